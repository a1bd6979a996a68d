"""Convolutional, pooling, normalization and residual layers: the CNTK and its relatives.

Images are torch's ``(n, C, *S)`` batches (``NCHW`` for ``S = (H, W)``, ``NCL`` for 1-D
signals), not neural-tangents' channels-last ``NHWC``: a batch whose last axis has 1 or 3
entries while its other non-batch axes have more than 4 (``(n, 28, 28, 1)``, ``(n, 32, 32,
3)``) is refused with the permutation to apply. The channels are the infinite-width axis;
the kernels keep the spatial axes, in one of two layouts (neural-tangents' conventions,
arXiv:1912.02803):

- **full**: the covariance between every pair of positions, interleaved as
  ``(n1, n2, H, H', W, W')``. Pooling layers need it.
- **diagonal**: only the same-position covariances ``(n1, n2, H, W)``. Convolutions,
  activations and LayerNorm map the diagonal to itself, so when no pooling layer follows
  (e.g. a CNN with ``Flatten`` on top) only the diagonal is propagated: :math:`(HW)^2`
  times less memory and work.

:meth:`~ntklab.kernels.Architecture.kernel` keeps the full layout up to the last pooling
layer and the diagonal after it. The input kernel is averaged over channels,
:math:`K_0(x, x')_{hh'} = \\frac1C \\sum_c x_{ch} x'_{ch'}`.

A convolution with filter :math:`f` (NTK parameterization, :math:`|f|` positions per filter,
stride :math:`s`) maps, position pair by position pair (arXiv:1904.11955, Arora et al. 2019),

.. math::

    K'_{hh'} = \\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} K_{sh + d,\\, sh' + d} + \\sigma_b^2,
    \\qquad \\Theta'_{hh'} = K'_{hh'} + \\frac{\\sigma_w^2}{|f|}
    \\sum_{d \\in f} \\Theta_{sh + d,\\, sh' + d},

with zero (``SAME``, explicit pads) or periodic (``CIRCULAR``) padding of the covariance.
Average pooling averages each axis of the pair over its window,
:math:`K'_{hh'} = |f|^{-2} \\sum_{d, d'} K_{sh+d, sh'+d'}`; global average pooling averages
over all pairs and ``Flatten`` over the diagonal.

Memory: the full layout holds :math:`n_1 n_2 (HW)^2` numbers per kernel. ``kernel`` computes
blocks of input pairs that fit ``max_memory`` bytes (default: the policy of
:mod:`ntklab.memory`, half of the memory this process may still use) and raises
:class:`~ntklab.errors.NtklabValueError` when not even one pair fits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

from .._checks import (
    check_channels_first,
    check_nonnegative,
    check_positive_int,
    check_precision,
)
from ..errors import NtklabTypeError, NtklabValueError
from ..memory import resolve_max_memory
from .kernel import Kernel, KernelState
from .layers import Architecture, Layer, Parameterization, _as_float

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "AvgPool",
    "Conv",
    "Dropout",
    "Flatten",
    "GlobalAvgPool",
    "LayerNorm",
    "Padding",
    "Residual",
]

Padding = Literal["SAME", "VALID", "CIRCULAR"] | int | tuple[int, ...]
"""``"SAME"``, ``"VALID"``, ``"CIRCULAR"`` (periodic, with SAME's pads), or explicit symmetric
zero pads per spatial dimension (an int for all), as torch's ``padding=``."""

_PADDINGS = ("SAME", "VALID", "CIRCULAR")


# --------------------------------------------------------------------------------------------
# spatial primitives on covariance tensors


def _as_tuple(name: str, value: int | Sequence[int], ndim: int | None = None) -> tuple[int, ...]:
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


def _check_padding(padding: object, ndim: int) -> None:
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


def _output_size(size: int, window: int, stride: int, lo: int, hi: int, what: str) -> int:
    out = (size + lo + hi - window) // stride + 1
    if out < 1:
        raise NtklabValueError(
            f"{what}: expected a spatial size of at least {window - lo - hi} for a window of "
            f"{window} with pads ({lo}, {hi}), got {size}"
        )
    return out


def _pad(x: Tensor, axis: int, lo: int, hi: int, wrap: bool) -> Tensor:
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


def _window_mean(
    x: Tensor, axes: tuple[int, ...], window: int, stride: int, pads: tuple[int, int], wrap: bool
) -> Tensor:
    """:math:`y_i = \\frac1w \\sum_{d<w} x_{si + d}`, the same offset ``d`` on every axis of
    ``axes`` (one axis: a window average; a pair of axes: the diagonal of a 2-D window).

    Zero padding is not materialized: each offset adds the in-range rectangle of ``x`` into
    the output (one pass per offset); circular padding wraps the input first."""
    if wrap:
        for axis in axes:
            x = _pad(x, axis, pads[0], pads[1], wrap)
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


def _spatial_axes(state: KernelState) -> list[tuple[int, ...]]:
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


def input_states(
    x1: Tensor, x2: Tensor | None, *, full: bool
) -> tuple[KernelState, KernelState, KernelState]:
    """Input kernels of image batches ``(n, C, *S)``, averaged over channels.

    Returns the pair state and the per-input states of ``x1`` and ``x2`` (the same object
    when ``x2`` is None).
    """
    c, s = x1.shape[1], x1.ndim - 2
    letters = "hwdxyz"[:s]
    up = letters.upper()
    if full:
        pair = "".join(a + b for a, b in zip(letters, up, strict=True))
        spec = f"ic{letters},jc{up}->ij{pair}"
        self_spec = f"ic{letters},ic{up}->i{pair}"
    else:
        spec = f"ic{letters},jc{letters}->ij{letters}"
        self_spec = f"ic{letters},ic{letters}->i{letters}"
    other = x1 if x2 is None else x2
    cov = (
        torch.einsum(spec, x1, other).div_(c)
        if not _grad(x1, x2)
        else (torch.einsum(spec, x1, other) / c)
    )
    fields = {"spatial_ndim": s, "full_spatial": full}

    def self_state(x: Tensor) -> KernelState:
        k = torch.einsum(self_spec, x, x) / c
        return self_variances(KernelState(k, None, k, k, c, **fields))  # type: ignore[arg-type]

    diag1 = self_state(x1)
    diag2 = diag1 if x2 is None else self_state(x2)
    state = KernelState(cov, None, cov, cov, c, **fields)  # type: ignore[arg-type]
    return with_variances(state, diag1, diag2), diag1, diag2


def _grad(x1: Tensor, x2: Tensor | None) -> bool:
    return torch.is_grad_enabled() and (x1.requires_grad or (x2 is not None and x2.requires_grad))


def _require_spatial(layer: Layer, state: KernelState, ndim: int) -> None:
    if state.spatial_ndim != ndim:
        got = (
            "a flat (n, d) representation"
            if state.spatial_ndim == 0
            else (f"{state.spatial_ndim} spatial dimension(s)")
        )
        raise NtklabValueError(
            f"{type(layer).__name__}: expected inputs with {ndim} spatial dimension(s) "
            f"(a batch of shape (n, C{', L' if ndim == 1 else ', H, W'}...)), got {got}"
        )


# --------------------------------------------------------------------------------------------
# layers


@dataclass(frozen=True)
class Conv(Layer):
    """Convolution over the channels of 1-D or 2-D inputs (``nn.Conv1d``/``nn.Conv2d``).

    Parameters
    ----------
    filter_shape : int or tuple of int
        Spatial shape of the filters, one entry per spatial dimension (an int means a 1-D
        convolution unless given with a tuple of strides or pads).
    strides : int or tuple of int, optional
        Default 1 in every dimension.
    padding : {"SAME", "VALID", "CIRCULAR"}, int or tuple of int
        ``"SAME"`` keeps the size at stride 1 (XLA's rule: the extra pad goes at the end);
        ``"CIRCULAR"`` pads periodically with SAME's pads; ints are symmetric zero pads, as
        torch's ``padding=``.
    w_std, b_std : float or Tensor
        Weight and bias scales (``b_std=None``: no bias), as in :class:`~ntklab.Dense`.
    parameterization : {"ntk", "standard"}
        ``"ntk"``: :math:`y = \\sigma_w W * x / \\sqrt{C |f|} + \\sigma_b b` with unit Gaussian
        ``W, b``; ``"standard"``: :math:`y = W * x + b`, :math:`W \\sim N(0, \\sigma_w^2 / (C
        |f|))`, :math:`b \\sim N(0, \\sigma_b^2)`, whose NTK depends on the channel counts.
    width : int, optional
        Output channels (needed by the standard parameterization's next layer; filled by
        ``to_torch(width=...)`` otherwise).

    Notes
    -----
    Inputs are channels-first, ``(n, C, H, W)`` or ``(n, C, L)`` (torch's layout, not
    neural-tangents' ``NHWC``). A batch whose last axis has 1 or 3 entries while its other
    non-batch axes have more than 4, such as ``(n, 28, 28, 1)``, is taken for channels-last and
    refused (permute it with ``x.permute(0, 3, 1, 2)``).

    Standard parameterization, with :math:`C` the input channels:
    :math:`\\Theta' = C \\sum_{d\\in f} K_{\\cdot+d} + \\sigma_w^2 \\frac{1}{|f|}\\sum_{d\\in f}
    \\Theta_{\\cdot+d} + [\\text{bias}]` (neural-tangents' ``stax.Conv``).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> cnn = nl.serial(nl.kernels.Conv((3, 3), w_std=1.4), nl.Relu(), nl.kernels.Flatten(),
    ...                 nl.Dense(1.0))
    >>> cnn.kernel(torch.randn(4, 3, 8, 8, dtype=torch.float64)).ntk.shape
    torch.Size([4, 4])
    """

    filter_shape: int | tuple[int, ...] = (3, 3)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "SAME"
    w_std: float | Tensor = 1.0
    b_std: float | Tensor | None = 0.0
    parameterization: Parameterization = "ntk"
    width: int | None = None

    def __post_init__(self) -> None:
        ndim = None
        for v in (self.filter_shape, self.strides, self.padding):
            if isinstance(v, tuple | list):
                ndim = len(v)
                break
        filt = _as_tuple("filter_shape", self.filter_shape, ndim)
        ndim = len(filt)
        if ndim not in (1, 2):
            raise NtklabValueError(
                f"filter_shape: expected 1 or 2 spatial dimensions, got {ndim}: {filt}"
            )
        strides = (1,) * ndim if self.strides is None else _as_tuple("strides", self.strides, ndim)
        _check_padding(self.padding, ndim)
        padding = tuple(self.padding) if isinstance(self.padding, list) else self.padding
        object.__setattr__(self, "filter_shape", filt)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "padding", padding)
        check_nonnegative("w_std", self.w_std)
        if self.b_std is not None:
            check_nonnegative("b_std", self.b_std)
        if self.parameterization not in ("ntk", "standard"):
            raise NtklabValueError(
                f"parameterization: expected 'ntk' or 'standard', got {self.parameterization!r}"
            )
        if self.width is not None:
            check_positive_int("width", self.width)

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def spatial_ndim(self) -> int | None:
        return len(self._filter)

    @property
    def _filter(self) -> tuple[int, ...]:
        return self.filter_shape  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def _strides(self) -> tuple[int, ...]:
        return self.strides  # type: ignore[return-value]

    def _requires_grad(self) -> bool:
        return any(isinstance(v, Tensor) and v.requires_grad for v in (self.w_std, self.b_std))

    def _convolve(self, x: Tensor, state: KernelState) -> Tensor:
        wrap = self.padding == "CIRCULAR"
        for k, (axes, size) in enumerate(
            zip(_spatial_axes(state), state.spatial_shape, strict=True)
        ):
            f, s = self._filter[k], self._strides[k]
            pads = pads_for(self.padding, size, f, s, k)
            _output_size(size, f, s, *pads, what="Conv")
            x = _window_mean(x, axes, f, s, pads, wrap)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        _require_spatial(self, state, len(self._filter))
        w2 = self.w_std**2
        b2 = 0.0 if self.b_std is None else self.b_std**2
        cov_u = self._convolve(state.cov, state)
        ntk_u = None if state.ntk is None else self._convolve(state.ntk, state)
        # _convolve returns fresh tensors: update them in place unless autograd needs them.
        fused = inplace and not isinstance(w2, Tensor) and not isinstance(b2, Tensor)
        if fused and self.parameterization == "ntk":
            cov = cov_u.mul_(w2).add_(b2)
            ntk = cov.clone() if ntk_u is None else ntk_u.mul_(w2).add_(cov)
            return dataclasses.replace(state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True)
        cov = cov_u * w2 + b2
        if self.parameterization == "ntk":
            ntk = cov.clone() if ntk_u is None else cov + w2 * ntk_u
        else:
            if state.fan_in is None:
                raise NtklabValueError(
                    "Conv(parameterization='standard'): expected the channel count of the "
                    "previous layer (its NTK scales with the fan-in), got width=None; pass "
                    "width=N to that layer"
                )
            fan = float(state.fan_in * math.prod(self._filter))
            ntk = fan * cov_u if ntk_u is None else fan * cov_u + w2 * ntk_u
            if self.b_std is not None:
                ntk = ntk + 1.0
        return dataclasses.replace(state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        from ..nets.conv_modules import ConvLayer

        out = self.width if self.width is not None else out_features
        return ConvLayer(
            in_features,
            out,
            self._filter,
            strides=self._strides,
            padding=self.padding,
            w_std=_as_float(self.w_std),
            b_std=None if self.b_std is None else _as_float(self.b_std),
            parameterization=self.parameterization,
            generator=generator,
            dtype=dtype,
            device=device,
        )


@dataclass(frozen=True)
class AvgPool(Layer):
    """Average pooling over windows of the spatial axes (``nn.AvgPool1d``/``nn.AvgPool2d``
    with ``count_include_pad=True``, and neural-tangents' ``AvgPool``).

    Parameters
    ----------
    window_shape : int or tuple of int
    strides : int or tuple of int, optional
        Default: the window (torch's convention; neural-tangents' default is 1).
    padding : {"SAME", "VALID", "CIRCULAR"}, int or tuple of int
        As for :class:`Conv`; zero pads count in the average (the window size divides).

    Notes
    -----
    .. math:: K'_{hh'} = \\frac{1}{|f|^2} \\sum_{d, d' \\in f} K_{sh+d,\\, sh'+d'},

    the same for :math:`\\Theta`. Needs the full spatial covariance.
    """

    window_shape: int | tuple[int, ...] = (2, 2)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "VALID"

    def __post_init__(self) -> None:
        ndim = None
        for v in (self.window_shape, self.strides, self.padding):
            if isinstance(v, tuple | list):
                ndim = len(v)
                break
        window = _as_tuple("window_shape", self.window_shape, ndim)
        if len(window) not in (1, 2):
            raise NtklabValueError(
                f"window_shape: expected 1 or 2 spatial dimensions, got {len(window)}: {window}"
            )
        strides = (
            window if self.strides is None else _as_tuple("strides", self.strides, len(window))
        )
        _check_padding(self.padding, len(window))
        padding = tuple(self.padding) if isinstance(self.padding, list) else self.padding
        object.__setattr__(self, "window_shape", window)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "padding", padding)

    @property
    def spatial_ndim(self) -> int | None:
        return len(self._window)

    @property
    def mixes_space(self) -> bool:
        return True

    @property
    def _window(self) -> tuple[int, ...]:
        return self.window_shape  # type: ignore[return-value]

    def _pool(self, x: Tensor, state: KernelState) -> Tensor:
        wrap = self.padding == "CIRCULAR"
        strides: tuple[int, ...] = self.strides  # type: ignore[assignment]
        for k, (axes, size) in enumerate(
            zip(_spatial_axes(state), state.spatial_shape, strict=True)
        ):
            f, s = self._window[k], strides[k]
            pads = pads_for(self.padding, size, f, s, k)
            _output_size(size, f, s, *pads, what="AvgPool")
            for axis in axes:
                x = _window_mean(x, (axis,), f, s, pads, wrap)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        _require_spatial(self, state, len(self._window))
        _require_full(self, state)
        cov = self._pool(state.cov, state)
        ntk = None if state.ntk is None else self._pool(state.ntk, state)
        return dataclasses.replace(state, cov=cov, ntk=ntk)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        from ..nets.conv_modules import AvgPoolLayer

        return AvgPoolLayer(self._window, self.strides, self.padding)  # type: ignore[arg-type]


