"""Spectra of dot-product kernels on spheres, against closed forms, scipy quadrature and Gram
matrices."""

from __future__ import annotations

import doctest
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy import integrate, special

import ntklab
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import sphere
from ntklab.kernels.sphere import (
    circle_eigenvalues,
    fourier_coefficients_s1,
    harmonic_multiplicities,
    harmonic_multiplicity,
    legendre_polynomials,
    profile_from_architecture,
    rkhs_norm_squared,
    sobolev_norm_squared,
    sphere_eigenvalues,
)

F64 = torch.float64


# arc-cosine kernels (Cho & Saul 2009) of degree 0 and 1, in torch and numpy
def kappa0(t: torch.Tensor) -> torch.Tensor:
    return (math.pi - torch.arccos(t)) / math.pi


def kappa1(t: torch.Tensor) -> torch.Tensor:
    return (torch.sqrt(torch.clamp(1 - t * t, min=0)) + (math.pi - torch.arccos(t)) * t) / math.pi


def kappa0_np(t: float) -> float:
    return (math.pi - math.acos(t)) / math.pi


def kappa1_np(t: float) -> float:
    return (math.sqrt(max(1 - t * t, 0.0)) + (math.pi - math.acos(t)) * t) / math.pi


def closed_form_kappa0(k: np.ndarray) -> np.ndarray:
    """mu_0 = 1/2, mu_k = 2 / (pi^2 k^2) for odd k, 0 for even k >= 2 (triangle wave)."""
    mu = np.where(k % 2 == 1, 2.0 / (math.pi**2 * np.maximum(k, 1) ** 2), 0.0)
    mu[k == 0] = 0.5
    return mu


def closed_form_kappa1(k: np.ndarray) -> np.ndarray:
    """mu_1 = 1/4, mu_k = 4 / (pi^2 (k^2 - 1)^2) for even k (incl. 0), 0 for odd k >= 3."""
    even = k % 2 == 0
    mu = np.zeros(k.shape)
    mu[even] = 4.0 / (math.pi**2 * (k[even].astype(float) ** 2 - 1) ** 2)
    mu[k == 1] = 0.25
    return mu


def quad_circle(kappa: object, k: int) -> float:
    """(1/2pi) int kappa(cos a) cos(ka) da by QUADPACK's QAWO, independent of the FFT."""
    value, _ = integrate.quad(
        lambda a: kappa(math.cos(a)),  # type: ignore[operator]
        0.0,
        math.pi,
        weight="cos",
        wvar=k,
        limit=500,
        epsabs=1e-13,
        epsrel=1e-12,
    )
    return value / math.pi


def quad_sphere(kappa: object, dim: int, k: int) -> float:
    """Funk-Hecke integral by QAWS (algebraic endpoint weight), independent of Gauss-Jacobi."""
    lam = (dim - 2) / 2
    alpha = (dim - 3) / 2
    norm = special.gamma(dim / 2) / (math.sqrt(math.pi) * special.gamma((dim - 1) / 2))
    p1 = special.eval_gegenbauer(k, lam, 1.0)
    value, _ = integrate.quad(
        lambda t: kappa(t) * special.eval_gegenbauer(k, lam, t) / p1,  # type: ignore[operator]
        -1.0,
        1.0,
        weight="alg",
        wvar=(alpha, alpha),
        limit=500,
        epsabs=1e-14,
        epsrel=1e-12,
    )
    return float(norm * value)


def test_docstring_examples() -> None:
    result = doctest.testmod(sphere)
    assert result.attempted >= 8
    assert result.failed == 0


# --------------------------------------------------------------------------------------------
# multiplicities and Legendre polynomials


def test_harmonic_multiplicity_matches_formula_and_known_cases() -> None:
    assert [harmonic_multiplicity(2, k) for k in range(5)] == [1, 2, 2, 2, 2]
    assert [harmonic_multiplicity(3, k) for k in range(5)] == [1, 3, 5, 7, 9]
    assert [harmonic_multiplicity(4, k) for k in range(5)] == [1, 4, 9, 16, 25]
    for d in range(2, 12):
        for k in range(1, 30):
            formula = Fraction(2 * k + d - 2, k) * math.comb(k + d - 3, d - 2)
            assert formula == harmonic_multiplicity(d, k)
    mult = harmonic_multiplicities(5, 6)
    assert mult.dtype == F64
    assert mult.tolist() == [float(harmonic_multiplicity(5, k)) for k in range(7)]


