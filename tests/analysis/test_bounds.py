"""GD loss curves: the spectral formula against GD run step by step on a linear model, the
trace bound against dense matrix powers, the lambda_min bound, the generalization figure."""

from __future__ import annotations

import doctest

import pytest
import torch
from torch.testing import assert_close

from ntklab.analysis import (
    bounds,
    gd_loss_curve,
    generalization_figure,
    kernel_eigh,
    lambda_min_bound,
    trace_bound,
)
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(bounds)
    assert result.attempted >= 4
    assert result.failed == 0


def run_gd(
    x: torch.Tensor,
    y: torch.Tensor,
    theta: torch.Tensor,
    eta: float,
    steps: int,
    normalization: str,
) -> torch.Tensor:
    """Plain GD on f = X theta with the squared loss; the loss before each step and after."""
    n_entries = y.numel()
    losses = []
    for _ in range(steps + 1):
        theta = theta.detach().requires_grad_(True)
        residual = x @ theta - y
        loss = 0.5 * residual.square().sum()
        if normalization == "mean":
            loss = loss / n_entries
        losses.append(float(loss.detach()))
        (grad,) = torch.autograd.grad(loss, theta)
        theta = theta - eta * grad
    return torch.tensor(losses, dtype=F64)


@pytest.mark.parametrize("normalization", ["mean", "sum"])
@pytest.mark.parametrize("outputs", [1, 3])
def test_loss_curve_equals_gd_on_a_linear_model(
    normalization: str, outputs: int, gen: torch.Generator
) -> None:
    n, p = 30, 50
    x = torch.randn(n, p, dtype=F64, generator=gen) / p**0.5
    y = torch.randn(n, outputs, dtype=F64, generator=gen)
    theta0 = torch.randn(p, outputs, dtype=F64, generator=gen)
    if outputs == 1:
        y, theta0 = y[:, 0], theta0[:, 0]
    vals, vecs = kernel_eigh(x @ x.T)  # the NTK of f = X theta
    n_entries = y.numel()
    # claim D2's step 1/lambda_max on the kernel, in each normalization
    eta = (n_entries if normalization == "mean" else 1.0) / float(vals[0])
    steps = 200
    actual = run_gd(x, y, theta0, eta, steps, normalization)
    r0 = x @ theta0 - y
    predicted = gd_loss_curve(
        vals, vecs, r0, torch.arange(steps + 1), learning_rate=eta, normalization=normalization
    )  # type: ignore[arg-type]
    assert predicted.dtype == F64 and predicted.shape == (steps + 1,)
    assert_close(predicted, actual, rtol=1e-10, atol=1e-12)
    assert float(actual[-1]) < 0.5 * float(actual[0])  # it did train


def test_loss_curve_follows_a_divergent_step_too(gen: torch.Generator) -> None:
    x = torch.randn(8, 12, dtype=F64, generator=gen)
    y = torch.randn(8, dtype=F64, generator=gen)
    vals, vecs = kernel_eigh(x @ x.T)
    eta = 2.2 / float(vals[0])
    actual = run_gd(x, y, torch.zeros(12, dtype=F64), eta, 20, "sum")
    assert_close(
        gd_loss_curve(vals, vecs, -y, list(range(21)), learning_rate=eta, normalization="sum"),
        actual,
        rtol=1e-10,
        atol=0,
    )
    assert float(actual[-1]) > float(actual[0])


def test_trace_bound_matches_dense_matrix_powers(gen: torch.Generator) -> None:
    a = torch.randn(20, 6, dtype=F64, generator=gen)
    kernel = a @ a.T + 0.01 * torch.eye(20, dtype=F64)
    vals, _ = kernel_eigh(kernel)
    n_entries, eta, loss0 = 40, 30.0 / float(vals[0]), 2.5  # two outputs, "mean"
    step = eta / n_entries
    steps = [0, 1, 5, 17]
    c = loss0 / float(kernel.trace())
    eye = torch.eye(20, dtype=F64)
    dense = torch.tensor(
        [
            c * float((torch.linalg.matrix_power(eye - step * kernel, 2 * t) @ kernel).trace())
            for t in steps
        ],
        dtype=F64,
    )
    got = trace_bound(vals, steps, learning_rate=eta, loss0=loss0, n_entries=n_entries)
    assert_close(got, dense, rtol=1e-10, atol=0)
    same = trace_bound(vals, steps, learning_rate=step, loss0=loss0, normalization="sum")
    assert_close(same, dense, rtol=1e-10, atol=0)