def _require_full(layer: Layer, state: KernelState) -> None:
    if state.spatial_ndim and not state.full_spatial:
        raise NtklabValueError(
            f"{type(layer).__name__}: expected the full spatial covariance, got only its "
            "diagonal (a pooling layer inside a branch that Architecture.kernel did not "
            "see; put pooling layers at the top level of serial(...))"
        )


@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """Average over all positions (``nn.AdaptiveAvgPool2d(1)`` followed by ``Flatten``).

    .. math:: K' = \\frac{1}{|S|^2} \\sum_{h, h'} K_{hh'}.

    Needs the full spatial covariance; on a flat representation it does nothing.
    """

    @property
    def mixes_space(self) -> bool:
        return True

    @property
    def spatial_layer(self) -> bool:
        return True

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.spatial_ndim == 0:
            return state
        _require_full(self, state)
        dims = tuple(range(state.batch_ndim, state.cov.ndim))
        cov = state.cov.mean(dim=dims)
        ntk = None if state.ntk is None else state.ntk.mean(dim=dims)
        return dataclasses.replace(state, cov=cov, ntk=ntk, spatial_ndim=0, full_spatial=False)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        from ..nets.conv_modules import GlobalAvgPoolLayer

        return GlobalAvgPoolLayer()


@dataclass(frozen=True)
class Flatten(Layer):
    """Flatten channels and positions into one feature axis (``nn.Flatten()``).

    The next ``Dense`` layer reads :math:`C |S|` features, so its kernel is the average of
    the same-position covariances, :math:`K' = \\frac{1}{|S|} \\sum_h K_{hh}`. Only the
    spatial diagonal is needed; on a flat representation it does nothing.
    """

    @property
    def spatial_layer(self) -> bool:
        return True

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.spatial_ndim == 0:
            return state
        b, s = state.batch_ndim, state.spatial_ndim
        size = math.prod(state.spatial_shape)

        def flat(x: Tensor) -> Tensor:
            if state.full_spatial:
                x = full_diagonal(x, b, s)
            return x.mean(dim=tuple(range(b, x.ndim)))

        fan_in = None if state.fan_in is None else state.fan_in * size
        return dataclasses.replace(
            state,
            cov=flat(state.cov),
            ntk=None if state.ntk is None else flat(state.ntk),
            fan_in=fan_in,
            spatial_ndim=0,
            full_spatial=False,
        )

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return nn.Flatten()


