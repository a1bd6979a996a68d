from __future__ import annotations

import pytest
import torch

import ntklab as nl

F64 = torch.float64


@pytest.fixture
def arch() -> nl.Architecture:
    return nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Erf(),
        nl.Dense(w_std=1.2, b_std=0.05),
    )


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 4, generator=g, dtype=F64)
    y = torch.randn(12, 2, generator=g, dtype=F64)
    xt = torch.randn(5, 4, generator=g, dtype=F64)
    return x, y, xt
