r"""Spectra of dot-product (zonal) kernels on spheres, and RKHS and Sobolev norms.

A dot-product kernel on the sphere :math:`S^{d-1} \subset \mathbb{R}^d` is given by its
*profile* :math:`\kappa : [-1, 1] \to \mathbb{R}`, :math:`k(x, x') = \kappa(\langle x, x'
\rangle)`. Here a profile is any torch callable that maps a tensor of cosines ``t`` to a tensor
of the same shape, elementwise (for example ``torch.exp`` or
:func:`profile_from_architecture`).

All operators are taken with respect to the *uniform probability measure* :math:`\sigma` on
the sphere. Spherical harmonics :math:`Y_{kj}`, :math:`j = 1..N(d, k)`, orthonormal in
:math:`L^2(\sigma)`, diagonalize every dot-product kernel (Mercer / Funk-Hecke):

.. math::

    \kappa(\langle x, x' \rangle) = \sum_{k \ge 0} \mu_k \sum_{j=1}^{N(d,k)} Y_{kj}(x) Y_{kj}(x')
    = \sum_{k \ge 0} \mu_k \, N(d, k) \, P_k^{(d)}(\langle x, x' \rangle),

with :math:`P_k^{(d)}` the Legendre (Gegenbauer) polynomial of dimension ``d`` normalized by
:math:`P_k^{(d)}(1) = 1`. In particular :math:`\kappa(1) = \sum_k \mu_k N(d, k)`.

Coefficient layouts (used by :func:`rkhs_norm_squared` and :func:`sobolev_norm_squared`):

- **S^1 table**, shape ``(K+1, 2)``: row ``k`` holds ``(a_k, b_k)``, the coefficients of
  :math:`f = a_0 + \sum_{k \ge 1} a_k \sqrt{2}\cos(k\theta) + b_k \sqrt{2}\sin(k\theta)` in the
  orthonormal basis :math:`\{1, \sqrt{2}\cos k\theta, \sqrt{2}\sin k\theta\}` of
  :math:`L^2(d\theta / 2\pi)`. ``b_0`` has no basis function and must be exactly 0. This is
  what :func:`fourier_coefficients_s1` returns. Then
  :math:`\|f\|_{L^2}^2 = \sum_k (a_k^2 + b_k^2)`.
- **Per-degree energies**, shape ``(K+1,)``: :math:`E_k = \sum_j c_{kj}^2 \ge 0`, the squared
  :math:`L^2(\sigma)` norm of the degree-``k`` component of ``f``. This is all that zonal norms
  need, on any sphere.
- **Per-harmonic coefficients** with ``multiplicity`` given, shape ``(sum(multiplicity),)``:
  the :math:`c_{kj}` listed degree by degree (all ``multiplicity[0]`` coefficients of degree 0,
  then those of degree 1, ...). They are squared and summed per degree.

Precision: float64 is recommended (and is the default grid dtype). In float32 the FFT and
quadrature round at about 1e-7 relative to :math:`\kappa(1)`, so eigenvalues below that are
noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ntklab.errors import NtklabTypeError, NtklabValueError

__all__ = [
    "ArchitectureProfile",
    "FourierCoefficientsS1",
    "KernelArchitecture",
    "Profile",
    "circle_eigenvalues",
    "fourier_coefficients_s1",
    "harmonic_multiplicities",
    "harmonic_multiplicity",
    "legendre_polynomials",
    "profile_from_architecture",
    "rkhs_norm_squared",
    "sobolev_norm_squared",
    "sphere_eigenvalues",
]

Profile = Callable[[Tensor], Tensor]
"""A dot-product kernel's profile: cosines ``t`` (any shape) to ``kappa(t)`` (same shape)."""

_MIN_CIRCLE_GRID = 4096
_CIRCLE_OVERSAMPLING = 64
_MIN_QUADRATURE_POINTS = 1024
_QUADRATURE_OVERSAMPLING = 8
_DEFAULT_RTOL = 1e-12


# ---------------------------------------------------------------------------------------------
# validation helpers


