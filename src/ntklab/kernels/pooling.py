"""Pooling and flattening: the kernel rules :class:`AvgPool`, :class:`GlobalAvgPool`,
:class:`Flatten` and their finite modules :class:`AvgPoolLayer`, :class:`GlobalAvgPoolLayer`.

Average pooling averages each axis of a position pair over its window,
:math:`K'_{hh'} = |f|^{-2} \\sum_{d, d'} K_{sh+d, sh'+d'}`; global average pooling averages
over all pairs and ``Flatten`` over the diagonal (neural-tangents' conventions,
arXiv:1912.02803). The pooling layers read covariances between different positions
(``mixes_space``): the engine carries the full spatial covariance up to the last of them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import NtklabValueError
from .covariance import (
    Padding,
    as_tuple,
    check_padding,
    full_diagonal,
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

__all__ = ["AvgPool", "AvgPoolLayer", "Flatten", "GlobalAvgPool", "GlobalAvgPoolLayer"]


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
        window = as_tuple("window_shape", self.window_shape, ndim)
        if len(window) not in (1, 2):
            raise NtklabValueError(
                f"window_shape: expected 1 or 2 spatial dimensions, got {len(window)}: {window}"
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
        return self.window_shape  # type: ignore[return-value]

    def _pool(self, x: Tensor, state: KernelState) -> Tensor:
        wrap = self.padding == "CIRCULAR"
        strides: tuple[int, ...] = self.strides  # type: ignore[assignment]
        for k, (axes, size) in enumerate(
            zip(spatial_axes(state), state.spatial_shape, strict=True)
        ):
            f, s = self._window[k], strides[k]
            pads = pads_for(self.padding, size, f, s, k)
            output_size(size, f, s, *pads, what="AvgPool")
            for axis in axes:
                x = window_mean(x, (axis,), f, s, pads, wrap)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        require_spatial("AvgPool", state, len(self._window))
        require_full(type(self).__name__, state)
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

        return AvgPoolLayer(self._window, self.strides, self.padding)  # type: ignore[arg-type]


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


class AvgPoolLayer(nn.Module):
    """Average pooling with zero pads counted in the average (``count_include_pad``)."""

    def __init__(
        self, window_shape: tuple[int, ...], strides: tuple[int, ...], padding: Padding
    ) -> None:
        super().__init__()
        self.window_shape = tuple(window_shape)
        self.strides = tuple(strides)
        self.padding = padding

    def forward(self, input: Tensor) -> Tensor:
        x = pad_images(input, self.window_shape, self.strides, self.padding)
        pool = nn.functional.avg_pool1d if len(self.window_shape) == 1 else nn.functional.avg_pool2d
        return pool(x, self.window_shape, self.strides)

    def extra_repr(self) -> str:
        return f"window_shape={self.window_shape}, strides={self.strides}, padding={self.padding!r}"


class GlobalAvgPoolLayer(nn.Module):
    """The mean over all positions: ``(n, C, *S)`` to ``(n, C)``."""

    def forward(self, input: Tensor) -> Tensor:
        return input.mean(dim=tuple(range(2, input.ndim))) if input.ndim > 2 else input