def test_trace_bound_is_exact_under_residual_alignment(gen: torch.Generator) -> None:
    """(v_i^T r0)^2 = c lambda_i turns the exact curve into the trace formula."""
    n = 25
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=gen))
    lam = torch.linspace(3.0, 0.01, n, dtype=F64)
    r0 = q @ (0.7 * lam.sqrt() * torch.sign(torch.randn(n, dtype=F64, generator=gen)))
    eta = n / float(lam[0])
    steps = torch.arange(0, 60, 7)
    exact = gd_loss_curve(lam, q, r0, steps, learning_rate=eta)
    bound = trace_bound(lam, steps, learning_rate=eta, loss0=float(exact[0]))
    assert_close(bound, exact, rtol=1e-12, atol=0)


def test_lambda_min_bound_is_above_the_exact_curve(gen: torch.Generator) -> None:
    a = torch.randn(15, 15, dtype=F64, generator=gen)
    vals, vecs = kernel_eigh(a @ a.T + 0.05 * torch.eye(15, dtype=F64))
    r0 = torch.randn(15, dtype=F64, generator=gen)
    eta = 15 / float(vals[0])
    steps = torch.arange(0, 300, 10)
    exact = gd_loss_curve(vals, vecs, r0, steps, learning_rate=eta)
    bound = lambda_min_bound(vals, steps, learning_rate=eta, loss0=float(exact[0]))
    assert bool((bound >= exact * (1 - 1e-12)).all())
    lam_min = float(vals[-1])
    assert_close(bound, float(exact[0]) * (1 - lam_min / float(vals[0])) ** (2 * steps.double()))


def test_rounding_negative_eigenvalues_are_floored_and_real_ones_rejected() -> None:
    vals = torch.tensor([2.0, 1.0, -1e-9], dtype=F64)
    assert_close(
        lambda_min_bound(vals, [0, 3], learning_rate=0.25, loss0=1.0, normalization="sum"),
        torch.ones(2, dtype=F64),
    )
    with pytest.raises(NtklabValueError, match="eigvals: expected the eigenvalues of a positive"):
        trace_bound(torch.tensor([2.0, -0.5], dtype=F64), 1, learning_rate=0.1, loss0=1.0)


def test_generalization_figure() -> None:
    k = torch.tensor([[2.0, 0.3, 0.1], [0.3, 1.0, 0.0], [0.1, 0.0, 3.0]], dtype=F64)
    assert generalization_figure(k) == pytest.approx(2.0)
    assert generalization_figure(kernel_eigh(k).eigenvalues) == pytest.approx(2.0, rel=1e-12)
    with pytest.raises(NtklabValueError, match="kernel: expected a square matrix"):
        generalization_figure(torch.ones(2, 3))


def test_bad_arguments_name_themselves() -> None:
    vals = torch.tensor([2.0, 1.0], dtype=F64)
    vecs = torch.eye(2, dtype=F64)
    r0 = torch.ones(2, dtype=F64)
    with pytest.raises(NtklabValueError, match="normalization: expected one of 'mean', 'sum'"):
        gd_loss_curve(vals, vecs, r0, 1, learning_rate=0.1, normalization="avg")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="t: expected finite steps >= 0"):
        gd_loss_curve(vals, vecs, r0, torch.tensor([-1]), learning_rate=0.1)
    with pytest.raises(NtklabValueError, match="t: expected integral"):
        trace_bound(vals, torch.tensor([0.5]), learning_rate=0.1, loss0=1.0)
    with pytest.raises(NtklabTypeError, match="t: expected a sequence of ints"):
        trace_bound(vals, [0.5], learning_rate=0.1, loss0=1.0)  # type: ignore[list-item]
    with pytest.raises(NtklabValueError, match="learning_rate: expected a number > 0"):
        gd_loss_curve(vals, vecs, r0, 1, learning_rate=0.0)
    with pytest.raises(NtklabValueError, match="eigvecs: expected a full eigenbasis"):
        gd_loss_curve(vals, vecs[:, :1], r0, 1, learning_rate=0.1)
    with pytest.raises(NtklabValueError, match="r0: expected 2 rows"):
        gd_loss_curve(vals, vecs, torch.ones(3), 1, learning_rate=0.1)
    with pytest.raises(NtklabValueError, match="n_entries: expected a multiple of"):
        trace_bound(vals, 1, learning_rate=0.1, loss0=1.0, n_entries=3)
    with pytest.raises(NtklabValueError, match="loss0: expected a number >= 0"):
        lambda_min_bound(vals, 1, learning_rate=0.1, loss0=-1.0)
