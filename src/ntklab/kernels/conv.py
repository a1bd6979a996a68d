"""Convolutions: the kernel rule :class:`Conv` (the CNTK) and its finite module
:class:`ConvLayer`.

Images are torch's ``(n, C, *S)`` batches (``NCHW`` for ``S = (H, W)``, ``NCL`` for 1-D
signals), not neural-tangents' channels-last ``NHWC``: a batch whose last axis has 1 or 3
entries while its other non-batch axes have more than 4 (``(n, 28, 28, 1)``, ``(n, 32, 32,
3)``) is refused with the permutation to apply. The channels are the infinite-width axis.

A convolution with filter :math:`f` (NTK parameterization, :math:`|f|` positions per filter,
stride :math:`s`) maps, position pair by position pair (arXiv:1904.11955, Arora et al. 2019),

.. math::

    K'_{hh'} = \\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} K_{sh + d,\\, sh' + d} + \\sigma_b^2,
    \\qquad \\Theta'_{hh'} = K'_{hh'} + \\frac{\\sigma_w^2}{|f|}
    \\sum_{d \\in f} \\Theta_{sh + d,\\, sh' + d},

with zero (``SAME``, explicit pads) or periodic (``CIRCULAR``) padding of the covariance. It
maps the spatial diagonal to itself, so it runs in either carried layout
(:mod:`ntklab.kernels.covariance`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import KW_ONLY, dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from .._checks import check_channels_first
from ..errors import NtklabValueError
from .covariance import (
    Padding,
    as_tuple,
    check_padding,
    output_size,
    pad_images,
    pads_for,
    require_spatial,
    spatial_axes,
    window_mean,
)
from .engine import (
    Layer,
    Parameterization,
    as_float,
    check_weight_scales,
    check_width,
    plain_ntk_scales,
)
from .kernel import KernelState

__all__ = ["Conv", "ConvLayer"]


@dataclass(frozen=True)
class Conv(Layer):
    """Convolution over the channels of 1-D or 2-D inputs (``nn.Conv1d``/``nn.Conv2d``).

    The positional arguments are those of neural-tangents' ``stax.Conv(out_chan,
    filter_shape, strides, padding, W_std, b_std)``: ``Conv(64, (3, 3))`` is 64 channels of
    3x3 filters. Unlike ``stax`` (``"VALID"``), the default padding is ``"SAME"``.

    Parameters
    ----------
    width : int, optional
        Output channels (``stax``'s ``out_chan``). The NTK-parameterized kernel does not
        depend on it; it sets the channels in ``to_torch`` (default: ``to_torch``'s
        ``width``), weighs a :class:`~ntklab.kernels.FanInConcat`, and is the fan-in of the
        next layer in the standard parameterization.
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
        Keyword only.

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
    >>> from ntklab.kernels import Conv, Flatten
    >>> cnn = nl.serial(Conv(16, (3, 3), w_std=1.4), nl.Relu(), Flatten(), nl.Dense(1))
    >>> cnn.kernel(torch.randn(4, 3, 8, 8, dtype=torch.float64)).ntk.shape
    torch.Size([4, 4])
    """

    width: int | None = None
    filter_shape: int | tuple[int, ...] = (3, 3)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "SAME"
    w_std: float | Tensor = 1.0
    b_std: float | Tensor | None = 0.0
    _: KW_ONLY
    parameterization: Parameterization = "ntk"

    def __post_init__(self) -> None:
        check_width(
            self.width,
            "the output channels, neural-tangents' out_chan: Conv(64, (3, 3)) is 64 channels "
            "of 3x3 filters",
            "Conv(filter_shape=(3, 3), w_std=1.4)",
        )
        ndim = None
        for v in (self.filter_shape, self.strides, self.padding):
            if isinstance(v, tuple | list):
                ndim = len(v)
                break
        filt = as_tuple("filter_shape", self.filter_shape, ndim)
        ndim = len(filt)
        if ndim not in (1, 2):
            raise NtklabValueError(
                f"filter_shape: expected 1 or 2 spatial dimensions, got {ndim}: {filt}"
            )
        strides = (1,) * ndim if self.strides is None else as_tuple("strides", self.strides, ndim)
        check_padding(self.padding, ndim)
        padding = tuple(self.padding) if isinstance(self.padding, list) else self.padding
        object.__setattr__(self, "filter_shape", filt)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "padding", padding)
        check_weight_scales(self.w_std, self.b_std, self.parameterization)

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def spatial_ndim(self) -> int | None:
        return len(self._filter)

    @property
    def fused_kind(self) -> Literal["conv"] | None:
        return "conv" if plain_ntk_scales(self.w_std, self.b_std, self.parameterization) else None

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
            zip(spatial_axes(state), state.spatial_shape, strict=True)
        ):
            f, s = self._filter[k], self._strides[k]
            pads = pads_for(self.padding, size, f, s, k)
            output_size(size, f, s, *pads, what="Conv")
            x = window_mean(x, axes, f, s, pads, wrap)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        require_spatial("Conv", state, len(self._filter))
        w2 = self.w_std**2
        b2 = 0.0 if self.b_std is None else self.b_std**2
        cov_u = self._convolve(state.cov, state)
        ntk_u = None if state.ntk is None else self._convolve(state.ntk, state)
        # _convolve returns fresh tensors: update them in place unless autograd needs them.
        fused = inplace and not isinstance(w2, Tensor) and not isinstance(b2, Tensor)
        if fused and self.parameterization == "ntk":
            cov = cov_u.mul_(w2).add_(b2)
            ntk = cov.clone() if ntk_u is None else ntk_u.mul_(w2).add_(cov)
            return dataclasses.replace(
                state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True, product=False
            )
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
        return dataclasses.replace(
            state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True, product=False
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
        out = self.width if self.width is not None else out_features
        return ConvLayer(
            in_features,
            out,
            self._filter,
            strides=self._strides,
            padding=self.padding,
            w_std=as_float(self.w_std),
            b_std=None if self.b_std is None else as_float(self.b_std),
            parameterization=self.parameterization,
            generator=generator,
            dtype=dtype,
            device=device,
        )


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
        x = pad_images(input, self.filter_shape, self.strides, self.padding)
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