@dataclass(frozen=True)
class LayerNorm(Layer):
    """Layer normalization of zero-mean Gaussian pre-activations.

    Parameters
    ----------
    axes : {"channel", "all"}
        ``"channel"``: normalize over the channels at each position (``nn.LayerNorm(d)`` on
        ``(n, d)`` features; neural-tangents' default ``axis=-1``); ``"all"``: over channels
        and positions together (``nn.GroupNorm(1, C)``, ``nn.LayerNorm((C, H, W))``).
    eps : float
        Added to the variance, as torch's ``eps``.
    affine : bool
        Learnable per-channel gain :math:`\\gamma = 1` and bias :math:`\\beta = 0` (torch's
        ``elementwise_affine``/``affine``), shared across positions. They add to the NTK.
    bias : bool
        Whether the affine part has :math:`\\beta` (torch's ``bias=``).

    Notes
    -----
    With :math:`v(x)` the input variance averaged over the normalized positions (one per
    position for ``"channel"``),

    .. math:: K' = \\frac{K}{\\sqrt{(v(x) + \\epsilon)(v(x') + \\epsilon)}}, \\qquad
              \\Theta' = \\frac{\\Theta}{\\sqrt{(v(x) + \\epsilon)(v(x') + \\epsilon)}}
              + [\\text{affine}]\\, (K' + [\\text{bias}]).

    The mean over channels of a centred Gaussian representation vanishes at infinite width,
    so the layer must follow a ``Dense`` or ``Conv`` layer (possibly through pooling,
    ``Flatten`` or ``Dropout``), not a nonlinearity (as in neural-tangents).
    """

    axes: Literal["channel", "all"] = "channel"
    eps: float = 1e-5
    affine: bool = False
    bias: bool = True

    def __post_init__(self) -> None:
        if self.axes not in ("channel", "all"):
            raise NtklabValueError(f"axes: expected 'channel' or 'all', got {self.axes!r}")
        check_nonnegative("eps", self.eps)

    @property
    def has_parameters(self) -> bool:
        return False

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if not state.gaussian:
            raise NtklabValueError(
                "LayerNorm: expected zero-mean Gaussian pre-activations (the output of a Dense "
                "or Conv layer), got the output of a nonlinearity or the raw inputs, whose "
                "mean over channels does not vanish"
            )
        v1, v2 = state.var1, state.var2
        if self.axes == "all" and state.spatial_ndim:
            v1 = v1.mean(dim=tuple(range(state.batch_ndim, v1.ndim)), keepdim=True)
            v2 = v2.mean(dim=tuple(range(state.batch_ndim, v2.ndim)), keepdim=True)
        scale = torch.rsqrt(v1 + self.eps) * torch.rsqrt(v2 + self.eps)
        cov = state.cov * scale
        ntk = None if state.ntk is None else state.ntk * scale
        if self.affine:
            extra = cov + 1.0 if self.bias else cov
            ntk = extra.clone() if ntk is None else ntk + extra
        return dataclasses.replace(state, cov=cov, ntk=ntk)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        from ..nets.conv_modules import LayerNormLayer

        return LayerNormLayer(
            self.axes,
            eps=self.eps,
            affine=self.affine,
            bias=self.bias,
            dtype=dtype,
            device=device,
        )