@pytest.mark.parametrize("dim", [2, 3, 5, 10])
def test_legendre_polynomials_match_scipy(dim: int) -> None:
    t = torch.linspace(-1, 1, 101, dtype=F64)
    p = legendre_polynomials(t, dim, 40)
    assert p.shape == (41, 101)
    for k in range(41):
        if dim == 2:
            ref = np.cos(k * np.arccos(t.numpy()))
        else:
            lam = (dim - 2) / 2
            ref = special.eval_gegenbauer(k, lam, t.numpy()) / special.eval_gegenbauer(k, lam, 1.0)
        np.testing.assert_allclose(p[k].numpy(), ref, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# circle


@pytest.mark.parametrize(
    ("kappa", "kappa_np", "closed_form"),
    [(kappa0, kappa0_np, closed_form_kappa0), (kappa1, kappa1_np, closed_form_kappa1)],
)
def test_circle_arccos_against_quad_and_closed_form(kappa, kappa_np, closed_form) -> None:  # type: ignore[no-untyped-def]
    n_freq = 40
    mu = circle_eigenvalues(kappa, n_freq).numpy()
    ks = np.arange(n_freq + 1)
    quad = np.array([quad_circle(kappa_np, k) for k in ks])
    exact = closed_form(ks)
    # The closed forms are verified by quadrature first, then the FFT against both.
    np.testing.assert_allclose(quad, exact, rtol=0, atol=1e-12)
    # FFT on the default grid (N = 4096 here): aliasing of kappa0's k^-2 spectrum is about
    # 4 zeta(2) / (pi^2 N^2) = 4.0e-8 on odd k; kappa1's (k^-4) is at rounding.
    alias = 4 * (math.pi**2 / 6) / (math.pi**2 * 4096**2)
    atol = 1.01 * alias if kappa is kappa0 else 1e-14
    np.testing.assert_allclose(mu, exact, rtol=0, atol=atol)
    np.testing.assert_allclose(mu, quad, rtol=0, atol=atol)


def test_circle_aliasing_is_exactly_the_poisson_sum() -> None:
    """mu^(N)_k = mu_k + sum_{m>=1} (mu_{mN-k} + mu_{mN+k}), checked with the closed form."""
    n, n_freq = 64, 10
    mu = circle_eigenvalues(kappa0, n_freq, grid=n).numpy()
    ks = np.arange(n_freq + 1)
    m = np.arange(1, 200_001)[:, None]
    aliased = closed_form_kappa0(ks) + (
        closed_form_kappa0(m * n - ks) + closed_form_kappa0(m * n + ks)
    ).sum(axis=0)
    np.testing.assert_allclose(mu, aliased, rtol=0, atol=1e-9)  # truncation of the m-sum
    assert np.abs(mu - closed_form_kappa0(ks))[1::2].min() > 1e-4  # aliasing is visible


def test_circle_exp_is_modified_bessel_and_differentiable() -> None:
    scale = torch.tensor(1.3, dtype=F64, requires_grad=True)
    mu = circle_eigenvalues(lambda t: torch.exp(scale * t), 20)
    ref = special.iv(np.arange(21), 1.3)
    np.testing.assert_allclose(mu.detach().numpy(), ref, rtol=1e-13, atol=1e-16)
    (grad,) = torch.autograd.grad(mu[3], scale)
    # d/ds I_3(s) = (I_2(s) + I_4(s)) / 2
    assert grad.item() == pytest.approx((special.iv(2, 1.3) + special.iv(4, 1.3)) / 2, rel=1e-12)


def test_circle_parity_zeros_of_relu_ntk_stay_zero() -> None:
    ntk = circle_eigenvalues(lambda t: kappa1(t) + t * kappa0(t), 512)
    assert ntk[3::2].abs().max().item() < 1e-15
    assert (ntk[::2] > 0).all()
    # relative aliasing at k = 512 on the default grid (65536): ~ 2 zeta(2) (512/65536)^2
    fine = circle_eigenvalues(lambda t: kappa1(t) + t * kappa0(t), 512, grid=2**20)
    assert abs(ntk[512] / fine[512] - 1).item() < 4e-4


def test_circle_follows_profile_dtype() -> None:
    mu = circle_eigenvalues(torch.exp, 5, dtype=torch.float32)
    assert mu.dtype == torch.float32
    np.testing.assert_allclose(mu.numpy(), special.iv(np.arange(6), 1.0), atol=1e-6)


# --------------------------------------------------------------------------------------------
# spheres


@pytest.mark.parametrize("dim", [3, 5, 10])
def test_sphere_recovers_chosen_gegenbauer_coefficients(dim: int) -> None:
    gen = np.random.default_rng(dim)
    degree = 12
    a = gen.uniform(0.1, 1.0, degree + 1)
    lam = (dim - 2) / 2
    mult = np.array([harmonic_multiplicity(dim, k) for k in range(degree + 1)], dtype=float)

    def profile(t: torch.Tensor) -> torch.Tensor:  # scipy's Gegenbauer, independent
        x = t.numpy()
        out = sum(
            a[k] * mult[k] * special.eval_gegenbauer(k, lam, x) / special.eval_gegenbauer(k, lam, 1)
            for k in range(degree + 1)
        )
        return torch.from_numpy(np.asarray(out, dtype=np.float64))

    mu = sphere_eigenvalues(profile, dim, degree + 5, quadrature_points=64).numpy()
    np.testing.assert_allclose(mu[: degree + 1], a, rtol=1e-12)
    np.testing.assert_allclose(mu[degree + 1 :], 0.0, atol=1e-13)


def test_sphere_exp_on_s4_closed_form_and_mercer_sum() -> None:
    dim, degree = 5, 40
    mu = sphere_eigenvalues(torch.exp, dim, degree)
    nu = dim / 2 - 1
    ref = special.gamma(dim / 2) * 2**nu * special.iv(np.arange(degree + 1) + nu, 1.0)
    np.testing.assert_allclose(mu.numpy(), ref, rtol=1e-12, atol=5e-15)  # rounding
    # kappa(1) = sum mu_k N(d, k); past k = 12 the true terms are < 1e-16, and the computed
    # ones are rounding noise (~1e-16) amplified by N(5, k) ~ k^3 / 3
    total = (mu[:21] * harmonic_multiplicities(dim, 20)).sum().item()
    assert total == pytest.approx(math.e, abs=1e-13)


def test_sphere_quadrature_is_accurate_to_rounding_at_many_nodes() -> None:
    """Moments E[t^2], E[t^4] and the parity zeros at n = 4096 on S^2 (Legendre weight),
    where scipy.special.roots_jacobi is off by 1e-13."""
    mu = sphere_eigenvalues(lambda t: t**4 + t**3, 3, 5, quadrature_points=4096)
    # t^4 = 1/5 P0 + 4/7 P2 + 8/35 P4, t^3 = 3/5 P1 + 2/5 P3; mu_k = coefficient / (2k + 1)
    expected = torch.tensor([1 / 5, 1 / 5, 4 / 35, 2 / 35, 8 / 315, 0.0], dtype=F64)
    torch.testing.assert_close(mu, expected, rtol=0, atol=5e-16)


@pytest.mark.parametrize("dim", [3, 5])
@pytest.mark.parametrize(("kappa", "kappa_np"), [(kappa0, kappa0_np), (kappa1, kappa1_np)])
def test_sphere_arccos_against_qaws(dim: int, kappa, kappa_np) -> None:  # type: ignore[no-untyped-def]
    degree = 12
    mu = sphere_eigenvalues(kappa, dim, degree).numpy()
    ref = np.array([quad_sphere(kappa_np, dim, k) for k in range(degree + 1)])
    np.testing.assert_allclose(mu, ref, rtol=0, atol=2e-10)
    mult = harmonic_multiplicities(dim, 400).numpy()
    assert (sphere_eigenvalues(kappa, dim, 400).numpy() * mult).sum() == pytest.approx(
        1.0 if kappa is kappa0 else kappa1_np(1.0), abs=2e-3
    )


def test_sphere_dim_two_delegates_to_circle() -> None:
    torch.testing.assert_close(
        sphere_eigenvalues(kappa1, 2, 30, quadrature_points=1024),
        circle_eigenvalues(kappa1, 30, grid=1024),
    )


def test_sphere_eigenvalues_are_differentiable() -> None:
    scale = torch.tensor(0.7, dtype=F64, requires_grad=True)
    mu = sphere_eigenvalues(lambda t: torch.exp(scale * t), 3, 4)
    (grad,) = torch.autograd.grad(mu[2], scale)
    eps = 1e-6
    plus = sphere_eigenvalues(lambda t: torch.exp((0.7 + eps) * t), 3, 4)[2]
    minus = sphere_eigenvalues(lambda t: torch.exp((0.7 - eps) * t), 3, 4)[2]
    assert grad.item() == pytest.approx(((plus - minus) / (2 * eps)).item(), rel=1e-7)


# --------------------------------------------------------------------------------------------
# Fourier coefficients and norms


def test_fourier_coefficients_of_a_trig_polynomial_are_exact() -> None:
    gen = np.random.default_rng(0)
    coeffs = gen.normal(size=(7, 2))
    coeffs[0, 1] = 0.0

    def f(a: torch.Tensor) -> torch.Tensor:
        out = coeffs[0, 0] * torch.ones_like(a)
        for k in range(1, 7):
            out = out + math.sqrt(2) * (
                coeffs[k, 0] * torch.cos(k * a) + coeffs[k, 1] * torch.sin(k * a)
            )
        return out

    res = fourier_coefficients_s1(f, 10, grid=64)
    np.testing.assert_allclose(res.coefficients[:7].numpy(), coeffs, atol=1e-14)
    np.testing.assert_allclose(res.coefficients[7:].numpy(), 0.0, atol=1e-14)
    assert res.energy == pytest.approx(float((coeffs**2).sum()), rel=1e-13)
    assert res.truncation_energy < 1e-28
    assert res.aliasing_energy < 1e-28
    assert res.grid == 64


def test_fourier_coefficients_of_a_kink_against_quad() -> None:
    res = fourier_coefficients_s1(lambda a: torch.abs(torch.sin(a)), 20)
    # |sin a| = 2/pi - (4/pi) sum_{k even} cos(ka) / (k^2 - 1)
    for k in range(21):
        ref, _ = integrate.quad(
            lambda a, k=k: abs(math.sin(a)) * math.cos(k * a), 0, 2 * math.pi, limit=200
        )
        ref *= (math.sqrt(2) if k else 1.0) / (2 * math.pi)
        # aliasing of the k^-2 spectrum on N = 4096: 2 (4/pi) zeta(2) / N^2 ~ 2.5e-7, well
        # within the reported sqrt(aliasing_energy) ~ 2e-5
        assert res.coefficients[k, 0].item() == pytest.approx(ref, abs=3e-7)
        assert abs(res.coefficients[k, 0].item() - ref) < math.sqrt(res.aliasing_energy)
    np.testing.assert_allclose(res.coefficients[:, 1].numpy(), 0.0, atol=1e-15)
    returned = float(res.coefficients.square().sum())
    assert res.energy == pytest.approx(0.5, rel=1e-12)
    assert res.truncation_energy == pytest.approx(res.energy - returned, rel=1e-9)
    assert 0 < res.aliasing_energy < 1e-9
    finer = fourier_coefficients_s1(lambda a: torch.abs(torch.sin(a)), 20, grid=2**16)
    assert finer.coefficients[0, 0].item() == pytest.approx(2 / math.pi, abs=1e-9)
    assert finer.aliasing_energy < res.aliasing_energy / 1000


def _sobolev_by_quadrature(f, derivatives: int) -> float:  # type: ignore[no-untyped-def]
    """(1/2pi) int sum_j binom(s, j) (f^(j))^2 for integer s, derivatives by autograd."""

    def integrand(a: float) -> float:
        x = torch.tensor(a, dtype=F64, requires_grad=True)
        value = f(x)
        terms = [value.item() ** 2]
        current = value
        for _ in range(derivatives):
            (current,) = torch.autograd.grad(current, x, create_graph=True)
            terms.append(current.item() ** 2)
        return sum(math.comb(derivatives, j) * terms[j] for j in range(derivatives + 1))

    value, _ = integrate.quad(integrand, 0, 2 * math.pi, limit=200, epsabs=1e-12)
    return value / (2 * math.pi)


@pytest.mark.parametrize("s", [1, 2])
def test_sobolev_norm_of_trig_polynomial_against_derivative_integral(s: int) -> None:
    gen = np.random.default_rng(1)
    coeffs = torch.tensor(gen.normal(size=(6, 2)), dtype=F64)
    coeffs[0, 1] = 0.0

    def f(a: torch.Tensor) -> torch.Tensor:
        out = coeffs[0, 0] + 0 * a
        for k in range(1, 6):
            out = out + math.sqrt(2) * (
                coeffs[k, 0] * torch.cos(k * a) + coeffs[k, 1] * torch.sin(k * a)
            )
        return out

    expected = _sobolev_by_quadrature(f, s)  # (1 + k^2)^s = sum_j binom(s, j) k^(2j)
    assert sobolev_norm_squared(coeffs, float(s)).item() == pytest.approx(expected, rel=1e-10)
    assert sobolev_norm_squared(coeffs, 0.0).item() == pytest.approx(float(coeffs.square().sum()))


def test_sobolev_on_sphere_uses_laplace_beltrami_eigenvalues() -> None:
    energies = torch.tensor([1.0, 0.0, 2.0, 0.5], dtype=F64)
    got = sobolev_norm_squared(energies, 1.5, dim=5)
    k = np.arange(4)
    assert got.item() == pytest.approx(float(((1 + k * (k + 3)) ** 1.5 * energies.numpy()).sum()))


def _circle_gram_check(kappa, rel: float) -> None:  # type: ignore[no-untyped-def]
    gen = np.random.default_rng(2)
    centers = torch.tensor(gen.uniform(0, 2 * math.pi, 6), dtype=F64)
    alpha = torch.tensor(gen.normal(size=6), dtype=F64)
    gram = kappa(torch.cos(centers[:, None] - centers[None, :]))
    expected = (alpha @ gram @ alpha).item()

    def f(a: torch.Tensor) -> torch.Tensor:  # f = sum_i alpha_i kappa(<x_i, .>)
        return kappa(torch.cos(a[:, None] - centers[None, :])) @ alpha

    n_freq = 512
    coeffs = fourier_coefficients_s1(f, n_freq).coefficients
    mu = circle_eigenvalues(kappa, n_freq)
    assert rkhs_norm_squared(coeffs, mu).item() == pytest.approx(expected, rel=rel)


def test_rkhs_norm_of_kernel_sections_matches_gram_on_circle() -> None:
    _circle_gram_check(lambda t: torch.exp(2.0 * t), rel=1e-12)
    # kappa1 has exact zeros (odd k >= 3) where f's coefficients vanish too; the truncated
    # tail sum_{k > 512} mu_k (...)^2 is ~1e-9.
    _circle_gram_check(kappa1, rel=1e-7)


def test_rkhs_norm_of_kernel_sections_matches_gram_on_s2() -> None:
    gen = np.random.default_rng(3)
    x = gen.normal(size=(5, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    alpha = gen.normal(size=5)
    cos = np.clip(x @ x.T, -1, 1)
    expected = alpha @ np.exp(cos) @ alpha
    degree = 30
    mu = sphere_eigenvalues(torch.exp, 3, degree)
    # energies of f = sum_i alpha_i exp(<x_i, .>), from the exact eigenvalues i_k(1):
    # E_k = mu_k^2 N_k alpha^T P_k(cos) alpha. Degrees k >= 11 have mu_k below the zero
    # tolerance (1e-12 max mu; computed ones are rounding noise past k ~ 15) and energies below
    # theirs: they count as 0/0 and are dropped, which costs 2e-12 of the norm here.
    exact = special.spherical_in(np.arange(degree + 1), 1.0)
    mult = 2 * np.arange(degree + 1) + 1
    legendre = np.stack([special.eval_legendre(k, cos) for k in range(degree + 1)])
    quad_forms = np.einsum("i,kij,j->k", alpha, legendre, alpha)
    energies = torch.tensor(exact**2 * mult * quad_forms, dtype=F64)
    assert rkhs_norm_squared(energies, mu).item() == pytest.approx(expected, rel=1e-11)


def test_rkhs_norm_layouts_agree_and_zero_eigenvalues() -> None:
    mu = torch.tensor([0.5, 0.25, 0.0, 0.1], dtype=F64)
    table = torch.tensor([[1.0, 0.0], [0.5, -0.5], [0.0, 0.0], [0.2, 0.1]], dtype=F64)
    expected = 1 / 0.5 + 0.5 / 0.25 + 0.05 / 0.1
    assert rkhs_norm_squared(table, mu).item() == pytest.approx(expected)
    flat = torch.tensor([1.0, 0.5, -0.5, 0.0, 0.0, 0.2, 0.1], dtype=F64)
    assert rkhs_norm_squared(flat, mu, [1, 2, 2, 2]).item() == pytest.approx(expected)
    energies = table.square().sum(dim=1)
    assert rkhs_norm_squared(energies, mu).item() == pytest.approx(expected)
    # a component where the eigenvalue vanishes: not in the RKHS
    table[2, 1] = 1e-3
    assert rkhs_norm_squared(table, mu).item() == math.inf
    # rounding-level eigenvalue and rounding-level coefficient: still finite
    mu_round = mu.clone()
    mu_round[2] = 1e-17
    table[2, 1] = 1e-17
    assert rkhs_norm_squared(table, mu_round).item() == pytest.approx(expected)


def test_rkhs_norm_is_differentiable() -> None:
    mu = torch.tensor([0.5, 0.25], dtype=F64, requires_grad=True)
    table = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=F64, requires_grad=True)
    norm = rkhs_norm_squared(table, mu)
    norm.backward()
    assert mu.grad is not None and table.grad is not None
    torch.testing.assert_close(mu.grad, torch.tensor([-4.0, -8.0], dtype=F64))
    torch.testing.assert_close(table.grad, torch.tensor([[4.0, 0.0], [4.0, 4.0]], dtype=F64))


# --------------------------------------------------------------------------------------------
# architectures


@dataclass
class _Kernel:
    nngp: torch.Tensor
    ntk: torch.Tensor


class _StandIn:
    """kernel(x1, x2) = exp(<x1, x2> / d) as NNGP and (1 + <x1, x2>) as NTK."""

    def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> _Kernel:
        dot = x1 @ x2.T
        return _Kernel(nngp=torch.exp(dot / x1.shape[1]), ntk=1 + dot)


def test_profile_from_architecture_with_stand_in() -> None:
    t = torch.linspace(-1, 1, 12, dtype=F64).reshape(3, 4)
    torch.testing.assert_close(
        profile_from_architecture(_StandIn(), 4, "nngp")(t), torch.exp(t / 4)
    )
    torch.testing.assert_close(profile_from_architecture(_StandIn(), 4)(t), 1 + t)
    radius = profile_from_architecture(_StandIn(), 3, "ntk", radius=2.0)
    torch.testing.assert_close(radius(t), 1 + 4 * t)
    mu = circle_eigenvalues(profile_from_architecture(_StandIn(), 2, "nngp"), 4)
    np.testing.assert_allclose(mu.numpy(), special.iv(np.arange(5), 0.5), rtol=1e-13)


def test_profile_from_architecture_relu_ntk() -> None:
    arch = ntklab.serial(ntklab.Dense(w_std=1.0), ntklab.Relu(), ntklab.Dense(w_std=1.0))
    # radius sqrt(2) on S^1: the input kernel <x, x'>/2 is exactly t, so the NTK is
    # (kappa1(t) + t kappa0(t)) / 2 and the NNGP kappa1(t) / 2.
    ntk = profile_from_architecture(arch, 2, "ntk", radius=math.sqrt(2))
    nngp = profile_from_architecture(arch, 2, "nngp", radius=math.sqrt(2))
    t = torch.linspace(-1, 1, 41, dtype=F64)
    torch.testing.assert_close(ntk(t), (kappa1(t) + t * kappa0(t)) / 2)
    torch.testing.assert_close(nngp(t), kappa1(t) / 2)
    mu = circle_eigenvalues(ntk, 64).numpy()
    ks = np.arange(65)
    # t kappa0(cos a) = cos(a) kappa0(cos a): its k-th coefficient is (mu_{k-1} + mu_{k+1}) / 2
    k0 = closed_form_kappa0(np.arange(66))
    tk0 = np.array([(k0[abs(k - 1)] + k0[k + 1]) / 2 for k in ks])
    np.testing.assert_allclose(mu, (closed_form_kappa1(ks) + tk0) / 2, atol=1e-8)
    # on S^2 with unit-norm inputs (input kernel t/3), parity zeros of the bias-free net
    sphere = sphere_eigenvalues(profile_from_architecture(arch, 3), 3, 21)
    assert sphere[3::2].abs().max().item() < 1e-14
    assert (sphere[::2] > 0).all()


# --------------------------------------------------------------------------------------------
# errors


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(NtklabValueError, match=r"dim: expected an int >= 2.*got 1"):
        sphere_eigenvalues(torch.exp, 1, 3)
    with pytest.raises(NtklabTypeError, match=r"dim: expected an int"):
        sphere_eigenvalues(torch.exp, 3.0, 3)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match=r"degree: expected an int >= 0, got -1"):
        sphere_eigenvalues(torch.exp, 3, -1)
    with pytest.raises(NtklabValueError, match=r"n_frequencies: expected an int >= 0, got -2"):
        circle_eigenvalues(torch.exp, -2)
    with pytest.raises(NtklabValueError, match=r"grid: expected an even int >= .* = 22.*got 21"):
        circle_eigenvalues(torch.exp, 10, grid=21)
    with pytest.raises(NtklabValueError, match=r"k: expected an int >= 0"):
        harmonic_multiplicity(3, -1)


def test_bad_profiles_raise_clear_errors() -> None:
    with pytest.raises(
        NtklabValueError, match=r"profile: expected .* shape \(2049,\), got shape \(2049, 1\)"
    ):
        circle_eigenvalues(lambda t: t[:, None], 3)
    with pytest.raises(
        NtklabValueError, match=r"profile: expected .*shape \(1024,\), got shape \(1023,\)"
    ):
        sphere_eigenvalues(lambda t: t[1:], 3, 3)
    with pytest.raises(
        NtklabValueError, match=r"profile: expected finite values, got 1 non-finite"
    ):
        circle_eigenvalues(lambda t: 1 / (t + 1), 3, grid=16)
    with pytest.raises(NtklabTypeError, match=r"profile: expected to return a real floating"):
        circle_eigenvalues(lambda t: (t > 0).long(), 3)
    with pytest.raises(NtklabTypeError, match=r"profile: expected to return a torch.Tensor"):
        circle_eigenvalues(lambda t: t.numpy(), 3)  # type: ignore[arg-type, return-value]
    with pytest.raises(NtklabValueError, match=r"f: expected .*got shape \(\)"):
        fourier_coefficients_s1(lambda a: a.sum(), 3)


def test_bad_coefficients_raise_clear_errors() -> None:
    mu = torch.ones(3, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"coefficients: expected entry \[0, 1\]"):
        rkhs_norm_squared(torch.ones(3, 2, dtype=F64), mu)
    with pytest.raises(NtklabValueError, match=r"coefficients: expected per-degree energies"):
        rkhs_norm_squared(torch.tensor([1.0, -1.0, 0.0], dtype=F64), mu)
    with pytest.raises(NtklabValueError, match=r"eigenvalues: expected shape \(K\+1,\) = \(3,\)"):
        rkhs_norm_squared(torch.ones(3, dtype=F64), torch.ones(4, dtype=F64))
    with pytest.raises(NtklabValueError, match=r"eigenvalues: expected values >= 0"):
        rkhs_norm_squared(torch.ones(3, dtype=F64), torch.tensor([1.0, -0.5, 0.1], dtype=F64))
    with pytest.raises(
        NtklabValueError, match=r"\(sum\(multiplicity\),\) = \(5,\).*got shape \(3,\)"
    ):
        rkhs_norm_squared(torch.ones(3, dtype=F64), mu, [1, 2, 2])
    with pytest.raises(NtklabValueError, match=r"dim: expected 2 for an S\^1 coefficient table"):
        sobolev_norm_squared(torch.zeros(3, 2, dtype=F64), 1.0, dim=3)
    with pytest.raises(NtklabTypeError, match=r"coefficients: expected a torch.Tensor"):
        sobolev_norm_squared(np.zeros(3), 1.0)  # type: ignore[arg-type]


def test_bad_architectures_raise_clear_errors() -> None:
    with pytest.raises(NtklabValueError, match=r"get: expected 'ntk' or 'nngp', got 'cnn'"):
        profile_from_architecture(_StandIn(), 3, "cnn")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"arch: expected an object with a kernel"):
        profile_from_architecture(object(), 3)  # type: ignore[arg-type]

    class _Bad:
        def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> _Kernel:
            k = torch.ones(x1.shape[0], dtype=x1.dtype)
            return _Kernel(nngp=k, ntk=k)

    with pytest.raises(
        NtklabValueError, match=r"arch: expected arch.kernel\(x1, x2\).ntk .*\(5, 1\), got \(5,\)"
    ):
        profile_from_architecture(_Bad(), 3)(torch.zeros(5, dtype=F64))
