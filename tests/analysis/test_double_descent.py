"""Double descent: the asymptotic risks against Marchenko-Pastur quadrature and simulation,
random-features regression against lstsq, interpolation, and the arc-cosine kernel limit."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch
from scipy import integrate
from torch.testing import assert_close

import ntklab as nl
from ntklab.analysis import (
    double_descent,
    min_norm_linear_regression_risk,
    min_norm_risk,
    optimal_ridge,
    optimal_ridge_risk,
    random_features_regression,
    random_features_risk,
    random_relu_features,
    ridge_risk,
)
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(double_descent)
    assert result.attempted >= 5
    assert result.failed == 0


def test_min_norm_risk_closed_form() -> None:
    g = torch.tensor([0.25, 0.5, 1.0, 2.0, 5.0], dtype=F64)
    got = min_norm_risk(g, r2=2.0, sigma2=0.5)
    ref = [0.5 * 0.25 / 0.75, 0.5, math.inf, 2.0 * 0.5 + 0.5, 2.0 * 0.8 + 0.5 / 4]
    assert got.tolist() == pytest.approx(ref, rel=1e-14)
    assert float(min_norm_risk(1.0, r2=1.0, sigma2=0.0)) == 0.0
    with pytest.raises(NtklabValueError, match="gamma: expected finite values > 0"):
        min_norm_risk(torch.tensor([0.0, 1.0], dtype=F64), r2=1.0, sigma2=1.0)
    with pytest.raises(NtklabValueError, match="sigma2: expected a number >= 0"):
        min_norm_risk(0.5, r2=1.0, sigma2=-1.0)


def marchenko_pastur(gamma: float, f) -> float:  # type: ignore[no-untyped-def]
    """Integral of f against the Marchenko-Pastur law of ratio gamma (scipy quadrature)."""
    lo, hi = (1 - math.sqrt(gamma)) ** 2, (1 + math.sqrt(gamma)) ** 2

    def density(s: float) -> float:
        return math.sqrt((hi - s) * (s - lo)) / (2 * math.pi * gamma * s)

    value = integrate.quad(lambda s: density(s) * f(s), lo, hi, limit=200, epsabs=1e-13)[0]
    return float(value + (1 - 1 / gamma) * f(0.0) if gamma > 1 else value)


@pytest.mark.parametrize("gamma", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("lam", [0.05, 1.0])
def test_ridge_risk_equals_marchenko_pastur_quadrature(gamma: float, lam: float) -> None:
    r2, sigma2 = 1.3, 0.7
    bias = r2 * lam**2 * marchenko_pastur(gamma, lambda s: 1 / (s + lam) ** 2)
    variance = sigma2 * gamma * marchenko_pastur(gamma, lambda s: s / (s + lam) ** 2)
    got = float(ridge_risk(gamma, lam, r2=r2, sigma2=sigma2))
    assert got == pytest.approx(bias + variance, rel=1e-8)


def test_ridge_to_zero_is_min_norm() -> None:
    g = torch.tensor([0.3, 0.8, 1.5, 4.0], dtype=F64)
    small = ridge_risk(g, 1e-9, r2=1.0, sigma2=0.5)
    assert_close(small, min_norm_risk(g, r2=1.0, sigma2=0.5), rtol=1e-6, atol=0)
    zero = ridge_risk(g, torch.zeros(4, dtype=F64), r2=1.0, sigma2=0.5)
    assert_close(zero, min_norm_risk(g, r2=1.0, sigma2=0.5), rtol=0, atol=0)


def test_optimal_ridge_minimizes_and_removes_the_peak() -> None:
    grid = torch.logspace(-4, 2, 600, dtype=F64)
    for gamma in (0.5, 1.0, 2.0):
        best = optimal_ridge_risk(gamma, r2=1.0, sigma2=0.5)
        assert float(best) <= float(ridge_risk(gamma, grid, r2=1.0, sigma2=0.5).min()) + 1e-12
        assert float(optimal_ridge(gamma, r2=1.0, sigma2=0.5)) == pytest.approx(0.5 * gamma)
    gammas = torch.linspace(0.1, 5.0, 50, dtype=F64)
    curve = optimal_ridge_risk(gammas, r2=1.0, sigma2=0.5)
    assert bool((curve.diff() > 0).all())  # monotone: no peak at gamma = 1
    assert bool((curve <= min_norm_risk(gammas, r2=1.0, sigma2=0.5)).all())
    with pytest.raises(NtklabValueError, match="r2: expected a number > 0"):
        optimal_ridge(1.0, r2=0.0, sigma2=1.0)


@pytest.mark.parametrize(("n", "p", "ridge"), [(800, 400, 0.0), (300, 600, 0.0), (400, 600, 0.5)])
def test_simulation_matches_the_asymptotic_risk(n: int, p: int, ridge: float) -> None:
    sim = min_norm_linear_regression_risk(
        n, p, r2=1.0, sigma2=0.5, repeats=20, ridge=ridge, generator=n + p
    )
    theory = float(ridge_risk(p / n, ridge, r2=1.0, sigma2=0.5))
    assert sim.gamma == p / n and sim.risks.shape == (20,)
    assert sim.mean == pytest.approx(theory, rel=0.08)
    assert abs(sim.mean - theory) < 4 * sim.stderr + 0.01 * theory


def _numpy_linear_risks(n: int, p: int, ridge: float, repeats: int, seed: int) -> np.ndarray:
    """The draws of min_norm_linear_regression_risk (same generator, same order), fitted with
    numpy: lstsq (min-norm) or a dense solve of the normal equations (ridge)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(repeats):
        x = torch.randn(n, p, dtype=F64, generator=g)
        direction = torch.randn(p, dtype=F64, generator=g)
        beta = direction / direction.norm()  # r2 = 1
        y = x @ beta + math.sqrt(0.5) * torch.randn(n, dtype=F64, generator=g)
        xn, yn = x.numpy(), y.numpy()
        if ridge == 0.0:
            fit = np.linalg.lstsq(xn, yn, rcond=None)[0]
        else:
            fit = np.linalg.solve(xn.T @ xn + n * ridge * np.eye(p), xn.T @ yn)
        out.append(np.sum((fit - beta.numpy()) ** 2))
    return np.array(out)