@dataclass(frozen=True)
class Dropout(Layer):
    """Dropout with probability ``rate``, at inference (``model.eval()``): the identity.

    The kernels are those of the network used for prediction; the finite counterpart is
    ``nn.Dropout(rate)``, which drops units only in training mode.
    """

    rate: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.rate, int | float) or not 0.0 <= self.rate < 1.0:
            raise NtklabValueError(f"rate: expected a float in [0, 1), got {self.rate!r}")

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        return state

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return nn.Dropout(float(self.rate))


@dataclass(frozen=True)
class Residual(Layer):
    """Identity plus a scaled branch: :math:`y = x + \\alpha\\, g(x)`.

    Parameters
    ----------
    branch : Architecture, Layer or sequence of layers
        Must end with a layer with parameters (``Dense``/``Conv``, possibly followed by
        pooling, ``LayerNorm`` or ``Dropout``) and keep the shape of its input.
    scale : float
        The branch scale :math:`\\alpha`.

    Notes
    -----
    The branch's output is linear in its last layer's fresh zero-mean weights, so at
    infinite width it is uncorrelated with the identity path and (neural-tangents'
    ``FanInSum`` of ``FanOut``)

    .. math:: K' = K + \\alpha^2 K_g, \\qquad \\Theta' = \\Theta + \\alpha^2 \\Theta_g.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> block = nl.kernels.Residual([nl.Relu(), nl.Dense(1.4)], scale=0.5)
    >>> arch = nl.serial(nl.Dense(1.0), block, block, nl.Relu(), nl.Dense(1.0))
    >>> arch.kernel(torch.randn(3, 4, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    branch: Architecture | Layer | Sequence[Layer]
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "branch", _flatten_branch(self.branch))
        if not isinstance(self.scale, int | float) or not math.isfinite(self.scale):
            raise NtklabValueError(f"scale: expected a finite float, got {self.scale!r}")

    @property
    def layers(self) -> tuple[Layer, ...]:
        """The branch's layers."""
        return self.branch  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def has_parameters(self) -> bool:
        return any(layer.has_parameters for layer in self.layers)

    @property
    def mixes_space(self) -> bool:
        return any(layer.mixes_space for layer in self.layers)

    @property
    def spatial_layer(self) -> bool:
        return any(layer.spatial_layer for layer in self.layers)

    @property
    def spatial_ndim(self) -> int | None:
        dims = {layer.spatial_ndim for layer in self.layers} - {None}
        return dims.pop() if len(dims) == 1 else None

    def _requires_grad(self) -> bool:
        return any(layer._requires_grad() for layer in self.layers)

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        raise NtklabValueError(  # pragma: no cover - Architecture.kernel calls step()
            "Residual: expected to be run by Architecture.kernel (it needs the per-input "
            "variances inside the branch), got a bare propagate call"
        )

    def step(
        self,
        state: KernelState,
        diag1: KernelState,
        diag2: KernelState | None,
        *,
        inplace: bool,
    ) -> tuple[KernelState, KernelState, KernelState | None]:
        branch_in = state
        if inplace:
            ntk = None if state.ntk is None else state.ntk.clone()
            branch_in = dataclasses.replace(state, cov=state.cov.clone(), ntk=ntk)
        out, d1, d2 = run_layers(self.layers, branch_in, diag1, diag2, inplace=inplace)
        if not out.gaussian:
            raise NtklabValueError(
                "Residual: expected a branch that ends with a Dense or Conv layer (possibly "
                "followed by pooling, LayerNorm or Dropout), so that its output is "
                "uncorrelated with the identity path; got one that ends with "
                f"{type(self.layers[-1]).__name__}"
            )
        if out.cov.shape != state.cov.shape:
            raise NtklabValueError(
                f"Residual: expected the branch to keep the kernel's shape "
                f"{tuple(state.cov.shape)} (same spatial size), got {tuple(out.cov.shape)}"
            )
        a2 = float(self.scale) ** 2

        def combine(s: KernelState, b: KernelState) -> KernelState:
            cov = s.cov + a2 * b.cov
            if s.ntk is None and b.ntk is None:
                ntk = None
            elif s.ntk is None:
                assert b.ntk is not None
                ntk = b.ntk * a2
            elif b.ntk is None:
                ntk = s.ntk
            else:
                ntk = s.ntk + b.ntk * a2
            fan_in = b.fan_in if b.fan_in is not None else s.fan_in
            return dataclasses.replace(
                s, cov=cov, ntk=ntk, fan_in=fan_in, gaussian=s.gaussian and b.gaussian
            )

        new1 = self_variances(combine(diag1, d1))
        new2 = None if diag2 is None else self_variances(combine(diag2, d2))  # type: ignore[arg-type]
        pair = combine(state, out)
        return with_variances(pair, new1, new1 if new2 is None else new2), new1, new2

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        from ..nets.conv_modules import ResidualBlock

        hidden = out_features if out_features is not None else in_features
        last = max(i for i, layer in enumerate(self.layers) if layer.has_parameters)
        if in_features is None and not isinstance(self.layers[last], Conv):
            raise NtklabValueError(
                "Residual: expected the number of input features (the branch's last Dense must "
                "return as many), got None; put a Dense layer before the block or pass "
                "in_features to to_torch"
            )
        modules: list[nn.Module] = []
        features: int | None = in_features
        for i, layer in enumerate(self.layers):
            out = in_features if i == last else hidden
            mod = layer.module(features, out, generator=generator, dtype=dtype, device=device)
            modules.append(mod)
            if layer.has_parameters:  # a module without out_features leaves the next lazy
                found = getattr(mod, "out_features", None)
                features = found if isinstance(found, int) else None
        return ResidualBlock(nn.Sequential(*modules), float(self.scale), in_features)


