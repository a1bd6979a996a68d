"""Targets: tent maps against a piecewise-linear reference and the FFT, polynomials against
exact spherical quadrature, parities against enumeration, excess risks against Monte Carlo."""

from __future__ import annotations

import doctest
import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from scipy import special

from ntklab.data import (
    SparseParity,
    SpherePolynomial,
    TentMap,
    TentMapS1,
    TrigPolynomial,
    estimate_capacity,
    excess_risk_s1,
    kernel_excess_risk_sphere,
    kernel_predictor_coefficients_s1,
    random_sparse_parity,
    random_sphere_polynomial,
    random_trig_polynomial,
    source_condition_target,
    targets,
    uniform_circle,
    uniform_sphere,
)
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import Dense, Relu, serial
from ntklab.kernels.sphere import (
    circle_eigenvalues,
    fourier_coefficients_s1,
    harmonic_multiplicities,
    harmonic_multiplicity,
    legendre_polynomials,
    profile_from_architecture,
    sphere_eigenvalues,
)

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(targets, extraglobs={"math": math})
    assert result.attempted >= 10
    assert result.failed == 0


# ---------------------------------------------------------------------------------------------
# exact quadrature on S^(d-1), built independently of the library


def sphere_quadrature(dim: int, exact_degree: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Product Gauss rule on S^(d-1), exact for polynomials of degree <= exact_degree.

    x = (t, sqrt(1 - t^2) y), y in S^(d-2), with t Gauss-Jacobi for (1 - t^2)^((d-3)/2) and
    the equispaced rule on S^1 at the bottom. Weights sum to one (uniform probability).
    """
    if dim == 2:
        m = exact_degree + 1
        a = np.arange(m) * 2 * np.pi / m
        points = torch.tensor(np.stack([np.cos(a), np.sin(a)], 1))
        return points, torch.full((m,), 1.0 / m, dtype=F64)
    alpha = (dim - 3) / 2
    n = exact_degree // 2 + 1
    t, w = special.roots_jacobi(n, alpha, alpha)
    w = w / w.sum()
    y, wy = sphere_quadrature(dim - 1, exact_degree)
    t_t = torch.tensor(t)[:, None, None]
    points = torch.cat(
        [t_t.expand(n, y.shape[0], 1), torch.sqrt(1 - t_t**2) * y[None]], dim=2
    ).reshape(-1, dim)
    weights = (torch.tensor(w)[:, None] * wy[None]).reshape(-1)
    return points, weights


def test_quadrature_helper_is_exact() -> None:
    # E[x_1^4] = 3 / (d (d + 2)) and E[x_1^2 x_2^2] = 1 / (d (d + 2)).
    for dim in (3, 5):
        x, w = sphere_quadrature(dim, 6)
        assert float(w @ x[:, 0] ** 4) == pytest.approx(3 / (dim * (dim + 2)), abs=1e-13)
        assert float(w @ (x[:, 1] * x[:, 2]) ** 2) == pytest.approx(1 / (dim * (dim + 2)))


# ---------------------------------------------------------------------------------------------
# tent maps


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 8])
def test_tent_map_values_on_the_dyadic_grid(depth: int) -> None:
    s = TentMap(depth)
    grid = s.breakpoints()
    values = s(grid)
    expected = torch.tensor([float(j % 2) for j in range(2**depth + 1)], dtype=F64)
    torch.testing.assert_close(values, expected, rtol=0, atol=0)
    # Peaks: local maxima on a fine grid.
    fine = torch.linspace(0, 1, 2**depth * 16 + 1, dtype=F64)
    y = s(fine)
    peaks = int(((y[1:-1] > y[:-2]) & (y[1:-1] > y[2:])).sum())
    assert peaks == s.num_peaks == 2 ** (depth - 1)
    # Between breakpoints: linear interpolation (numpy reference).
    u = torch.rand(1000, generator=torch.Generator().manual_seed(depth), dtype=F64)
    reference = np.interp(u.numpy(), grid.numpy(), expected.numpy())
    torch.testing.assert_close(s(u), torch.from_numpy(reference), rtol=0, atol=1e-12)
    # s_L(x) = s_1(frac(2^(L-1) x))
    torch.testing.assert_close(s(u), TentMap(1)(torch.frac(2 ** (depth - 1) * u)))
    assert s.num_pieces == 2**depth


def test_tent_map_moments() -> None:
    s = TentMap(4)
    u = (torch.arange(1 << 16, dtype=F64) + 0.5) / (1 << 16)
    assert float(s(u).mean()) == pytest.approx(s.mean, abs=1e-9)
    assert float(s(u).var(unbiased=False)) == pytest.approx(s.variance, abs=1e-8)


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_tent_map_s1_fourier_coefficients_match_fft(depth: int) -> None:
    f = TentMapS1(depth)
    k = 64
    exact = f.fourier_coefficients(k)
    fft = fourier_coefficients_s1(f, k, grid=1 << 16).coefficients
    # aliasing of a k^-2 spectrum on 65536 points: below 1e-7
    torch.testing.assert_close(exact, fft, rtol=0, atol=2e-7)
    # only odd multiples of 2^(L-1) are nonzero
    nonzero = set(exact[:, 0].nonzero().flatten().tolist())
    base = 2 ** (depth - 1)
    assert nonzero == {0} | set(range(base, k + 1, 2 * base))
    # Parseval against the closed-form L2 norm 1/3 (tail sum_{m > M} of 8/(pi^4 m^4) tiny)
    long = f.fourier_coefficients(1 << 14)
    assert float(long.square().sum()) == pytest.approx(f.l2_norm_squared, abs=1e-9)


def test_tent_map_s1_is_periodic_and_accepts_points() -> None:
    f = TentMapS1(3)
    a, x = uniform_circle(500, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(f(a), TentMap(3)(a / (2 * math.pi)))
    torch.testing.assert_close(f(x), f(a), rtol=0, atol=1e-12)
    torch.testing.assert_close(f(a + 2 * math.pi), f(a), rtol=0, atol=1e-12)
    torch.testing.assert_close(f(a - 6 * math.pi), f(a), rtol=0, atol=1e-12)


def test_tent_map_errors() -> None:
    with pytest.raises(NtklabValueError, match=r"x: expected values in \[0, 1\]"):
        TentMap(2)(torch.tensor([0.5, 1.5]))
    with pytest.raises(NtklabValueError, match="depth: expected an int >= 1"):
        TentMap(0)
    with pytest.raises(NtklabValueError, match="x: expected angles of shape"):
        TentMapS1(2)(torch.zeros(3, 3))


# ---------------------------------------------------------------------------------------------
# trigonometric polynomials and excess risk on S^1


def test_trig_polynomial_values_and_fft(gen: torch.Generator) -> None:
    f = random_trig_polynomial(6, generator=gen)
    assert f.degree == 6
    assert float(f.l2_norm_squared()) == pytest.approx(1.0, abs=1e-14)
    a = torch.rand(50, generator=gen, dtype=F64) * 2 * math.pi
    c = f.coefficients.numpy()
    reference = c[0, 0] + math.sqrt(2) * sum(
        c[k, 0] * np.cos(k * a.numpy()) + c[k, 1] * np.sin(k * a.numpy()) for k in range(1, 7)
    )
    torch.testing.assert_close(f(a), torch.from_numpy(reference))
    torch.testing.assert_close(f(torch.stack([a.cos(), a.sin()], 1)), f(a))
    fft = fourier_coefficients_s1(f, 10, grid=64).coefficients
    torch.testing.assert_close(fft, f.fourier_coefficients(10), rtol=0, atol=1e-14)
    g = random_trig_polynomial(6, generator=torch.Generator().manual_seed(1234))
    torch.testing.assert_close(g.coefficients, f.coefficients)


def test_trig_polynomial_validation() -> None:
    with pytest.raises(NtklabValueError, match=r"coefficients: expected entry \[0, 1\]"):
        TrigPolynomial(torch.ones(3, 2, dtype=F64))
    with pytest.raises(NtklabValueError, match="coefficients: expected an S"):
        TrigPolynomial(torch.zeros(3, dtype=F64))


def test_excess_risk_s1_matches_monte_carlo(gen: torch.Generator) -> None:
    target = random_trig_polynomial(5, generator=gen)
    predictor = random_trig_polynomial(8, generator=gen, normalize=False)
    exact = excess_risk_s1(predictor.coefficients, target.coefficients)
    a, _ = uniform_circle(200_000, generator=gen)
    sq = (predictor(a) - target(a)).square()
    assert abs(float(exact) - float(sq.mean())) < 4 * float(sq.std()) / math.sqrt(sq.numel())
    # symmetric, zero on itself, batched
    torch.testing.assert_close(excess_risk_s1(target.coefficients, predictor.coefficients), exact)
    batch = torch.stack([predictor.coefficients, torch.zeros(9, 2, dtype=F64)])
    torch.testing.assert_close(
        excess_risk_s1(batch, target.coefficients), torch.stack([exact, exact.new_tensor(1.0)])
    )


def _kappa_arccos1(t: torch.Tensor) -> torch.Tensor:
    t = t.clamp(-1, 1)
    return (torch.sqrt(1 - t * t) + (math.pi - torch.arccos(t)) * t) / math.pi


@pytest.mark.parametrize(
    ("profile", "k", "grid"), [(torch.exp, 40, 4096), (_kappa_arccos1, 64, 1 << 16)]
)
def test_kernel_predictor_coefficients_match_fft(
    profile: Callable[[torch.Tensor], torch.Tensor], k: int, grid: int
) -> None:
    g = torch.Generator().manual_seed(5)
    n = 17
    centres, _ = uniform_circle(n, generator=g)
    alpha = torch.randn(n, 3, generator=g, dtype=F64)
    mu = circle_eigenvalues(profile, k, grid=grid)
    tables = kernel_predictor_coefficients_s1(alpha, centres, mu)
    assert tables.shape == (3, k + 1, 2)
    for j in range(3):

        def predictor(a: torch.Tensor, j: int = j) -> torch.Tensor:
            return profile(torch.cos(a[:, None] - centres[None, :])) @ alpha[:, j]

        fft = fourier_coefficients_s1(predictor, k // 2, grid=1 << 14).coefficients
        scale = float(fft.abs().max())
        torch.testing.assert_close(tables[j, : k // 2 + 1], fft, rtol=0, atol=2e-6 * scale)
    # a single predictor (n,) and points (n, 2) give the same as the batch
    points = torch.stack([centres.cos(), centres.sin()], 1)
    single = kernel_predictor_coefficients_s1(alpha[:, 1], points, mu)
    torch.testing.assert_close(single, tables[1])


def test_kernel_predictor_excess_risk_end_to_end() -> None:
    # Excess risk of a kernel predictor by Parseval == grid average of (f_hat - f)^2.
    g = torch.Generator().manual_seed(2)
    target = random_trig_polynomial(4, generator=g)
    centres, _ = uniform_circle(25, generator=g)
    alpha = torch.randn(25, generator=g, dtype=F64) / 25
    mu = circle_eigenvalues(torch.exp, 48)
    risk = excess_risk_s1(kernel_predictor_coefficients_s1(alpha, centres, mu), target.coefficients)
    a = torch.arange(4096, dtype=F64) * 2 * math.pi / 4096
    f_hat = torch.exp(torch.cos(a[:, None] - centres[None])) @ alpha
    torch.testing.assert_close(risk, (f_hat - target(a)).square().mean(), rtol=1e-10, atol=0)


# ---------------------------------------------------------------------------------------------
# polynomials on the sphere


@pytest.mark.parametrize("dim", [3, 5])
def test_sphere_polynomial_harmonic_content_by_quadrature(dim: int) -> None:
    g = torch.Generator().manual_seed(dim)
    degree = 3
    f = random_sphere_polynomial(degree, dim, generator=g, n_centres=6)
    assert f.degree == degree and f.dim == dim
    x, w = sphere_quadrature(dim, 2 * (degree + 3))
    values = f(x)
    y = uniform_sphere(7, dim, generator=g)
    for ell in range(degree + 4):
        # Funk-Hecke projection onto degree ell: N(d, l) E_x[f(x) P_l(<x, y>)]
        p = legendre_polynomials(x @ y.T, dim, ell)[ell]  # shape: (q, 7)
        projection = harmonic_multiplicity(dim, ell) * (w * values) @ p
        torch.testing.assert_close(projection, f.degree_component(y, ell), rtol=0, atol=1e-12)
    energies = torch.stack([w @ f.degree_component(x, k).square() for k in range(degree + 1)])
    torch.testing.assert_close(f.degree_energies(), energies, rtol=1e-10, atol=1e-14)
    assert float(w @ values.square()) == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(values, sum(f.degree_component(x, k) for k in range(degree + 1)))


def test_sphere_polynomial_prescribed_energies_and_monte_carlo(gen: torch.Generator) -> None:
    energies = torch.tensor([0.0, 0.5, 0.25, 0.125], dtype=F64)
    f = random_sphere_polynomial(3, 6, generator=gen, degree_energies=energies)
    torch.testing.assert_close(f.degree_energies(), energies)
    x = uniform_sphere(100_000, 6, generator=gen)
    sq = f(x).square()
    assert abs(float(sq.mean()) - 0.875) < 4 * float(sq.std()) / math.sqrt(x.shape[0])


def test_sphere_polynomial_validation(gen: torch.Generator) -> None:
    z = uniform_sphere(3, 4, generator=gen)
    with pytest.raises(NtklabValueError, match="weights: expected shape"):
        SpherePolynomial(z, torch.zeros(2, 4, dtype=F64))
    with pytest.raises(NtklabValueError, match="centres: expected unit vectors"):
        SpherePolynomial(2 * z, torch.zeros(2, 3, dtype=F64))
    f = SpherePolynomial(z, torch.zeros(2, 3, dtype=F64))
    with pytest.raises(NtklabValueError, match=r"x: expected points of shape \(n, 4\)"):
        f(torch.zeros(2, 3, dtype=F64))


def test_kernel_excess_risk_sphere_against_quadrature(gen: torch.Generator) -> None:
    dim = 3

    def kappa(t: torch.Tensor) -> torch.Tensor:
        return (1 + t) ** 3 / 8 + 0.1 * t

    mu = sphere_eigenvalues(kappa, dim, 4)  # degree-3 profile: exact, mu_4 = 0
    target = random_sphere_polynomial(2, dim, generator=gen, n_centres=5)
    centres = uniform_sphere(9, dim, generator=gen)
    alpha = torch.randn(9, generator=gen, dtype=F64)
    risk = kernel_excess_risk_sphere(alpha, centres, mu, target)
    x, w = sphere_quadrature(dim, 8)
    f_hat = kappa(x @ centres.T) @ alpha
    torch.testing.assert_close(risk, w @ (f_hat - target(x)).square(), rtol=1e-10, atol=1e-12)
    with pytest.raises(NtklabValueError, match="eigenvalues: expected at least"):
        kernel_excess_risk_sphere(alpha, centres, mu[:2], target)


# ---------------------------------------------------------------------------------------------
# sparse parity


def test_sparse_parity_is_the_product_and_a_walsh_character() -> None:
    p = random_sparse_parity(6, 3, generator=torch.Generator().manual_seed(0))
    assert len(set(p.coords)) == 3 and all(0 <= c < 6 for c in p.coords)
    cube = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=6)), dtype=F64)
    y = p(cube)
    reference = torch.tensor([math.prod(row[c] for c in p.coords) for row in cube.tolist()])
    torch.testing.assert_close(y, reference.double())
    # orthogonal to every character of degree < 3, and to other degree-3 characters
    for size in range(4):
        for subset in itertools.combinations(range(6), size):
            chi = cube[:, list(subset)].prod(1) if subset else torch.ones(64, dtype=F64)
            expected = 1.0 if subset == p.coords else 0.0
            assert float((y * chi).mean()) == expected
    assert random_sparse_parity(6, 3, generator=torch.Generator().manual_seed(0)) == p


def test_sparse_parity_errors() -> None:
    with pytest.raises(NtklabValueError, match="coords: expected 2 distinct"):
        SparseParity(5, 2, (1, 1))
    with pytest.raises(NtklabValueError, match=r"coords: expected coordinates in \[0, 5\)"):
        SparseParity(5, 2, (1, 7))
    with pytest.raises(NtklabValueError, match="k: expected an int <= dim"):
        random_sparse_parity(3, 4, generator=torch.Generator())
    with pytest.raises(NtklabValueError, match=r"x: expected points of shape \(n, 5\)"):
        SparseParity(5, 1, (0,))(torch.ones(2, 4))


# ---------------------------------------------------------------------------------------------
# capacity and source-condition targets


def test_estimate_capacity_closed_forms() -> None:
    k = torch.arange(513, dtype=F64)
    # S^1: mu_k = (1 + k)^-2 at ranks ~ 2k -> gamma = 1/2
    fit = estimate_capacity((1 + k) ** -2.0)
    assert fit.gamma == pytest.approx(0.5, abs=0.01)
    assert fit.gamma_ci[0] < fit.gamma < fit.gamma_ci[1] or fit.gamma_ci[0] == fit.gamma
    # S^2: ranks ~ k^2, so mu_k = (1 + k)^-3 gives gamma = 2/3
    fit3 = estimate_capacity((1 + k[:129]) ** -3.0, dim=3)
    assert fit3.gamma == pytest.approx(2.0 / 3.0, abs=0.02)


def test_estimate_capacity_relu_ntk_on_the_circle() -> None:
    arch = serial(
        Dense(w_std=1.0), Relu(), Dense(w_std=1.0)
    )  # one hidden layer, no bias: parity zeros
    mu = circle_eigenvalues(profile_from_architecture(arch, 2), 512)
    assert float(mu[3].abs()) < 1e-12 * float(mu.max())
    fit = estimate_capacity(mu)
    assert fit.gamma == pytest.approx(0.5, abs=0.03)
    with pytest.raises(NtklabValueError, match="eigenvalues: expected values >= 0"):
        estimate_capacity(torch.tensor([1.0, -0.5, 0.1, 0.01], dtype=F64))
    with pytest.raises(NtklabValueError, match="rank_range: expected at least 3"):
        estimate_capacity(mu, rank_range=(10.0, 12.0))


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_source_condition_target_on_the_circle(beta: float) -> None:
    arch = serial(
        Dense(w_std=1.0, b_std=0.1), Relu(), Dense(w_std=1.0, b_std=0.1), Relu(), Dense(w_std=1.0)
    )
    mu = circle_eigenvalues(profile_from_architecture(arch, 2), 256)
    t = source_condition_target(mu, beta, generator=torch.Generator().manual_seed(0))
    assert isinstance(t.function, TrigPolynomial)
    energies = t.degree_energies()
    assert float(energies.sum()) == pytest.approx(1.0, abs=1e-13)
    assert float(energies[0]) == 0.0
    ratio = energies[1:] * torch.arange(1, 257, dtype=F64) / mu[1:] ** (2 * beta)
    torch.testing.assert_close(ratio, ratio[0].expand(256), rtol=1e-10, atol=0)
    assert t.gamma == pytest.approx(0.5, abs=0.03)
    assert t.predicted_rate == pytest.approx(-2 * beta / (2 * beta + t.gamma))
    # the function is the stated series, evaluated consistently
    fft = fourier_coefficients_s1(t, 256, grid=4096).coefficients
    torch.testing.assert_close(fft, t.function.coefficients, rtol=0, atol=1e-12)
    # the source condition holds for s < beta (sum E_k / mu_k^(2s) finite) and is borderline at
    # s = beta: the partial sums grow like log K
    partial = torch.cumsum(energies[1:] / mu[1:] ** (2 * beta), 0)
    growth = float(partial[255] - partial[127]) / float(partial[127] - partial[63])
    assert growth == pytest.approx(1.0, abs=0.1)


def test_source_condition_target_options() -> None:
    k = torch.arange(129, dtype=F64)
    mu = (1 + k) ** -2.0
    g = torch.Generator().manual_seed(1)
    t = source_condition_target(mu, 1.0, generator=g, weights="gaussian", truncation=32)
    assert t.function.degree == 32
    assert float(t.function.l2_norm_squared()) == pytest.approx(1.0, abs=1e-13)
    with pytest.raises(NtklabValueError, match="truncation: expected an int <= K = 128"):
        source_condition_target(mu, 1.0, generator=g, truncation=200)
    with pytest.raises(NtklabValueError, match="beta: expected a finite real number > 0"):
        source_condition_target(mu, -1.0, generator=g)
    with pytest.raises(NtklabValueError, match="weights: expected 'signs' or 'gaussian'"):
        source_condition_target(mu, 1.0, generator=g, weights="uniform")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="generator"):
        source_condition_target(mu, 1.0, generator=1)  # type: ignore[arg-type]


def test_source_condition_target_on_the_sphere() -> None:
    dim, degree = 5, 12
    k = torch.arange(degree + 1, dtype=F64)
    mu = (1 + k) ** -4.0
    t = source_condition_target(mu, 0.5, generator=torch.Generator().manual_seed(0), dim=dim)
    assert isinstance(t.function, SpherePolynomial) and t.dim == dim
    mult = harmonic_multiplicities(dim, degree)
    ranks = torch.cumsum(mult, 0) - 1
    energies = t.degree_energies()
    ratio = energies[1:] * ranks[1:] / (mult[1:] * mu[1:])
    torch.testing.assert_close(ratio, ratio[0].expand(degree), rtol=1e-9, atol=0)
    assert float(energies.sum()) == pytest.approx(1.0, abs=1e-12)
    x = uniform_sphere(4, dim, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(t(x), t.function(x))