@pytest.mark.parametrize(
    ("n", "p", "ridge"),
    [(60, 20, 0.0), (60, 57, 0.0), (60, 63, 0.0), (60, 150, 0.0), (60, 57, 0.3), (60, 150, 1.5)],
)
def test_linear_simulation_equals_numpy_fits_of_the_same_draws(
    n: int, p: int, ridge: float
) -> None:
    sim = min_norm_linear_regression_risk(
        n, p, r2=1.0, sigma2=0.5, repeats=4, ridge=ridge, generator=7
    )
    ref = _numpy_linear_risks(n, p, ridge, 4, seed=7)
    assert_close(sim.risks, torch.from_numpy(ref), rtol=1e-9, atol=0.0)


@pytest.mark.parametrize(("n", "p"), [(12, 7), (7, 12)])
def test_linear_fit_of_a_rank_deficient_design_is_the_pseudo_inverse(
    gen: torch.Generator, n: int, p: int
) -> None:
    # rank 4 < min(n, p): the Gram matrix is singular, the fit must be X^+ y (not a blow-up)
    x = torch.randn(n, 4, dtype=F64, generator=gen) @ torch.randn(4, p, dtype=F64, generator=gen)
    y = torch.randn(n, dtype=F64, generator=gen)
    ref = np.linalg.pinv(x.numpy()) @ y.numpy()
    assert_close(
        double_descent._linear_fit(x, y, 0.0), torch.from_numpy(ref), rtol=1e-8, atol=1e-10
    )
    ridge = np.linalg.solve(x.numpy().T @ x.numpy() + n * 0.1 * np.eye(p), x.numpy().T @ y.numpy())
    assert_close(
        double_descent._linear_fit(x, y, 0.1), torch.from_numpy(ridge), rtol=1e-9, atol=0.0
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linear_fit_of_a_nearly_singular_design_keeps_the_svd_accuracy(seed: int) -> None:
    # two columns 1e-6 apart: cond(X) ~ 1e6, the Cholesky factor of X^T X exists but the
    # normal equations lose ~eps cond(X)^2 ~ 1e-4 (measured 4e-4..2e-3); the SVD keeps ~1e-9
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 7, dtype=F64, generator=g)
    x[:, -1] = x[:, -2] + 1e-6 * torch.randn(12, dtype=F64, generator=g)
    y = torch.randn(12, dtype=F64, generator=g)
    ref = np.linalg.lstsq(x.numpy(), y.numpy(), rcond=None)[0]
    got = double_descent._linear_fit(x, y, 0.0).numpy()
    assert np.abs(got - ref).max() < 1e-7 * np.abs(ref).max()