def check_affine_layernorm(layers: Sequence[Layer], where: str, *, in_branch: bool = False) -> None:
    """Raise unless every ``LayerNorm(affine=True)`` is followed by a layer with parameters
    (through pooling, ``Flatten``, ``Dropout`` or ``Identity`` only).

    The gain :math:`\\gamma_c` moves one unit only, so its gradient :math:`\\hat x_c` stays
    correlated with the unit it feeds: through a nonlinearity :math:`\\phi` it contributes
    :math:`E[\\phi'(u) u\\, \\phi'(v) v]`, not the :math:`E[uv] E[\\phi'(u)\\phi'(v)]` of the
    kernel recursion. A linear layer next averages over fresh weights and restores it.
    """
    from .activations import Identity

    passthrough = (AvgPool, GlobalAvgPool, Flatten, Dropout, Identity)
    for i, layer in enumerate(layers):
        if isinstance(layer, Residual):
            check_affine_layernorm(layer.layers, f"{where}[{i}].branch", in_branch=True)
        if not (isinstance(layer, LayerNorm) and layer.affine):
            continue
        nxt = next((lay for lay in layers[i + 1 :] if not isinstance(lay, passthrough)), None)
        if (nxt is None and not in_branch) or (nxt is not None and nxt.has_parameters):
            continue
        raise NtklabValueError(
            f"{where}[{i}]: expected LayerNorm(affine=True) to be followed by a Dense or Conv "
            f"layer, got {'the end of a residual branch' if nxt is None else type(nxt).__name__}"
            "; the kernel of a learnable per-channel gain feeding a nonlinearity is not "
            "implemented (use affine=False there)"
        )


