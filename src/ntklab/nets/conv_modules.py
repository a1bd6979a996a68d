"""Finite-width counterparts of the convolutional, pooling, normalization and residual layers
of :mod:`ntklab.kernels.spatial` (what ``Architecture.to_torch`` builds for them).

Inputs are torch's channels-first batches ``(n, C, L)`` or ``(n, C, H, W)``. The layers with
parameters are lazy in their input channels (created from ``generator`` on the first forward
call, as ``nn.LazyConv2d``) and expose ``out_channels`` but no ``out_features``, so the layer
after them stays lazy too (e.g. a ``Dense`` after ``Flatten`` reads ``C H W`` features).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from .._checks import check_channels_first
from ..errors import NtklabValueError
from ..kernels.spatial import Padding, pads_for

__all__ = [
    "AvgPoolLayer",
    "ConvLayer",
    "GlobalAvgPoolLayer",
    "LayerNormLayer",
    "ResidualBlock",
]


def _pad_input(
    x: Tensor, window: tuple[int, ...], strides: tuple[int, ...], padding: Padding
) -> Tensor:
    """Pad the spatial axes of ``x`` ``(n, C, *S)`` as the kernel layers do."""
    pads: list[int] = []
    for k in reversed(range(len(window))):  # F.pad lists the last axis first
        pads.extend(pads_for(padding, int(x.shape[2 + k]), window[k], strides[k], k))
    if not any(pads):
        return x
    mode = "circular" if padding == "CIRCULAR" else "constant"
    return nn.functional.pad(x, pads, mode=mode)


class ConvLayer(LazyModuleMixin, nn.Module):
    """A 1-D or 2-D convolution in NTK or standard parameterization.

    NTK parameterization: unit Gaussian ``weight`` ``(out, C, *f)`` and ``bias``, and
    :math:`y = \\sigma_w W * x / \\sqrt{C |f|} + \\sigma_b b`. Standard:
    :math:`y = W * x + b` with :math:`W \\sim N(0, \\sigma_w^2 / (C |f|))`,
    :math:`b \\sim N(0, \\sigma_b^2)`. ``padding`` as :class:`ntklab.kernels.Conv`.

    ``in_channels=None``: created on the first forward call; ``out_channels=None``: as many
    as the input has (the last layer of a residual branch). With ``check_layout=True`` (set by
    ``Architecture.to_torch`` on a network's first layer) a channels-last looking input, such
    as ``(n, 28, 28, 1)``, is refused (:func:`ntklab._checks.check_channels_first`).
    """

    cls_to_become = None

    def __init__(
        self,
        in_channels: int | None,
        out_channels: int | None,
        filter_shape: tuple[int, ...],
        *,
        strides: tuple[int, ...] | None = None,
        padding: Padding = "SAME",
        w_std: float = 1.0,
        b_std: float | None = 0.0,
        parameterization: Literal["ntk", "standard"] = "ntk",
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if parameterization not in ("ntk", "standard"):
            raise NtklabValueError(
                f"parameterization: expected 'ntk' or 'standard', got {parameterization!r}"
            )
        super().__init__()
        self.filter_shape = tuple(filter_shape)
        self.strides = tuple(strides) if strides is not None else (1,) * len(self.filter_shape)
        self.padding = padding
        self.w_std = float(w_std)
        self.b_std = None if b_std is None else float(b_std)
        self.parameterization = parameterization
        self.in_channels = 0
        self.out_channels = out_channels
        self.check_layout = False
        self._generator = generator
        self.weight = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        self.bias: nn.Parameter | None = None
        if b_std is not None:
            self.bias = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        if in_channels is not None:
            self._materialize(in_channels)

    def _materialize(self, in_channels: int) -> None:
        self.in_channels = in_channels
        if self.out_channels is None:
            self.out_channels = in_channels
        shape = (self.out_channels, in_channels, *self.filter_shape)
        self.weight.materialize(shape)
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))  # type: ignore[attr-defined]
        self.reset_parameters()

    @property
    def fan_in(self) -> int:
        """Input channels times the filter size."""
        return self.in_channels * math.prod(self.filter_shape)

    def reset_parameters(self) -> None:
        """Draw the parameters again (from the layer's generator)."""
        if self.has_uninitialized_params():
            return
        standard = self.parameterization == "standard"
        with torch.no_grad():
            scale = self.w_std / math.sqrt(self.fan_in) if standard else 1.0
            self.weight.normal_(0.0, 1.0, generator=self._generator).mul_(scale)
            if self.bias is not None:
                bscale = float(self.b_std or 0.0) if standard else 1.0
                self.bias.normal_(0.0, 1.0, generator=self._generator).mul_(bscale)

    def _check_input(self, input: Tensor) -> None:
        if input.ndim != len(self.filter_shape) + 2:
            raise NtklabValueError(
                f"input: expected a {len(self.filter_shape) + 2}-D batch (n, C, ...), got shape "
                f"{tuple(input.shape)}"
            )
        if self.check_layout:
            check_channels_first("input", input)

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self._check_input(input)  # before the channel count is read from it
            self._materialize(int(input.shape[1]))

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        x = _pad_input(input, self.filter_shape, self.strides, self.padding)
        conv = nn.functional.conv1d if len(self.filter_shape) == 1 else nn.functional.conv2d
        if self.parameterization == "standard":
            return conv(x, self.weight, self.bias, stride=self.strides)
        out = conv(x, self.weight, stride=self.strides) * (self.w_std / math.sqrt(self.fan_in))
        if self.bias is not None:
            shape = (1, -1) + (1,) * len(self.filter_shape)
            out = out + float(self.b_std or 0.0) * self.bias.view(shape)
        return out

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
            f"filter_shape={self.filter_shape}, strides={self.strides}, "
            f"padding={self.padding!r}, w_std={self.w_std}, b_std={self.b_std}, "
            f"parameterization={self.parameterization}"
        )


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
        x = _pad_input(input, self.window_shape, self.strides, self.padding)
        pool = nn.functional.avg_pool1d if len(self.window_shape) == 1 else nn.functional.avg_pool2d
        return pool(x, self.window_shape, self.strides)

    def extra_repr(self) -> str:
        return f"window_shape={self.window_shape}, strides={self.strides}, padding={self.padding!r}"


class GlobalAvgPoolLayer(nn.Module):
    """The mean over all positions: ``(n, C, *S)`` to ``(n, C)``."""

    def forward(self, input: Tensor) -> Tensor:
        return input.mean(dim=tuple(range(2, input.ndim))) if input.ndim > 2 else input


class LayerNormLayer(LazyModuleMixin, nn.Module):
    """:math:`(x - \\mu) / \\sqrt{\\sigma^2 + \\epsilon}` over the channels (``"channel"``) or
    over channels and positions (``"all"``), with an optional per-channel affine map
    (``weight = 1``, ``bias = 0`` at initialization, created lazily)."""

    cls_to_become = None

    def __init__(
        self,
        axes: Literal["channel", "all"],
        *,
        eps: float = 1e-5,
        affine: bool = False,
        bias: bool = True,
        num_channels: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.axes = axes
        self.eps = float(eps)
        self.affine = affine
        self.weight: nn.Parameter | None = None
        self.bias: nn.Parameter | None = None
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
            if num_channels is not None:
                self._materialize(num_channels)

    def _materialize(self, channels: int) -> None:
        assert self.weight is not None
        self.weight.materialize((channels,))  # type: ignore[attr-defined]
        with torch.no_grad():
            self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.materialize((channels,))  # type: ignore[attr-defined]
                self.bias.zero_()

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self._materialize(int(input.shape[1]))

    def forward(self, input: Tensor) -> Tensor:
        dims = (1,) if self.axes == "channel" else tuple(range(1, input.ndim))
        mean = input.mean(dim=dims, keepdim=True)
        var = input.var(dim=dims, unbiased=False, keepdim=True)
        out = (input - mean) * torch.rsqrt(var + self.eps)
        if self.weight is not None:
            shape = (1, -1) + (1,) * (input.ndim - 2)
            out = out * self.weight.view(shape)
            if self.bias is not None:
                out = out + self.bias.view(shape)
        return out

    def extra_repr(self) -> str:
        return f"axes={self.axes!r}, eps={self.eps}, affine={self.affine}"


class ResidualBlock(nn.Module):
    """:math:`y = x + \\alpha\\, g(x)` for a branch module :math:`g`."""

    def __init__(self, branch: nn.Module, scale: float = 1.0, features: int | None = None) -> None:
        super().__init__()
        self.branch = branch
        self.scale = float(scale)
        if features is not None:
            self.out_features = features

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = input + self.scale * self.branch(input)
        return out

    def extra_repr(self) -> str:
        return f"scale={self.scale}"
