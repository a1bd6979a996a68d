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
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from .._checks import check_channels_first
from ..errors import NtklabValueError
from .covariance import (
    Padding,
    as_tuple,
    center_mask,
    check_padding,
    full_diagonal,
    output_size,
    pad,
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

__all__ = [
    "Conv",
    "ConvLayer",
    "ConvLocal",
    "ConvLocalLayer",
    "ConvTranspose",
    "ConvTransposeLayer",
    "fold_periodic",
    "transpose_geometry",
    "window_scatter",
]


@dataclass(frozen=True)
class Conv(Layer):
    """Convolution over the channels of 1-D, 2-D or 3-D inputs (``nn.Conv1d``/``nn.Conv2d``/
    ``nn.Conv3d``).

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
        if ndim not in (1, 2, 3):
            raise NtklabValueError(
                f"filter_shape: expected 1, 2 or 3 spatial dimensions, got {ndim}: {filt}"
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
        """``"conv"`` for 1-D and 2-D filters with plain-number NTK scales (the fused
        convolution kernel has no 3-D layout: 3-D convolutions run eager)."""
        if len(self._filter) > 2:
            return None
        return "conv" if plain_ntk_scales(self.w_std, self.b_std, self.parameterization) else None

    @property
    def _filter(self) -> tuple[int, ...]:
        return self.filter_shape  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def _strides(self) -> tuple[int, ...]:
        return self.strides  # type: ignore[return-value]

    def _requires_grad(self) -> bool:
        return any(isinstance(v, Tensor) and v.requires_grad for v in (self.w_std, self.b_std))

    def mask_after(self, mask: Tensor) -> Tensor:
        return center_mask(mask, self._filter, self._strides, self.padding)

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


CONVOLUTIONS = {1: nn.functional.conv1d, 2: nn.functional.conv2d, 3: nn.functional.conv3d}
"""torch's convolution for each number of spatial dimensions."""


class ConvLayer(LazyModuleMixin, nn.Module):
    """A 1-D, 2-D or 3-D convolution in NTK or standard parameterization.

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
        conv = CONVOLUTIONS[len(self.filter_shape)]
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


# --------------------------------------------------------------------------------------------
# locally connected and transposed convolutions


def _conv_arguments(layer: ConvLocal | ConvTranspose) -> dict[str, object]:
    return {
        "width": layer.width,
        "filter_shape": layer.filter_shape,
        "strides": layer.strides,
        "padding": layer.padding,
        "w_std": layer.w_std,
        "b_std": layer.b_std,
        "parameterization": layer.parameterization,
    }


def _embed_diagonal(diag: Tensor, batch_ndim: int, spatial_ndim: int) -> Tensor:
    """The full layout ``(batch..., H, H', W, W')`` that is ``diag`` ``(batch..., H, W)`` on
    its spatial diagonal and zero elsewhere."""
    batch, sizes = diag.shape[:batch_ndim], diag.shape[batch_ndim:]
    out = diag.new_zeros(*batch, *[d for size in sizes for d in (size, size)])
    view = out
    for _ in range(spatial_ndim):
        view = torch.diagonal(view, dim1=batch_ndim, dim2=batch_ndim + 1)
    view.copy_(diag)
    return out


@dataclass(frozen=True)
class ConvLocal(Layer):
    """Locally connected layer: a convolution without weight sharing (neural-tangents'
    ``stax.ConvLocal``), with its own filter and bias at every output position.

    The arguments are those of :class:`Conv` (``ConvLocal(64, (3, 3))``).

    Notes
    -----
    Different positions have independent weights, so the outputs at two different positions
    are uncorrelated and the layer keeps only the same-position terms of the rule of
    :class:`Conv` (Novak et al. 2019, arXiv:1810.05148):

    .. math::

        K'_{hh'} = \\delta_{hh'} \\Big(\\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} K_{sh + d,\\,
        sh + d} + \\sigma_b^2\\Big),

    the same for :math:`\\Theta` (with :math:`+ K'`). On the spatial diagonal it equals
    :class:`Conv`; in the full layout its off-diagonal positions are zero (a pooling layer
    after it sees no correlation between positions).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import ConvLocal, GlobalAvgPool
    >>> lcn = nl.serial(ConvLocal(8, (3, 3)), nl.Relu(), GlobalAvgPool(), nl.Dense(1))
    >>> lcn.kernel(torch.randn(3, 2, 6, 6, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
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
        rule = Conv(**_conv_arguments(self))  # type: ignore[arg-type]  # validates them
        if len(rule.filter_shape) == 3:  # type: ignore[arg-type]
            raise NtklabValueError(
                f"filter_shape: expected 1 or 2 spatial dimensions for ConvLocal (its module "
                f"unfolds patches with nn.functional.unfold), got {rule.filter_shape}"
            )
        object.__setattr__(self, "filter_shape", rule.filter_shape)
        object.__setattr__(self, "strides", rule.strides)
        object.__setattr__(self, "padding", rule.padding)

    @property
    def _rule(self) -> Conv:
        return Conv(**_conv_arguments(self))  # type: ignore[arg-type]

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def spatial_ndim(self) -> int | None:
        return len(self.filter_shape)  # type: ignore[arg-type]

    def _requires_grad(self) -> bool:
        return self._rule._requires_grad()

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        require_spatial("ConvLocal", state, len(self.filter_shape))  # type: ignore[arg-type]
        if not state.full_spatial:
            return self._rule.propagate(state, inplace=inplace)
        b, s = state.batch_ndim, state.spatial_ndim
        diag = dataclasses.replace(
            state,
            cov=full_diagonal(state.cov, b, s),
            ntk=None if state.ntk is None else full_diagonal(state.ntk, b, s),
            full_spatial=False,
        )
        out = self._rule.propagate(diag, inplace=False)
        return dataclasses.replace(
            out,
            cov=_embed_diagonal(out.cov, b, s),
            ntk=None if out.ntk is None else _embed_diagonal(out.ntk, b, s),
            full_spatial=True,
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
        return ConvLocalLayer(
            in_features,
            out,
            self.filter_shape,
            strides=self.strides,
            padding=self.padding,
            w_std=as_float(self.w_std),
            b_std=None if self.b_std is None else as_float(self.b_std),
            parameterization=self.parameterization,
            generator=generator,
            dtype=dtype,
            device=device,
        )


class ConvLocalLayer(ConvLayer):
    """A locally connected layer (NTK or standard parameterization): the filter
    ``weight[p]`` ``(out, C |f|)`` and the bias ``bias[:, p]`` of output position ``p`` are
    its own, applied to the patches of ``nn.functional.unfold``.

    NTK parameterization: :math:`y_p = \\sigma_w W_p x_{[p]} / \\sqrt{C |f|} + \\sigma_b b_p`
    with unit Gaussian ``W, b``; standard: :math:`W_p \\sim N(0, \\sigma_w^2 / (C |f|))`,
    :math:`b_p \\sim N(0, \\sigma_b^2)`. The parameters depend on the spatial shape, so they
    are created on the first forward call (always lazy; a given ``in_channels`` is checked
    against that batch's channels).
    """

    def __init__(
        self, in_channels: int | None, out_channels: int | None, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(None, out_channels, *args, **kwargs)
        self.out_shape: tuple[int, ...] = ()
        self.expected_channels = in_channels

    def _materialize_for(self, input: Tensor) -> None:
        self.in_channels = int(input.shape[1])
        if self.expected_channels not in (None, self.in_channels):
            raise NtklabValueError(
                f"input: expected {self.expected_channels} channels, got shape {tuple(input.shape)}"
            )
        if self.out_channels is None:
            self.out_channels = self.in_channels
        x = pad_images(input[:1], self.filter_shape, self.strides, self.padding)
        self.out_shape = tuple(
            output_size(int(x.shape[2 + k]), f, s, 0, 0, "ConvLocal")
            for k, (f, s) in enumerate(zip(self.filter_shape, self.strides, strict=True))
        )
        positions = math.prod(self.out_shape)
        self.weight.materialize((positions, self.out_channels, self.fan_in))
        if self.bias is not None:
            self.bias.materialize((self.out_channels, *self.out_shape))  # type: ignore[attr-defined]
        self.reset_parameters()

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self._check_input(input)
            self._materialize_for(input)

    def _patches(self, input: Tensor) -> Tensor:
        """``(n, C |f|, positions)``: the receptive field of every output position."""
        x = pad_images(input, self.filter_shape, self.strides, self.padding)
        if len(self.filter_shape) == 1:
            x = x.unsqueeze(2)
            return nn.functional.unfold(x, (1, *self.filter_shape), stride=(1, *self.strides))
        return nn.functional.unfold(x, self.filter_shape, stride=self.strides)

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        patches = self._patches(input)
        if patches.shape[2] != self.weight.shape[0]:
            raise NtklabValueError(
                f"input: expected the spatial shape this ConvLocalLayer was built for (output "
                f"positions {self.out_shape}), got shape {tuple(input.shape)}"
            )
        out = torch.einsum("nkp,pok->nop", patches, self.weight)
        out = out.reshape(out.shape[0], out.shape[1], *self.out_shape)
        standard = self.parameterization == "standard"
        if not standard:
            out = out * (self.w_std / math.sqrt(self.fan_in))
        if self.bias is not None:
            out = out + (self.bias if standard else float(self.b_std or 0.0) * self.bias)
        return out


def transpose_geometry(
    padding: Padding, size: int, window: int, stride: int, dim: int
) -> tuple[int, int]:
    """``(lo, out)`` of a transposed convolution along spatial dimension ``dim``: output
    position ``o`` is position ``o + lo`` of the full transposed convolution (input ``i``
    with filter offset ``d`` lands on ``s i + d``, of length ``(size - 1) s + f``), for
    ``out`` positions; positions beyond the full length are zero.

    ``"VALID"`` and ``"SAME"`` follow ``jax.lax.conv_transpose`` (``out = s size +
    max(f - s, 0)`` and ``s size``); ints crop as torch's ``padding=``; ``"CIRCULAR"``
    is ``"VALID"`` before the periodic fold of :func:`fold_periodic`."""
    if padding in ("VALID", "CIRCULAR"):
        return 0, size * stride + max(window - stride, 0)
    if padding == "SAME":
        pad_a = window - 1 if stride > window - 1 else -(-(window + stride - 2) // 2)
        return window - 1 - pad_a, size * stride
    p = padding if isinstance(padding, int) else padding[dim]
    return int(p), (size - 1) * stride + window - 2 * int(p)


def window_scatter(
    x: Tensor, axes: tuple[int, ...], window: int, stride: int, lo: int, out_size: int
) -> Tensor:
    """The adjoint of :func:`~ntklab.kernels.covariance.window_mean`:
    :math:`y_o = \\frac1w \\sum_{d<w} \\sum_i [o = s i + d - lo]\\, x_i`, the same offset
    ``d`` on every axis of ``axes``; outputs out of ``[0, out_size)`` are dropped."""
    size = x.shape[axes[0]]
    shape = list(x.shape)
    for axis in axes:
        shape[axis] = out_size
    out = x.new_zeros(shape)
    for d in range(window):
        # input i lands on o = s i + d - lo, kept when 0 <= o < out_size
        i_lo = max(0, -((d - lo) // stride))
        i_hi = min(size - 1, (out_size - 1 + lo - d) // stride)
        if i_lo > i_hi:
            continue
        o_lo = stride * i_lo + d - lo
        out_index: list[slice] = [slice(None)] * x.ndim
        in_index: list[slice] = [slice(None)] * x.ndim
        for axis in axes:
            out_index[axis] = slice(o_lo, o_lo + stride * (i_hi - i_lo) + 1, stride)
            in_index[axis] = slice(i_lo, i_hi + 1)
        out[tuple(out_index)] += x[tuple(in_index)]
    return out.mul_(1.0 / window)


def fold_periodic(x: Tensor, axis: int, size: int) -> Tensor:
    """Sum the positions of ``axis`` that are congruent modulo ``size``, centred as
    neural-tangents' ``CIRCULAR`` transposed convolution: position ``q`` lands on
    ``(q - (L - size) // 2) mod size``, ``L = x.shape[axis]``."""
    length = x.shape[axis]
    shift = (length - size) // 2
    index = (torch.arange(length, device=x.device) - shift) % size
    shape = list(x.shape)
    shape[axis] = size
    return x.new_zeros(shape).index_add(axis, index, x)


class _TransposedRule(Conv):
    """:class:`Conv`'s affine rule with the window sum of a transposed convolution (internal
    to :class:`ConvTranspose`; never a layer of an architecture)."""

    def _convolve(self, x: Tensor, state: KernelState) -> Tensor:
        for k, (axes, size) in enumerate(
            zip(spatial_axes(state), state.spatial_shape, strict=True)
        ):
            f, s = self._filter[k], self._strides[k]
            lo, out = transpose_geometry(self.padding, size, f, s, k)
            if out < 1:
                raise NtklabValueError(
                    f"ConvTranspose: expected padding that leaves at least one output "
                    f"position, got {self.padding!r} on a spatial size of {size}"
                )
            x = window_scatter(x, axes, f, s, lo, out)
            if self.padding == "CIRCULAR":
                for axis in axes:
                    x = fold_periodic(x, axis, size * s)
        return x


@dataclass(frozen=True)
class ConvTranspose(Layer):
    """Transposed convolution (``nn.ConvTranspose1d``/``nn.ConvTranspose2d``,
    neural-tangents' ``stax.ConvTranspose``).

    The arguments are those of :class:`Conv` (``ConvTranspose(64, (3, 3), (2, 2))``), with
    neural-tangents' output sizes: ``"VALID"`` gives :math:`s n + \\max(f - s, 0)` positions
    (torch's :math:`(n - 1) s + f` when :math:`f \\ge s`), ``"SAME"`` :math:`s n`, and
    ``"CIRCULAR"`` folds the ``"VALID"`` output periodically onto :math:`s n` positions; ints
    crop that many positions at both ends, as torch's ``padding=``. The default is
    ``"VALID"`` (torch's and stax's).

    Notes
    -----
    Input position :math:`i` reaches output :math:`o = s i + d - \\ell` through filter
    offset :math:`d`, so, with the fan-in :math:`C |f|` of neural-tangents,

    .. math::

        K'_{oo'} = \\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} \\sum_{i, i'}
        [o = s i + d - \\ell]\\, [o' = s i' + d - \\ell]\\, K_{ii'} + \\sigma_b^2,

    the adjoint of :class:`Conv`'s window sum, and :math:`\\Theta' = K' +
    \\frac{\\sigma_w^2}{|f|} \\sum (\\ldots) \\Theta`. The same offset on both positions maps
    the spatial diagonal to itself, so it runs in either layout.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import ConvTranspose, Flatten
    >>> net = nl.serial(ConvTranspose(8, (3, 3), (2, 2)), nl.Relu(), Flatten(), nl.Dense(1))
    >>> net.kernel(torch.randn(3, 2, 4, 4, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    width: int | None = None
    filter_shape: int | tuple[int, ...] = (3, 3)
    strides: int | tuple[int, ...] | None = None
    padding: Padding = "VALID"
    w_std: float | Tensor = 1.0
    b_std: float | Tensor | None = 0.0
    _: KW_ONLY
    parameterization: Parameterization = "ntk"

    @property
    def moves_positions(self) -> bool:
        return True

    def __post_init__(self) -> None:
        rule = _TransposedRule(**_conv_arguments(self))  # type: ignore[arg-type]
        object.__setattr__(self, "filter_shape", rule.filter_shape)
        object.__setattr__(self, "strides", rule.strides)
        object.__setattr__(self, "padding", rule.padding)

    @property
    def _rule(self) -> Conv:
        return _TransposedRule(**_conv_arguments(self))  # type: ignore[arg-type]

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def spatial_ndim(self) -> int | None:
        return len(self.filter_shape)  # type: ignore[arg-type]

    def _requires_grad(self) -> bool:
        return self._rule._requires_grad()

    def spatial_shape_after(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        rule = self._rule
        filt, strides = rule._filter, rule._strides
        if len(shape) != len(filt):
            return shape
        padding = "VALID" if self.padding == "CIRCULAR" else self.padding  # before the fold
        return tuple(
            max(size, transpose_geometry(padding, size, f, s, k)[1])
            for k, (size, f, s) in enumerate(zip(shape, filt, strides, strict=True))
        )

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        require_spatial("ConvTranspose", state, len(self.filter_shape))  # type: ignore[arg-type]
        return self._rule.propagate(state, inplace=inplace)

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
        return ConvTransposeLayer(
            in_features,
            out,
            self.filter_shape,  # type: ignore[arg-type]
            strides=self.strides,  # type: ignore[arg-type]
            padding=self.padding,
            w_std=as_float(self.w_std),
            b_std=None if self.b_std is None else as_float(self.b_std),
            parameterization=self.parameterization,
            generator=generator,
            dtype=dtype,
            device=device,
        )


class ConvTransposeLayer(ConvLayer):
    """A transposed convolution in NTK or standard parameterization, with the output sizes
    of :class:`ConvTranspose`: unit Gaussian ``weight`` ``(C, out, *f)`` (torch's layout for
    ``conv_transpose``) and :math:`y = \\sigma_w W \\star^T x / \\sqrt{C |f|} + \\sigma_b b`;
    standard: :math:`W \\sim N(0, \\sigma_w^2 / (C |f|))`."""

    def _materialize(self, in_channels: int) -> None:
        self.in_channels = in_channels
        if self.out_channels is None:
            self.out_channels = in_channels
        self.weight.materialize((in_channels, self.out_channels, *self.filter_shape))
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))  # type: ignore[attr-defined]
        self.reset_parameters()

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        conv = {
            1: nn.functional.conv_transpose1d,
            2: nn.functional.conv_transpose2d,
            3: nn.functional.conv_transpose3d,
        }[len(self.filter_shape)]
        x = conv(input, self.weight, stride=self.strides)  # the full length (n - 1) s + f
        for k, (f, s) in enumerate(zip(self.filter_shape, self.strides, strict=True)):
            size = int(input.shape[2 + k])
            lo, out = transpose_geometry(self.padding, size, f, s, k)
            full = int(x.shape[2 + k])
            x = pad(x, 2 + k, 0, max(0, out + lo - full), wrap=False).narrow(2 + k, lo, out)
            if self.padding == "CIRCULAR":
                x = fold_periodic(x, 2 + k, size * s)
        if self.parameterization == "standard":
            scale, bscale = 1.0, 1.0
        else:
            scale, bscale = self.w_std / math.sqrt(self.fan_in), float(self.b_std or 0.0)
        out_x = x * scale
        if self.bias is not None:
            shape = (1, -1) + (1,) * len(self.filter_shape)
            out_x = out_x + bscale * self.bias.view(shape)
        return out_x