def _flatten_branch(branch: object) -> tuple[Layer, ...]:
    """The layers of a branch (an activation may come first: it reads the block's input)."""
    if isinstance(branch, Architecture):
        return branch.layers
    if isinstance(branch, Layer):
        return (branch,)
    if isinstance(branch, list | tuple) and branch:
        out: list[Layer] = []
        for item in branch:
            out.extend(_flatten_branch(item))
        return tuple(out)
    raise NtklabTypeError(
        f"branch: expected an Architecture, a Layer or a non-empty sequence of layers, got "
        f"{type(branch).__name__}"
    )


# --------------------------------------------------------------------------------------------
# the recursion driver (used by Architecture.kernel)


def run_layers(
    layers: Sequence[Layer],
    state: KernelState,
    diag1: KernelState,
    diag2: KernelState | None,
    *,
    inplace: bool,
    diagonal_after: int = -1,
) -> tuple[KernelState, KernelState, KernelState | None]:
    """Propagate a pair state and the per-input states through ``layers``.

    ``diag2=None`` means ``x2 = x1``. After layer ``diagonal_after`` the full spatial
    layout is reduced to its diagonal (no later layer needs the off-diagonal positions).
    """
    for i, layer in enumerate(layers):
        state, diag1, diag2 = layer.step(state, diag1, diag2, inplace=inplace)
        if i == diagonal_after and state.full_spatial:
            state, diag1 = to_diagonal(state), to_diagonal(diag1)
            diag2 = None if diag2 is None else to_diagonal(diag2)
            state = with_variances(state, diag1, diag1 if diag2 is None else diag2)
    return state, diag1, diag2


