"""Wasserstein distances: 1-D against a linear program and scipy quadrature, Gaussians against
scipy.linalg.sqrtm, POT against an assignment solver, and the Monte Carlo floor."""

from __future__ import annotations

import doctest
import math
import sys

import numpy as np
import pytest
import torch
from scipy import integrate, linalg, optimize, special
from torch.testing import assert_close

from ntklab.analysis import (
    W2Floor,
    debias_w2,
    debiased_w2_to_normal,
    normal_w2_floor,
    w2_squared_1d,
    w2_squared_empirical,
    w2_squared_gaussians,
    w2_squared_to_normal,
    wasserstein,
)
from ntklab.errors import NtklabError, NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(wasserstein)
    assert result.attempted >= 5
    assert result.failed == 0


def transport_lp(a: np.ndarray, b: np.ndarray) -> float:
    """W2^2 between uniform empirical measures by the transport linear program (scipy)."""
    n, m = a.shape[0], b.shape[0]
    cost = ((a[:, None] - b[None, :]) ** 2).ravel()
    rows = np.kron(np.eye(n), np.ones((1, m)))
    cols = np.kron(np.ones((1, n)), np.eye(m))
    res = optimize.linprog(
        cost,
        A_eq=np.vstack([rows, cols]),
        b_eq=np.concatenate([np.full(n, 1 / n), np.full(m, 1 / m)]),
        bounds=(0, None),
        method="highs",
    )
    assert res.success
    return float(res.fun)


@pytest.mark.parametrize(("n", "m"), [(6, 6), (5, 7), (9, 4), (1, 3)])
def test_1d_two_samples_equal_the_transport_lp(n: int, m: int, gen: torch.Generator) -> None:
    a = torch.randn(n, dtype=F64, generator=gen)
    b = 0.5 + 2 * torch.randn(m, dtype=F64, generator=gen)
    got = w2_squared_1d(a, b)
    assert float(got) == pytest.approx(transport_lp(a.numpy(), b.numpy()), rel=1e-9, abs=1e-12)
    assert float(w2_squared_1d(b, a)) == pytest.approx(float(got), rel=1e-12)


def test_1d_batches_and_shifts(gen: torch.Generator) -> None:
    a = torch.randn(3, 50, dtype=F64, generator=gen)
    b = torch.randn(3, 31, dtype=F64, generator=gen)
    batched = w2_squared_1d(a, b)
    assert_close(batched, torch.stack([w2_squared_1d(a[i], b[i]) for i in range(3)]))
    assert_close(w2_squared_1d(a, a + 0.3), torch.full((3,), 0.09, dtype=F64))
    assert w2_squared_1d(a[0].float(), b[0].float()).dtype == torch.float32


def quad_w2_to_normal(x: np.ndarray, mu: float, sigma: float) -> float:
    """Integrate (x_(i) - mu - sigma Phi^{-1}(u))^2 over each [i/M, (i+1)/M] with scipy."""
    xs = np.sort(x)
    m = xs.shape[0]
    total = 0.0
    for i in range(m):
        val, _ = integrate.quad(
            lambda u, xi=xs[i]: (xi - mu - sigma * special.ndtri(u)) ** 2,
            i / m,
            (i + 1) / m,
            epsabs=1e-13,
            epsrel=1e-12,
            limit=200,
        )
        total += val
    return total


@pytest.mark.parametrize("m", [1, 2, 7, 40])
def test_sample_to_normal_equals_quadrature(m: int, gen: torch.Generator) -> None:
    x = 0.3 + 1.7 * torch.randn(m, dtype=F64, generator=gen)
    got = float(w2_squared_to_normal(x, 0.2, 1.5))
    assert got == pytest.approx(quad_w2_to_normal(x.numpy(), 0.2, 1.5), rel=1e-8, abs=1e-12)


