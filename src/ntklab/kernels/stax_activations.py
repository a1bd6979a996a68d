"""The further activations of neural-tangents' ``stax`` with closed-form dual kernels.

``Sign``, ``Exp``, ``ExpNormalized``, ``GaussianBump`` (``stax.Gaussian``), ``Rbf``,
``Gabor``, ``Hermite``, ``Monomial``, ``RectifiedMonomial``, ``Polynomial`` and ``SigmoidLike``
(``stax.Sigmoid_like``), with the semantics and argument names of neural-tangents 0.6.5
(Novak et al., 2020, arXiv:1912.02803; Han et al., 2022,
arXiv:2209.04121). As in :mod:`.activations`, with :math:`a = K(x,x)`,
:math:`b = K(x',x')`, :math:`c = K(x,x')` and the correlation :math:`\\rho = c/\\sqrt{ab} =
\\cos\\theta`, each layer maps the NNGP to :math:`E[\\phi(u)\\phi(v)]` and multiplies the NTK by
:math:`E[\\phi'(u)\\phi'(v)]` (which is :math:`\\partial_c E[\\phi(u)\\phi(v)]`, Price's theorem).
The diagonal pass (``cov``, ``var1``, ``var2`` the same tensor) is the same formula at
:math:`c = a = b`, where the correlation is exactly 1.

Where ntklab differs from ``stax``:

- ``Hermite`` and ``Monomial`` go through the exact polynomial dual of ``Polynomial``, so they
  hold at any input variance; ``stax.Hermite`` returns :math:`c^n`, which is the kernel only for
  unit variances (there the two agree), and ``stax.Monomial`` stops at degree 5.
- ``stax.Gaussian`` is :class:`GaussianBump` (``Gaussian`` is ntklab's Gaussian distribution of
  outputs, :class:`ntklab.dynamics.Gaussian`) and ``stax.Sigmoid_like`` is :class:`SigmoidLike`.
- ``ExpNormalized`` always clips the correlation into [-1, 1] (``stax``'s ``do_clip=True``;
  :func:`~ntklab.kernels.activations.correlation` warns when the clip moves it by more than
  rounding), so it takes no ``do_clip``.
- ``Sign`` and ``RectifiedMonomial(0)`` have zero derivative almost everywhere: their NTK factor
  is 0, as in ``stax`` and as autograd sees the finite network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import NtklabTypeError, NtklabValueError
from .activations import (
    Activation,
    Erf,
    arccos_duals,
    check_finite_float,
    correlation,
)

__all__ = [
    "Exp",
    "ExpNormalized",
    "Gabor",
    "GaussianBump",
    "Hermite",
    "Monomial",
    "Polynomial",
    "Rbf",
    "RectifiedMonomial",
    "SigmoidLike",
    "Sign",
]

_TWO_PI = 2.0 * math.pi


def _check_degree(degree: object) -> int:
    """Return ``degree`` if it is an int >= 0, else raise naming it."""
    if isinstance(degree, bool) or not isinstance(degree, int):
        raise NtklabTypeError(f"degree: expected a non-negative int, got {degree!r}")
    if degree < 0:
        raise NtklabValueError(f"degree: expected an int >= 0, got {degree}")
    return degree


def _check_positive(name: str, value: object) -> None:
    if check_finite_float(name, value) <= 0:
        raise NtklabValueError(f"{name}: expected a finite float > 0, got {value!r}")


def _zeros_like(cov: Tensor, var1: Tensor, var2: Tensor) -> Tensor:
    shape = torch.broadcast_shapes(cov.shape, var1.shape, var2.shape)  # type: ignore[no-untyped-call]
    return cov.new_zeros(shape)


def _is_diagonal_pass(cov: Tensor, var1: Tensor, var2: Tensor) -> bool:
    return cov is var1 and var1 is var2


# --------------------------------------------------------------------------------------------
# Sign and the rectified monomials: arc-cosine kernels


@dataclass(frozen=True)
class Sign(Activation):
    """:math:`\\phi(x) = \\mathrm{sign}(x)` (``stax.Sign``).

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{2}{\\pi}\\arcsin\\rho = 1 - \\frac{2\\theta}{\\pi},
        \\qquad E[\\phi'(u)\\phi'(v)] = 0,

    (Cho & Saul, 2009, the arc-cosine kernel of degree 0 rescaled). The derivative is zero
    almost everywhere, so the layers before a ``Sign`` get no gradient: its NTK factor is 0, as
    in ``stax`` and in the finite network under autograd. On the diagonal
    :math:`E[\\phi^2] = 1`, and 0 for an input of zero variance (:math:`\\mathrm{sign}(0) = 0`).

    Near :math:`\\rho = 1` the kernel moves like :math:`\\sqrt{1 - \\rho}`: a pair of identical
    inputs passed as ``kernel(x, x.clone())`` (whose correlation is 1 only up to rounding) gets
    :math:`1 - O(\\sqrt\\epsilon)`, and after two ``Sign`` layers :math:`1 - O(\\epsilon^{1/4})`
    (5e-5 measured in float64); ``kernel(x)`` takes the diagonal from the diagonal pass, exact.
    neural-tangents' formula has the same behaviour.
    """

    def phi(self, x: Tensor) -> Tensor:
        return torch.sign(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        if _is_diagonal_pass(cov, var1, var2):
            nngp = (var1 > 0).to(cov.dtype)
        else:
            rho, _, _ = correlation(cov, var1, var2, inplace=False)
            j0, _ = arccos_duals(rho)  # pi - theta
            nngp = j0 * (2.0 / math.pi) - 1.0
        return nngp, (torch.zeros_like(nngp) if derivative else None)


def arccos_kernel(n: int, rho: Tensor) -> Tensor:
    """The arc-cosine function :math:`J_n(\\theta)` of Cho & Saul (2009), :math:`\\rho =
    \\cos\\theta`, by the recursion

    .. math::
        J_0 = \\pi - \\theta, \\quad J_1 = \\sin\\theta + (\\pi - \\theta)\\cos\\theta, \\quad
        J_n = (2n - 1)\\cos\\theta\\, J_{n-1} + (n - 1)^2 \\sin^2\\theta\\, J_{n-2},

    so that :math:`E[u_+^n v_+^n] = (ab)^{n/2} J_n(\\theta) / (2\\pi)` (:math:`J_n(0) =
    \\pi (2n-1)!!`). Proof of the recursion for :math:`A_n(\\rho) = J_n / (2\\pi)` (unit
    variances), by induction from :math:`n = 2` (checked by expanding): Price's theorem gives
    :math:`A_n' = n^2 A_{n-1}`, and the derivative of the right-hand side is, by the recursion at
    :math:`n - 1`, :math:`(2n - 1) A_{n-1} + (n-1)^2 A_{n-1} = n^2 A_{n-1}`; both sides agree at
    :math:`\\rho = 0`, where :math:`E[z_+^n] = (n-1) E[z_+^{n-2}]`. Checked against quadrature
    up to degree 4 in the tests. Differentiable in :math:`\\rho`, with finite gradients at
    :math:`\\rho = \\pm 1`.
    """
    j0, j1 = arccos_duals(rho)
    if n == 0:
        return j0
    sin2 = 1.0 - rho * rho
    prev, cur = j0, j1
    for k in range(2, n + 1):
        prev, cur = cur, (2 * k - 1) * rho * cur + (k - 1) ** 2 * sin2 * prev
    return cur


def _rectified_moment(n: int, cov: Tensor, var1: Tensor, var2: Tensor) -> Tensor:
    """:math:`E[\\phi_n(u)\\phi_n(v)]` for :math:`\\phi_n(x) = [x \\ge 0]\\, x^n`."""
    rho, s1, s2 = correlation(cov, var1, var2, inplace=False)
    out = (s1 * s2) ** n * arccos_kernel(n, rho) / _TWO_PI
    if n == 0:  # phi_0(0) = 1: an input of zero variance is always >= 0
        zero1, zero2 = var1 <= 0, var2 <= 0
        out = torch.where(zero1 | zero2, 0.5 + 0.5 * (zero1 & zero2).to(out.dtype), out)
    return out


@dataclass(frozen=True)
class RectifiedMonomial(Activation):
    """:math:`\\phi(x) = [x \\ge 0]\\, x^n`, ``n = degree`` (``stax.RectifiedMonomial``).

    The arc-cosine kernels of Cho & Saul (2009) (:func:`arccos_kernel`):

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{(ab)^{n/2}}{2\\pi} J_n(\\theta), \\qquad
        E[\\phi'(u)\\phi'(v)] = n^2 \\frac{(ab)^{(n-1)/2}}{2\\pi} J_{n-1}(\\theta),

    and 0 for :math:`n = 0` (a step, whose derivative is zero almost everywhere). On the
    diagonal :math:`E[\\phi^2] = (2n-1)!!\\, a^n / 2`. ``RectifiedMonomial(1)`` is ``Relu``.

    Parameters
    ----------
    degree : int
        :math:`n \\ge 0`.
    """

    degree: int

    def __post_init__(self) -> None:
        _check_degree(self.degree)

    def phi(self, x: Tensor) -> Tensor:
        return torch.where(x >= 0, x**self.degree, torch.zeros_like(x))

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        n = self.degree
        nngp = _rectified_moment(n, cov, var1, var2)
        dot = None
        if derivative:
            dot = (
                _zeros_like(cov, var1, var2)
                if n == 0
                else n * n * _rectified_moment(n - 1, cov, var1, var2)
            )
        return nngp, dot


# --------------------------------------------------------------------------------------------
# polynomials


@lru_cache(maxsize=64)
def _hermite_table(coef: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Row ``l``: the coefficients in :math:`q` of :math:`s_l(q) = \\sum_i p_{2i+l}
    \\frac{(2i+l)!}{2^i\\, i!\\, \\sqrt{l!}} q^i`, the :math:`l`-th normalized Hermite
    coefficient of :math:`p(\\sqrt q\\, z)` divided by :math:`q^{l/2}`."""
    rows = []
    for ell in range(len(coef)):
        root = math.sqrt(math.factorial(ell))
        rows.append(
            tuple(
                coef[2 * i + ell]
                * (math.factorial(2 * i + ell) // (2**i * math.factorial(i)))
                / root
                for i in range((len(coef) - 1 - ell) // 2 + 1)
            )
        )
    return tuple(rows)


def _horner(coef: Sequence[float], x: Tensor) -> Tensor:
    """:math:`\\sum_k \\mathrm{coef}_k x^k` (a constant one still depends on ``x`` for autograd)."""
    if len(coef) == 1:
        return x * 0.0 + coef[0]
    out = torch.full_like(x, coef[-1])
    for value in reversed(coef[:-1]):
        out = out * x + value
    return out


def polynomial_dual(coef: Sequence[float], cov: Tensor, var1: Tensor, var2: Tensor) -> Tensor:
    """:math:`E[p(u)p(v)]` for :math:`p(x) = \\sum_k \\mathrm{coef}_k x^k`.

    Expanding :math:`p(\\sqrt a z)` in the normalized Hermite polynomials :math:`h_l = He_l /
    \\sqrt{l!}` (the expansion of ``stax.Polynomial``; Han et al., 2022, arXiv:2209.04121) and
    using :math:`E[h_l(u/\\sqrt a) h_m(v/\\sqrt b)] = \\delta_{lm}\\rho^l` (Mehler's formula),

    .. math::
        E[p(u)p(v)] = \\sum_l s_l(a)\\, s_l(b)\\, c^l, \\qquad
        s_l(q) = \\sum_i \\mathrm{coef}_{2i+l} \\frac{(2i+l)!}{2^i\\, i!\\, \\sqrt{l!}}\\, q^i,

    a polynomial in :math:`(a, b, c)`: exact at any variance (zero included) and correlation,
    with no square root. The NTK factor :math:`E[p'(u)p'(v)]` is the same with the
    coefficients of :math:`p'`.
    """
    table = _hermite_table(tuple(float(v) for v in coef))
    terms = [_horner(row, var1) * _horner(row, var2) for row in table]  # s_l(a) s_l(b)
    out = _zeros_like(cov, var1, var2) + terms[-1]
    for term in reversed(terms[:-1]):
        out = out * cov + term
    return out


def _derivative_coef(coef: Sequence[float]) -> tuple[float, ...]:
    return tuple(k * coef[k] for k in range(1, len(coef))) or (0.0,)


def _polynomial_duals(
    coef: Sequence[float], cov: Tensor, var1: Tensor, var2: Tensor, derivative: bool
) -> tuple[Tensor, Tensor | None]:
    nngp = polynomial_dual(coef, cov, var1, var2)
    dot = polynomial_dual(_derivative_coef(coef), cov, var1, var2) if derivative else None
    return nngp, dot


@dataclass(frozen=True)
class Polynomial(Activation):
    """:math:`\\phi(x) = \\mathrm{coef}_0 + \\mathrm{coef}_1 x + \\dots + \\mathrm{coef}_n x^n`
    (``stax.Polynomial``; the order of ``numpy.polynomial.Polynomial``).

    Dual kernels in closed form by :func:`polynomial_dual`, exact at any variance.

    Parameters
    ----------
    coef : sequence of float
        At least one finite coefficient, lowest degree first.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> x = torch.randn(3, 2, dtype=torch.float64)
    >>> k = nl.serial(nl.Dense(w_std=1.0), nl.Polynomial([0.0, 1.0, 0.5]), nl.Dense()).kernel(x)
    >>> k.ntk.shape
    torch.Size([3, 3])
    """

    coef: tuple[float, ...]

    def __post_init__(self) -> None:
        coef = self.coef
        if isinstance(coef, str | bytes) or not isinstance(coef, Sequence | np.ndarray):
            raise NtklabTypeError(f"coef: expected a sequence of floats, got {coef!r}")
        values = tuple(coef)
        if not values:
            raise NtklabValueError("coef: expected at least one coefficient, got an empty one")
        checked = tuple(check_finite_float(f"coef[{i}]", v) for i, v in enumerate(values))
        object.__setattr__(self, "coef", checked)

    def phi(self, x: Tensor) -> Tensor:
        return _horner(self.coef, x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return _polynomial_duals(self.coef, cov, var1, var2, derivative)


@dataclass(frozen=True)
class Monomial(Activation):
    """:math:`\\phi(x) = x^n`, ``n = degree`` (``stax.Monomial``, which stops at degree 5).

    ``Polynomial`` with one coefficient: e.g. :math:`E[u^2 v^2] = ab + 2c^2`,
    :math:`E[u^3 v^3] = 9abc + 6c^3`; on the diagonal :math:`(2n-1)!!\\, a^n`.

    Parameters
    ----------
    degree : int
        :math:`n \\ge 0`.
    """

    degree: int

    def __post_init__(self) -> None:
        _check_degree(self.degree)

    def phi(self, x: Tensor) -> Tensor:
        return x**self.degree

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        coef = (0.0,) * self.degree + (1.0,)
        return _polynomial_duals(coef, cov, var1, var2, derivative)


@lru_cache(maxsize=32)
def _hermite_coef(degree: int) -> tuple[float, ...]:
    """Coefficients of :math:`He_n(x) / \\sqrt{n!}`, lowest degree first."""
    poly = np.polynomial.hermite_e.herme2poly([0.0] * degree + [1.0])
    return tuple(float(v) / math.sqrt(math.factorial(degree)) for v in poly)


@dataclass(frozen=True)
class Hermite(Activation):
    """:math:`\\phi(x) = He_n(x) / \\sqrt{n!}`, the probabilists' Hermite polynomial normalized
    to unit norm under the standard Gaussian (``stax.Hermite``).

    For unit variances :math:`E[\\phi(u)\\phi(v)] = c^n` and :math:`E[\\phi'(u)\\phi'(v)] =
    n c^{n-1}` (Mehler's formula; O'Donnell, 2014), which is what ``stax.Hermite`` returns
    whatever the variances (it assumes unit-variance inputs and warns). Here the kernel is that
    of the polynomial (:func:`polynomial_dual`): exact at any variance, equal to
    :math:`c^n` at unit variances.

    Parameters
    ----------
    degree : int
        :math:`n \\ge 0`.
    """

    degree: int

    def __post_init__(self) -> None:
        _check_degree(self.degree)

    def phi(self, x: Tensor) -> Tensor:
        return _horner(_hermite_coef(self.degree), x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return _polynomial_duals(_hermite_coef(self.degree), cov, var1, var2, derivative)


# --------------------------------------------------------------------------------------------
# exponentials


@dataclass(frozen=True)
class Exp(Activation):
    """:math:`\\phi(x) = a\\, e^{b x}` (``stax.Exp``): the moment generating function gives

    .. math::
        E[\\phi(u)\\phi(v)] = a^2 e^{b^2 (K_{11} + K_{22} + 2c)/2}, \\qquad
        E[\\phi'(u)\\phi'(v)] = b^2 E[\\phi(u)\\phi(v)].

    Parameters
    ----------
    a, b : float
        Output and input scales, finite.
    """

    a: float = 1.0
    b: float = 1.0

    def __post_init__(self) -> None:
        check_finite_float("a", self.a)
        check_finite_float("b", self.b)

    def phi(self, x: Tensor) -> Tensor:
        return self.a * torch.exp(self.b * x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        b2 = self.b * self.b
        e = torch.exp(b2 * (0.5 * (var1 + var2) + cov))
        return (self.a**2) * e, ((self.a**2 * b2) * e if derivative else None)


def _no_finite_network() -> NtklabValueError:
    return NtklabValueError(
        "ExpNormalized: expected an activation with a finite-width counterpart, got a kernel "
        "map (the normalized Gaussian kernel of Shankar et al., 2020) with no elementwise "
        "function; to_torch and finite networks cannot use it"
    )


@dataclass(frozen=True)
class ExpNormalized(Activation):
    """The normalized Gaussian kernel of Shankar et al. (2020, arXiv:2003.02237), p. 6
    (``stax.ExpNormalized``):

    .. math::
        K' = \\sqrt{K_{11} K_{22}}\\; e^{\\gamma(\\rho + \\mathrm{shift})}, \\qquad
        \\Theta' = \\gamma\\, e^{\\gamma(\\rho + \\mathrm{shift})}\\, \\Theta,

    (:math:`\\gamma` = ``gamma``). It is a kernel map, not the dual of one elementwise
    function at every variance, so it has no finite network: :meth:`module` raises. The
    correlation is always clipped into [-1, 1] (``stax``'s ``do_clip=True``).

    Parameters
    ----------
    gamma : float
        :math:`\\gamma \\ge 0` (a negative one gives a kernel that is not positive
        semi-definite and a negative NTK factor).
    shift : float
        Added to the correlation before exponentiating, finite.
    """

    gamma: float = 1.0
    shift: float = -1.0

    def __post_init__(self) -> None:
        if check_finite_float("gamma", self.gamma) < 0:
            raise NtklabValueError(f"gamma: expected a finite float >= 0, got {self.gamma!r}")
        check_finite_float("shift", self.shift)

    def phi(self, x: Tensor) -> Tensor:
        raise _no_finite_network()

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        raise _no_finite_network()

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        rho, s1, s2 = correlation(cov, var1, var2, inplace=False)
        e = torch.exp(self.gamma * (rho + self.shift))
        return (s1 * s2) * e, (self.gamma * e if derivative else None)


@dataclass(frozen=True)
class GaussianBump(Activation):
    """:math:`\\phi(x) = a\\, e^{b x^2}` (``stax.Gaussian(a, b)``; renamed because
    :class:`ntklab.dynamics.Gaussian` is the Gaussian distribution of outputs).

    With :math:`D = (1 - 2b K_{11})(1 - 2b K_{22}) - 4b^2 c^2 = \\det(I - 2b\\Sigma)`,

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{a^2}{\\sqrt D}, \\qquad
        E[\\phi'(u)\\phi'(v)] = \\frac{4 a^2 b^2 c}{D^{3/2}},

    (the Gaussian integral; the second is :math:`\\partial_c` of the first). On the diagonal
    :math:`a^2 (1 - 4bK)^{-1/2}`: for ``b > 0`` (a growing :math:`\\phi`) the moments are
    finite only while :math:`4bK < 1`, and the kernel raises otherwise.

    Parameters
    ----------
    a, b : float
        Output scale and the coefficient of :math:`x^2`, finite (a bump for ``b < 0``).
    """

    a: float = 1.0
    b: float = -1.0

    def __post_init__(self) -> None:
        check_finite_float("a", self.a)
        check_finite_float("b", self.b)

    def phi(self, x: Tensor) -> Tensor:
        return self.a * torch.exp(self.b * x * x)

    def _check_variances(self, var1: Tensor, var2: Tensor) -> None:
        if self.b <= 0:
            return
        top = max(float(var1.max()), float(var2.max())) if var1.numel() else 0.0
        if 4.0 * self.b * top >= 1.0:
            raise NtklabValueError(
                f"b: expected 4 b K(x, x) < 1 for every input (the second moment of "
                f"exp(b x^2) is infinite otherwise), got b = {self.b!r} with an incoming "
                f"variance K(x, x) = {top:.6g}; use b <= 0 or smaller input scales"
            )

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        self._check_variances(var1, var2)
        b = self.b
        det = (1.0 - 2.0 * b * var1) * (1.0 - 2.0 * b * var2) - (4.0 * b * b) * cov * cov
        inv_root = torch.rsqrt(det.clamp_min(torch.finfo(det.dtype).tiny))
        a2 = self.a**2
        nngp = a2 * inv_root
        dot = (4.0 * a2 * b * b) * cov * inv_root**3 if derivative else None
        return nngp, dot


@dataclass(frozen=True)
class Rbf(Activation):
    """:math:`\\phi(x) = \\sqrt2 \\sin(\\sqrt{2\\gamma}\\, x + \\pi/4)` (``stax.Rbf``), whose
    NNGP is the squared-exponential kernel of the pre-activations:

    .. math::
        E[\\phi(u)\\phi(v)] = e^{-\\gamma (K_{11} + K_{22} - 2c)} = e^{-\\gamma E[(u-v)^2]},
        \\qquad E[\\phi'(u)\\phi'(v)] = 2\\gamma\\, E[\\phi(u)\\phi(v)],

    (Rahimi & Recht, 2007, random Fourier features); 1 on the diagonal.

    Parameters
    ----------
    gamma : float
        :math:`\\gamma = 1 / (2\\ell^2) > 0` for the length-scale :math:`\\ell`.
    """

    gamma: float = 1.0

    def __post_init__(self) -> None:
        _check_positive("gamma", self.gamma)

    def phi(self, x: Tensor) -> Tensor:
        return math.sqrt(2.0) * torch.sin(math.sqrt(2.0 * self.gamma) * x + math.pi / 4)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        nngp = torch.exp(-self.gamma * (var1 + var2 - 2.0 * cov))
        return nngp, ((2.0 * self.gamma) * nngp if derivative else None)


@dataclass(frozen=True)
class Gabor(Activation):
    """:math:`\\phi(x) = e^{-x^2} \\sin x` (``stax.Gabor``).

    With :math:`s = K_{11} + K_{22}`, :math:`p = K_{11} K_{22}`, :math:`\\Delta = 4(p - c^2)` and
    :math:`D = 1 + 2s + \\Delta = \\det(I + 2\\Sigma)`, writing
    :math:`\\sin u \\sin v = (\\cos(u - v) - \\cos(u + v))/2` and integrating the Gaussians,

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{e^{-(s + \\Delta + 2c) / (2D)}\\,(e^{2c/D} - 1)}{2\\sqrt D},

        E[\\phi'(u)\\phi'(v)] = \\frac{e^{-(s + \\Delta + 2c)/(2D)}}{2 D^{5/2}}
            \\big(S - T + e^{2c/D}(S + T)\\big),

    with :math:`S = 1 + 2s + 4(c^2 + p)` and :math:`T = 4c(\\Delta + 3s + 2)` (the formulas of
    ``stax.Gabor``, checked against quadrature in the tests). On the diagonal
    :math:`(1 - e^{-2K/(1+4K)}) / (2\\sqrt{1 + 4K})`.
    """

    def phi(self, x: Tensor) -> Tensor:
        return torch.exp(-x * x) * torch.sin(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        c = cov
        s = var1 + var2
        p = var1 * var2
        diff = 4.0 * (p - c * c)
        denom = 1.0 + 2.0 * s + diff
        left = torch.exp(-(s + diff + 2.0 * c) / (2.0 * denom))
        right = torch.exp(2.0 * c / denom)
        nngp = left * torch.expm1(2.0 * c / denom) / (2.0 * torch.sqrt(denom))
        dot = None
        if derivative:
            shared = 1.0 + 2.0 * s + 4.0 * (c * c + p)
            term = 4.0 * c * (diff + 3.0 * s + 2.0)
            dot = left * (shared - term + right * (shared + term)) / (2.0 * denom**2.5)
        return nngp, dot


# --------------------------------------------------------------------------------------------
# a sigmoid through erf

_SIGMOID_LIKE_SCALE = 2.4020563531719796


@dataclass(frozen=True)
class SigmoidLike(Activation):
    """:math:`\\phi(x) = \\tfrac12 \\mathrm{erf}(x / s) + \\tfrac12`, :math:`s =
    2.4020563531719796` (``stax.Sigmoid_like``): the erf closest to the logistic sigmoid in
    squared error on [-5, 5]. (``Sigmoid`` is the logistic function itself, by quadrature.)

    Since erf is odd, :math:`E[\\phi(u)\\phi(v)] = \\tfrac14 + \\tfrac14
    E[\\mathrm{erf}(u/s)\\,\\mathrm{erf}(v/s)]` and :math:`E[\\phi'\\phi'] = \\tfrac{1}{4s^2}
    E[\\mathrm{erf}'(u/s)\\,\\mathrm{erf}'(v/s)]`, the duals of :class:`Erf` (Williams, 1997)
    at the kernels divided by :math:`s^2`.
    """

    def phi(self, x: Tensor) -> Tensor:
        return 0.5 * torch.erf(x / _SIGMOID_LIKE_SCALE) + 0.5

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        inv = 1.0 / _SIGMOID_LIKE_SCALE**2
        k, d = Erf().dual(cov * inv, var1 * inv, var2 * inv, inplace=False, derivative=derivative)
        return 0.25 * k + 0.25, (None if d is None else (0.25 * inv) * d)
