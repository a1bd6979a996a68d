"""Samplers: exact support, moments of the uniform law, KS tests, seeding, errors."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from scipy import stats

from ntklab.data import circle_grid, hypercube, sampling, uniform_circle, uniform_sphere
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(sampling, extraglobs={"math": math})
    assert result.attempted >= 4
    assert result.failed == 0


@pytest.mark.parametrize("dim", [2, 3, 7])
def test_uniform_sphere_moments(dim: int, gen: torch.Generator) -> None:
    n = 200_000
    x = uniform_sphere(n, dim, generator=gen)
    assert x.shape == (n, dim) and x.dtype == F64
    torch.testing.assert_close(x.norm(dim=1), torch.ones(n, dtype=F64), rtol=0, atol=1e-14)
    # E[x] = 0 and E[x x^T] = I/d, within 5 standard errors (each coordinate has var 1/d).
    se = 5 * math.sqrt(1.0 / dim / n)
    torch.testing.assert_close(x.mean(0), torch.zeros(dim, dtype=F64), rtol=0, atol=se)
    second = x.T @ x / n
    torch.testing.assert_close(second, torch.eye(dim, dtype=F64) / dim, rtol=0, atol=5 * se)
    # E[x_1^4] = 3 / (d (d + 2)): fails for e.g. normalized uniform-cube draws.
    fourth = x[:, 0].pow(4)
    expected = 3.0 / (dim * (dim + 2))
    assert abs(float(fourth.mean()) - expected) < 5 * float(fourth.std()) / math.sqrt(n)


def test_uniform_sphere_s2_coordinate_is_uniform(gen: torch.Generator) -> None:
    # Archimedes: a coordinate of a uniform point of S^2 is uniform on [-1, 1], in any
    # rotated frame.
    x = uniform_sphere(20_000, 3, generator=gen)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=F64))
    for column in (x[:, 0], (x @ q)[:, 1]):
        p_value = stats.kstest(column.numpy(), stats.uniform(loc=-1, scale=2).cdf).pvalue
        assert p_value > 1e-3


def test_uniform_circle_angles_and_points(gen: torch.Generator) -> None:
    angles, points = uniform_circle(20_000, generator=gen)
    assert bool((angles >= 0).all()) and bool((angles < 2 * math.pi).all())
    torch.testing.assert_close(points, torch.stack([angles.cos(), angles.sin()], 1))
    p_value = stats.kstest((angles / (2 * math.pi)).numpy(), "uniform").pvalue
    assert p_value > 1e-3


def test_circle_grid_integrates_trig_polynomials_exactly() -> None:
    n = 12
    angles, points = circle_grid(n)
    torch.testing.assert_close(angles, torch.arange(n, dtype=F64) * 2 * math.pi / n)
    torch.testing.assert_close(points[:, 0], angles.cos())
    for k in range(1, n):
        assert abs(float(torch.cos(k * angles).mean())) < 1e-14
        assert abs(float(torch.sin(k * angles).mean())) < 1e-14
    assert float(torch.cos(n * angles).mean()) == pytest.approx(1.0)


def test_hypercube_is_uniform_on_vertices(gen: torch.Generator) -> None:
    n, d = 40_000, 6
    x = hypercube(n, d, generator=gen)
    assert set(x.unique().tolist()) == {-1.0, 1.0}
    # Each of the 8 sign patterns of the first 3 coordinates equally likely (chi-square).
    codes = ((x[:, :3] > 0).long() * torch.tensor([1, 2, 4])).sum(1)
    counts = torch.bincount(codes, minlength=8).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3
    # Independent coordinates: E[x_i x_j] = 0.
    second = x.T @ x / n
    off = second - torch.diag(torch.diagonal(second))
    assert float(off.abs().max()) < 5 / math.sqrt(n)


def test_seeding_dtype_and_device() -> None:
    def draw(seed: int) -> torch.Tensor:
        return uniform_sphere(5, 4, generator=torch.Generator().manual_seed(seed))

    torch.testing.assert_close(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))
    g = torch.Generator().manual_seed(0)
    assert uniform_sphere(3, 2, generator=g, dtype=torch.float32).dtype == torch.float32
    a, x = uniform_circle(3, generator=g, dtype=torch.float32, device="cpu")
    assert a.dtype == x.dtype == torch.float32
    assert hypercube(3, 2, generator=g, dtype=torch.float32).dtype == torch.float32
    # the global RNG is untouched
    state = torch.random.get_rng_state()
    hypercube(10, 3, generator=g)
    assert torch.equal(state, torch.random.get_rng_state())


def test_errors_name_the_argument() -> None:
    g = torch.Generator().manual_seed(0)
    with pytest.raises(NtklabValueError, match="n: expected an int >= 1"):
        uniform_sphere(0, 3, generator=g)
    with pytest.raises(NtklabTypeError, match="dim"):
        uniform_sphere(3, 2.0, generator=g)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"generator: expected a torch\.Generator"):
        uniform_circle(3, generator=None)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="dtype: expected a real floating"):
        hypercube(3, 2, generator=g, dtype=torch.int64)
    with pytest.raises(NtklabValueError, match="n: "):
        circle_grid(-1)