def test_relu_features_and_their_kernel_limit(gen: torch.Generator) -> None:
    x = torch.randn(7, 4, dtype=F64, generator=gen)
    w = torch.randn(4, 5, dtype=F64, generator=gen)
    assert_close(random_relu_features(x, w), torch.relu(x @ w / 2) / math.sqrt(5))
    with pytest.raises(NtklabValueError, match="weights: expected 4 rows"):
        random_relu_features(x, w.T)


def test_min_norm_features_regression_equals_lstsq(gen: torch.Generator) -> None:
    n, d = 30, 4
    x, xt = torch.randn(n, d, dtype=F64, generator=gen), torch.randn(9, d, dtype=F64, generator=gen)
    y = torch.randn(n, 2, dtype=F64, generator=gen)
    for p in (12, 80):  # under- and over-parameterized
        pred = random_features_regression(x, y, xt, n_features=p, generator=3)
        w = torch.randn(d, p, dtype=F64, generator=torch.Generator().manual_seed(3))
        phi, phi_t = random_relu_features(x, w).numpy(), random_relu_features(xt, w).numpy()
        coef = np.linalg.lstsq(phi, y.numpy(), rcond=None)[0]  # min-norm least squares
        assert pred.shape == (1, 9, 2)
        assert_close(pred[0], torch.from_numpy(phi_t @ coef), rtol=1e-8, atol=1e-9)
    train = random_features_regression(x, y[:, 0], x, n_features=80, generator=3)
    assert_close(train[0], y[:, 0], rtol=0, atol=1e-8)  # P > n interpolates


def test_ridge_features_regression_equals_the_normal_equations(gen: torch.Generator) -> None:
    n, d, p = 25, 3, 40
    x, xt = torch.randn(n, d, dtype=F64, generator=gen), torch.randn(6, d, dtype=F64, generator=gen)
    y = torch.randn(n, dtype=F64, generator=gen)
    ridges = [0.0, 1e-3, 0.3]
    pred = random_features_regression(x, y, xt, n_features=p, ridges=ridges, generator=8)
    w = torch.randn(d, p, dtype=F64, generator=torch.Generator().manual_seed(8))
    phi, phi_t = random_relu_features(x, w), random_relu_features(xt, w)
    for i, lam in enumerate(ridges[1:], start=1):
        beta = torch.linalg.solve(phi.T @ phi + n * lam * torch.eye(p, dtype=F64), phi.T @ y)
        assert_close(pred[i], phi_t @ beta, rtol=1e-8, atol=1e-10)
    assert pred.dtype == F64
    assert random_features_regression(x.float(), y.float(), xt.float(), n_features=p).dtype == (
        torch.float32
    )


