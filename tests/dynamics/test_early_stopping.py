"""Early-stopped kernel GD on S^1 against the dense closed form of ntklab.dynamics."""

from __future__ import annotations

import math

import pytest
import torch

import ntklab as nl
from ntklab.data import (
    TrigPolynomial,
    excess_risk_s1,
    kernel_predictor_coefficients_s1,
    source_condition_target,
    uniform_circle,
)
from ntklab.dynamics import linearized_dynamics
from ntklab.dynamics.early_stopping import (
    early_stopping_time,
    kernel_gd_coefficients_s1,
    kernel_gd_excess_risk_s1,
)
from ntklab.errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ntklab.kernels.sphere import circle_eigenvalues, profile_from_architecture

F64 = torch.float64


def _mercer_kernel(a: torch.Tensor, b: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """mu_0 + 2 sum_k mu_k cos k (a - b), summed directly."""
    k = torch.arange(1, mu.shape[0], dtype=F64)
    diff = a[:, None, None] - b[None, :, None]
    return mu[0] + 2.0 * (mu[1:] * torch.cos(k * diff)).sum(-1)


def _relu_arch() -> nl.Architecture:
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.0), nl.Relu())
    return nl.serial(block, block, nl.Dense(w_std=math.sqrt(2.0), b_std=0.0))


def test_stopping_time_closed_form() -> None:
    assert early_stopping_time(4096, 0.5, 0.5) == pytest.approx(4096 ** (1 / 1.5), rel=1e-14)
    assert early_stopping_time(100, 1.0, 0.0, scale=3.0) == pytest.approx(30.0, rel=1e-14)
    with pytest.raises(NtklabValueError, match="beta"):
        early_stopping_time(10, 0.0, 0.5)
    with pytest.raises(NtklabValueError, match="gamma"):
        early_stopping_time(10, 1.0, -0.1)
    with pytest.raises(NtklabValueError, match="n"):
        early_stopping_time(0, 1.0, 0.5)


@pytest.mark.parametrize(
    ("schedule", "lr", "times"), [("flow", 1.0, [0.3, 7.0, 250.0]), ("gd", 0.5, [1.0, 12.0, 300.0])]
)
def test_matches_dense_linearized_dynamics(schedule: str, lr: float, times: list[float]) -> None:
    """The Mercer-feature predictor equals the n x n closed form with the same kernel."""
    g = torch.Generator().manual_seed(0)
    mu = 1.0 / (1.0 + torch.arange(13, dtype=F64)) ** 2
    a, x = uniform_circle(40, generator=g)
    y = torch.sin(3 * a) + 0.3 * torch.randn(40, generator=g, dtype=F64)
    test = torch.linspace(0, 2 * math.pi, 97, dtype=F64)
    t = torch.tensor(times, dtype=F64)
    tables = kernel_gd_coefficients_s1(x, y, mu, t, schedule=schedule, learning_rate=lr)  # type: ignore[arg-type]
    dyn = linearized_dynamics(_mercer_kernel(a, a, mu), y, learning_rate=lr, schedule=schedule)
    expected = dyn.test(t, _mercer_kernel(test, a, mu))  # shape: (T, m)
    got = torch.stack([TrigPolynomial(tab)(test) for tab in tables])
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_excess_risk_agrees_with_the_full_relu_ntk() -> None:
    """Against the untruncated kernel (arch.kernel), dense solve, coefficients to K = 2048."""
    arch = _relu_arch()
    mu_long = circle_eigenvalues(profile_from_architecture(arch, 2), 2048, grid=65536)
    mu = mu_long[:129]
    g = torch.Generator().manual_seed(1)
    target = source_condition_target(mu, 0.5, generator=g)
    assert isinstance(target.function, TrigPolynomial)
    a, x = uniform_circle(200, generator=g)
    y = target(a) + 0.5 * torch.randn(200, generator=g, dtype=F64)
    t = torch.tensor([5.0, 40.0], dtype=F64)
    ours = kernel_gd_excess_risk_s1(a, y, mu, target.function.coefficients, t)

    k = arch.kernel(x).ntk
    dyn = linearized_dynamics(k, y)
    alpha = dyn.train_kernel.integrated(t, y[:, None])[..., 0]  # shape: (T, n)
    tables = kernel_predictor_coefficients_s1(alpha.T, a, mu_long)
    dense = excess_risk_s1(tables, target.function.coefficients)
    torch.testing.assert_close(ours, dense, rtol=2e-3, atol=0.0)


def test_limits_zero_time_and_interpolation() -> None:
    g = torch.Generator().manual_seed(2)
    mu = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=F64)
    f = torch.tensor([[0.2, 0.0], [0.3, -0.4], [0.0, 0.1], [0.05, 0.0]], dtype=F64)
    a, _ = uniform_circle(30, generator=g)
    y = TrigPolynomial(f)(a)
    risk = kernel_gd_excess_risk_s1(a, y, mu, f, torch.tensor([0.0, 1e9], dtype=F64))
    torch.testing.assert_close(risk[0], f.square().sum())
    torch.testing.assert_close(risk[1], torch.zeros((), dtype=F64), atol=1e-12, rtol=0)


def test_float_time_returns_one_table_and_keeps_dtype() -> None:
    g = torch.Generator().manual_seed(3)
    a, _ = uniform_circle(10, generator=g, dtype=torch.float32)
    mu = torch.tensor([1.0, 0.5, 0.1], dtype=torch.float32)
    table = kernel_gd_coefficients_s1(a, torch.cos(a), mu, 2.0)
    assert table.shape == (3, 2) and table.dtype == torch.float32


def test_bad_inputs_are_named() -> None:
    a = torch.zeros(4, dtype=F64)
    mu = torch.tensor([1.0, 0.5], dtype=F64)
    with pytest.raises(NtklabValueError, match="y"):
        kernel_gd_coefficients_s1(a, torch.zeros(3, dtype=F64), mu, 1.0)
    with pytest.raises(NtklabValueError, match="eigenvalues"):
        kernel_gd_coefficients_s1(a, a, torch.tensor([1.0, -0.5], dtype=F64), 1.0)
    with pytest.raises(NtklabTypeError, match="eigenvalues"):
        kernel_gd_coefficients_s1(a, a, [1.0, 0.5], 1.0)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="x"):
        kernel_gd_coefficients_s1(torch.zeros(4, 3, dtype=F64), a, mu, 1.0)
    with pytest.raises(NtklabValueError, match="schedule"):
        kernel_gd_coefficients_s1(a, a, mu, 1.0, schedule="sgd")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="whole numbers"):
        kernel_gd_coefficients_s1(a, a, mu, 1.5, schedule="gd")
    with pytest.warns(NumericalWarning, match="critical"):
        kernel_gd_coefficients_s1(a, a, mu, 1.0, schedule="gd", learning_rate=100.0)
