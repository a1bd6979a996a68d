"""Finite-width modules with the parameterizations of ``ntklab.kernels``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from ..errors import NtklabValueError

__all__ = ["DenseLayer", "ElementwiseActivation"]


class DenseLayer(LazyModuleMixin, nn.Linear):
    """A linear layer in NTK or standard parameterization.

    NTK parameterization: ``weight`` and ``bias`` are unit Gaussian and the forward pass is

    .. math:: y = \\frac{\\sigma_w}{\\sqrt{n_{in}}} x W^T + \\sigma_b b.

    Standard parameterization: :math:`y = x W^T + b` with :math:`W_{ij} \\sim N(0,
    \\sigma_w^2 / n_{in})` and :math:`b_i \\sim N(0, \\sigma_b^2)`.

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
        parameterization: Literal["ntk", "standard"] = "ntk",
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if parameterization not in ("ntk", "standard"):
            raise NtklabValueError(
                f"parameterization: expected 'ntk' or 'standard', got {parameterization!r}"
            )
        super().__init__(0, 0, bias=b_std is not None, device=device, dtype=dtype)
        self.w_std = float(w_std)
        self.b_std = None if b_std is None else float(b_std)
        self.parameterization = parameterization
        self.out_features = out_features
        self._generator = generator
        self.weight = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        if b_std is not None:
            self.bias = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        if in_features is not None:
            self._materialize(in_features)

    def _materialize(self, in_features: int) -> None:
        self.in_features = in_features
        self.weight.materialize((self.out_features, in_features))  # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.materialize((self.out_features,))  # type: ignore[attr-defined]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.has_uninitialized_params() or self.in_features == 0:
            return
        with torch.no_grad():
            scale = (
                1.0 if self.parameterization == "ntk" else self.w_std / math.sqrt(self.in_features)
            )
            self.weight.normal_(0.0, 1.0, generator=self._generator).mul_(scale)
            if self.bias is not None:
                bscale = 1.0 if self.parameterization == "ntk" else float(self.b_std or 0.0)
                self.bias.normal_(0.0, 1.0, generator=self._generator).mul_(bscale)

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self._materialize(int(input.shape[-1]))

    def forward(self, input: Tensor) -> Tensor:
        if self.parameterization == "standard":
            return nn.functional.linear(input, self.weight, self.bias)
        out = nn.functional.linear(input, self.weight) * (self.w_std / math.sqrt(self.in_features))
        if self.bias is not None:
            out = out + float(self.b_std or 0.0) * self.bias
        return out

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"w_std={self.w_std}, b_std={self.b_std}, parameterization={self.parameterization}"
        )


class ElementwiseActivation(nn.Module):
    """Applies a scalar function elementwise; the finite counterpart of an activation layer."""

    def __init__(self, fn: Callable[[Tensor], Tensor], name: str) -> None:
        super().__init__()
        self.fn = fn
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name