@pytest.mark.parametrize("p", [9, 20, 31, 90])
def test_every_ridge_of_one_fit_equals_a_separate_dense_solve(gen: torch.Generator, p: int) -> None:
    # p < n, p = n, p > n: the tall and the wide SVD paths, with two outputs (k = 2)
    n, d = 20, 3
    x, xt = torch.randn(n, d, dtype=F64, generator=gen), torch.randn(5, d, dtype=F64, generator=gen)
    y = torch.randn(n, 2, dtype=F64, generator=gen)
    ridges = [0.0, 1e-4, 1e-2, 1.0]
    pred = random_features_regression(x, y, xt, n_features=p, ridges=ridges, generator=p)
    w = torch.randn(d, p, dtype=F64, generator=torch.Generator().manual_seed(p))
    phi, phi_t = random_relu_features(x, w).numpy(), random_relu_features(xt, w).numpy()
    refs = [phi_t @ np.linalg.lstsq(phi, y.numpy(), rcond=None)[0]]
    for lam in ridges[1:]:  # dual form: Phi^T (Phi Phi^T + n lam I)^-1 y
        refs.append(phi_t @ phi.T @ np.linalg.solve(phi @ phi.T + n * lam * np.eye(n), y.numpy()))
    assert pred.shape == (4, 5, 2)
    for i, ref in enumerate(refs):
        assert_close(pred[i], torch.from_numpy(ref), rtol=1e-7, atol=1e-9)


def test_many_features_approach_arccos_kernel_regression(gen: torch.Generator) -> None:
    n, d, lam = 40, 5, 0.05
    x, xt = (
        torch.randn(n, d, dtype=F64, generator=gen),
        torch.randn(10, d, dtype=F64, generator=gen),
    )
    y = torch.sin(x.sum(dim=1))
    arch = nl.serial(nl.Dense(w_std=1.0, b_std=None), nl.Relu(), nl.Dense(w_std=1.0, b_std=None))
    k = arch.kernel(x).nngp
    kt = arch.kernel(xt, x).nngp
    krr = kt @ torch.linalg.solve(k + n * lam * torch.eye(n, dtype=F64), y)
    pred = random_features_regression(x, y, xt, n_features=40000, ridges=lam, generator=1)[0]
    error = float((pred - krr).norm() / krr.norm())
    assert error < 0.03
    few = random_features_regression(x, y, xt, n_features=400, ridges=lam, generator=1)[0]
    assert float((few - krr).norm() / krr.norm()) > error  # it is converging with P


def test_random_features_risk_peaks_at_interpolation() -> None:
    g = torch.Generator().manual_seed(0)
    n, d = 100, 10
    x = torch.randn(n + 400, d, dtype=F64, generator=g)
    x = x / x.norm(dim=1, keepdim=True) * math.sqrt(d)
    y = x @ (torch.randn(d, dtype=F64, generator=g) / math.sqrt(d))
    y = y + 0.3 * torch.randn(n + 400, dtype=F64, generator=g)
    ridges = [0.0, 1e-3, 1e-2, 1e-1]
    median = {}
    best = {}
    for p in (50, 100, 200):
        risk = random_features_risk(
            x[:n], y[:n], x[n:], y[n:], n_features=p, ridges=ridges, repeats=5, generator=p
        )
        assert risk.risks.shape == (5, 4)
        assert_close(risk.median, risk.risks.quantile(0.5, dim=0))
        median[p] = float(risk.median[0])
        best[p] = float(risk.median.min())
    assert median[100] > 3 * max(median[50], median[200])  # the min-norm peak at P = n
    assert best[100] <= 1.1 * best[50]  # a tuned ridge removes it


def test_regression_inputs_are_checked() -> None:
    x, y = torch.randn(5, 2, dtype=F64), torch.randn(5, dtype=F64)
    with pytest.raises(NtklabValueError, match="y_train: expected 5 rows"):
        random_features_regression(x, y[:4], x, n_features=3)
    with pytest.raises(NtklabValueError, match="x_test: expected 2 columns"):
        random_features_regression(x, y, torch.randn(3, 3, dtype=F64), n_features=3)
    with pytest.raises(NtklabValueError, match="ridges\\[1\\]: expected a number >= 0"):
        random_features_regression(x, y, x, n_features=3, ridges=[0.0, -1.0])
    with pytest.raises(NtklabTypeError, match="n_features"):
        random_features_regression(x, y, x, n_features=2.5)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="y_test: expected shape \\(5,\\)"):
        random_features_risk(x, y, x, y[:, None], n_features=3)
    with pytest.raises(NtklabValueError, match="repeats: expected an int >= 1"):
        min_norm_linear_regression_risk(10, 5, r2=1.0, sigma2=1.0, repeats=0)