def last_mixing_layer(layers: Sequence[Layer]) -> int:
    """Index of the last layer that needs the full spatial covariance (-1 if none)."""
    return max((i for i, layer in enumerate(layers) if layer.mixes_space), default=-1)


def architecture_spatial_ndim(layers: Sequence[Layer]) -> int | None:
    """The number of spatial dimensions the architecture's Conv/AvgPool layers expect."""
    dims = {layer.spatial_ndim for layer in layers} - {None}
    if len(dims) > 1:
        raise NtklabValueError(
            "layers: expected Conv/AvgPool layers of one spatial dimensionality, got "
            f"{sorted(d for d in dims if d is not None)}"
        )
    return dims.pop() if dims else None


def check_images(
    x1: object, x2: object | None, spatial_ndim: int | None
) -> tuple[Tensor, Tensor | None]:
    """Validate image batches ``(n, C, *S)`` (or flat ``(n, d)`` when ``spatial_ndim`` is
    None) for an architecture with spatial layers: float32 or float64, finite, and not
    channels-last (:func:`~ntklab._checks.check_channels_first`: a last axis of 1 or 3 entries
    after axes of more than 4 is refused)."""

    def one(name: str, x: object) -> Tensor:
        if not isinstance(x, Tensor):
            raise NtklabTypeError(
                f"{name}: expected a torch.Tensor of shape (n, C, ...), got {type(x).__name__}"
            )
        ndims = (2, 3, 4) if spatial_ndim is None else (spatial_ndim + 2,)
        if x.ndim not in ndims:
            want = {3: "(n, C, L)", 4: "(n, C, H, W)"}.get(ndims[-1], "(n, d)")
            if spatial_ndim is None:
                want = "(n, d), (n, C, L) or (n, C, H, W)"
            raise NtklabValueError(
                f"{name}: expected a {'/'.join(map(str, ndims))}-D tensor of shape {want}, got "
                f"{x.ndim}-D shape {tuple(x.shape)}"
            )
        check_precision(name, x)
        if x.ndim > 2:
            check_channels_first(name, x)
        if min(x.shape[1:]) == 0:
            raise NtklabValueError(
                f"{name}: expected non-empty channels and positions, got shape {tuple(x.shape)}"
            )
        if not bool(torch.isfinite(x).all()):
            bad = int((~torch.isfinite(x)).sum())
            raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
        return x

    a = one("x1", x1)
    if x2 is None:
        return a, None
    b = one("x2", x2)
    if a.shape[1:] != b.shape[1:]:
        raise NtklabValueError(
            f"x2: expected the channels and spatial shape of x1, {tuple(a.shape[1:])}, got "
            f"{tuple(b.shape[1:])}"
        )
    if a.dtype != b.dtype:
        raise NtklabTypeError(f"x2: expected the dtype of x1 ({a.dtype}), got {b.dtype}")
    if a.device != b.device:
        raise NtklabValueError(f"x2: expected the device of x1 ({a.device}), got {b.device}")
    return a, b


