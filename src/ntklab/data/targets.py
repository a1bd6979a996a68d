r"""Target functions with exact spectral information: tent maps, trigonometric and spherical
polynomials, sparse parities and source-condition targets.

Conventions follow :mod:`ntklab.kernels.sphere`: :math:`L^2` norms are with respect to the
uniform *probability* measure, and a function on :math:`S^1` is described by its **S^1
table** of shape ``(K+1, 2)``, row ``k`` holding ``(a_k, b_k)`` in the orthonormal basis
:math:`\{1, \sqrt2\cos ka, \sqrt2\sin ka\}`:

.. math::

    f(a) = a_0 + \sqrt2 \sum_{k=1}^{K} \bigl(a_k \cos ka + b_k \sin ka\bigr), \qquad
    \|f\|_{L^2}^2 = \sum_k a_k^2 + b_k^2 ,

with ``b_0 = 0``. Functions on :math:`S^1` accept angles of shape ``(n,)`` or points
``(cos a, sin a)`` of shape ``(n, 2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from ntklab._checks import check_matrix, check_positive_int
from ntklab.analysis import PowerLawFit, fit_power_law
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels.sphere import harmonic_multiplicities, legendre_polynomials

from .._repr import short_repr
from ._validation import (
    BLOCK_ELEMENTS,
    as_angles,
    check_float_dtype,
    check_generator,
    check_nonnegative_int,
    check_real,
    check_vector,
    draw_normal,
)
from .sampling import uniform_sphere

__all__ = [
    "CapacityFit",
    "SourceConditionTarget",
    "SparseParity",
    "SpherePolynomial",
    "TentMap",
    "TentMapS1",
    "TrigPolynomial",
    "estimate_capacity",
    "excess_risk_s1",
    "kernel_excess_risk_sphere",
    "kernel_predictor_coefficients_s1",
    "random_sparse_parity",
    "random_sphere_polynomial",
    "random_trig_polynomial",
    "source_condition_target",
]

_SQRT2 = math.sqrt(2.0)
_DEFAULT_RTOL = 1e-12


# ---------------------------------------------------------------------------------------------
# S^1 tables


def _check_table(name: str, coefficients: object, *, batched: bool = False) -> Tensor:
    """Validate an S^1 table of shape (K+1, 2) (or (..., K+1, 2) when ``batched``)."""
    if not isinstance(coefficients, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor S^1 table of shape (K+1, 2), got "
            f"{type(coefficients).__name__}"
        )
    if not coefficients.is_floating_point():
        raise NtklabTypeError(
            f"{name}: expected a real floating tensor, got dtype {coefficients.dtype}"
        )
    ok_ndim = coefficients.ndim >= 2 if batched else coefficients.ndim == 2
    if not ok_ndim or coefficients.shape[-1] != 2 or coefficients.shape[-2] == 0:
        shape = "(..., K+1, 2)" if batched else "(K+1, 2)"
        raise NtklabValueError(
            f"{name}: expected an S^1 table of shape {shape}, got shape {tuple(coefficients.shape)}"
        )
    if not bool(torch.isfinite(coefficients).all()):
        bad = int((~torch.isfinite(coefficients)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    if bool((coefficients[..., 0, 1] != 0).any()):
        raise NtklabValueError(
            f"{name}: expected entry [0, 1] (the sine coefficient of frequency 0, which has no "
            f"basis function) to be 0, got {coefficients[..., 0, 1].flatten()[0].item()!r}"
        )
    return coefficients


def _pad_table(table: Tensor, n_rows: int) -> Tensor:
    """Truncate or zero-pad the frequency axis (-2) of ``table`` to ``n_rows``."""
    rows = table.shape[-2]
    if rows >= n_rows:
        return table[..., :n_rows, :]
    pad = table.new_zeros((*table.shape[:-2], n_rows - rows, 2))
    return torch.cat([table, pad], dim=-2)


def _evaluate_series(angles: Tensor, coefficients: Tensor) -> Tensor:
    """The orthonormal series of an S^1 table at ``angles`` (n,), blocked over points."""
    n_freq = coefficients.shape[0]
    k = torch.arange(n_freq, dtype=angles.dtype, device=angles.device)
    scale = torch.full((n_freq,), _SQRT2, dtype=angles.dtype, device=angles.device)
    scale[0] = 1.0
    a = coefficients[:, 0].to(angles.dtype) * scale  # shape: (K+1,)
    b = coefficients[:, 1].to(angles.dtype) * scale
    block = max(1, BLOCK_ELEMENTS // n_freq)
    out = []
    for start in range(0, angles.shape[0], block):
        phase = angles[start : start + block, None] * k  # shape: (b, K+1)
        out.append(torch.cos(phase) @ a + torch.sin(phase) @ b)
    if not out:
        return angles.new_zeros(0)
    return torch.cat(out)


# ---------------------------------------------------------------------------------------------
# tent maps (Telgarsky)


def _tent_compose(u: Tensor, depth: int) -> Tensor:
    """:math:`s_1` composed ``depth`` times, :math:`s_1(x) = 2\\min(x, 1 - x)` on [0, 1]."""
    y = u
    for _ in range(depth):
        y = 2.0 * torch.minimum(y, 1.0 - y)
    return y


@dataclass(frozen=True)
class TentMap:
    r"""The iterated tent map :math:`s_L` on :math:`[0, 1]` (Telgarsky 2016, arXiv:1602.04485).

    .. math::

        s_1(x) = \begin{cases} 2x & x \le 1/2 \\ 2(1 - x) & x > 1/2 \end{cases}, \qquad
        s_L = \underbrace{s_1 \circ \dots \circ s_1}_{L}.

    :math:`s_L` is piecewise linear with ``2^L`` pieces of slope :math:`\pm 2^L` and breakpoints
    :math:`j / 2^L`, where it takes the value 0 (even ``j``) or 1 (odd ``j``): ``2^(L-1)``
    peaks of height 1. Equivalently :math:`s_L(x) = s_1(\{2^{L-1} x\})` (fractional part).
    Under the uniform law on [0, 1]: mean 1/2, variance 1/12, for every ``L``.

    Parameters
    ----------
    depth : int
        :math:`L \ge 1`.

    Examples
    --------
    >>> TentMap(2)(torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0]))
    tensor([0., 1., 0., 1., 0.])
    """

    depth: int

    def __post_init__(self) -> None:
        check_positive_int("depth", self.depth)

    @property
    def num_pieces(self) -> int:
        """Number of linear pieces, ``2^L``."""
        return 1 << self.depth

    @property
    def num_peaks(self) -> int:
        """Number of local maxima (value 1), ``2^(L-1)``."""
        return 1 << (self.depth - 1)

    @property
    def mean(self) -> float:
        """:math:`E[s_L(U)] = 1/2` for :math:`U` uniform on [0, 1]."""
        return 0.5

    @property
    def variance(self) -> float:
        """:math:`\\mathrm{Var}[s_L(U)] = 1/12` for :math:`U` uniform on [0, 1]."""
        return 1.0 / 12.0

    def breakpoints(
        self, *, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
    ) -> Tensor:
        """The ``2^L + 1`` breakpoints :math:`j / 2^L`, ``j = 0..2^L``, shape ``(2^L + 1,)``."""
        dtype = check_float_dtype(dtype)
        return torch.arange(self.num_pieces + 1, dtype=dtype, device=device) / self.num_pieces

    def __call__(self, x: Tensor) -> Tensor:
        """:math:`s_L(x)` elementwise for ``x`` in [0, 1] (any shape); differentiable."""
        if not isinstance(x, Tensor):
            raise NtklabTypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise NtklabTypeError(f"x: expected a real floating tensor, got dtype {x.dtype}")
        outside = ~((x >= 0) & (x <= 1))
        if bool(outside.any()):
            raise NtklabValueError(
                f"x: expected values in [0, 1], got {int(outside.sum())} outside (e.g. "
                f"{x[outside].flatten()[0].item()!r}); use TentMapS1 for angles"
            )
        return _tent_compose(x, self.depth)


@dataclass(frozen=True)
class TentMapS1:
    r"""The iterated tent map on the circle, :math:`f(a) = s_L(a / 2\pi)`.

    Continuous and :math:`2\pi`-periodic because :math:`s_L(0) = s_L(1) = 0`. Since
    :math:`s_L(u) = s_1(\{M u\})` with :math:`M = 2^{L-1}`, ``f`` is a triangle wave of
    frequency ``M`` and its Fourier series is exact and explicit:

    .. math::

        f(a) = \frac12 - \frac{4}{\pi^2} \sum_{m \text{ odd}} \frac{\cos(m M a)}{m^2},

    i.e. in the orthonormal S^1 table :math:`a_0 = 1/2`,
    :math:`a_{mM} = -2\sqrt2 / (\pi^2 m^2)` for odd ``m`` and all other entries 0 (``f`` is
    even). Parseval: :math:`\|f\|_{L^2}^2 = 1/3`, variance 1/12.

    Parameters
    ----------
    depth : int
        :math:`L \ge 1`.

    Examples
    --------
    >>> f = TentMapS1(1)
    >>> torch.round(f.fourier_coefficients(3), decimals=4)
    tensor([[ 0.5000,  0.0000],
            [-0.2866,  0.0000],
            [ 0.0000,  0.0000],
            [-0.0318,  0.0000]], dtype=torch.float64)
    """

    depth: int

    def __post_init__(self) -> None:
        check_positive_int("depth", self.depth)

    @property
    def base_frequency(self) -> int:
        """:math:`M = 2^{L-1}`, the lowest nonzero frequency (also the number of peaks)."""
        return 1 << (self.depth - 1)

    @property
    def num_peaks(self) -> int:
        """Number of peaks on the circle, ``2^(L-1)``."""
        return 1 << (self.depth - 1)

    @property
    def num_pieces(self) -> int:
        """Number of linear pieces on the circle, ``2^L``."""
        return 1 << self.depth

    @property
    def l2_norm_squared(self) -> float:
        """:math:`\\|f\\|^2_{L^2} = 1/3`."""
        return 1.0 / 3.0

    @property
    def variance(self) -> float:
        """Variance under the uniform law on the circle, 1/12."""
        return 1.0 / 12.0

    def __call__(self, x: Tensor) -> Tensor:
        """``f`` at angles ``(n,)`` (any real value, taken mod 2 pi) or points ``(n, 2)``."""
        angles = as_angles("x", x)
        u = torch.remainder(angles, 2.0 * math.pi) / (2.0 * math.pi)
        return _tent_compose(u.clamp(0.0, 1.0), self.depth)

    def fourier_coefficients(
        self,
        n_frequencies: int,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """The exact S^1 table of shape ``(n_frequencies + 1, 2)`` (see the class docstring)."""
        n_frequencies = check_nonnegative_int("n_frequencies", n_frequencies)
        dtype = check_float_dtype(dtype)
        table = torch.zeros(n_frequencies + 1, 2, dtype=torch.float64)
        table[0, 0] = 0.5
        m_freq = self.base_frequency
        for k in range(m_freq, n_frequencies + 1, 2 * m_freq):
            m = k // m_freq
            table[k, 0] = -2.0 * _SQRT2 / (math.pi**2 * m * m)
        return table.to(dtype=dtype, device=device)


# ---------------------------------------------------------------------------------------------
# trigonometric polynomials


@short_repr
@dataclass(frozen=True, eq=False)
class TrigPolynomial:
    r"""A trigonometric polynomial of degree ``<= K`` on :math:`S^1`, given by its S^1 table.

    .. math::

        f(a) = a_0 + \sqrt2 \sum_{k=1}^{K} \bigl(a_k \cos ka + b_k \sin ka\bigr).

    Attributes
    ----------
    coefficients : Tensor of shape (K + 1, 2)
        The exact orthonormal Fourier coefficients (``b_0 = 0``).

    Examples
    --------
    >>> c = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    >>> TrigPolynomial(c)(torch.tensor([math.pi / 2], dtype=torch.float64))  # 1 + 2 sqrt2
    tensor([3.8284], dtype=torch.float64)
    """

    coefficients: Tensor

    def __post_init__(self) -> None:
        _check_table("coefficients", self.coefficients)

    @property
    def degree(self) -> int:
        """The highest frequency ``K`` represented (trailing zero rows included)."""
        return int(self.coefficients.shape[0]) - 1

    @property
    def dim(self) -> int:
        """Ambient dimension of :math:`S^1 \\subset \\mathbb{R}^2`: 2."""
        return 2

    def __call__(self, x: Tensor) -> Tensor:
        """Values at angles ``(n,)`` or points ``(n, 2)``, shape ``(n,)``, in ``x``'s dtype."""
        angles = as_angles("x", x)
        return _evaluate_series(angles, self.coefficients.to(angles.device))

    def degree_energies(self) -> Tensor:
        """:math:`E_k = a_k^2 + b_k^2`, shape ``(K + 1,)``."""
        return self.coefficients.square().sum(dim=1)

    def l2_norm_squared(self) -> Tensor:
        """:math:`\\|f\\|_{L^2}^2 = \\sum_k a_k^2 + b_k^2` (Parseval), shape ``()``."""
        return self.coefficients.square().sum()

    def fourier_coefficients(self, n_frequencies: int | None = None) -> Tensor:
        """The S^1 table truncated or zero-padded to ``n_frequencies + 1`` rows."""
        if n_frequencies is None:
            return self.coefficients
        n_frequencies = check_nonnegative_int("n_frequencies", n_frequencies)
        return _pad_table(self.coefficients, n_frequencies + 1)


