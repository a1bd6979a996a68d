"""The compiled CPU loops of :func:`.structured_conv.factor_cotangents` and
:func:`.structured_conv.input_cotangents` (float32 and float64).

The C source is :mod:`ntklab.kernels._cotangent_source`; it is compiled and loaded with the
fused kernels' library (:mod:`ntklab.kernels._fused`: compiled at first use, cached, checked,
``NTKLAB_DISABLE_FUSED=1`` turns it off). Where the library is unavailable, or for tensors off
the CPU, other dtypes, grouped or 3-d convolutions, :func:`available` is false and the torch
form is used.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch
from torch import Tensor

from ..kernels import _fused
from ..kernels._cotangent_source import VECTOR_BYTES

__all__ = ["VECTOR_BYTES", "available", "factor", "factor_available", "run"]


def factor_available(like: Tensor) -> bool:
    """Whether the compiled factorization covers cotangents like ``like``."""
    return like.device.type == "cpu" and like.dtype in _fused._SUFFIX and _fused.available()


def available(h: Tensor, groups: int, dims: int) -> bool:
    """Whether the compiled input-cotangent loop covers these cotangents and this
    convolution (ungrouped, 1-d or 2-d)."""
    return groups == 1 and dims in (1, 2) and factor_available(h)


def factor(rows: Sequence[Tensor | None], rtol: float) -> tuple[Tensor, Tensor] | None:
    """:func:`.structured_conv.factor_cotangents` of per-output cotangents.

    Parameters
    ----------
    rows : sequence of (Tensor of shape (n, C, P) or None)
        One per output, each contiguous in ``(C, P)``, all with the same example stride;
        None for an output that ignores the layer (zeros).
    rtol : float

    Returns
    -------
    (alpha, h) or None
        ``alpha`` of shape (n, k, C), ``h`` of shape (n, C, P); None when some example's
        cotangents do not factor.
    """
    like = next(g for g in rows if g is not None)
    n, c, p = like.shape
    k = len(rows)
    alpha = like.new_empty((n, k, c))
    h = like.new_empty((n, c, p))
    pointers = (ctypes.c_void_p * k)(*(None if g is None else g.data_ptr() for g in rows))
    fn = getattr(_fused._library(), f"ntklab_factor_cotangents_{_fused._SUFFIX[like.dtype]}")
    ok = fn(pointers, k, n, c, p, like.stride(0), rtol, alpha.data_ptr(), h.data_ptr(),
            torch.get_num_threads())  # fmt: skip
    return (alpha, h) if ok else None


def run(
    u: Tensor,
    flipped: Tensor,
    alpha: Tensor,
    out: Tensor,
    kernel: tuple[int, int],
    dilation: tuple[int, int],
    start: tuple[int, int],
    size: tuple[int, int],
) -> None:
    """Write :math:`\\bar g_{a, ci} = \\sum_c \\alpha_{ac} z_c` into ``out`` (2-d layout).

    Parameters
    ----------
    u : Tensor of shape (n, C, hu, wu)
        A view of contiguous padded, stride-dilated cotangents whose first element is the
        first one read: row stride ``wu`` and plane stride ``hu wu`` of the contiguous tensor
        it views, with :data:`VECTOR_BYTES` readable past the last column read.
    flipped : Tensor of shape (C_in, C, kh * kw)
        The flipped kernel, input channel first, contiguous.
    alpha : Tensor of shape (n, C, k)
        Contiguous.
    out : Tensor of shape (n, k, C_in, H, W)
        Contiguous; rows ``start[0] + [0, size[0])`` and columns ``start[1] + [0, size[1])``
        written.
    kernel, dilation : (int, int)
    start, size : (int, int)
        The region of ``out`` that the window of ``u`` reaches.
    """
    n, c, hu, wu = u.shape[0], u.shape[1], u.stride(1) // u.stride(2), u.stride(2)
    fn = getattr(_fused._library(), f"ntklab_input_cotangents_{_fused._SUFFIX[u.dtype]}")
    fn(
        u.data_ptr(),
        n,
        c,
        hu,
        wu,
        flipped.data_ptr(),
        flipped.shape[0],
        kernel[0],
        kernel[1],
        dilation[0],
        dilation[1],
        alpha.data_ptr(),
        alpha.shape[2],
        out.data_ptr(),
        out.shape[3],
        out.shape[4],
        start[0],
        start[1],
        size[0],
        size[1],
        torch.get_num_threads(),
    )
