"""Fully-connected layers: the kernel rule :class:`Dense` and its finite module
:class:`DenseLayer`.

Conventions are those of neural-tangents' ``stax`` (arXiv:1912.02803): a ``Dense`` layer in
NTK parameterization computes :math:`y = \\sigma_w W x / \\sqrt{n_{in}} + \\sigma_b b` with
unit Gaussian ``W`` and ``b``.
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

from ..errors import NtklabValueError
from .engine import (
    Layer,
    Parameterization,
    Role,
    affine,
    as_float,
    check_weight_scales,
    check_width,
    plain_ntk_scales,
)
from .kernel import KernelState

__all__ = ["Dense", "DenseLayer"]


@dataclass(frozen=True)
class Dense(Layer):
    """Fully-connected layer.

    The positional arguments are those of neural-tangents' ``stax.Dense(out_dim, W_std,
    b_std)``: ``Dense(512)`` is a layer of 512 units, not a weight scale of 512.

    Parameters
    ----------
    width : int or None
        Output width of this layer (``stax``'s ``out_dim``). The NTK-parameterized kernel does
        not depend on it; it sets the layer's width in ``to_torch`` (default: ``to_torch``'s
        ``width`` for hidden layers and ``out_features`` for the last one), weighs a
        :class:`~ntklab.kernels.FanInConcat`, and is the fan-in of the next layer in the
        standard parameterization.
    w_std : float or Tensor
        Weight scale :math:`\\sigma_w >= 0`.
    b_std : float, Tensor or None
        Bias scale :math:`\\sigma_b >= 0`; ``None`` means no bias (which differs from
        ``0.0`` only in the standard parameterization's NTK, where a bias, even initialized
        at zero, contributes 1).
    parameterization : {"ntk", "standard"}
        ``"ntk"``: :math:`y = \\sigma_w W x/\\sqrt{n_{in}} + \\sigma_b b`, unit Gaussian
        ``W, b``. ``"standard"``: :math:`y = W x + b` with
        :math:`W_{ij} \\sim N(0, \\sigma_w^2 / n_{in})`, :math:`b \\sim N(0, \\sigma_b^2)`; its
        NTK depends on the widths. Keyword only.

    Notes
    -----
    Kernel recursion (neural-tangents' conventions). NTK parameterization:

    .. math:: K' = \\sigma_w^2 K + \\sigma_b^2, \\qquad \\Theta' = K' + \\sigma_w^2 \\Theta.

    Standard parameterization, with :math:`n_{in}` the fan-in width:

    .. math:: K' = \\sigma_w^2 K + \\sigma_b^2, \\qquad
              \\Theta' = n_{in} K + \\sigma_w^2 \\Theta + [\\text{bias}].
    """

    width: int | None = None
    w_std: float | Tensor = 1.0
    b_std: float | Tensor | None = 0.0
    _: KW_ONLY
    parameterization: Parameterization = "ntk"

    def __post_init__(self) -> None:
        check_width(
            self.width,
            "the number of units, neural-tangents' out_dim: Dense(512) is 512 units",
            "Dense(w_std=1.5, b_std=0.1)",
        )
        check_weight_scales(self.w_std, self.b_std, self.parameterization)

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def takes_role(self) -> bool:
        return True

    @property
    def fused_kind(self) -> Literal["dense"] | None:
        return "dense" if plain_ntk_scales(self.w_std, self.b_std, self.parameterization) else None

    def _requires_grad(self) -> bool:
        return any(isinstance(v, Tensor) and v.requires_grad for v in (self.w_std, self.b_std))

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.spatial_ndim:
            raise NtklabValueError(
                "Dense: expected a flat (n, d) representation, got one with "
                f"{state.spatial_ndim} spatial dimension(s); put Flatten() or GlobalAvgPool() "
                "before it, or use a Conv with filter_shape 1 for a per-position dense layer"
            )
        w2 = self.w_std**2
        b2 = 0.0 if self.b_std is None else self.b_std**2
        cov, ntk = state.cov, state.ntk
        if self.parameterization == "ntk":
            # shape: (n1, n2). K' = w^2 K + b^2 ;  Theta' = K' + w^2 Theta
            cov = affine(cov, w2, b2, inplace)
            if ntk is None:
                ntk = cov.clone()
            elif inplace and not isinstance(w2, Tensor):
                ntk = torch.add(cov, ntk, alpha=w2, out=ntk)
            else:
                ntk = cov + w2 * ntk
        else:
            if state.fan_in is None:
                raise NtklabValueError(
                    "Dense(parameterization='standard'): expected the width of the previous "
                    "Dense layer (its NTK scales with the fan-in), got width=None; pass "
                    "Dense(..., width=N) to that layer"
                )
            fan_in = float(state.fan_in)
            bias = 0.0 if self.b_std is None else 1.0
            # Theta' = n_in K + w^2 Theta + [bias], with the incoming K
            if ntk is None:
                ntk = torch.mul(cov, fan_in)
            elif inplace and not isinstance(w2, Tensor):
                ntk = ntk.mul_(w2).add_(cov, alpha=fan_in)
            else:
                ntk = fan_in * cov + w2 * ntk
            if bias:
                ntk = ntk.add_(bias) if inplace else ntk + bias
            cov = affine(cov, w2, b2, inplace)
        return dataclasses.replace(
            state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True, product=False
        )

    def propagate_variance(self, var: Tensor) -> Tensor:
        """The diagonal recursion :math:`v' = \\sigma_w^2 v + \\sigma_b^2`."""
        b2 = 0.0 if self.b_std is None else self.b_std**2
        return affine(var, self.w_std**2, b2, inplace=False)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
        parameterization: Literal["ntk", "standard", "mup"] | None = None,
        role: Role = "hidden",
    ) -> nn.Module:
        """A :class:`DenseLayer`; ``parameterization`` (default: this layer's own) may
        override it, e.g. with ``"mup"``, which reads ``role`` (where the layer sits:
        ``"input"``, ``"hidden"``, ``"output"`` or ``"only"``)."""
        out = self.width if self.width is not None else out_features
        if out is None:
            raise NtklabValueError("width: expected an int for the hidden Dense layers, got None")
        return DenseLayer(
            in_features,
            out,
            w_std=as_float(self.w_std),
            b_std=None if self.b_std is None else as_float(self.b_std),
            parameterization=parameterization or self.parameterization,
            role=role,
            generator=generator,
            dtype=dtype,
            device=device,
        )


class DenseLayer(LazyModuleMixin, nn.Linear):
    """A linear layer in NTK, standard or maximal-update (muP) parameterization.

    Every parameterization is written in the abc form of Yang & Hu (arXiv:2011.14522):
    ``weight`` and ``bias`` are drawn as :math:`N(0, s_W^2)` and :math:`N(0, s_b^2)` and the
    forward pass multiplies them by constants, :math:`y = m_W x W^T + m_b b`. With
    :math:`n_{in}` the fan-in, :math:`n` the hidden width and :math:`\\sigma_w, \\sigma_b`
    the scales, :math:`(m_W, s_W; m_b, s_b)` is

    - ``"ntk"``: :math:`(\\sigma_w / \\sqrt{n_{in}}, 1;\\ \\sigma_b, 1)`;
    - ``"standard"``: :math:`(1, \\sigma_w / \\sqrt{n_{in}};\\ 1, \\sigma_b)`;
    - ``"mup"`` (Table 3 of the paper, SGD with one width-independent learning rate), input
      layer :math:`(\\sigma_w \\sqrt{n / n_{in}}, n^{-1/2})`, hidden layers
      :math:`(\\sigma_w, n_{in}^{-1/2})`, readout :math:`(\\sigma_w / \\sqrt{n_{in}},
      n_{in}^{-1/2})`, the biases of hidden layers :math:`(\\sigma_b \\sqrt{n}, n^{-1/2})`
      (fan-in 1, fan-out n, like input weights) and the readout bias as in ``"ntk"`` (finite
      fan-in and fan-out).

    At initialization ntk and standard give the same function; they differ in their gradients
    (so in the NTK and in the learning rate that trains them). muP keeps the pre-activations
    O(1), makes the output :math:`O(n^{-1/2})` at initialization and lets every hidden feature
    move by O(1) in training: the rich (feature-learning) regime, as opposed to the lazy NTK
    regime. ``role`` says where the layer sits: ``"input"`` (reads the data), ``"hidden"``,
    ``"output"`` (the readout), or ``"only"`` (a one-layer network, which muP treats as NTK).

    With ``in_features=None`` the weights are created on the first forward call (like
    ``nn.LazyLinear``), drawn from ``generator``.
    """

    cls_to_become = None  # stays a DenseLayer after initialization

    def __init__(
        self,
        in_features: int | None,
        out_features: int,
        *,
        w_std: float = 1.0,
        b_std: float | None = 0.0,
        parameterization: Literal["ntk", "standard", "mup"] = "ntk",
        role: Literal["input", "hidden", "output", "only"] = "hidden",
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if parameterization not in ("ntk", "standard", "mup"):
            raise NtklabValueError(
                f"parameterization: expected 'ntk', 'standard' or 'mup', got {parameterization!r}"
            )
        if role not in ("input", "hidden", "output", "only"):
            raise NtklabValueError(
                f"role: expected 'input', 'hidden', 'output' or 'only', got {role!r}"
            )
        super().__init__(0, 0, bias=b_std is not None, device=device, dtype=dtype)
        self.w_std = float(w_std)
        self.b_std = None if b_std is None else float(b_std)
        self.parameterization = parameterization
        self.role = role
        self.out_features = out_features
        self._generator = generator
        self.weight = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        if b_std is not None:
            self.bias = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        if in_features is not None:
            self._materialize(in_features)

    @property
    def scales(self) -> tuple[float, float, float, float]:
        """``(weight_multiplier, weight_init_std, bias_multiplier, bias_init_std)``."""
        if self.has_uninitialized_params() or self.in_features == 0:
            raise NtklabValueError(
                "DenseLayer: expected materialized parameters (in_features known), got a lazy "
                "layer that has not seen an input yet"
            )
        n_in, n_out = float(self.in_features), float(self.out_features)
        w, b = self.w_std, float(self.b_std or 0.0)
        kind = self.parameterization
        if kind == "mup" and self.role == "only":
            kind = "ntk"
        if kind == "ntk":
            return w / math.sqrt(n_in), 1.0, b, 1.0
        if kind == "standard":
            return 1.0, w / math.sqrt(n_in), 1.0, b
        if self.role == "output":
            # The readout bias has finite fan-in and fan-out: muP leaves it as in NTK.
            return w / math.sqrt(n_in), 1.0 / math.sqrt(n_in), b, 1.0
        bias = (b * math.sqrt(n_out), 1.0 / math.sqrt(n_out))
        if self.role == "input":
            return w * math.sqrt(n_out / n_in), 1.0 / math.sqrt(n_out), *bias
        return w, 1.0 / math.sqrt(n_in), *bias

    @property
    def weight_multiplier(self) -> float:
        """:math:`m_W`: the constant the forward pass multiplies ``weight`` by."""
        return self.scales[0]

    @property
    def bias_multiplier(self) -> float:
        """:math:`m_b`: the constant the forward pass multiplies ``bias`` by."""
        return self.scales[2]

    def _materialize(self, in_features: int) -> None:
        self.in_features = in_features
        self.weight.materialize((self.out_features, in_features))  # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.materialize((self.out_features,))  # type: ignore[attr-defined]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.has_uninitialized_params() or self.in_features == 0:
            return
        _, w_init, _, b_init = self.scales
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0, generator=self._generator).mul_(w_init)
            if self.bias is not None:
                self.bias.normal_(0.0, 1.0, generator=self._generator).mul_(b_init)

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self._materialize(int(input.shape[-1]))

    def forward(self, input: Tensor) -> Tensor:
        w_mult, _, b_mult, _ = self.scales
        out = nn.functional.linear(input, self.weight)
        if w_mult != 1.0:
            out = out * w_mult
        if self.bias is not None:
            out = out + (self.bias if b_mult == 1.0 else b_mult * self.bias)
        return out

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"w_std={self.w_std}, b_std={self.b_std}, parameterization={self.parameterization}, "
            f"role={self.role}"
        )