def block_bytes(x: Tensor, rows: int, cols: int, full: bool) -> int:
    """Estimated peak bytes of one block of ``rows x cols`` input pairs: the NNGP and NTK
    and two temporaries per pair, plus the per-input states, at the input's spatial size
    (padded by 2 per dimension)."""
    positions = math.prod(s + 2 for s in x.shape[2:])
    per_pair = positions**2 if full else positions
    item = x.element_size()
    return item * per_pair * (4 * rows * cols + 4 * (rows + cols))


def kernel_in_blocks(
    compute: Callable[[Tensor, Tensor | None], Kernel],
    a: Tensor,
    b: Tensor | None,
    *,
    full: bool,
    max_memory: int | None,
) -> Kernel:
    """Compute ``compute(a, b)`` in blocks of input pairs that fit ``max_memory`` bytes."""
    budget = resolve_max_memory(max_memory, a.device)
    n1 = a.shape[0]
    n2 = n1 if b is None else b.shape[0]
    if block_bytes(a, n1, n2, full) <= budget:
        return compute(a, b)
    if block_bytes(a, 1, 1, full) > budget:
        layout = "full spatial covariance" if full else "spatial diagonal"
        raise NtklabValueError(
            f"max_memory: expected at least {block_bytes(a, 1, 1, full)} bytes (one pair of "
            f"inputs of shape {tuple(a.shape[1:])}, {layout}), got {budget}; reduce the "
            "image size, use Flatten instead of pooling, or pass a larger max_memory"
        )
    size = 1
    while size < max(n1, n2) and block_bytes(a, 2 * size, 2 * size, full) <= budget:
        size *= 2
    blocks1 = list(range(0, n1, size))
    blocks2 = list(range(0, n2, size))
    rows_nngp: list[Tensor] = []
    rows_ntk: list[Tensor] = []
    var1_parts: list[Tensor] = []
    var2_parts: list[Tensor | None] = [None] * len(blocks2)
    cache: dict[tuple[int, int], Kernel] = {}
    for i, s1 in enumerate(blocks1):
        xa = a[s1 : s1 + size]
        row_nngp, row_ntk = [], []
        for j, s2 in enumerate(blocks2):
            if b is None and j < i:
                k_t = cache[(j, i)]
                row_nngp.append(k_t.nngp.T)
                row_ntk.append(k_t.ntk.T)
                continue
            k = (
                compute(xa, None)
                if b is None and i == j
                else compute(xa, (a if b is None else b)[s2 : s2 + size])
            )
            if b is None:
                cache[(i, j)] = k
            row_nngp.append(k.nngp)
            row_ntk.append(k.ntk)
            if var2_parts[j] is None:
                var2_parts[j] = k.var2
            if (j == 0 or (b is None and i == j)) and len(var1_parts) == i:
                var1_parts.append(k.var1)
        rows_nngp.append(torch.cat(row_nngp, dim=1))
        rows_ntk.append(torch.cat(row_ntk, dim=1))
    var1 = torch.cat(var1_parts)
    var2 = var1 if b is None else torch.cat([v for v in var2_parts if v is not None])
    return Kernel(nngp=torch.cat(rows_nngp), ntk=torch.cat(rows_ntk), var1=var1, var2=var2)
