"""Pooling and flattening: the kernel rules :class:`AvgPool`, :class:`SumPool`,
:class:`GlobalAvgPool`, :class:`GlobalSumPool`, :class:`Flatten` and their finite modules
:class:`AvgPoolLayer`, :class:`SumPoolLayer`, :class:`GlobalAvgPoolLayer`,
:class:`GlobalSumPoolLayer`.

Average pooling averages each axis of a position pair over its window,
:math:`K'_{hh'} = |f|^{-2} \\sum_{d, d'} K_{sh+d, sh'+d'}`; sum pooling sums it (the same
times :math:`|f|^2`); global pooling averages (sums) over all pairs and ``Flatten`` averages
over the diagonal (neural-tangents' conventions, arXiv:1912.02803). The pooling layers read
covariances between different positions (``mixes_space``): the engine carries the full
spatial covariance up to the last of them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import NtklabTypeError, NtklabValueError
from .covariance import (
    Padding,
    as_tuple,
    center_mask,
    check_padding,
    full_diagonal,
    masked_counts,
    output_size,
    pad_images,
    pads_for,
    require_full,
    require_spatial,
    spatial_axes,
    window_mean,
)
from .engine import Layer
from .kernel import KernelState

__all__ = [
    "AvgPool",
    "AvgPoolLayer",
    "Flatten",
    "GlobalAvgPool",
    "GlobalAvgPoolLayer",
    "GlobalSumPool",
    "GlobalSumPoolLayer",
    "SumPool",
    "SumPoolLayer",
]


PoolMode = Literal["mean", "sum", "edges"]
"""How a window is reduced: its mean over the whole window (zero pads included), its sum, or
its mean over the in-range positions only (``normalize_edges``)."""


def pool_windows(
    x: Tensor,
    state: KernelState,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Padding,
    mode: PoolMode,
    what: str,
) -> Tensor:
    """Pool both axes of every spatial dimension of a full-layout ``x`` over its windows.

    Along one axis, with window :math:`f`, stride :math:`s` and :math:`c_i` the in-range
    positions of window :math:`i`: ``"mean"`` gives :math:`\\frac1f \\sum_{d<f} x_{si+d}`,
    ``"sum"`` :math:`\\sum_{d<f} x_{si+d}` and ``"edges"`` :math:`\\frac{1}{c_i} \\sum_{d<f}
    x_{si+d}` (pads excluded; the same as ``"mean"`` without zero pads).
    """
    wrap = padding == "CIRCULAR"
    for k, (axes, size) in enumerate(zip(spatial_axes(state), state.spatial_shape, strict=True)):
        f, s = window[k], strides[k]
        pads = pads_for(padding, size, f, s, k)
        output_size(size, f, s, *pads, what=what)
        counts = None  # shape: (out,), the fraction of each window in range
        if mode == "edges" and not wrap and any(pads):
            counts = window_mean(x.new_ones(size), (0,), f, s, pads, False)
        for axis in axes:
            x = window_mean(x, (axis,), f, s, pads, wrap)
            if mode == "sum":
                x = x.mul_(f)
            elif counts is not None:
                shape = [1] * x.ndim
                shape[axis] = -1
                x = x / counts.view(shape)
    return x


class _WindowPool(Layer):
    """What :class:`AvgPool` and :class:`SumPool` share: the window geometry, the full
    layout they read and the spatial shape they write."""

    window_shape: int | tuple[int, ...]
    strides: int | tuple[int, ...] | None
    padding: Padding

    def _check_geometry(self) -> None:
        ndim = None
        for v in (self.window_shape, self.strides, self.padding):
            if isinstance(v, tuple | list):
                ndim = len(v)
                break
        window = as_tuple("window_shape", self.window_shape, ndim)
        if len(window) not in (1, 2, 3):
            raise NtklabValueError(
                f"window_shape: expected 1, 2 or 3 spatial dimensions, got {len(window)}: {window}"
            )
        strides = window if self.strides is None else as_tuple("strides", self.strides, len(window))
        check_padding(self.padding, len(window))
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
    def passes_through(self) -> bool:
        return True

    @property
    def _window(self) -> tuple[int, ...]:
        return self.window_shape  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def _strides(self) -> tuple[int, ...]:
        return self.strides  # type: ignore[return-value]

    @property
    def _mode(self) -> PoolMode:
        raise NotImplementedError  # pragma: no cover - set by each pooling layer

    def _pool(self, x: Tensor, state: KernelState) -> Tensor:
        name = type(self).__name__
        return pool_windows(x, state, self._window, self._strides, self.padding, self._mode, name)

    def mask_after(self, mask: Tensor) -> Tensor:
        return center_mask(mask, self._window, self._strides, self.padding)

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        require_spatial(type(self).__name__, state, len(self._window))
        require_full(type(self).__name__, state)
        cov = self._pool(state.cov, state)
        ntk = None if state.ntk is None else self._pool(state.ntk, state)
        return dataclasses.replace(state, cov=cov, ntk=ntk)


@dataclass(frozen=True)
class AvgPool(_WindowPool):
    """Average pooling over windows of the spatial axes (``nn.AvgPool1d``/``nn.AvgPool2d``
    with ``count_include_pad=True``, and neural-tangents' ``AvgPool``).

    Parameters
    ----------
    window_shape : int or tuple of int
    strides : int or tuple of int, optional
        Default: the window (torch's convention; neural-tangents' default is 1).
    padding : {"SAME", "VALID", "CIRCULAR"}, int or tuple of int
        As for :class:`Conv`; zero pads count in the average (the window size divides).
    normalize_edges : bool
        Divide by the number of in-range positions of each window instead of the window
        size (torch's ``count_include_pad=False``, neural-tangents' ``normalize_edges=True``);
        it changes only windows that reach into zero pads.

    Notes
    -----
    .. math:: K'_{hh'} = \\frac{1}{|f|^2} \\sum_{d, d' \\in f} K_{sh+d,\\, sh'+d'},

    the same for :math:`\\Theta`; with ``normalize_edges`` the sum is divided by
    :math:`c_h c_{h'}`, the in-range counts of the two windows. Needs the full spatial
    covariance.
    """

    window_shape: int | tuple[int, ...] = (2, 2)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "VALID"
    normalize_edges: bool = False

    def __post_init__(self) -> None:
        self._check_geometry()
        if not isinstance(self.normalize_edges, bool):
            raise NtklabTypeError(f"normalize_edges: expected a bool, got {self.normalize_edges!r}")

    @property
    def _mode(self) -> PoolMode:
        return "edges" if self.normalize_edges else "mean"

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return AvgPoolLayer(
            self._window, self._strides, self.padding, normalize_edges=self.normalize_edges
        )


@dataclass(frozen=True)
class SumPool(_WindowPool):
    """Sum pooling over windows of the spatial axes (neural-tangents' ``SumPool``; torch's
    ``nn.AvgPool2d(..., divisor_override=1)``).

    Parameters
    ----------
    window_shape : int or tuple of int
    strides : int or tuple of int, optional
        Default: the window (torch's convention; neural-tangents' default is 1).
    padding : {"SAME", "VALID", "CIRCULAR"}, int or tuple of int
        As for :class:`Conv` (zero pads add nothing).

    Notes
    -----
    .. math:: K'_{hh'} = \\sum_{d, d' \\in f} K_{sh+d,\\, sh'+d'},

    :math:`|f|^2` times the kernel of :class:`AvgPool`; the same for :math:`\\Theta`. Needs
    the full spatial covariance.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Conv, Flatten, SumPool
    >>> cnn = nl.serial(Conv(8, (3, 3)), nl.Relu(), SumPool((2, 2)), Flatten(), nl.Dense(1))
    >>> cnn.kernel(torch.randn(3, 2, 6, 6, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    window_shape: int | tuple[int, ...] = (2, 2)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "VALID"

    def __post_init__(self) -> None:
        self._check_geometry()

    @property
    def _mode(self) -> PoolMode:
        return "sum"

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return SumPoolLayer(self._window, self._strides, self.padding)


class _GlobalPool(Layer):
    """What :class:`GlobalAvgPool` and :class:`GlobalSumPool` share."""

    _total = False  # sum over all position pairs instead of averaging

    @property
    def mixes_space(self) -> bool:
        return True

    @property
    def passes_through(self) -> bool:
        return True

    @property
    def spatial_layer(self) -> bool:
        return True

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.spatial_ndim == 0:
            return state
        require_full(type(self).__name__, state)
        dims = tuple(range(state.batch_ndim, state.cov.ndim))
        if state.mask is not None and not self._total:
            # masked positions hold zeros: average over the unmasked pairs only
            counts = masked_counts(state)
            cov = state.cov.sum(dim=dims) / counts
            ntk = None if state.ntk is None else state.ntk.sum(dim=dims) / counts
            return dataclasses.replace(state, cov=cov, ntk=ntk, spatial_ndim=0, full_spatial=False)
        reduce = torch.sum if self._total else torch.mean
        cov = reduce(state.cov, dim=dims)
        ntk = None if state.ntk is None else reduce(state.ntk, dim=dims)
        return dataclasses.replace(state, cov=cov, ntk=ntk, spatial_ndim=0, full_spatial=False)


@dataclass(frozen=True)
class GlobalAvgPool(_GlobalPool):
    """Average over all positions (``nn.AdaptiveAvgPool2d(1)`` followed by ``Flatten``).

    .. math:: K' = \\frac{1}{|S|^2} \\sum_{h, h'} K_{hh'}.

    Needs the full spatial covariance; on a flat representation it does nothing.
    """

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return GlobalAvgPoolLayer()


@dataclass(frozen=True)
class GlobalSumPool(_GlobalPool):
    """Sum over all positions (neural-tangents' ``GlobalSumPool``): ``(n, C, *S)`` to
    ``(n, C)``.

    .. math:: K' = \\sum_{h, h'} K_{hh'},

    :math:`|S|^2` times the kernel of :class:`GlobalAvgPool`. Needs the full spatial
    covariance; on a flat representation it does nothing.
    """

    _total = True

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return GlobalSumPoolLayer()


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

    @property
    def passes_through(self) -> bool:
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


def _pool_layer(x: Tensor, window: tuple[int, ...], strides: tuple[int, ...]) -> Tensor:
    pool = {1: nn.functional.avg_pool1d, 2: nn.functional.avg_pool2d, 3: nn.functional.avg_pool3d}[
        len(window)
    ]
    out: Tensor = pool(x, window, strides)
    return out


class AvgPoolLayer(nn.Module):
    """Average pooling, zero pads counted in the average (``count_include_pad``) unless
    ``normalize_edges``."""

    def __init__(
        self,
        window_shape: tuple[int, ...],
        strides: tuple[int, ...],
        padding: Padding,
        *,
        normalize_edges: bool = False,
    ) -> None:
        super().__init__()
        self.window_shape = tuple(window_shape)
        self.strides = tuple(strides)
        self.padding = padding
        self.normalize_edges = normalize_edges

    def forward(self, input: Tensor) -> Tensor:
        x = pad_images(input, self.window_shape, self.strides, self.padding)
        out = _pool_layer(x, self.window_shape, self.strides)
        if self.normalize_edges and self.padding != "CIRCULAR":
            ones = input.new_ones((1, 1, *input.shape[2:]))
            pads = pad_images(ones, self.window_shape, self.strides, self.padding)
            out = out / _pool_layer(pads, self.window_shape, self.strides)
        return out

    def extra_repr(self) -> str:
        return (
            f"window_shape={self.window_shape}, strides={self.strides}, "
            f"padding={self.padding!r}, normalize_edges={self.normalize_edges}"
        )


class SumPoolLayer(nn.Module):
    """Sum pooling: the window sums of the (padded) input."""

    def __init__(
        self, window_shape: tuple[int, ...], strides: tuple[int, ...], padding: Padding
    ) -> None:
        super().__init__()
        self.window_shape = tuple(window_shape)
        self.strides = tuple(strides)
        self.padding = padding

    def forward(self, input: Tensor) -> Tensor:
        x = pad_images(input, self.window_shape, self.strides, self.padding)
        return _pool_layer(x, self.window_shape, self.strides) * math.prod(self.window_shape)

    def extra_repr(self) -> str:
        return f"window_shape={self.window_shape}, strides={self.strides}, padding={self.padding!r}"


class GlobalAvgPoolLayer(nn.Module):
    """The mean over all positions: ``(n, C, *S)`` to ``(n, C)``."""

    def forward(self, input: Tensor) -> Tensor:
        return input.mean(dim=tuple(range(2, input.ndim))) if input.ndim > 2 else input


class GlobalSumPoolLayer(nn.Module):
    """The sum over all positions: ``(n, C, *S)`` to ``(n, C)``."""

    def forward(self, input: Tensor) -> Tensor:
        return input.sum(dim=tuple(range(2, input.ndim))) if input.ndim > 2 else input