def test_sample_to_normal_batches_and_float32(gen: torch.Generator) -> None:
    x = torch.randn(4, 25, dtype=F64, generator=gen)
    means = torch.tensor([0.0, 1.0, -1.0, 0.5], dtype=F64)
    got = w2_squared_to_normal(x, means, 2.0)
    ref = torch.stack([w2_squared_to_normal(x[i], float(means[i]), 2.0) for i in range(4)])
    assert_close(got, ref)
    single = w2_squared_to_normal(x.float(), means.float(), 2.0)
    assert single.dtype == torch.float32
    assert_close(single, got.float(), rtol=1e-5, atol=1e-6)


def test_sample_to_normal_rejects_bad_parameters() -> None:
    with pytest.raises(NtklabValueError, match="std: expected values > 0"):
        w2_squared_to_normal(torch.zeros(3), 0.0, 0.0)
    with pytest.raises(NtklabValueError, match="mean: expected a shape that broadcasts"):
        w2_squared_to_normal(torch.zeros(2, 3), torch.zeros(3), 1.0)
    with pytest.raises(NtklabTypeError, match=r"sample: expected a torch\.Tensor"):
        w2_squared_to_normal([0.0, 1.0], 0.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="sample: expected finite"):
        w2_squared_to_normal(torch.tensor([0.0, math.inf]), 0.0, 1.0)


def random_spd(d: int, gen: torch.Generator, rank: int | None = None) -> torch.Tensor:
    a = torch.randn(d, rank or d, dtype=F64, generator=gen)
    return a @ a.T / d


@pytest.mark.parametrize("rank", [None, 2])
def test_gaussians_equal_the_sqrtm_formula(rank: int | None, gen: torch.Generator) -> None:
    d = 5
    m1, m2 = torch.randn(d, dtype=F64, generator=gen), torch.randn(d, dtype=F64, generator=gen)
    s1, s2 = random_spd(d, gen, rank), random_spd(d, gen)
    r1 = linalg.sqrtm(s1.numpy())
    cross = linalg.sqrtm(r1 @ s2.numpy() @ r1)
    ref = float(np.sum((m1 - m2).numpy() ** 2) + np.trace(s1.numpy() + s2.numpy() - 2 * cross.real))
    got = w2_squared_gaussians(m1, s1, m2, s2)
    assert float(got) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    assert float(w2_squared_gaussians(m1, s1, m1, s1)) == pytest.approx(0.0, abs=1e-10)


def test_gaussians_in_one_dimension() -> None:
    got = w2_squared_gaussians(
        torch.tensor([1.0]), torch.tensor([[4.0]]), torch.tensor([0.0]), torch.tensor([[0.25]])
    )
    assert float(got) == pytest.approx(1.0 + (2.0 - 0.5) ** 2, rel=1e-6)
    with pytest.raises(NtklabValueError, match="cov1: expected a symmetric matrix"):
        w2_squared_gaussians(
            torch.zeros(2), torch.tensor([[1.0, 0.5], [0.0, 1.0]]), torch.zeros(2), torch.eye(2)
        )
    with pytest.raises(NtklabValueError, match="cov2: expected shape \\(2, 2\\)"):
        w2_squared_gaussians(torch.zeros(2), torch.eye(2), torch.zeros(2), torch.eye(3))
    with pytest.raises(NtklabValueError, match="cov1: expected the eigenvalues of a positive"):
        w2_squared_gaussians(torch.zeros(2), -torch.eye(2), torch.zeros(2), torch.eye(2))


def test_empirical_needs_pot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ot", None)  # makes `import ot` raise ImportError
    with pytest.raises(NtklabError, match='pip install "ntklab\\[ot\\]"'):
        w2_squared_empirical(torch.zeros(2, 1), torch.ones(2, 1))


