"""Covariance tensors of image representations: layouts, padding and windows.

The kernels of images keep spatial axes, in one of two layouts (neural-tangents' conventions,
arXiv:1912.02803):

- **full**: the covariance between every pair of positions, interleaved as
  ``(n1, n2, H, H', W, W')``. Pooling layers need it.
- **diagonal**: only the same-position covariances ``(n1, n2, H, W)``. Convolutions,
  activations and LayerNorm map the diagonal to itself.

This module holds the pure tensor operations that the layer rules share (window means over
one axis or a pair of axes, zero or periodic padding, the diagonal of a full layout), and the
padding geometry that the finite modules share with them (:func:`pads_for`). It imports no
layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, Protocol

import torch
from torch import Tensor, nn

from .._checks import check_positive_int
from ..errors import NtklabTypeError, NtklabValueError
from .kernel import KernelState

__all__ = [
    "Padding",
    "apply_mask",
    "as_tuple",
    "center_mask",
    "check_padding",
    "full_diagonal",
    "masked_counts",
    "next_diagonal",
    "output_size",
    "pad",
    "pad_images",
    "pads_for",
    "require_full",
    "require_spatial",
    "self_variances",
    "spatial_axes",
    "to_diagonal",
    "window_mean",
    "with_variances",
]

Padding = Literal["SAME", "VALID", "CIRCULAR"] | int | tuple[int, ...]
"""``"SAME"``, ``"VALID"``, ``"CIRCULAR"`` (periodic, with SAME's pads), or explicit symmetric
zero pads per spatial dimension (an int for all), as torch's ``padding=``."""

_PADDINGS = ("SAME", "VALID", "CIRCULAR")


def as_tuple(name: str, value: int | Sequence[int], ndim: int | None = None) -> tuple[int, ...]:
    """``value`` as a tuple of positive ints (an int is repeated ``ndim`` times, default 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        out: tuple[int, ...] = (value,) * (ndim or 1)
    elif isinstance(value, tuple | list) and value:
        out = tuple(value)
    else:
        raise NtklabTypeError(
            f"{name}: expected an int or a non-empty tuple of ints, got {value!r}"
        )
    for v in out:
        check_positive_int(name, v)
    if ndim is not None and len(out) != ndim:
        raise NtklabValueError(f"{name}: expected {ndim} entries, got {len(out)}: {out!r}")
    return out


def check_padding(padding: object, ndim: int) -> None:
    if isinstance(padding, str):
        if padding not in _PADDINGS:
            raise NtklabValueError(
                f"padding: expected 'SAME', 'VALID', 'CIRCULAR' or ints, got {padding!r}"
            )
        return
    pads = (padding,) * ndim if isinstance(padding, int) else padding
    if (
        not isinstance(pads, tuple)
        or len(pads) != ndim
        or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in pads)
    ):
        raise NtklabValueError(
            f"padding: expected 'SAME', 'VALID', 'CIRCULAR', an int >= 0 or {ndim} ints >= 0, "
            f"got {padding!r}"
        )


def pads_for(padding: Padding, size: int, window: int, stride: int, dim: int) -> tuple[int, int]:
    """Low and high pads of spatial dimension ``dim`` (XLA's rule for ``SAME``)."""
    if padding == "VALID":
        return 0, 0
    if padding in ("SAME", "CIRCULAR"):
        out = -(-size // stride)
        total = max((out - 1) * stride + window - size, 0)
        return total // 2, total - total // 2
    p = padding if isinstance(padding, int) else padding[dim]
    return int(p), int(p)


def output_size(size: int, window: int, stride: int, lo: int, hi: int, what: str) -> int:
    out = (size + lo + hi - window) // stride + 1
    if out < 1:
        raise NtklabValueError(
            f"{what}: expected a spatial size of at least {window - lo - hi} for a window of "
            f"{window} with pads ({lo}, {hi}), got {size}"
        )
    return out


def pad(x: Tensor, axis: int, lo: int, hi: int, wrap: bool) -> Tensor:
    """Pad ``x`` along ``axis`` with zeros, or periodically when ``wrap``."""
    if lo == 0 and hi == 0:
        return x
    size = x.shape[axis]
    if wrap:
        idx = torch.arange(-lo, size + hi, device=x.device) % size
        return torch.index_select(x, axis, idx)
    shape = list(x.shape)
    parts = []
    if lo:
        shape[axis] = lo
        parts.append(x.new_zeros(shape))
    parts.append(x)
    if hi:
        shape[axis] = hi
        parts.append(x.new_zeros(shape))
    return torch.cat(parts, dim=axis)


def window_mean(
    x: Tensor, axes: tuple[int, ...], window: int, stride: int, pads: tuple[int, int], wrap: bool
) -> Tensor:
    """:math:`y_i = \\frac1w \\sum_{d<w} x_{si + d}`, the same offset ``d`` on every axis of
    ``axes`` (one axis: a window average; a pair of axes: the diagonal of a 2-D window).

    Zero padding is not materialized: each offset adds the in-range rectangle of ``x`` into
    the output (one pass per offset); circular padding wraps the input first."""
    if wrap:
        for axis in axes:
            x = pad(x, axis, pads[0], pads[1], wrap)
        pads = (0, 0)
    lo, hi = pads
    size = x.shape[axes[0]]
    out_size = (size + lo + hi - window) // stride + 1
    shape = list(x.shape)
    for axis in axes:
        shape[axis] = out_size
    out = x.new_zeros(shape)
    for d in range(window):
        # output i reads input j = s i + d - lo, kept when 0 <= j < size (else a zero pad)
        i_lo = max(0, -((d - lo) // stride))
        i_hi = min(out_size - 1, (size - 1 + lo - d) // stride)
        if i_lo > i_hi:
            continue
        j_lo = stride * i_lo + d - lo
        out_index: list[slice] = [slice(None)] * x.ndim
        in_index: list[slice] = [slice(None)] * x.ndim
        for axis in axes:
            out_index[axis] = slice(i_lo, i_hi + 1)
            in_index[axis] = slice(j_lo, j_lo + stride * (i_hi - i_lo) + 1, stride)
        out[tuple(out_index)].add_(x[tuple(in_index)])
    return out.mul_(1.0 / window)


def spatial_axes(state: KernelState) -> list[tuple[int, ...]]:
    """The axis groups of each spatial dimension: ``(a, a')`` (full) or ``(a,)`` (diagonal)."""
    b = state.batch_ndim
    if state.full_spatial:
        return [(b + 2 * k, b + 2 * k + 1) for k in range(state.spatial_ndim)]
    return [(b + k,) for k in range(state.spatial_ndim)]


def full_diagonal(cov: Tensor, batch_ndim: int, spatial_ndim: int) -> Tensor:
    """The same-position entries ``(batch..., H, W)`` of a full ``(batch..., H, H, W, W)``."""
    for _ in range(spatial_ndim):
        cov = torch.diagonal(cov, dim1=batch_ndim, dim2=batch_ndim + 1)
    return cov


def self_variances(diag: KernelState) -> KernelState:
    """Set ``var1``/``var2`` of a per-input (diagonal pass) state from its covariance.

    Flat and diagonal layouts: the covariance itself, the same tensor (so activations see
    correlation exactly 1). Full layout: the variances at the first and at the second
    position of each pair, shaped ``(n, H, 1, W, 1)`` and ``(n, 1, H, 1, W)``.
    """
    if not diag.full_spatial or diag.spatial_ndim == 0:
        return dataclasses.replace(diag, var1=diag.cov, var2=diag.cov)
    s = diag.spatial_ndim
    v = full_diagonal(diag.cov, 1, s)  # shape: (n, *S)
    n, sizes = v.shape[0], v.shape[1:]
    var1 = v.reshape(n, *[d for size in sizes for d in (size, 1)])
    var2 = v.reshape(n, *[d for size in sizes for d in (1, size)])
    return dataclasses.replace(diag, var1=var1, var2=var2)


def with_variances(state: KernelState, diag1: KernelState, diag2: KernelState) -> KernelState:
    """Set ``var1`` ``(n1, 1, ...)`` and ``var2`` ``(1, n2, ...)`` of a pair state from the
    per-input states (which went through the same layers)."""
    return dataclasses.replace(state, var1=diag1.var1.unsqueeze(1), var2=diag2.var2.unsqueeze(0))


def to_diagonal(state: KernelState) -> KernelState:
    """Drop the off-diagonal positions of a full-layout state (for layers that follow the
    last pooling layer)."""
    if not state.full_spatial or state.spatial_ndim == 0:
        return state
    b, s = state.batch_ndim, state.spatial_ndim
    out = dataclasses.replace(
        state,
        cov=full_diagonal(state.cov, b, s),
        ntk=None if state.ntk is None else full_diagonal(state.ntk, b, s),
        full_spatial=False,
    )
    return self_variances(out) if b == 1 else out


class _Propagates(Protocol):
    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState: ...


def next_diagonal(layer: _Propagates, diag: KernelState) -> KernelState:
    """Propagate the per-input variances through ``layer`` (the kernel on the diagonal)."""
    return self_variances(layer.propagate(diag, inplace=False))


def require_spatial(name: str, state: KernelState, ndim: int) -> None:
    """Raise unless ``state`` has ``ndim`` spatial dimensions (``name``: the layer's)."""
    if state.spatial_ndim != ndim:
        got = (
            "a flat (n, d) representation"
            if state.spatial_ndim == 0
            else (f"{state.spatial_ndim} spatial dimension(s)")
        )
        raise NtklabValueError(
            f"{name}: expected inputs with {ndim} spatial dimension(s) "
            f"(a batch of shape (n, C{', L' if ndim == 1 else ', H, W'}...)), got {got}"
        )


def require_full(name: str, state: KernelState) -> None:
    """Raise unless a spatial ``state`` carries the full covariance (pooling needs it)."""
    if state.spatial_ndim and not state.full_spatial:
        raise NtklabValueError(
            f"{name}: expected the full spatial covariance, got only its diagonal (the "
            "carry plan of Architecture.kernel did not see this layer)"
        )


def pad_images(
    x: Tensor, window: tuple[int, ...], strides: tuple[int, ...], padding: Padding
) -> Tensor:
    """Pad the spatial axes of a batch ``(n, C, *S)`` as the kernel rules pad covariances."""
    pads: list[int] = []
    for k in reversed(range(len(window))):  # F.pad lists the last axis first
        pads.extend(pads_for(padding, int(x.shape[2 + k]), window[k], strides[k], k))
    if not any(pads):
        return x
    mode = "circular" if padding == "CIRCULAR" else "constant"
    return nn.functional.pad(x, pads, mode=mode)


def center_mask(
    mask: Tensor, window: tuple[int, ...], strides: tuple[int, ...], padding: Padding
) -> Tensor:
    """The mask ``(n, *S')`` of the output of a window layer (``Conv``, ``AvgPool``) on
    inputs masked as ``mask`` ``(n, *S)``: neural-tangents' rule, an output position is masked
    when the input position at the centre of its window is (unchanged when the spatial shape
    is)."""
    sizes = tuple(int(s) for s in mask.shape[1:])
    index: list[slice] = [slice(None)]
    out_sizes = []
    for k, size in enumerate(sizes):
        lo, hi = pads_for(padding, size, window[k], strides[k], k)
        out = (size + lo + hi - window[k]) // strides[k] + 1
        out_sizes.append(out)
        start = (window[k] - 1) // 2 - lo
        index.append(slice(start, start + (out - 1) * strides[k] + 1, strides[k]))
    if tuple(out_sizes) == sizes:
        return mask
    return mask[tuple(index)]


def _keep(mask: Tensor, first: bool, full: bool) -> Tensor:
    """``~mask`` ``(n, *S)`` shaped to broadcast as the first or the second input of a state
    (``(n, H, 1, W, 1)`` / ``(n, 1, H, 1, W)`` in the full layout, ``(n, H, W)`` else)."""
    keep = ~mask
    if not full:
        return keep
    n, sizes = keep.shape[0], keep.shape[1:]
    return keep.reshape(n, *[d for size in sizes for d in ((size, 1) if first else (1, size))])


def apply_mask(state: KernelState, mask1: Tensor, mask2: Tensor) -> KernelState:
    """``state`` with the covariances involving a masked position zeroed, and ``mask1``
    ``(n1, *S)``, ``mask2`` ``(n2, *S)`` (``True``: masked) carried; for a per-input state
    (one batch axis) both are the input's own mask.

    .. math:: K_{ij, hh'} \\leftarrow K_{ij, hh'} [\\neg m_{1, ih}] [\\neg m_{2, jh'}].
    """
    full = state.full_spatial
    k1, k2 = _keep(mask1, True, full), _keep(mask2, False, full)
    keep = k1 & k2 if state.batch_ndim == 1 else k1.unsqueeze(1) & k2.unsqueeze(0)
    zero = state.cov.new_zeros(())
    cov = torch.where(keep, state.cov, zero)
    ntk = None if state.ntk is None else torch.where(keep, state.ntk, zero)
    return dataclasses.replace(state, cov=cov, ntk=ntk, mask=(mask1, mask2))


def masked_counts(state: KernelState) -> Tensor:
    """The number of unmasked position pairs of each input pair of a masked spatial
    ``state``: ``(n1, n2)`` (``(n,)`` per input), :math:`|S_1| |S_2|` over unmasked
    positions."""
    if state.mask is None:  # pragma: no cover - called on masked states only
        raise NtklabValueError("state: expected a masked state, got mask=None")
    m1, m2 = state.mask
    c1 = (~m1).flatten(1).sum(dim=1).to(state.cov.dtype)
    c2 = (~m2).flatten(1).sum(dim=1).to(state.cov.dtype)
    return c1 * c2 if state.batch_ndim == 1 else c1[:, None] * c2[None, :]
