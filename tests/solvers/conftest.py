"""Small analytic-kernel problems shared by the solver tests."""

from __future__ import annotations

import pytest
import torch

import ntklab as nl


@pytest.fixture
def relu_arch() -> nl.kernels.Architecture:
    return nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.5),
    )


@pytest.fixture
def xy(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(240, 4, generator=gen, dtype=torch.float64)
    y = torch.stack([torch.sin(x[:, 0] * 2), x[:, 1] * x[:, 2]], dim=1)
    return x, y