def test_empirical_equals_assignment_and_1d(gen: torch.Generator) -> None:
    pytest.importorskip("ot")
    x = torch.randn(20, 3, dtype=F64, generator=gen)
    y = 0.5 + torch.randn(20, 3, dtype=F64, generator=gen)
    cost = torch.cdist(x, y).square().numpy()
    rows, cols = optimize.linear_sum_assignment(cost)
    assert float(w2_squared_empirical(x, y)) == pytest.approx(cost[rows, cols].mean(), rel=1e-9)
    a, b = torch.randn(7, 1, dtype=F64, generator=gen), torch.randn(5, 1, dtype=F64, generator=gen)
    assert float(w2_squared_empirical(a, b)) == pytest.approx(
        float(w2_squared_1d(a[:, 0], b[:, 0])), rel=1e-9
    )
    with pytest.raises(NtklabValueError, match="weights_x: expected 7 non-negative weights"):
        w2_squared_empirical(a, b, weights_x=torch.ones(7, dtype=F64))


def test_floor_of_one_sample_is_two_and_scales_with_variance() -> None:
    # one draw x: W2^2(delta_x, N(0, 1)) = x^2 + 1, expectation 2
    one = normal_w2_floor(1, repeats=20000, generator=3)
    assert abs(one.mean - 2.0) < 4 * one.stderr
    assert one.sd == pytest.approx(math.sqrt(2.0), rel=0.05)  # sd of chi^2_1
    unit = normal_w2_floor(64, repeats=500, generator=5)
    wide = normal_w2_floor(64, std=3.0, repeats=500, generator=5)
    assert wide.mean == pytest.approx(9 * unit.mean, rel=1e-12)
    assert wide.scaled_mean == pytest.approx(unit.scaled_mean, rel=1e-12)


def test_floor_matches_sampling_the_distance_directly() -> None:
    """The floor equals the mean of w2_squared_to_normal over independent normal samples."""
    m, reps = 1000, 1000
    floor = normal_w2_floor(m, std=0.5, repeats=reps, generator=1)
    g = torch.Generator().manual_seed(99)
    direct = w2_squared_to_normal(
        0.5 * torch.randn(reps, m, dtype=F64, generator=g) + 2.0, 2.0, 0.5
    )
    se = math.hypot(floor.stderr, float(direct.std()) / math.sqrt(reps))
    assert abs(floor.mean - float(direct.mean())) < 4 * se
    assert 3.1 < floor.scaled_mean < 3.55  # about 3.3 sigma^2 / M at M = 1000


def test_debiased_distance_recovers_a_shift() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(20000, dtype=F64, generator=g)
    null = debiased_w2_to_normal(x, 0.0, 1.0, repeats=200, generator=1)
    assert abs(null.value) < 3 * null.stderr
    assert null.measured == pytest.approx(float(w2_squared_to_normal(x, 0.0, 1.0)))
    shifted = debiased_w2_to_normal(x + 0.1, 0.0, 1.0, repeats=200, generator=1)
    assert abs(shifted.value - 0.01) < 3 * shifted.stderr
    # the bootstrap spread sees the 2 c mean(x) term, sd 2 c / sqrt(M), which the null lacks
    assert shifted.measured_stderr == pytest.approx(0.2 / math.sqrt(20000), rel=0.3)
    assert shifted.measured_stderr > 5 * null.measured_stderr
    assert shifted.stderr == pytest.approx(
        math.hypot(shifted.measured_stderr, shifted.floor.stderr)
    )


def test_debias_combines_uncertainties() -> None:
    floor = W2Floor(
        mean=0.2, stderr=0.03, sd=0.1, n_samples=10, repeats=100, std=1.0, scaled_mean=2.0
    )
    d = debias_w2(0.5, floor, measured_stderr=0.04)
    assert d.value == pytest.approx(0.3)
    assert d.stderr == pytest.approx(0.05)
    with pytest.raises(NtklabTypeError, match="floor: expected a W2Floor"):
        debias_w2(0.5, 0.2)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="measured: expected a number >= 0"):
        debias_w2(-0.5, floor)
    with pytest.raises(NtklabValueError, match="repeats: expected an int >= 2"):
        normal_w2_floor(10, repeats=1)
