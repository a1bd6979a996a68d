"""The Dormand-Prince integrator on ODEs with known solutions."""

from __future__ import annotations

import pytest
import torch

from ntklab.dynamics.ode import dopri5
from ntklab.errors import NtklabValueError

F64 = torch.float64


def test_riccati_and_rotation_to_tolerance() -> None:
    # y' = -y^2, y(0) = 1: y = 1 / (1 + t); z'' = -z (as a system): z = cos t.
    def fun(s: torch.Tensor) -> torch.Tensor:
        return torch.stack([-(s[0] ** 2), s[2], -s[1]])

    times = torch.tensor([0.0, 0.1, 1.0, 3.0, 10.0], dtype=F64)
    out = dopri5(
        fun,
        torch.tensor([1.0, 1.0, 0.0], dtype=F64),
        times,
        rtol=1e-10,
        atol=1e-12,
        max_steps=10_000,
    )
    torch.testing.assert_close(out[:, 0], 1 / (1 + times), rtol=0, atol=1e-9)
    torch.testing.assert_close(out[:, 1], torch.cos(times), rtol=0, atol=1e-8)
    # Looser tolerances give a visibly worse answer: the control is doing the work.
    loose = dopri5(
        fun, torch.tensor([1.0, 1.0, 0.0], dtype=F64), times, rtol=1e-3, atol=1e-3, max_steps=10_000
    )
    assert float((loose[:, 1] - torch.cos(times)).abs().max()) > 1e-6


def test_blow_up_and_budget_raise() -> None:
    one = torch.ones(1, dtype=F64)
    # y' = y^2 from 1 blows up at t = 1.
    with pytest.raises(NtklabValueError, match=r"step underflowed"):
        dopri5(
            lambda y: y**2,
            one,
            torch.tensor([2.0], dtype=F64),
            rtol=1e-8,
            atol=1e-10,
            max_steps=100_000,
        )
    with pytest.raises(NtklabValueError, match="max_steps"):
        dopri5(
            lambda y: -1e6 * y,
            one,
            torch.tensor([1.0], dtype=F64),
            rtol=1e-8,
            atol=1e-10,
            max_steps=50,
        )