def random_trig_polynomial(
    degree: int,
    *,
    generator: torch.Generator,
    normalize: bool = True,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> TrigPolynomial:
    r"""A random trigonometric polynomial of degree ``<= K`` with Gaussian coefficients.

    The ``2K + 1`` orthonormal coefficients :math:`a_0, a_k, b_k` are i.i.d.
    :math:`\mathcal{N}(0, 1)` (a Gaussian process with flat spectrum up to ``K``); with
    ``normalize`` they are rescaled so that :math:`\|f\|_{L^2} = 1` exactly.

    Parameters
    ----------
    degree : int
        Highest frequency ``K >= 0``.
    generator : torch.Generator
        Source of randomness.
    normalize : bool
        Rescale to unit :math:`L^2` norm.
    dtype, device
        Of the coefficients.

    Returns
    -------
    TrigPolynomial

    Examples
    --------
    >>> f = random_trig_polynomial(4, generator=torch.Generator().manual_seed(0))
    >>> f.degree, round(float(f.l2_norm_squared()), 12)
    (4, 1.0)
    """
    degree = check_nonnegative_int("degree", degree)
    dtype = check_float_dtype(dtype)
    gen = check_generator(generator)
    table = draw_normal((degree + 1, 2), gen, torch.float64, None)
    table[0, 1] = 0.0
    if normalize:
        table = table / table.square().sum().sqrt()
    return TrigPolynomial(table.to(dtype=dtype, device=device))


def excess_risk_s1(predictor: Tensor, target: Tensor) -> Tensor:
    r"""Exact :math:`L^2` excess risk on :math:`S^1` from Fourier coefficients (Parseval).

    .. math::

        \|\hat f - f\|_{L^2(da/2\pi)}^2 = \sum_k (\hat a_k - a_k)^2 + (\hat b_k - b_k)^2 .

    The shorter table is zero-padded, so the result is exact when both tables contain all
    nonzero frequencies of their functions (a kernel predictor has frequencies beyond any
    finite ``K``: see :func:`kernel_predictor_coefficients_s1` for the truncation). This is the
    excess risk over the Bayes predictor :math:`f` for the square loss with uniform inputs.

    Parameters
    ----------
    predictor : Tensor of shape (..., K1 + 1, 2)
        S^1 tables of one or several predictors (leading batch dimensions allowed).
    target : Tensor of shape (K2 + 1, 2)
        S^1 table of the target (e.g. ``TrigPolynomial.coefficients``).

    Returns
    -------
    Tensor of shape (...)
        One excess risk per predictor; differentiable.

    Examples
    --------
    >>> f = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    >>> excess_risk_s1(torch.zeros(1, 2, dtype=torch.float64), f)
    tensor(1., dtype=torch.float64)
    """
    predictor = _check_table("predictor", predictor, batched=True)
    target = _check_table("target", target)
    if predictor.device != target.device:
        raise NtklabValueError(
            f"target: expected the device of predictor ({predictor.device}), got {target.device}"
        )
    rows = max(predictor.shape[-2], target.shape[-2])
    dtype = torch.promote_types(predictor.dtype, target.dtype)
    diff = _pad_table(predictor.to(dtype), rows) - _pad_table(target.to(dtype), rows)
    return diff.square().sum(dim=(-2, -1))


def kernel_predictor_coefficients_s1(alpha: Tensor, centres: Tensor, eigenvalues: Tensor) -> Tensor:
    r"""Exact Fourier coefficients of a kernel predictor on :math:`S^1`.

    For a dot-product kernel with eigenvalues :math:`\mu_k`
    (:func:`ntklab.kernels.sphere.circle_eigenvalues`, so that
    :math:`\kappa(\cos a) = \mu_0 + 2 \sum_{k \ge 1} \mu_k \cos ka`), the predictor
    :math:`\hat f(a) = \sum_i \alpha_i \kappa(\cos(a - a_i))` has the S^1 table

    .. math::

        \hat a_0 = \mu_0 \sum_i \alpha_i, \qquad
        \hat a_k - i\, \hat b_k = \sqrt2\, \mu_k \sum_i \alpha_i e^{-i k a_i}
        \quad (k \ge 1).

    Only frequencies ``0..K`` are returned, ``K + 1 = len(eigenvalues)``; the predictor's
    energy above ``K`` is :math:`2\sum_{k>K}\mu_k^2 |\sum_i \alpha_i e^{-ika_i}|^2 \le 2
    (\sum_i |\alpha_i|)^2 \sum_{k > K}\mu_k^2`. Pass eigenvalues to a ``K`` where that is
    negligible (for the ReLU NTK, :math:`\mu_k \sim k^{-2}`, the bound falls as
    :math:`K^{-3}`). The sums are computed in blocks of points (memory
    ``O(block * K)``), in the dtype of ``alpha``.

    Parameters
    ----------
    alpha : Tensor of shape (n,) or (n, m)
        Dual coefficients of one predictor, or of ``m`` predictors sharing the centres
        (e.g. gradient-descent iterates or ridge values).
    centres : Tensor of shape (n,) or (n, 2)
        The training inputs :math:`a_i`, as angles or as points on :math:`S^1`.
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0, \dots, \mu_K`.

    Returns
    -------
    Tensor of shape (K + 1, 2) or (m, K + 1, 2)
        S^1 table(s) of the predictor(s); differentiable in ``alpha`` and ``eigenvalues``.

    Examples
    --------
    >>> mu = torch.tensor([0.5, 0.25], dtype=torch.float64)  # kappa(t) = 0.5 + 0.5 t
    >>> kernel_predictor_coefficients_s1(torch.ones(1, dtype=torch.float64),
    ...                                  torch.zeros(1, dtype=torch.float64), mu)
    tensor([[0.5000, 0.0000],
            [0.3536, 0.0000]], dtype=torch.float64)
    """
    if not isinstance(alpha, Tensor):
        raise NtklabTypeError(f"alpha: expected a torch.Tensor, got {type(alpha).__name__}")
    if not alpha.is_floating_point() or alpha.ndim not in (1, 2):
        raise NtklabValueError(
            f"alpha: expected a real floating tensor of shape (n,) or (n, m), got dtype "
            f"{alpha.dtype} and shape {tuple(alpha.shape)}"
        )
    angles = as_angles("centres", centres)
    if angles.shape[0] != alpha.shape[0]:
        raise NtklabValueError(
            f"centres: expected {alpha.shape[0]} points to match alpha's first dimension, got "
            f"shape {tuple(centres.shape)}"
        )
    mu = check_vector("eigenvalues", eigenvalues)
    squeeze = alpha.ndim == 1
    coef = alpha[:, None] if squeeze else alpha  # shape: (n, m)
    dtype = coef.dtype
    angles = angles.to(dtype=dtype, device=coef.device)
    n_freq = mu.shape[0]
    k = torch.arange(n_freq, dtype=dtype, device=coef.device)
    re = coef.new_zeros(coef.shape[1], n_freq)  # shape: (m, K+1)
    im = coef.new_zeros(coef.shape[1], n_freq)
    block = max(1, BLOCK_ELEMENTS // n_freq)
    for start in range(0, angles.shape[0], block):
        phase = angles[start : start + block, None] * k  # shape: (b, K+1)
        part = coef[start : start + block].T  # shape: (m, b)
        re = re + part @ torch.cos(phase)
        im = im + part @ torch.sin(phase)
    scale = torch.full((n_freq,), _SQRT2, dtype=dtype, device=coef.device)
    scale[0] = 1.0
    weight = mu.to(dtype=dtype, device=coef.device) * scale
    table = torch.stack([re * weight, im * weight], dim=-1)  # shape: (m, K+1, 2)
    table[:, 0, 1] = 0.0
    return table[0] if squeeze else table


# ---------------------------------------------------------------------------------------------
# polynomials on S^(d-1)


@short_repr
@dataclass(frozen=True, eq=False)
class SpherePolynomial:
    r"""A polynomial of degree ``<= K`` on :math:`S^{d-1}`, as a sum of zonal harmonics.

    .. math::

        f(x) = \sum_{k=0}^{K} f_k(x), \qquad
        f_k(x) = \sum_{j=1}^{J} w_{kj}\, P_k^{(d)}(\langle x, z_j \rangle),

    with :math:`P_k^{(d)}` the Legendre polynomial of dimension ``d``
    (:func:`ntklab.kernels.sphere.legendre_polynomials`, :math:`P_k^{(d)}(1) = 1`) and unit
    centres :math:`z_j`. Each :math:`P_k^{(d)}(\langle \cdot, z\rangle)` is a spherical
    harmonic of degree exactly ``k``, so :math:`f_k` is the degree-``k`` component of ``f``
    and there is none above ``K``. By the addition theorem,
    :math:`\langle P_k(\langle\cdot, z\rangle), P_k(\langle\cdot, z'\rangle)\rangle_{L^2} =
    P_k(\langle z, z'\rangle) / N(d, k)`, hence the exact per-degree energies

    .. math::

        E_k = \|f_k\|_{L^2}^2 = \frac{1}{N(d, k)} \sum_{j, j'} w_{kj} w_{kj'}
        P_k^{(d)}(\langle z_j, z_{j'} \rangle).

    Attributes
    ----------
    centres : Tensor of shape (J, d)
        Unit vectors :math:`z_j`.
    weights : Tensor of shape (K + 1, J)
        :math:`w_{kj}`.
    """

    centres: Tensor
    weights: Tensor

    def __post_init__(self) -> None:
        centres = check_matrix("centres", self.centres)
        if not isinstance(self.weights, Tensor) or self.weights.ndim != 2:
            got = (
                f"shape {tuple(self.weights.shape)}"
                if isinstance(self.weights, Tensor)
                else type(self.weights).__name__
            )
            raise NtklabValueError(f"weights: expected a tensor of shape (K+1, J), got {got}")
        if self.weights.shape[1] != centres.shape[0]:
            raise NtklabValueError(
                f"weights: expected shape (K+1, J) with J = {centres.shape[0]} centres, got "
                f"{tuple(self.weights.shape)}"
            )
        if self.weights.dtype != centres.dtype or self.weights.device != centres.device:
            raise NtklabTypeError(
                f"weights: expected the dtype and device of centres ({centres.dtype}, "
                f"{centres.device}), got ({self.weights.dtype}, {self.weights.device})"
            )
        if centres.shape[1] < 2:
            raise NtklabValueError(
                f"centres: expected points in R^d with d >= 2, got shape {tuple(centres.shape)}"
            )
        norms = centres.norm(dim=1)
        if not torch.allclose(norms, torch.ones_like(norms), atol=1e-5, rtol=0.0):
            raise NtklabValueError(
                f"centres: expected unit vectors, got norms between {float(norms.min())!r} and "
                f"{float(norms.max())!r}"
            )

    @property
    def dim(self) -> int:
        """Ambient dimension ``d``."""
        return int(self.centres.shape[1])

    @property
    def degree(self) -> int:
        """Highest degree ``K``."""
        return int(self.weights.shape[0]) - 1

    def _components(self, x: Tensor) -> Tensor:
        """All degree components at ``x`` (n, d): shape (K + 1, n), blocked over points."""
        x = check_matrix("x", x)
        if x.shape[1] != self.dim:
            raise NtklabValueError(
                f"x: expected points of shape (n, {self.dim}) on S^{self.dim - 1}, got shape "
                f"{tuple(x.shape)}"
            )
        centres = self.centres.to(dtype=x.dtype, device=x.device)
        weights = self.weights.to(dtype=x.dtype, device=x.device)
        n_deg, n_centres = weights.shape
        block = max(1, BLOCK_ELEMENTS // (n_deg * n_centres))
        out = []
        for start in range(0, x.shape[0], block):
            t = x[start : start + block] @ centres.T  # shape: (b, J)
            polys = legendre_polynomials(t, self.dim, self.degree)  # shape: (K+1, b, J)
            out.append(torch.einsum("kbj,kj->kb", polys, weights))
        return torch.cat(out, dim=1)

    def __call__(self, x: Tensor) -> Tensor:
        """Values at points ``x`` of shape ``(n, d)`` (on the sphere), shape ``(n,)``."""
        return self._components(x).sum(dim=0)

    def degree_component(self, x: Tensor, k: int) -> Tensor:
        """The degree-``k`` component :math:`f_k(x)`, shape ``(n,)`` (0 for ``k > K``)."""
        k = check_nonnegative_int("k", k)
        if k > self.degree:
            check_matrix("x", x)
            return x.new_zeros(x.shape[0])
        return self._components(x)[k]

    def degree_energies(self) -> Tensor:
        """The exact :math:`E_k = \\|f_k\\|^2_{L^2}`, shape ``(K + 1,)`` (class docstring)."""
        gram = self.centres @ self.centres.T  # shape: (J, J)
        polys = legendre_polynomials(gram.clamp(-1.0, 1.0), self.dim, self.degree)
        mult = harmonic_multiplicities(
            self.dim, self.degree, dtype=self.weights.dtype, device=self.weights.device
        )
        quad = torch.einsum("kj,kji,ki->k", self.weights, polys, self.weights)
        return quad / mult

    def l2_norm_squared(self) -> Tensor:
        """:math:`\\|f\\|^2_{L^2} = \\sum_k E_k`, shape ``()``."""
        return self.degree_energies().sum()


def random_sphere_polynomial(
    degree: int,
    dim: int,
    *,
    generator: torch.Generator,
    n_centres: int = 16,
    degree_energies: Tensor | None = None,
    normalize: bool = True,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> SpherePolynomial:
    r"""A random polynomial of degree ``<= K`` on :math:`S^{d-1}` with known degree content.

    Draws ``J = n_centres`` centres uniformly on the sphere and weights
    :math:`w_{kj} \sim \mathcal{N}(0, N(d, k) / J)`, so that every degree has expected
    energy 1 (:class:`SpherePolynomial`). Then either each degree is rescaled to the requested
    ``degree_energies`` exactly, or (``normalize``) the whole function to unit
    :math:`L^2` norm. The degree-``k`` component lies in a space of dimension
    ``min(J, N(d, k))``.

    Parameters
    ----------
    degree : int
        Highest degree ``K >= 0``.
    dim : int
        Ambient dimension ``d >= 2``.
    generator : torch.Generator
        Source of randomness (centres first, then weights).
    n_centres : int
        Number ``J >= 1`` of centres.
    degree_energies : Tensor of shape (K + 1,), optional
        Exact target energies :math:`E_k \ge 0` (then ``normalize`` is ignored).
    normalize : bool
        Rescale to unit :math:`L^2` norm (when ``degree_energies`` is None).
    dtype, device
        Of the centres and weights.

    Returns
    -------
    SpherePolynomial

    Examples
    --------
    >>> f = random_sphere_polynomial(2, 5, generator=torch.Generator().manual_seed(0))
    >>> f.degree, f.dim, round(float(f.l2_norm_squared()), 12)
    (2, 5, 1.0)
    """
    degree = check_nonnegative_int("degree", degree)
    dim = check_positive_int("dim", dim)
    if dim < 2:
        raise NtklabValueError(f"dim: expected an int >= 2 (the sphere S^(d-1)), got {dim}")
    n_centres = check_positive_int("n_centres", n_centres)
    dtype = check_float_dtype(dtype)
    gen = check_generator(generator)
    if degree_energies is not None:
        target = check_vector("degree_energies", degree_energies, length=degree + 1)
        if bool((target < 0).any()):
            raise NtklabValueError(
                f"degree_energies: expected values >= 0, got negative entries at degrees "
                f"{(target < 0).nonzero().flatten().tolist()[:8]}"
            )
    centres = uniform_sphere(n_centres, dim, generator=gen)
    mult = harmonic_multiplicities(dim, degree)
    weights = draw_normal((degree + 1, n_centres), gen, torch.float64, None)
    weights = weights * (mult / n_centres).sqrt()[:, None]
    poly = SpherePolynomial(centres, weights)
    energies = poly.degree_energies()
    if degree_energies is not None:
        wanted = degree_energies.detach().to(dtype=torch.float64, device="cpu")
        scale = torch.where(energies > 0, (wanted / energies).sqrt(), torch.zeros_like(wanted))
        weights = weights * scale[:, None]
    elif normalize:
        weights = weights / energies.sum().sqrt()
    return SpherePolynomial(
        centres.to(dtype=dtype, device=device), weights.to(dtype=dtype, device=device)
    )


def kernel_excess_risk_sphere(
    alpha: Tensor, centres: Tensor, eigenvalues: Tensor, target: SpherePolynomial
) -> Tensor:
    r"""Exact :math:`L^2` excess risk of a kernel predictor against a :class:`SpherePolynomial`,
    over degrees ``0..K``.

    For :math:`\hat f(x) = \sum_i \alpha_i \kappa(\langle x, x_i \rangle)` with
    :math:`\kappa = \sum_k \mu_k N(d, k) P_k^{(d)}` (:func:`ntklab.kernels.sphere.
    sphere_eigenvalues`), the degree-``k`` component is
    :math:`\hat f_k = \mu_k N(d,k) \sum_i \alpha_i P_k(\langle \cdot, x_i\rangle)`, and by the
    addition theorem

    .. math::

        \|\hat f_k - f_k\|^2 = \mu_k^2 N \alpha^\top P_k(X X^\top) \alpha
        - 2 \mu_k\, \alpha^\top P_k(X Z^\top) w_k + \tfrac{1}{N} w_k^\top P_k(Z Z^\top) w_k .

    The sum runs over ``k = 0..K``, ``K + 1 = len(eigenvalues)`` (which must be at least the
    target's degree + 1); the predictor's energy above ``K``,
    :math:`\sum_{k>K} \mu_k^2 N(d,k)\, \alpha^\top P_k(XX^\top)\alpha`, is left out: choose
    ``K`` where it is negligible. Cost :math:`O(n^2 K)`.

    Parameters
    ----------
    alpha : Tensor of shape (n,)
        Dual coefficients.
    centres : Tensor of shape (n, d)
        Training inputs :math:`x_i` on the sphere.
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0..\mu_K`.
    target : SpherePolynomial
        The target ``f``, of degree ``<= K``.

    Returns
    -------
    Tensor of shape ()
        :math:`\sum_{k \le K} \|\hat f_k - f_k\|^2_{L^2}`.
    """
    if not isinstance(target, SpherePolynomial):
        raise NtklabTypeError(f"target: expected a SpherePolynomial, got {type(target).__name__}")
    x = check_matrix("centres", centres)
    if x.shape[1] != target.dim:
        raise NtklabValueError(
            f"centres: expected shape (n, {target.dim}) to match the target, got {tuple(x.shape)}"
        )
    alpha = check_vector("alpha", alpha, length=x.shape[0])
    mu = check_vector("eigenvalues", eigenvalues)
    degree = mu.shape[0] - 1
    if degree < target.degree:
        raise NtklabValueError(
            f"eigenvalues: expected at least target.degree + 1 = {target.degree + 1} entries, "
            f"got {mu.shape[0]}"
        )
    dtype = alpha.dtype
    x = x.to(dtype)
    z = target.centres.to(dtype=dtype, device=x.device)
    w = _pad_rows(target.weights.to(dtype=dtype, device=x.device), degree + 1)
    mu = mu.to(dtype=dtype, device=x.device)
    mult = harmonic_multiplicities(target.dim, degree, dtype=dtype, device=x.device)
    d = target.dim
    p_xx = legendre_polynomials((x @ x.T).clamp(-1.0, 1.0), d, degree)  # shape: (K+1, n, n)
    p_xz = legendre_polynomials((x @ z.T).clamp(-1.0, 1.0), d, degree)  # shape: (K+1, n, J)
    p_zz = legendre_polynomials((z @ z.T).clamp(-1.0, 1.0), d, degree)  # shape: (K+1, J, J)
    predictor = mu.square() * mult * torch.einsum("i,kij,j->k", alpha, p_xx, alpha)
    cross = mu * torch.einsum("i,kij,kj->k", alpha, p_xz, w)
    own = torch.einsum("kj,kji,ki->k", w, p_zz, w) / mult
    return (predictor - 2.0 * cross + own).sum()


def _pad_rows(weights: Tensor, n_rows: int) -> Tensor:
    if weights.shape[0] >= n_rows:
        return weights
    return torch.cat([weights, weights.new_zeros(n_rows - weights.shape[0], weights.shape[1])])


# ---------------------------------------------------------------------------------------------
# sparse parity


@short_repr
@dataclass(frozen=True)
class SparseParity:
    r"""The sparse parity :math:`y = \prod_{i \in S} x_i` on :math:`\{-1, 1\}^d`, ``|S| = k``.

    Under the uniform law on the hypercube, ``y`` is uniform on :math:`\{-1, 1\}` (for
    ``k >= 1``): mean 0, variance 1, and it is orthogonal to every polynomial of degree
    ``< k`` (a single Walsh character of degree ``k``).

    Attributes
    ----------
    dim : int
        ``d >= 1``.
    k : int
        Number of relevant coordinates, ``0 <= k <= d`` (``k = 0`` is the constant 1).
    coords : tuple of int
        The ``k`` distinct coordinates :math:`S`, in increasing order.

    Examples
    --------
    >>> SparseParity(3, 2, (0, 2))(torch.tensor([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0]]))
    tensor([-1.,  1.])
    """

    dim: int
    k: int
    coords: tuple[int, ...]

    def __post_init__(self) -> None:
        check_positive_int("dim", self.dim)
        check_nonnegative_int("k", self.k)
        if self.k > self.dim:
            raise NtklabValueError(f"k: expected an int <= dim = {self.dim}, got {self.k}")
        if not isinstance(self.coords, tuple) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in self.coords
        ):
            raise NtklabTypeError(f"coords: expected a tuple of ints, got {self.coords!r}")
        if len(self.coords) != self.k or len(set(self.coords)) != self.k:
            raise NtklabValueError(
                f"coords: expected {self.k} distinct coordinates, got {self.coords!r}"
            )
        if any(not 0 <= c < self.dim for c in self.coords):
            raise NtklabValueError(
                f"coords: expected coordinates in [0, {self.dim}), got {self.coords!r}"
            )
        if list(self.coords) != sorted(self.coords):
            raise NtklabValueError(f"coords: expected increasing order, got {self.coords!r}")

    @property
    def variance(self) -> float:
        """Variance of ``y`` under the uniform law: 1 (``k >= 1``) or 0 (``k = 0``)."""
        return 1.0 if self.k >= 1 else 0.0

    def __call__(self, x: Tensor) -> Tensor:
        """:math:`\\prod_{i \\in S} x_i` for ``x`` of shape ``(n, d)``, shape ``(n,)``."""
        x = check_matrix("x", x)
        if x.shape[1] != self.dim:
            raise NtklabValueError(
                f"x: expected points of shape (n, {self.dim}), got shape {tuple(x.shape)}"
            )
        if self.k == 0:
            return x.new_ones(x.shape[0])
        idx = torch.tensor(self.coords, device=x.device)
        return x.index_select(1, idx).prod(dim=1)


def random_sparse_parity(dim: int, k: int, *, generator: torch.Generator) -> SparseParity:
    """A :class:`SparseParity` on ``k`` distinct coordinates drawn uniformly among ``dim``.

    Examples
    --------
    >>> p = random_sparse_parity(20, 3, generator=torch.Generator().manual_seed(0))
    >>> p.k, len(p.coords)
    (3, 3)
    """
    dim = check_positive_int("dim", dim)
    k = check_nonnegative_int("k", k)
    if k > dim:
        raise NtklabValueError(f"k: expected an int <= dim = {dim}, got {k}")
    gen = check_generator(generator)
    perm = torch.randperm(dim, generator=gen, device=gen.device)[:k]
    coords = tuple(sorted(int(c) for c in perm.tolist()))
    return SparseParity(dim=dim, k=k, coords=coords)


# ---------------------------------------------------------------------------------------------
# capacity and source-condition targets


@short_repr
@dataclass(frozen=True)
class CapacityFit:
    r"""Capacity :math:`\gamma` of a kernel from the decay :math:`\lambda_i \sim i^{-1/\gamma}`
    of its sorted eigenvalues (counted with multiplicity).

    Attributes
    ----------
    gamma : float
        :math:`-1 / b`, ``b`` the fitted log-log slope.
    gamma_ci : tuple of float
        The slope's confidence interval mapped through :math:`-1/b` (``(nan, nan)`` if it
        reaches 0).
    fit : PowerLawFit
        Fit of :math:`\lambda` against rank.
    rank_range : tuple of float
        The ranks fitted, inclusive.
    """

    gamma: float
    gamma_ci: tuple[float, float]
    fit: PowerLawFit
    rank_range: tuple[float, float]


def _check_rtol(rtol: object) -> float:
    if isinstance(rtol, bool) or not isinstance(rtol, int | float) or not 0 <= rtol < 1:
        raise NtklabValueError(f"rtol: expected a float in [0, 1), got {rtol!r}")
    return float(rtol)


def _nonzero_eigenvalues(eigenvalues: Tensor, rtol: float) -> tuple[Tensor, Tensor]:
    """(float64 cpu eigenvalues, mask of exact zeros) after the PSD check."""
    mu = check_vector("eigenvalues", eigenvalues).detach().to(dtype=torch.float64, device="cpu")
    scale = float(mu.abs().max())
    zero = mu.abs() <= rtol * scale
    negative = (mu < 0) & ~zero
    if bool(negative.any()):
        raise NtklabValueError(
            f"eigenvalues: expected values >= 0 (a positive semi-definite kernel) up to "
            f"rtol={rtol} relative to max|mu|, got negative values at degrees "
            f"{negative.nonzero().flatten().tolist()[:8]}"
        )
    if scale == 0:
        raise NtklabValueError("eigenvalues: expected at least one nonzero value, got all 0")
    return mu, zero


def estimate_capacity(
    eigenvalues: Tensor,
    *,
    dim: int = 2,
    rank_range: tuple[float, float] | None = None,
    rtol: float = _DEFAULT_RTOL,
) -> CapacityFit:
    r"""Estimate the capacity :math:`\gamma` from a dot-product kernel's eigenvalues.

    The distinct eigenvalues :math:`\mu_k` (``k = 0..K``, degree ``k`` with multiplicity
    :math:`N(d, k)`) are sorted in decreasing order, exact zeros (:math:`|\mu_k| \le
    \mathrm{rtol} \max|\mu|`, e.g. parity zeros) dropped, and each is placed at its last rank
    :math:`i_k` (cumulative multiplicity), so that :math:`\mu_{(i)}` as a function of the rank
    is sampled at every jump. A power law :math:`\mu \approx C i^{b}` is fitted
    (:func:`ntklab.analysis.fit_power_law`) over ``rank_range`` and

    .. math::

        \gamma = -1 / b, \qquad \lambda_i \asymp i^{-1/\gamma}.

    For the ReLU NTK on :math:`S^1`, :math:`\mu_k \sim k^{-2}` and :math:`i_k \approx 2k`,
    so :math:`\gamma = 1/2`.

    Parameters
    ----------
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0..\mu_K` (``circle_eigenvalues``, ``sphere_eigenvalues``).
    dim : int
        Ambient dimension ``d >= 2`` (multiplicities :math:`N(d, k)`); 2 for the circle.
    rank_range : (float, float), optional
        Ranks fitted, inclusive. Default: the upper half of the log-rank range,
        :math:`[\sqrt{i_{\max}}, i_{\max}]` (on :math:`S^1` with ``K = 512``: frequencies
        about 16 to 512).
    rtol : float
        Relative tolerance for exact zeros.

    Returns
    -------
    CapacityFit

    Examples
    --------
    >>> k = torch.arange(257, dtype=torch.float64)
    >>> fit = estimate_capacity(1.0 / (1.0 + k) ** 2)
    >>> round(fit.gamma, 2)
    0.5
    """
    dim = check_positive_int("dim", dim)
    if dim < 2:
        raise NtklabValueError(f"dim: expected an int >= 2, got {dim}")
    rtol = _check_rtol(rtol)
    mu, zero = _nonzero_eigenvalues(eigenvalues, rtol)
    mult = harmonic_multiplicities(dim, mu.shape[0] - 1)
    keep = ~zero
    values, order = torch.sort(mu[keep], descending=True, stable=True)
    ranks = torch.cumsum(mult[keep][order], dim=0)
    r_max = float(ranks[-1])
    if rank_range is None:
        lo, hi = math.sqrt(r_max), r_max
    else:
        if (
            not isinstance(rank_range, tuple)
            or len(rank_range) != 2
            or not all(isinstance(v, int | float) for v in rank_range)
            or not 0 < rank_range[0] < rank_range[1]
        ):
            raise NtklabValueError(
                f"rank_range: expected a tuple (low, high) with 0 < low < high, got {rank_range!r}"
            )
        lo, hi = float(rank_range[0]), float(rank_range[1])
    inside = (ranks >= lo) & (ranks <= hi)
    if int(inside.sum()) < 3:
        raise NtklabValueError(
            f"rank_range: expected at least 3 distinct nonzero eigenvalues with rank in "
            f"[{lo:g}, {hi:g}], got {int(inside.sum())} (ranks run to {r_max:g}); pass more "
            f"eigenvalues or a wider rank_range"
        )
    fit = fit_power_law(ranks[inside].numpy(), values[inside].numpy())
    if not fit.slope < 0:
        raise NtklabValueError(
            f"eigenvalues: expected eigenvalues decaying with rank, got a fitted slope "
            f"{fit.slope:.4g} >= 0 over ranks [{lo:g}, {hi:g}]"
        )
    ci = (-1.0 / fit.ci_low, -1.0 / fit.ci_high) if fit.ci_high < 0 else (math.nan, math.nan)
    return CapacityFit(gamma=-1.0 / fit.slope, gamma_ci=ci, fit=fit, rank_range=(lo, hi))


@short_repr
@dataclass(frozen=True, eq=False)
class SourceConditionTarget:
    r"""A target built from a kernel's eigenfunctions with a prescribed source condition.

    Attributes
    ----------
    function : TrigPolynomial or SpherePolynomial
        The target, of unit :math:`L^2` norm (callable on inputs).
    beta : float
        Source exponent :math:`\beta`.
    eigenvalues : Tensor of shape (K + 1,)
        The kernel's eigenvalues :math:`\mu_0..\mu_K` that defined it.
    capacity : CapacityFit
        :math:`\gamma` fitted on ``eigenvalues``.
    """

    function: TrigPolynomial | SpherePolynomial
    beta: float
    eigenvalues: Tensor
    capacity: CapacityFit = field(repr=False)

    @property
    def gamma(self) -> float:
        """The estimated capacity :math:`\\gamma`."""
        return self.capacity.gamma

    @property
    def predicted_rate(self) -> float:
        r"""The minimax exponent :math:`-2\beta / (2\beta + \gamma)` of the excess risk in
        ``n`` (Caponnetto & De Vito 2007; early-stopped kernel GD attains it)."""
        return -2.0 * self.beta / (2.0 * self.beta + self.gamma)

    @property
    def dim(self) -> int:
        """Ambient dimension ``d`` (2 for the circle)."""
        return self.function.dim

    def degree_energies(self) -> Tensor:
        """Exact per-degree energies :math:`E_k` of the target, shape ``(K_t + 1,)``."""
        return self.function.degree_energies()

    def __call__(self, x: Tensor) -> Tensor:
        """The target at ``x`` (angles or points on :math:`S^1`, points on
        :math:`S^{d-1}`)."""
        return self.function(x)


def source_condition_target(
    eigenvalues: Tensor,
    beta: float,
    *,
    generator: torch.Generator,
    dim: int = 2,
    truncation: int | None = None,
    weights: Literal["signs", "gaussian"] = "signs",
    n_centres: int = 32,
    rank_range: tuple[float, float] | None = None,
    rtol: float = _DEFAULT_RTOL,
) -> SourceConditionTarget:
    r"""A unit-norm target with source condition :math:`\beta` for a dot-product kernel.

    On :math:`S^1` (``dim = 2``), with :math:`\mu_k` the kernel's eigenvalues:

    .. math::

        f(a) = \sum_{k=1}^{K_t} c_k \bigl(g_k \cos ka + h_k \sin ka\bigr), \qquad
        c_k^2 \propto \frac{\mu_k^{2\beta}}{k},

    with random signs :math:`g_k, h_k = \pm 1` (``weights="signs"``: every frequency has
    energy exactly :math:`\propto c_k^2`) or standard Gaussians (``"gaussian"``), no constant
    term, scaled to :math:`\|f\|_{L^2} = 1`. Per eigenfunction of rank ``i`` the squared
    coefficient is :math:`\propto \lambda_i^{2\beta} / i`, so :math:`\|T^{-s} f\|` is finite
    for every :math:`s < \beta` and diverges (logarithmically) at :math:`s = \beta`: the
    source condition holds with exponent :math:`\beta` and no better. The minimax excess-risk
    rate is then :math:`n^{-2\beta/(2\beta + \gamma)}` (Caponnetto & De Vito 2007; Lin &
    Rosasco 2017, arXiv:1605.08882), with :math:`\gamma` from :func:`estimate_capacity`.

    On :math:`S^{d-1}` (``dim = d > 2``) the same rule per harmonic: degree ``k`` gets energy
    :math:`E_k \propto N(d, k)\, \mu_k^{2\beta} / i_k`, :math:`i_k = \sum_{j=1}^{k} N(d, j)`
    (for ``d = 2`` this is :math:`\mu_k^{2\beta}/k` again), realized by a
    :class:`SpherePolynomial` with ``n_centres`` random centres; ``"gaussian"`` multiplies
    :math:`E_k` by an independent :math:`\chi^2_{N(d,k)} / N(d, k)` factor.

    Parameters
    ----------
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0..\mu_K` of the kernel (``circle_eigenvalues(profile_from_architecture(
        arch, 2), K)`` or ``sphere_eigenvalues``). All of them are used to fit
        :math:`\gamma`.
    beta : float
        Source exponent :math:`\beta > 0`.
    generator : torch.Generator
        Source of the signs / Gaussians (and the centres on :math:`S^{d-1}`).
    dim : int
        Ambient dimension ``d >= 2``; 2 for the circle.
    truncation : int, optional
        Highest frequency :math:`K_t \le K` of the target (default ``K``).
    weights : {"signs", "gaussian"}
        Random signs (deterministic energies) or Gaussian coefficients.
    n_centres : int
        Number of zonal centres on :math:`S^{d-1}` (ignored on :math:`S^1`).
    rank_range : (float, float), optional
        Passed to :func:`estimate_capacity`.
    rtol : float
        Eigenvalues with :math:`|\mu_k| \le \mathrm{rtol}\max|\mu|` are exact zeros (their
        frequencies get no energy).

    Returns
    -------
    SourceConditionTarget
        With the target (dtype and device of ``eigenvalues``), :math:`\gamma` and the predicted
        rate.

    Examples
    --------
    >>> k = torch.arange(257, dtype=torch.float64)
    >>> mu = 1.0 / (1.0 + k) ** 2
    >>> t = source_condition_target(mu, 1.0, generator=torch.Generator().manual_seed(0))
    >>> round(t.predicted_rate, 2), round(float(t.function.l2_norm_squared()), 12)
    (-0.8, 1.0)
    """
    beta = check_real("beta", beta, minimum=0.0)
    dim = check_positive_int("dim", dim)
    if dim < 2:
        raise NtklabValueError(f"dim: expected an int >= 2, got {dim}")
    if weights not in ("signs", "gaussian"):
        raise NtklabValueError(f"weights: expected 'signs' or 'gaussian', got {weights!r}")
    gen = check_generator(generator)
    rtol = _check_rtol(rtol)
    capacity = estimate_capacity(eigenvalues, dim=dim, rank_range=rank_range, rtol=rtol)
    mu, zero = _nonzero_eigenvalues(eigenvalues, rtol)
    n_freq = mu.shape[0] - 1
    if truncation is None:
        k_t = n_freq
    else:
        k_t = check_positive_int("truncation", truncation)
        if k_t > n_freq:
            raise NtklabValueError(
                f"truncation: expected an int <= K = {n_freq} (len(eigenvalues) - 1), got {k_t}"
            )
    mu = torch.where(zero, torch.zeros_like(mu), mu)[: k_t + 1]
    mult = harmonic_multiplicities(dim, k_t)
    ranks = torch.cumsum(mult, dim=0) - 1.0  # i_k = sum_{j=1..k} N(d, j); i_0 = 0 unused
    energies = torch.zeros(k_t + 1, dtype=torch.float64)
    energies[1:] = mult[1:] * mu[1:].pow(2.0 * beta) / ranks[1:]
    if not float(energies.sum()) > 0:
        raise NtklabValueError(
            f"eigenvalues: expected a nonzero eigenvalue at some frequency 1..{k_t}, got none"
        )
    out_dtype, out_device = eigenvalues.dtype, eigenvalues.device
    function: TrigPolynomial | SpherePolynomial
    if dim == 2:
        c = energies.sqrt()  # c_k, with E_k = c_k^2
        if weights == "signs":
            g = 2.0 * torch.randint(0, 2, (2, k_t), generator=gen, device=gen.device) - 1.0
        else:
            g = draw_normal((2, k_t), gen, torch.float64, None)
        g = g.to(dtype=torch.float64, device="cpu")
        table = torch.zeros(k_t + 1, 2, dtype=torch.float64)
        table[1:, 0] = c[1:] * g[0] / _SQRT2
        table[1:, 1] = c[1:] * g[1] / _SQRT2
        table = table / table.square().sum().sqrt()
        function = TrigPolynomial(table.to(dtype=out_dtype, device=out_device))
    else:
        if weights == "gaussian":
            factors = torch.ones(k_t + 1, dtype=torch.float64)
            for k in range(1, k_t + 1):
                m = int(mult[k])
                factors[k] = draw_normal((m,), gen, torch.float64, None).square().mean()
            energies = energies * factors
        energies = energies / energies.sum()
        function = random_sphere_polynomial(
            k_t,
            dim,
            generator=gen,
            n_centres=n_centres,
            degree_energies=energies,
            dtype=out_dtype,
            device=out_device,
        )
    return SourceConditionTarget(
        function=function, beta=beta, eigenvalues=eigenvalues, capacity=capacity
    )
