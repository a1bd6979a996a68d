"""Layer normalization: the kernel rule :class:`LayerNorm` and its finite module
:class:`LayerNormLayer`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from .._checks import check_nonnegative
from ..errors import NtklabValueError
from .engine import Layer
from .kernel import KernelState

__all__ = ["LayerNorm", "LayerNormLayer"]


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

    On masked inputs (``mask_constant``), ``"all"`` averages over the unmasked positions
    only, in the kernel (:math:`v(x)`) and in the finite layer (mean and variance), so a
    padded sequence is normalized as the short one. (neural-tangents 0.6.5 also counts
    :math:`\\epsilon` at each padded position in :math:`v(x)`: a relative difference of order
    :math:`\\epsilon`.)

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

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        """Raise unless ``affine=False`` or a layer with parameters follows (through pooling,
        ``Flatten``, ``Dropout`` or ``Identity`` only).

        The gain :math:`\\gamma_c` moves one unit only, so its gradient :math:`\\hat x_c`
        stays correlated with the unit it feeds: through a nonlinearity :math:`\\phi` it
        contributes :math:`E[\\phi'(u) u\\, \\phi'(v) v]`, not the :math:`E[uv]
        E[\\phi'(u)\\phi'(v)]` of the kernel recursion. A linear layer next averages over
        fresh weights and restores it.
        """
        if not self.affine:
            return
        nxt = next((lay for lay in layers[index + 1 :] if not lay.passes_through), None)
        if (nxt is None and not in_branch) or (nxt is not None and nxt.has_parameters):
            return
        raise NtklabValueError(
            f"{where}[{index}]: expected LayerNorm(affine=True) to be followed by a Dense or "
            f"Conv layer, got {'the end of a branch' if nxt is None else type(nxt).__name__}"
            "; the kernel of a learnable per-channel gain feeding a nonlinearity is not "
            "implemented (use affine=False there)"
        )

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if not state.gaussian:
            raise NtklabValueError(
                "LayerNorm: expected zero-mean Gaussian pre-activations (the output of a Dense "
                "or Conv layer), got the output of a nonlinearity or the raw inputs, whose "
                "mean over channels does not vanish"
            )
        v1, v2 = state.var1, state.var2
        if self.axes == "all" and state.spatial_ndim and state.mask is not None:
            v1, v2 = _masked_mean_variances(state)
        elif self.axes == "all" and state.spatial_ndim:
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

        return LayerNormLayer(
            self.axes,
            eps=self.eps,
            affine=self.affine,
            bias=self.bias,
            dtype=dtype,
            device=device,
        )


def _masked_mean_variances(state: KernelState) -> tuple[Tensor, Tensor]:
    """The variances ``var1``, ``var2`` of a masked spatial ``state`` averaged over the
    unmasked positions of each input (neural-tangents' ``LayerNorm`` on masked inputs), shaped
    to broadcast against ``state.cov``; the variances at masked positions are zero."""
    assert state.mask is not None  # called on masked states only
    out = []
    for v, m, first in ((state.var1, state.mask[0], True), (state.var2, state.mask[1], False)):
        total = v.sum(dim=tuple(range(state.batch_ndim, v.ndim)), keepdim=True)
        count = (~m).flatten(1).sum(dim=1).to(v.dtype)  # shape: (n,)
        batch = (-1,) if state.batch_ndim == 1 else (-1, 1) if first else (1, -1)
        out.append(total / count.view(*batch, *(1,) * (v.ndim - state.batch_ndim)))
    return out[0], out[1]


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
        # the mask (n, *S) of masked inputs, set by MaskedNetwork for one forward pass
        self.mask: Tensor | None = None
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
        if self.mask is not None and self.axes == "all":
            # the mean and variance over the unmasked positions (and all channels) only
            keep = (~self.mask).unsqueeze(1).to(input.dtype)  # shape: (n, 1, *S)
            count = keep.sum(dim=dims, keepdim=True) * input.shape[1]
            mean = (input * keep).sum(dim=dims, keepdim=True) / count
            var = ((input - mean).square() * keep).sum(dim=dims, keepdim=True) / count
        else:
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