def _check_int(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise NtklabTypeError(
            f"{name}: expected an int >= {minimum}, got {type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise NtklabValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def _check_dim(dim: object, *, minimum: int = 2) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise NtklabTypeError(
            f"dim: expected an int >= {minimum} (the ambient dimension d of S^(d-1)), got "
            f"{type(dim).__name__} {dim!r}"
        )
    if dim < minimum:
        raise NtklabValueError(
            f"dim: expected an int >= {minimum} (the ambient dimension d of S^(d-1)), got {dim}"
        )
    return int(dim)


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _circle_grid(grid: int | None, n_frequencies: int, name: str = "grid") -> int:
    """Default: the power of two >= max(4096, 64 (K + 1)); a given grid must be even, > 2K."""
    if grid is None:
        return _next_power_of_two(max(_MIN_CIRCLE_GRID, _CIRCLE_OVERSAMPLING * (n_frequencies + 1)))
    grid = _check_int(grid, name, minimum=2)
    if grid % 2 or grid < 2 * n_frequencies + 2:
        raise NtklabValueError(
            f"{name}: expected an even int >= 2 * n_frequencies + 2 = {2 * n_frequencies + 2} "
            f"(a power of two >= 8 * n_frequencies is recommended), got {grid}"
        )
    return grid


def _evaluate(fn: Callable[[Tensor], Tensor], arg: Tensor, name: str) -> Tensor:
    """Call ``fn(arg)`` and check that it returns a finite real tensor of ``arg``'s shape."""
    out = fn(arg)
    if not isinstance(out, Tensor):
        raise NtklabTypeError(
            f"{name}: expected to return a torch.Tensor of shape {tuple(arg.shape)}, got "
            f"{type(out).__name__}"
        )
    if out.shape != arg.shape:
        raise NtklabValueError(
            f"{name}: expected an elementwise function returning its input's shape "
            f"{tuple(arg.shape)}, got shape {tuple(out.shape)}"
        )
    if not out.is_floating_point():
        raise NtklabTypeError(
            f"{name}: expected to return a real floating tensor, got dtype {out.dtype}"
        )
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = (~finite).nonzero().flatten()
        raise NtklabValueError(
            f"{name}: expected finite values, got {bad.numel()} non-finite out of "
            f"{out.numel()}, the first at input {arg.flatten()[bad[0]].item()!r}: "
            f"{out.flatten()[bad[0]].item()!r}"
        )
    return out


# ---------------------------------------------------------------------------------------------
# multiplicities and Legendre polynomials


def harmonic_multiplicity(dim: int, k: int) -> int:
    r"""Dimension :math:`N(d, k)` of the spherical harmonics of degree ``k`` on :math:`S^{d-1}`.

    .. math::

        N(d, 0) = 1, \qquad N(d, k) = \frac{2k + d - 2}{k} \binom{k + d - 3}{d - 2}
        = \binom{k + d - 1}{d - 1} - \binom{k + d - 3}{d - 1} \quad (k \ge 1).

    On the circle (``dim = 2``) this is 2 for every ``k >= 1`` (cosine and sine).

    Parameters
    ----------
    dim : int
        Ambient dimension ``d >= 2``.
    k : int
        Degree ``k >= 0``.

    Returns
    -------
    int
        The exact multiplicity.

    Examples
    --------
    >>> [harmonic_multiplicity(3, k) for k in range(4)]
    [1, 3, 5, 7]
    """
    d = _check_dim(dim)
    k = _check_int(k, "k", minimum=0)
    if k == 0:
        return 1
    return math.comb(k + d - 1, d - 1) - math.comb(k + d - 3, d - 1)


def harmonic_multiplicities(
    dim: int,
    degree: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """:math:`N(d, k)` for ``k = 0..degree`` as a tensor of shape ``(degree + 1,)``.

    See :func:`harmonic_multiplicity`. Floating ``dtype`` by default, because multiplicities
    multiply eigenvalues; for large ``d`` and ``k`` they may exceed float range (inf).
    """
    d = _check_dim(dim)
    degree = _check_int(degree, "degree", minimum=0)
    values = [float(harmonic_multiplicity(d, k)) for k in range(degree + 1)]
    return torch.tensor(values, dtype=dtype, device=device)


def legendre_polynomials(t: Tensor, dim: int, degree: int) -> Tensor:
    r"""Legendre polynomials of dimension ``d``, :math:`P_k^{(d)}(t)` for ``k = 0..degree``.

    Normalized by :math:`P_k^{(d)}(1) = 1`, i.e.
    :math:`P_k^{(d)} = C_k^{\lambda} / C_k^{\lambda}(1)` with :math:`\lambda = (d - 2)/2`
    (Chebyshev :math:`T_k` for ``d = 2``, Legendre for ``d = 3``). Computed by the forward
    three-term recurrence, which is stable on :math:`[-1, 1]` where :math:`|P_k^{(d)}| \le 1`:

    .. math::

        P_0 = 1, \quad P_1 = t, \quad
        (k + d - 2) P_{k+1}(t) = (2k + d - 2)\, t\, P_k(t) - k P_{k-1}(t).

    Parameters
    ----------
    t : Tensor of any shape
        Cosines, normally in ``[-1, 1]``. Differentiable.
    dim : int
        Ambient dimension ``d >= 2``.
    degree : int
        Highest degree ``K >= 0``.

    Returns
    -------
    Tensor of shape ``(degree + 1, *t.shape)``
        ``out[k] = P_k^{(d)}(t)``, on ``t``'s dtype and device.

    Examples
    --------
    >>> t = torch.tensor([0.5], dtype=torch.float64)
    >>> legendre_polynomials(t, 3, 2)[:, 0]  # 1, t, (3 t^2 - 1)/2
    tensor([ 1.0000,  0.5000, -0.1250], dtype=torch.float64)
    """
    d = _check_dim(dim)
    degree = _check_int(degree, "degree", minimum=0)
    if not isinstance(t, Tensor):
        raise NtklabTypeError(f"t: expected a torch.Tensor, got {type(t).__name__}")
    polys = [torch.ones_like(t)]
    if degree >= 1:
        polys.append(t.clone())
    for k in range(1, degree):
        nxt = ((2 * k + d - 2) * t * polys[k] - k * polys[k - 1]) / (k + d - 2)
        polys.append(nxt)
    return torch.stack(polys)


# ---------------------------------------------------------------------------------------------
# spectra


def circle_eigenvalues(
    profile: Profile,
    n_frequencies: int,
    *,
    grid: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Eigenvalues of a dot-product kernel on the circle :math:`S^1`, by FFT.

    The integral operator :math:`(Tf)(a) = \frac{1}{2\pi}\int_0^{2\pi}\kappa(\cos(a - b))
    f(b)\,db` has eigenfunctions :math:`\cos(ka), \sin(ka)` (multiplicity 2 for ``k >= 1``)
    with eigenvalues

    .. math::

        \mu_k = \frac{1}{2\pi} \int_0^{2\pi} \kappa(\cos a) \cos(k a)\, da
        \approx \mu_k^{(N)} = \frac{1}{N} \sum_{j=0}^{N-1} \kappa(\cos a_j) \cos(k a_j),
        \quad a_j = 2\pi j / N,

    so that :math:`\kappa(\cos a) = \mu_0 + 2\sum_{k\ge1}\mu_k\cos(ka)`. The profile is
    evaluated at the ``N/2 + 1`` distinct cosines only (the samples are even in ``a``).

    Aliasing (the only error besides rounding) is exact and known: by discrete Poisson
    summation

    .. math::

        \mu_k^{(N)} = \mu_k + \sum_{m \ge 1} (\mu_{mN - k} + \mu_{mN + k}).

    For analytic profiles (``exp``, erf/tanh networks) :math:`\mu_k` decays geometrically and
    the default grid puts the error below rounding. For a spectrum decaying as
    :math:`C k^{-p}` (ReLU NTK: ``p = 2``; ReLU NNGP: ``p = 4``) the error is about
    :math:`2 \zeta(p) C N^{-p}`, i.e. a relative error :math:`\approx 2\zeta(p) (k/N)^p` at
    frequency ``k``: 8e-4 at ``k = K`` for ``p = 2`` on the default grid. Because ``N`` is even,
    aliases keep the parity of ``k``, so eigenvalues that vanish by parity (odd ``k >= 3`` of
    a one-hidden-layer bias-free ReLU NTK) stay zero up to rounding.

    Parameters
    ----------
    profile : callable Tensor -> Tensor
        :math:`\kappa`, elementwise on a tensor of cosines of shape ``(N/2 + 1,)``.
    n_frequencies : int
        Highest frequency ``K >= 0``.
    grid : int, optional
        Number ``N`` of equispaced angles; even and ``>= 2K + 2``. Default: the power of two
        ``>= max(4096, 64 (K + 1))``. Pass a larger power of two to shrink the aliasing error
        of a non-smooth profile (cost: one profile call on ``N/2 + 1`` points and one FFT).
    dtype, device
        Of the cosine grid passed to ``profile`` (float64 recommended). The result follows the
        profile's output dtype and device.

    Returns
    -------
    Tensor of shape (K + 1,)
        :math:`\mu_0, \dots, \mu_K`. Differentiable through the profile.

    Examples
    --------
    >>> mu = circle_eigenvalues(torch.exp, 3)  # mu_k = I_k(1), modified Bessel
    >>> torch.round(mu, decimals=6)
    tensor([1.2661, 0.5652, 0.1357, 0.0222], dtype=torch.float64)
    """
    n_frequencies = _check_int(n_frequencies, "n_frequencies", minimum=0)
    n = _circle_grid(grid, n_frequencies)
    angles = torch.arange(n // 2 + 1, dtype=dtype, device=device) * (2.0 * math.pi / n)
    values = _evaluate(profile, torch.cos(angles), "profile")  # shape: (N/2 + 1,)
    samples = torch.cat([values, values[1:-1].flip(0)])  # shape: (N,), even in the angle
    spectrum: Tensor = torch.fft.rfft(samples).real / n  # shape: (N/2 + 1,)
    return spectrum[: n_frequencies + 1]


def _orthonormal_pass(
    x: NDArray[np.float64], b: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """p_n(x), p_n'(x) and sum_{k<n} p_k(x)^2 for the orthonormal recurrence with
    off-diagonals ``b`` (length n): b_{k+1} p_{k+1} = x p_k - b_k p_{k-1}, p_0 = 1."""
    p_prev, p = np.zeros_like(x), np.ones_like(x)
    dp_prev, dp = np.zeros_like(x), np.zeros_like(x)
    squares = np.ones_like(x)
    n = b.shape[0]
    for j in range(n):
        b_j = b[j - 1] if j > 0 else 0.0
        p_next = (x * p - b_j * p_prev) / b[j]
        dp_next = (p + x * dp - b_j * dp_prev) / b[j]
        p_prev, p, dp_prev, dp = p, p_next, dp, dp_next
        if j < n - 1:
            squares += p * p
    return p, dp, squares


@lru_cache(maxsize=32)
def _gauss_jacobi(n: int, alpha: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``n``-point Gauss rule for the probability weight proportional to ``(1 - t^2)^alpha``.

    Golub-Welsch nodes (eigenvalues of the Jacobi matrix), one Newton step on the orthonormal
    polynomial, and Christoffel weights ``1 / sum_{k<n} p_k(x_i)^2``: moments are exact to
    rounding (1e-16) for every ``alpha`` and ``n`` tried up to 12000, where
    ``scipy.special.roots_jacobi`` loses three digits at ``alpha = 0``. O(n) memory, O(n^2) time
    (0.4 s at n = 4096). The rule is symmetrized exactly, so odd degrees of even profiles
    integrate to zero up to the rounding of the profile itself.
    """
    k = np.arange(1, n + 1, dtype=np.float64)
    # Jacobi matrix of the symmetric Jacobi weight: zero diagonal, off-diagonal b_k.
    b = np.sqrt(k * (k + 2 * alpha) / ((2 * k + 2 * alpha - 1) * (2 * k + 2 * alpha + 1)))
    from scipy.linalg import eigvalsh_tridiagonal  # scipy.linalg costs 0.7 s to import

    nodes = eigvalsh_tridiagonal(np.zeros(n), b[: n - 1]) if n > 1 else np.zeros(1)
    p, dp, _ = _orthonormal_pass(nodes, b)
    nodes = nodes - p / dp
    _, _, squares = _orthonormal_pass(nodes, b)
    weights = 1.0 / squares
    nodes = 0.5 * (nodes - nodes[::-1])
    weights = 0.5 * (weights + weights[::-1])
    weights = weights / weights.sum()
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def sphere_eigenvalues(
    profile: Profile,
    dim: int,
    degree: int,
    *,
    quadrature_points: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Eigenvalues of a dot-product kernel on :math:`S^{d-1}`, by Funk-Hecke and Gauss-Jacobi.

    With respect to the uniform probability measure on :math:`S^{d-1}`, the eigenvalue on the
    degree-``k`` harmonics (multiplicity :math:`N(d, k)`, :func:`harmonic_multiplicity`) is

    .. math::

        \mu_k = \frac{|S^{d-2}|}{|S^{d-1}|} \int_{-1}^{1} \kappa(t)\, P_k^{(d)}(t)\,
        (1 - t^2)^{(d-3)/2}\, dt,
        \qquad \frac{|S^{d-2}|}{|S^{d-1}|} = \frac{\Gamma(d/2)}{\sqrt{\pi}\,\Gamma((d-1)/2)},

    and :math:`\kappa(1) = \sum_k \mu_k N(d, k)`. The integral is computed with ``n``-point
    Gauss-Jacobi quadrature (:math:`\alpha = \beta = (d - 3)/2`, weights normalized to sum to
    one, which is exactly the constant above; nodes by Golub-Welsch plus a Newton step and
    Christoffel weights, accurate to rounding where ``scipy.special.roots_jacobi`` loses three
    digits at ``d = 3``) and :func:`legendre_polynomials`. It is exact for a polynomial
    profile of degree ``<= 2n - 1 - k``, up to an absolute rounding error of about
    ``1e-15 * max|kappa|``.

    For non-smooth profiles (ReLU: :math:`\kappa` has a :math:`(1 - t)^{1/2}` or
    :math:`(1-t)^{3/2}` term at ``t = 1``) the error decays algebraically in ``n``. Measured for
    the one-hidden-layer ReLU NTK with ``K = 256`` and the default ``n = 2056``: relative error
    at most 8e-4 on S^2 (largest at ``k = K``, falling as ``n^-3``), 1.2e-5 on S^4; with
    ``n = 4096``, 1e-4 and 4e-7. Its parity zeros stay below 1e-15.
    Increase ``quadrature_points`` until the eigenvalues you need stop moving.

    ``dim = 2`` delegates to :func:`circle_eigenvalues` (multiplicity 2 for ``k >= 1``), with
    ``quadrature_points`` used as its FFT ``grid``.

    Parameters
    ----------
    profile : callable Tensor -> Tensor
        :math:`\kappa`, elementwise on a tensor of cosines of shape ``(n,)``.
    dim : int
        Ambient dimension ``d >= 2`` of :math:`S^{d-1} \subset \mathbb{R}^d`.
    degree : int
        Highest degree ``K >= 0``.
    quadrature_points : int, optional
        Number ``n`` of Gauss-Jacobi nodes. Default ``max(1024, 8 (K + 1))``. Node computation
        costs about 0.4 s at ``n = 4096`` (cached per ``(n, d)``).
    dtype, device
        Of the nodes passed to ``profile`` (float64 recommended). The result follows the
        profile's output dtype and device.

    Returns
    -------
    Tensor of shape (K + 1,)
        :math:`\mu_0, \dots, \mu_K`. Differentiable through the profile.

    Examples
    --------
    >>> mu = sphere_eigenvalues(lambda t: t**2, 3, 3)  # t^2 = 1/3 P_0 + 2/3 P_2 on S^2
    >>> torch.round(mu * harmonic_multiplicities(3, 3), decimals=12) + 0.0  # + 0.0: no "-0."
    tensor([0.3333, 0.0000, 0.6667, 0.0000], dtype=torch.float64)
    """
    d = _check_dim(dim)
    degree = _check_int(degree, "degree", minimum=0)
    if d == 2:
        return circle_eigenvalues(
            profile, degree, grid=quadrature_points, dtype=dtype, device=device
        )
    if quadrature_points is None:
        n = max(_MIN_QUADRATURE_POINTS, _QUADRATURE_OVERSAMPLING * (degree + 1))
    else:
        n = _check_int(quadrature_points, "quadrature_points", minimum=1)
    nodes_np, weights_np = _gauss_jacobi(n, (d - 3) / 2)
    nodes = torch.tensor(nodes_np, dtype=dtype, device=device)
    values = _evaluate(profile, nodes, "profile")  # shape: (n,)
    weights = torch.tensor(weights_np, dtype=values.dtype, device=values.device)
    polys = legendre_polynomials(nodes.to(values.dtype), d, degree)  # shape: (K+1, n)
    eigenvalues: Tensor = polys @ (weights * values)
    return eigenvalues


# ---------------------------------------------------------------------------------------------
# Fourier coefficients of callables on S^1


@dataclass(frozen=True, eq=False)
class FourierCoefficientsS1:
    r"""Orthonormal Fourier coefficients of a function on :math:`S^1`, with error estimates.

    Attributes
    ----------
    coefficients : Tensor of shape (K + 1, 2)
        S^1 table (module docstring): row ``k`` is ``(a_k, b_k)`` w.r.t.
        :math:`\{1, \sqrt2\cos k\theta, \sqrt2\sin k\theta\}`; ``b_0 = 0``.
    grid : int
        Number ``N`` of equispaced samples used.
    energy : float
        :math:`\|f\|^2_{L^2(d\theta/2\pi)}` as seen on the grid (mean of :math:`f^2`).
    truncation_energy : float
        Grid energy at frequencies ``K < k <= N/2``: the squared :math:`L^2` distance between
        ``f`` and its degree-``K`` Fourier projection, up to aliasing.
    aliasing_energy : float
        Grid energy at frequencies ``N/4 < k <= N/2``, the top quarter of the grid spectrum,
        which is what folds back onto the returned coefficients. For algebraically decaying
        coefficients (:math:`|c_k| \sim k^{-p}`, ``p > 1``) its square root exceeds the
        aliasing error of each returned coefficient, by a factor of order :math:`\sqrt{N}`
        (measured for :math:`|\sin\theta|` on ``N = 4096``: 2e-5 against 1.3e-7). If it is not
        negligible, refine ``grid``.
    """

    coefficients: Tensor
    grid: int
    energy: float
    truncation_energy: float
    aliasing_energy: float


def fourier_coefficients_s1(
    f: Callable[[Tensor], Tensor],
    n_frequencies: int,
    *,
    grid: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> FourierCoefficientsS1:
    r"""Orthonormal Fourier coefficients of a callable on :math:`S^1`, by FFT.

    With samples :math:`f_j = f(\theta_j)`, :math:`\theta_j = 2\pi j / N` and
    :math:`F_k = \sum_j f_j e^{-2\pi i jk/N}`:

    .. math::

        a_0 = F_0 / N, \qquad a_k = \sqrt{2}\, \mathrm{Re}\, F_k / N, \qquad
        b_k = -\sqrt{2}\, \mathrm{Im}\, F_k / N \quad (1 \le k \le K),

    the trapezoid rule for :math:`a_k = \frac{1}{2\pi}\int f\,\sqrt2\cos k\theta\,d\theta`
    (and likewise :math:`b_k`), exact up to aliasing (frequencies ``mN +- k``).

    Parameters
    ----------
    f : callable Tensor -> Tensor
        Takes angles of shape ``(N,)`` in ``[0, 2 pi)`` and returns values of shape ``(N,)``.
    n_frequencies : int
        Highest frequency ``K >= 0``.
    grid : int, optional
        Number ``N`` of samples; even and ``>= 2K + 2``. Default: the power of two
        ``>= max(4096, 64 (K + 1))``.
    dtype, device
        Of the angles passed to ``f`` (float64 recommended). The coefficients follow ``f``'s
        output dtype and device.

    Returns
    -------
    FourierCoefficientsS1
        ``coefficients`` of shape ``(K + 1, 2)`` (differentiable through ``f``) and the
        energy diagnostics.

    Examples
    --------
    >>> out = fourier_coefficients_s1(lambda a: 3 * torch.cos(2 * a), 3)
    >>> torch.round(out.coefficients[2], decimals=12)  # 3 cos 2a = (3 / sqrt 2) sqrt2 cos 2a
    tensor([2.1213, 0.0000], dtype=torch.float64)
    """
    n_frequencies = _check_int(n_frequencies, "n_frequencies", minimum=0)
    n = _circle_grid(grid, n_frequencies)
    angles = torch.arange(n, dtype=dtype, device=device) * (2.0 * math.pi / n)
    values = _evaluate(f, angles, "f")  # shape: (N,)
    spectrum = torch.fft.rfft(values) / n  # shape: (N/2 + 1,)
    coefficients = torch.stack(
        [spectrum.real[: n_frequencies + 1], -spectrum.imag[: n_frequencies + 1]], dim=1
    )  # shape: (K+1, 2)
    scale = torch.full((n_frequencies + 1, 1), math.sqrt(2.0), dtype=values.dtype)
    scale[0] = 1.0
    coefficients = coefficients * scale.to(values.device)
    coefficients[0, 1] = 0.0
    # Grid energy per frequency: |F_0|^2, 2|F_k|^2 for 0 < k < N/2, |F_{N/2}|^2 (all / N^2).
    power = spectrum.detach().abs().square().double().cpu()
    power[1 : n // 2] *= 2.0
    return FourierCoefficientsS1(
        coefficients=coefficients,
        grid=n,
        energy=float(power.sum()),
        truncation_energy=float(power[n_frequencies + 1 :].sum()),
        aliasing_energy=float(power[n // 4 + 1 :].sum()),
    )


# ---------------------------------------------------------------------------------------------
# norms


def _degree_energies(
    coefficients: Tensor, multiplicity: Sequence[int] | Tensor | None, name: str
) -> Tensor:
    """Per-degree energies from any of the three coefficient layouts (module docstring)."""
    if not isinstance(coefficients, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor, got {type(coefficients).__name__}")
    if not coefficients.is_floating_point():
        raise NtklabTypeError(
            f"{name}: expected a real floating tensor, got dtype {coefficients.dtype}"
        )
    if not bool(torch.isfinite(coefficients).all()):
        raise NtklabValueError(
            f"{name}: expected finite values, got "
            f"{int((~torch.isfinite(coefficients)).sum())} NaN or inf entries"
        )
    if multiplicity is not None:
        mult = torch.as_tensor(multiplicity).to(device=coefficients.device)
        if mult.ndim != 1 or mult.is_floating_point() or bool((mult < 0).any()):
            raise NtklabValueError(
                f"multiplicity: expected a 1-D sequence of non-negative ints, got {multiplicity!r}"
            )
        total = int(mult.sum())
        if coefficients.shape != (total,):
            raise NtklabValueError(
                f"{name}: expected per-harmonic coefficients of shape (sum(multiplicity),) = "
                f"({total},) since multiplicity is given, got shape {tuple(coefficients.shape)}"
            )
        degree_of = torch.repeat_interleave(torch.arange(mult.numel(), device=mult.device), mult)
        energies = torch.zeros(mult.numel(), dtype=coefficients.dtype, device=coefficients.device)
        return energies.index_add(0, degree_of, coefficients.square())
    if coefficients.ndim == 2 and coefficients.shape[1] == 2:
        if coefficients[0, 1] != 0:
            raise NtklabValueError(
                f"{name}: expected entry [0, 1] of the S^1 table of shape (K+1, 2) (the sine "
                f"coefficient of frequency 0, which has no basis function) to be 0, got "
                f"{coefficients[0, 1].item()!r}"
            )
        return coefficients.square().sum(dim=1)
    if coefficients.ndim == 1:
        if bool((coefficients < 0).any()):
            raise NtklabValueError(
                f"{name}: expected per-degree energies sum_j c_kj^2 >= 0 (shape (K+1,)), got "
                f"negative entries at degrees "
                f"{(coefficients < 0).nonzero().flatten().tolist()[:8]}. For raw coefficients "
                f"pass multiplicity (per-harmonic layout) or the (K+1, 2) S^1 table"
            )
        return coefficients
    raise NtklabValueError(
        f"{name}: expected an S^1 table of shape (K+1, 2), per-degree energies of shape "
        f"(K+1,), or per-harmonic coefficients with multiplicity given, got shape "
        f"{tuple(coefficients.shape)}"
    )


def rkhs_norm_squared(
    coefficients: Tensor,
    eigenvalues: Tensor,
    multiplicity: Sequence[int] | Tensor | None = None,
    *,
    rtol: float = _DEFAULT_RTOL,
) -> Tensor:
    r"""Squared RKHS norm of a function given by its harmonic coefficients.

    .. math::

        \|f\|_{\mathcal{H}}^2 = \sum_k \frac{E_k}{\mu_k}, \qquad E_k = \sum_j c_{kj}^2 .

    Zero eigenvalues: :math:`\mu_k` with :math:`|\mu_k| \le \mathrm{rtol} \cdot \max|\mu|` is
    treated as exactly zero. Its term is 0 when the degree-``k`` component vanishes
    (:math:`\sqrt{E_k} \le \mathrm{rtol} \cdot \|f\|_{L^2}`) and the result is ``inf``
    otherwise (``f`` is not in the RKHS, e.g. an odd frequency ``k >= 3`` for the one-layer
    bias-free ReLU NTK). Eigenvalues below ``-rtol * max|mu|`` are an error (not a PSD kernel).
    Eigenvalues beyond rounding but below the default ``rtol = 1e-12`` (an NNGP's
    :math:`k^{-4}` tail past ``k ~ 10^3``) cannot be resolved in float64 anyway.

    Parameters
    ----------
    coefficients : Tensor
        One of the layouts of the module docstring: S^1 table ``(K+1, 2)``, per-degree
        energies ``(K+1,)``, or per-harmonic coefficients ``(sum(multiplicity),)``.
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0..\mu_K` (:func:`circle_eigenvalues`, :func:`sphere_eigenvalues`).
    multiplicity : sequence of int or Tensor of shape (K + 1,), optional
        Number of harmonics per degree, selecting the per-harmonic layout.
    rtol : float
        Relative tolerance for exact zeros, see above.

    Returns
    -------
    Tensor of shape ()
        The squared norm (``inf`` if ``f`` is not in the RKHS). Differentiable in both inputs
        where finite.

    Examples
    --------
    >>> mu = torch.tensor([0.5, 0.25, 0.0], dtype=torch.float64)
    >>> rkhs_norm_squared(torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]).double(), mu)
    tensor(4., dtype=torch.float64)
    """
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol < 1:
        raise NtklabValueError(f"rtol: expected a float in [0, 1), got {rtol!r}")
    energies = _degree_energies(coefficients, multiplicity, "coefficients")
    if not isinstance(eigenvalues, Tensor):
        raise NtklabTypeError(
            f"eigenvalues: expected a torch.Tensor, got {type(eigenvalues).__name__}"
        )
    if eigenvalues.shape != energies.shape:
        raise NtklabValueError(
            f"eigenvalues: expected shape (K+1,) = {tuple(energies.shape)} to match "
            f"coefficients, got {tuple(eigenvalues.shape)}"
        )
    if not bool(torch.isfinite(eigenvalues).all()):
        raise NtklabValueError(
            f"eigenvalues: expected finite values, got "
            f"{int((~torch.isfinite(eigenvalues)).sum())} NaN or inf entries"
        )
    mu = eigenvalues.to(energies.dtype)
    scale = float(mu.detach().abs().max()) if mu.numel() else 0.0
    zero = mu.detach().abs() <= rtol * scale
    negative = (mu.detach() < 0) & ~zero
    if bool(negative.any()):
        raise NtklabValueError(
            f"eigenvalues: expected values >= 0 (a positive semi-definite kernel) up to "
            f"rtol={rtol} relative to max|mu|, got negative values at degrees "
            f"{negative.nonzero().flatten().tolist()[:8]}"
        )
    total = float(energies.detach().sum())
    present = energies.detach() > (rtol**2) * total
    if bool((zero & present).any()):
        return torch.tensor(math.inf, dtype=energies.dtype, device=energies.device)
    safe_mu = torch.where(zero, torch.ones_like(mu), mu)
    terms = torch.where(zero, torch.zeros_like(energies), energies / safe_mu)
    return terms.sum()


def sobolev_norm_squared(
    coefficients: Tensor,
    s: float,
    *,
    dim: int = 2,
    multiplicity: Sequence[int] | Tensor | None = None,
) -> Tensor:
    r"""Squared Sobolev norm :math:`H^s` on :math:`S^{d-1}` from harmonic coefficients.

    .. math::

        \|f\|_{H^s}^2 = \sum_k \bigl(1 + k(k + d - 2)\bigr)^s E_k,

    :math:`k(k+d-2)` being the eigenvalue of the Laplace-Beltrami operator on degree ``k``. On
    :math:`S^1` (``dim = 2``) the weight is :math:`(1 + k^2)^s`, so for ``s = 1`` this is
    :math:`\frac{1}{2\pi}\int (f^2 + f'^2)\,d\theta`.

    Parameters
    ----------
    coefficients : Tensor
        One of the layouts of the module docstring; the S^1 table requires ``dim = 2``.
    s : float
        Smoothness exponent (any real; ``s = 0`` is the :math:`L^2` norm).
    dim : int
        Ambient dimension ``d >= 2``; default 2 (the circle).
    multiplicity : sequence of int or Tensor of shape (K + 1,), optional
        Selects the per-harmonic layout.

    Returns
    -------
    Tensor of shape ()
        The squared norm, differentiable in ``coefficients``.

    Examples
    --------
    >>> c = torch.zeros(4, 2, dtype=torch.float64)
    >>> c[3, 0] = 1.0  # sqrt2 cos 3a: L2 norm 1, derivative norm 3
    >>> sobolev_norm_squared(c, 1.0)
    tensor(10., dtype=torch.float64)
    """
    d = _check_dim(dim)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
        raise NtklabValueError(f"s: expected a finite real number, got {s!r}")
    if (
        isinstance(coefficients, Tensor)
        and multiplicity is None
        and coefficients.ndim == 2
        and d != 2
    ):
        raise NtklabValueError(
            f"dim: expected 2 for an S^1 coefficient table of shape (K+1, 2), got {d}. On "
            f"S^(d-1) pass per-degree energies of shape (K+1,)"
        )
    energies = _degree_energies(coefficients, multiplicity, "coefficients")
    k = torch.arange(energies.shape[0], dtype=energies.dtype, device=energies.device)
    weights = (1.0 + k * (k + d - 2)) ** s
    return (weights * energies).sum()


# ---------------------------------------------------------------------------------------------
# architectures


class KernelArchitecture(Protocol):
    """Anything with ``kernel(x1, x2)`` returning an object with ``.nngp`` and ``.ntk``."""

    def kernel(self, x1: Tensor, x2: Tensor) -> Any: ...


@dataclass(frozen=True)
class ArchitectureProfile:
    r"""The profile :math:`\kappa(t)` of an architecture's kernel on a sphere of given radius.

    Calling it on cosines ``t`` returns ``arch.kernel(x(t), r e_1).<get>[:, 0]`` with
    :math:`x(t) = r\,(t e_1 + \sqrt{1 - t^2}\, e_2) \in \mathbb{R}^{d}`. Built by
    :func:`profile_from_architecture`.
    """

    arch: KernelArchitecture
    dim: int
    get: Literal["ntk", "nngp"] = "ntk"
    radius: float = 1.0

    def __call__(self, t: Tensor) -> Tensor:
        if not isinstance(t, Tensor):
            raise NtklabTypeError(f"t: expected a torch.Tensor, got {type(t).__name__}")
        flat = t.reshape(-1).clamp(-1.0, 1.0)
        x = torch.zeros(flat.shape[0], self.dim, dtype=t.dtype, device=t.device)
        x[:, 0] = flat
        x[:, 1] = torch.sqrt(torch.clamp(1.0 - flat * flat, min=0.0))
        x = x * self.radius
        e1 = torch.zeros(1, self.dim, dtype=t.dtype, device=t.device)
        e1[0, 0] = self.radius
        kernel = self.arch.kernel(x, e1)
        values = getattr(kernel, self.get)
        if not isinstance(values, Tensor) or values.shape != (flat.shape[0], 1):
            got = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
            raise NtklabValueError(
                f"arch: expected arch.kernel(x1, x2).{self.get} to be a tensor of shape "
                f"(n1, n2) = ({flat.shape[0]}, 1), got {got}"
            )
        return values[:, 0].reshape(t.shape)


def profile_from_architecture(
    arch: KernelArchitecture,
    dim: int,
    get: Literal["ntk", "nngp"] = "ntk",
    *,
    radius: float = 1.0,
) -> ArchitectureProfile:
    r"""The dot-product profile of an architecture's NTK or NNGP on a sphere in R^d.

    .. math::

        \kappa(t) = K_{\mathrm{arch}}\bigl(r(t e_1 + \sqrt{1 - t^2} e_2),\; r e_1\bigr),
        \qquad t \in [-1, 1].

    ntklab's input kernel is :math:`\langle x, x'\rangle / d` (the neural-tangents convention),
    so with the default ``radius = 1`` this is the kernel of unit-norm inputs, whose first
    layer sees :math:`t / d`; ``radius = sqrt(dim)`` makes the input kernel exactly ``t``.
    Any fully connected architecture is rotation invariant, so this profile determines its
    kernel on the whole sphere.

    Parameters
    ----------
    arch : object with ``kernel(x1, x2)``
        ``x1`` of shape ``(n1, d)``, ``x2`` of shape ``(n2, d)``; returns an object with
        ``.nngp`` and ``.ntk`` tensors of shape ``(n1, n2)``.
    dim : int
        Input dimension ``d >= 2``.
    get : {"ntk", "nngp"}
        Which kernel.
    radius : float
        Radius ``r > 0`` of the sphere.

    Returns
    -------
    ArchitectureProfile
        A callable profile (cosines of any shape to values of the same shape), following the
        cosines' dtype and device; pass it to :func:`circle_eigenvalues` or
        :func:`sphere_eigenvalues`.
    """
    d = _check_dim(dim)
    if get not in ("ntk", "nngp"):
        raise NtklabValueError(f"get: expected 'ntk' or 'nngp', got {get!r}")
    if not callable(getattr(arch, "kernel", None)):
        raise NtklabTypeError(
            f"arch: expected an object with a kernel(x1, x2) method, got {type(arch).__name__}"
        )
    if isinstance(radius, bool) or not isinstance(radius, (int, float)) or not radius > 0:
        raise NtklabValueError(f"radius: expected a positive float, got {radius!r}")
    if not math.isfinite(radius):
        raise NtklabValueError(f"radius: expected a finite float, got {radius!r}")
    return ArchitectureProfile(arch=arch, dim=d, get=get, radius=float(radius))
