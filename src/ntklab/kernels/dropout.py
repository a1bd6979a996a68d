"""Dropout: the kernel rule :class:`Dropout` (the identity at inference); its finite module is
``torch.nn.Dropout``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..errors import NtklabValueError
from .engine import Layer
from .kernel import KernelState

__all__ = ["Dropout"]


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

    @property
    def passes_through(self) -> bool:
        return True

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
