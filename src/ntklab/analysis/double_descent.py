r"""Double descent: exact asymptotic risks of min-norm and ridge linear regression, and
finite-sample simulations (linear and random ReLU features).

Isotropic model of Hastie, Montanari, Rosset and Tibshirani (arXiv:1903.08560): rows
:math:`x_i \sim N(0, I_p)`, :math:`y_i = x_i^\top\beta + \varepsilon_i`,
:math:`\|\beta\|^2 = r^2`, :math:`\mathrm{Var}\,\varepsilon = \sigma^2`, and
:math:`p/n \to \gamma`. The risk is the excess test error
:math:`R = E_{x_0}[(x_0^\top\hat\beta - x_0^\top\beta)^2] = \|\hat\beta - \beta\|^2` (the
noise :math:`\sigma^2` of a test label is not included). Ridge uses

.. math:: \hat\beta_\lambda = \arg\min_\beta \tfrac1n \|y - X\beta\|^2 + \lambda\|\beta\|^2
          = (X^\top X + n\lambda I)^{-1} X^\top y,

and :math:`\lambda \to 0^+` is the minimum-norm least-squares solution
:math:`\hat\beta = X^+ y`. The random-features helpers use the same convention on the features
:math:`\phi(x) = \mathrm{relu}(W^\top x/\sqrt d)/\sqrt P`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ntklab.errors import NtklabTypeError, NtklabValueError

from ._validate import integer, nonnegative_number, positive_number, real_tensor
from .rates import _generator

__all__ = [
    "RandomFeaturesRisk",
    "SimulatedRisk",
    "min_norm_linear_regression_risk",
    "min_norm_risk",
    "optimal_ridge",
    "optimal_ridge_risk",
    "random_features_regression",
    "random_features_risk",
    "random_relu_features",
    "ridge_risk",
]


# --------------------------------------------------------------------------- asymptotic risks


def _gamma(value: object, name: str = "gamma") -> Tensor:
    if isinstance(value, Tensor):
        if not value.is_floating_point():
            raise NtklabTypeError(f"{name}: expected a floating tensor, got dtype {value.dtype}")
        tensor = value.detach()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        tensor = torch.tensor(float(value), dtype=torch.float64)
    else:
        raise NtklabTypeError(
            f"{name}: expected a float or a floating tensor, got {type(value).__name__} {value!r}"
        )
    if not bool((torch.isfinite(tensor) & (tensor > 0)).all()):
        raise NtklabValueError(f"{name}: expected finite values > 0, got {tensor.tolist()}")
    return tensor


def min_norm_risk(gamma: float | Tensor, *, r2: float, sigma2: float) -> Tensor:
    r"""Asymptotic risk of min-norm least squares, isotropic features (Hastie et al. 2019,
    Theorems 1 and 2).

    .. math::

        R(\gamma) = \begin{cases}
            \sigma^2 \dfrac{\gamma}{1 - \gamma}, & \gamma < 1, \\[4pt]
            r^2\Big(1 - \dfrac1\gamma\Big) + \dfrac{\sigma^2}{\gamma - 1}, & \gamma > 1,
        \end{cases}

    and :math:`+\infty` at :math:`\gamma = 1` (for :math:`\sigma^2 > 0`).

    Parameters
    ----------
    gamma : float or Tensor
        :math:`p/n > 0`, any shape.
    r2 : float
        Signal energy :math:`r^2 = \|\beta\|^2 \ge 0`.
    sigma2 : float
        Noise variance :math:`\sigma^2 \ge 0`.

    Returns
    -------
    Tensor
        Of ``gamma``'s shape and dtype (float64 for a number).

    Examples
    --------
    >>> min_norm_risk(torch.tensor([0.5, 2.0], dtype=torch.float64), r2=1.0, sigma2=1.0).tolist()
    [1.0, 1.5]
    """
    g = _gamma(gamma)
    signal = nonnegative_number("r2", r2)
    noise = nonnegative_number("sigma2", sigma2)
    one = torch.ones_like(g)
    under = noise * g / (one - g)
    over = signal * (one - 1 / g) + noise / (g - one)
    risk = torch.where(g < 1, under, over)
    at_one = math.inf if noise > 0 else 0.0
    return torch.where(g == 1, torch.full_like(g, at_one), risk)


def _stieltjes(g: Tensor, lam: Tensor) -> tuple[Tensor, Tensor]:
    r"""Marchenko-Pastur :math:`m(-\lambda) = \int d\mu(s)/(s + \lambda)` and
    :math:`m'(-\lambda) = \int d\mu(s)/(s+\lambda)^2` for ratio :math:`\gamma`, :math:`\lambda > 0`.

    :math:`m` is the positive root of :math:`\gamma\lambda m^2 + (1 - \gamma + \lambda) m - 1 = 0`,
    evaluated without cancellation.
    """
    b = 1 - g + lam
    root = torch.sqrt(b.square() + 4 * g * lam)
    m = torch.where(b > 0, 2 / (b + root), (root - b) / (2 * g * lam))
    dm = (g * m.square() + m) / (2 * g * lam * m + b)
    return m, dm


def ridge_risk(gamma: float | Tensor, ridge: float | Tensor, *, r2: float, sigma2: float) -> Tensor:
    r"""Asymptotic risk of ridge regression, isotropic features (Hastie et al. 2019,
    Theorem 5 with :math:`\Sigma = I`).

    .. math::

        R(\gamma, \lambda) = r^2 \lambda^2\, m'(-\lambda)
            + \sigma^2 \gamma \big(m(-\lambda) - \lambda\, m'(-\lambda)\big),

    with :math:`m` the Stieltjes transform of the Marchenko-Pastur law of ratio :math:`\gamma`,
    the root of :math:`\gamma\lambda m^2 + (1 - \gamma + \lambda) m = 1`, and
    :math:`m' = (\gamma m^2 + m)/(2\gamma\lambda m + 1 - \gamma + \lambda)`. The first term is
    the bias, the second the variance; :math:`\lambda = 0` returns :func:`min_norm_risk`
    (its limit).

    Parameters
    ----------
    gamma : float or Tensor
        :math:`p/n > 0`.
    ridge : float or Tensor
        :math:`\lambda \ge 0` in the module's convention (penalty :math:`\lambda\|\beta\|^2`
        on the mean squared error); broadcasts against ``gamma``.
    r2, sigma2 : float
        :math:`r^2, \sigma^2 \ge 0`.

    Returns
    -------
    Tensor
        Of the broadcast shape.

    Examples
    --------
    >>> g = torch.tensor([0.5, 2.0], dtype=torch.float64)
    >>> [round(v, 12) for v in ridge_risk(g, 1.0, r2=1.0, sigma2=0.0).tolist()]  # bias only
    [0.348874687627, 0.603553390593]
    """
    g = _gamma(gamma)
    lam = _ridge(ridge, g)
    signal = nonnegative_number("r2", r2)
    noise = nonnegative_number("sigma2", sigma2)
    g, lam = g * torch.ones_like(lam), lam * torch.ones_like(g)  # broadcast
    positive = torch.where(lam > 0, lam, torch.ones_like(lam))
    m, dm = _stieltjes(g, positive)
    risk = signal * positive.square() * dm + noise * g * (m - positive * dm)
    return torch.where(lam > 0, risk, min_norm_risk(g, r2=signal, sigma2=noise))


def _ridge(value: object, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        if not value.is_floating_point():
            raise NtklabTypeError(f"ridge: expected a floating tensor, got dtype {value.dtype}")
        tensor = value.detach().to(dtype=like.dtype, device=like.device)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        tensor = torch.tensor(float(value), dtype=like.dtype, device=like.device)
    else:
        raise NtklabTypeError(
            f"ridge: expected a float or a floating tensor, got {type(value).__name__} {value!r}"
        )
    if not bool((torch.isfinite(tensor) & (tensor >= 0)).all()):
        raise NtklabValueError(f"ridge: expected finite values >= 0, got {tensor.tolist()}")
    return tensor


def optimal_ridge(gamma: float | Tensor, *, r2: float, sigma2: float) -> Tensor:
    r"""The risk-minimizing ridge for isotropic features, :math:`\lambda^* = \sigma^2\gamma/r^2`
    (Hastie et al. 2019, Theorem 5; it is the Bayes posterior mean for
    :math:`\beta \sim N(0, r^2 I/p)`).

    Parameters
    ----------
    gamma : float or Tensor
        :math:`p/n > 0`.
    r2 : float
        :math:`r^2 > 0`.
    sigma2 : float
        :math:`\sigma^2 \ge 0`.

    Returns
    -------
    Tensor
        Of ``gamma``'s shape.

    Examples
    --------
    >>> optimal_ridge(2.0, r2=4.0, sigma2=1.0).item()
    0.5
    """
    g = _gamma(gamma)
    signal = positive_number("r2", r2)
    return nonnegative_number("sigma2", sigma2) * g / signal


def optimal_ridge_risk(gamma: float | Tensor, *, r2: float, sigma2: float) -> Tensor:
    r""":func:`ridge_risk` at :func:`optimal_ridge`: no peak at :math:`\gamma = 1`, increasing in
    :math:`\gamma`.

    .. math:: R^*(\gamma) = R\big(\gamma, \lambda^* = \sigma^2\gamma / r^2\big).

    Parameters
    ----------
    gamma : float or Tensor
    r2 : float
        :math:`r^2 > 0`.
    sigma2 : float

    Returns
    -------
    Tensor
        Of ``gamma``'s shape.
    """
    return ridge_risk(gamma, optimal_ridge(gamma, r2=r2, sigma2=sigma2), r2=r2, sigma2=sigma2)


# ------------------------------------------------------------------------------ simulations


@dataclass(frozen=True)
class SimulatedRisk:
    """Risks of repeated finite-sample fits.

    Attributes
    ----------
    risks : Tensor of shape (repeats,)
        One excess risk per independent draw (float64).
    mean, median : float
    stderr : float
        Standard error of the mean (``nan`` for one repeat).
    gamma : float
        :math:`p/n`.
    """

    risks: Tensor
    mean: float
    median: float
    stderr: float
    gamma: float


def _ridge_filter(s: Tensor, ridge: Tensor, n: int, shape: tuple[int, ...]) -> Tensor:
    r"""Spectral filter :math:`s/(s^2 + n\lambda)`, or the pseudo-inverse :math:`1/s` (above
    the rank cutoff) where :math:`\lambda = 0`; shape (n_ridges, r)."""
    cutoff = s.max() * max(shape) * torch.finfo(s.dtype).eps
    inverse = torch.where(s > cutoff, 1 / torch.where(s > cutoff, s, 1.0), 0.0)
    lam = ridge[:, None]
    damped = s / (s.square() + n * torch.where(lam > 0, lam, 1.0))
    return torch.where(lam > 0, damped, inverse)


def _linear_fit(x: Tensor, y: Tensor, ridge: float) -> Tensor:
    r"""Ridge or min-norm least squares :math:`\hat\beta` for one design, shape (p,).

    With :math:`n\lambda` added to the smaller Gram matrix,

    .. math:: \hat\beta = (X^\top X + n\lambda I_p)^{-1} X^\top y \ (p \le n), \qquad
              \hat\beta = X^\top (X X^\top + n\lambda I_n)^{-1} y \ (p > n),

    solved with its Cholesky factor :math:`LL^\top`: :math:`\min(n, p)^2 \max(n, p)` flops
    for the Gram matrix and :math:`\min(n, p)^3/3` for the factor, several times cheaper than
    a thin SVD of :math:`X`. For :math:`\lambda = 0` and :math:`X` of full rank both forms are
    :math:`X^+ y`. Where the Gram matrix :math:`G` is not numerically positive definite (the
    factorization fails, or a pivot :math:`L_{ii}^2 \le \sqrt\epsilon \max_j G_{jj}`, which
    bounds :math:`\lambda_{\min}(G)` from above: a rank-deficient or nearly so :math:`X` at
    :math:`\lambda = 0`, where the normal equations lose accuracy), the fit falls back to the SVD
    :math:`X = U\,\mathrm{diag}(s)V^\top` with :func:`_ridge_filter` (singular values below
    :math:`\epsilon \max(n, p)\, s_{\max}` dropped).
    """
    rows, cols = x.shape
    wide = cols > rows
    gram = x @ x.T if wide else x.T @ x  # shape: (min(n, p), min(n, p))
    gram.diagonal().add_(rows * ridge)
    factor, info = torch.linalg.cholesky_ex(gram)
    tol = math.sqrt(torch.finfo(x.dtype).eps) * float(gram.diagonal().max())
    if int(info) == 0 and float(factor.diagonal().square().min()) > tol:
        if wide:
            return x.T @ torch.cholesky_solve(y[:, None], factor)[:, 0]
        return torch.cholesky_solve((x.T @ y)[:, None], factor)[:, 0]
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    lam = torch.tensor([ridge], dtype=x.dtype, device=x.device)
    coef = _ridge_filter(s, lam, rows, (rows, cols))[0] * (u.T @ y)
    fit: Tensor = vh.T @ coef
    return fit


def min_norm_linear_regression_risk(
    n: int,
    p: int,
    *,
    r2: float,
    sigma2: float,
    repeats: int = 10,
    ridge: float = 0.0,
    generator: torch.Generator | int | None = None,
) -> SimulatedRisk:
    r"""Simulated risk of min-norm (or ridge) least squares in the isotropic model.

    Each repeat draws :math:`X \in \mathbb R^{n \times p}` with i.i.d. :math:`N(0,1)` entries,
    :math:`\beta = r\,g/\|g\|` (:math:`g` standard normal), :math:`y = X\beta + \sigma\varepsilon`,
    fits the ridge solution :math:`\hat\beta = (X^\top X + n\lambda I)^{-1}X^\top y`, or the
    min-norm solution :math:`\hat\beta = X^+ y` for :math:`\lambda = 0`, and records
    :math:`\|\hat\beta - \beta\|^2`, the excess risk for isotropic test inputs. Compare with
    :func:`min_norm_risk` / :func:`ridge_risk` at :math:`\gamma = p/n`.

    The fit uses a Cholesky factor of the smaller Gram matrix :math:`X^\top X + n\lambda I`
    or :math:`X X^\top + n\lambda I` (a Gaussian :math:`X` has full rank with probability
    one), and falls back to the SVD of :math:`X` with singular values below
    :math:`\epsilon \max(n, p)\, s_{\max}` dropped where that matrix is not numerically
    positive definite. At :math:`n = 1000, p = 4000` a draw costs about 0.3 s of one core,
    against 3.6 s with a thin SVD of :math:`X`.

    Parameters
    ----------
    n, p : int
        Samples and features (>= 1).
    r2 : float
        :math:`r^2 = \|\beta\|^2 \ge 0`.
    sigma2 : float
        Noise variance :math:`\sigma^2 \ge 0`.
    repeats : int
        Independent draws (>= 1).
    ridge : float
        :math:`\lambda \ge 0`; 0 is min-norm.
    generator : torch.Generator or int or None
        Source of the draws (an int is a seed; ``None`` means seed 0).

    Returns
    -------
    SimulatedRisk

    Examples
    --------
    >>> sim = min_norm_linear_regression_risk(400, 200, r2=1.0, sigma2=1.0, repeats=4)
    >>> abs(sim.mean / min_norm_risk(0.5, r2=1.0, sigma2=1.0).item() - 1) < 0.15
    True
    """
    rows = integer("n", n, 1)
    cols = integer("p", p, 1)
    signal = nonnegative_number("r2", r2)
    noise = nonnegative_number("sigma2", sigma2)
    count = integer("repeats", repeats, 1)
    lam = nonnegative_number("ridge", ridge)
    gen = _generator(generator)
    risks = torch.empty(count, dtype=torch.float64)
    for i in range(count):
        x = torch.randn(rows, cols, dtype=torch.float64, generator=gen)
        direction = torch.randn(cols, dtype=torch.float64, generator=gen)
        beta = math.sqrt(signal) * direction / direction.norm()
        y = x @ beta + math.sqrt(noise) * torch.randn(rows, dtype=torch.float64, generator=gen)
        risks[i] = (_linear_fit(x, y, lam) - beta).square().sum()
    return _summary(risks, cols / rows)


def _summary(risks: Tensor, gamma: float) -> SimulatedRisk:
    count = risks.shape[0]
    return SimulatedRisk(
        risks=risks,
        mean=float(risks.mean()),
        median=float(risks.quantile(0.5)),
        stderr=float(risks.std() / math.sqrt(count)) if count > 1 else math.nan,
        gamma=gamma,
    )


def random_relu_features(x: Tensor, weights: Tensor) -> Tensor:
    r"""Random ReLU features :math:`\phi(x) = \mathrm{relu}(x W/\sqrt d)/\sqrt P`.

    With :math:`W_{ij} \sim N(0, 1)`, :math:`\phi(x)^\top\phi(x') \to
    E_w[\mathrm{relu}(w^\top x/\sqrt d)\,\mathrm{relu}(w^\top x'/\sqrt d)]` as
    :math:`P \to \infty`: the arc-cosine kernel of degree 1, which is the NNGP of
    ``serial(Dense(w_std=1.0, b_std=None), Relu(), Dense(w_std=1.0, b_std=None))``.

    Parameters
    ----------
    x : Tensor of shape (n, d)
    weights : Tensor of shape (d, P)

    Returns
    -------
    Tensor of shape (n, P)
        In the promoted dtype, differentiable.

    Examples
    --------
    >>> phi = random_relu_features(torch.ones(1, 4), torch.tensor([[1.0, -1.0]] * 4))
    >>> phi.tolist()  # relu(+-4 / sqrt(4)) / sqrt(2)
    [[1.4142135381698608, 0.0]]
    """
    inputs = real_tensor("x", x, (2,), shape_text="(n, d)")
    w = real_tensor("weights", weights, (2,), shape_text="(d, P)")
    if w.shape[0] != inputs.shape[1]:
        raise NtklabValueError(
            f"weights: expected {inputs.shape[1]} rows to match x (n, d), got shape "
            f"{tuple(w.shape)}"
        )
    d, features = inputs.shape[1], w.shape[1]
    return torch.relu(inputs @ w / math.sqrt(d)) / math.sqrt(features)


def _ridges(ridges: object) -> Tensor:
    if isinstance(ridges, numbers.Real) and not isinstance(ridges, bool):
        values = [float(ridges)]
    elif isinstance(ridges, Tensor):
        values = ridges.detach().reshape(-1).tolist()
    elif isinstance(ridges, Sequence) and not isinstance(ridges, str):
        values = list(ridges)
    else:
        raise NtklabTypeError(
            f"ridges: expected a float, a sequence of floats or a 1-D tensor, got "
            f"{type(ridges).__name__} {ridges!r}"
        )
    if not values:
        raise NtklabValueError("ridges: expected at least one ridge, got none")
    checked = [nonnegative_number(f"ridges[{i}]", v) for i, v in enumerate(values)]
    return torch.tensor(checked, dtype=torch.float64)


def _check_regression_inputs(
    x_train: object, y_train: object, x_test: object
) -> tuple[Tensor, Tensor, Tensor]:
    xa = real_tensor("x_train", x_train, (2,), shape_text="(n, d)")
    ya = real_tensor("y_train", y_train, (1, 2), shape_text="(n,) or (n, k)")
    xb = real_tensor("x_test", x_test, (2,), shape_text="(n_test, d)")
    if ya.shape[0] != xa.shape[0]:
        raise NtklabValueError(
            f"y_train: expected {xa.shape[0]} rows to match x_train, got shape {tuple(ya.shape)}"
        )
    if xb.shape[1] != xa.shape[1]:
        raise NtklabValueError(
            f"x_test: expected {xa.shape[1]} columns to match x_train, got shape {tuple(xb.shape)}"
        )
    if xa.device != xb.device or xa.device != ya.device:
        raise NtklabValueError(
            f"x_test, y_train: expected the device of x_train ({xa.device}), got "
            f"{xb.device} and {ya.device}"
        )
    return xa, ya, xb


def _fit_predict(
    xa: Tensor, ya: Tensor, xb: Tensor, n_features: int, lam: Tensor, gen: torch.Generator
) -> Tensor:
    r"""Predictions (n_ridges, n_test, k) in float64 for one draw of the weights.

    One thin SVD serves every ridge. It is taken of :math:`\Phi^\top` when :math:`P > n`
    (LAPACK's tall path: about 3x faster than the wide one at :math:`n = 500, P = 5000`),
    and the coefficients :math:`a_\lambda = V\,\mathrm{diag}(f_\lambda(s))\,U^\top y`
    (shape (n_ridges, P, k)) are formed before the test features multiply them, which costs
    :math:`n_{test} P\, n_{ridges} k` flops instead of :math:`n_{test} P \min(n, P)`.
    """
    d = xa.shape[1]
    w = torch.randn(d, n_features, dtype=torch.float64, generator=gen).to(xa.device)
    phi = random_relu_features(xa.detach().double(), w)  # shape: (n, P)
    phi_test = random_relu_features(xb.detach().double(), w)  # shape: (n_test, P)
    targets = ya.detach().double().reshape(ya.shape[0], -1)  # shape: (n, k)
    if n_features > xa.shape[0]:
        v, s, uh = torch.linalg.svd(phi.T, full_matrices=False)  # phi = uh.T diag(s) v.T
        u, vh = uh.T, v.T
    else:
        u, s, vh = torch.linalg.svd(phi, full_matrices=False)
    filt = _ridge_filter(s, lam.to(xa.device), xa.shape[0], tuple(phi.shape))  # (R, r)
    coef = filt[:, :, None] * (u.T @ targets)[None]  # shape: (R, r, k)
    weights = vh.T @ coef  # shape: (R, P, k)
    pred: Tensor = phi_test @ weights  # shape: (R, n_test, k)
    return pred


def random_features_regression(
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    *,
    n_features: int,
    ridges: float | Sequence[float] | Tensor = 0.0,
    generator: torch.Generator | int | None = None,
) -> Tensor:
    r"""Fit random ReLU features regression and predict, for several ridges at once.

    With :math:`\Phi = \phi(X) \in \mathbb R^{n \times P}` (:func:`random_relu_features`, one
    draw of :math:`W \in \mathbb R^{d \times P}` with unit Gaussian entries) and its thin SVD
    :math:`\Phi = U\,\mathrm{diag}(s)\,V^\top`,

    .. math::

        \hat f(x) = \phi(x)^\top V\, \mathrm{diag}\Big(\frac{s}{s^2 + n\lambda}\Big) U^\top y
                  = \phi(x)^\top \Phi^\top (\Phi\Phi^\top + n\lambda I)^{-1} y,

    and the min-norm interpolator :math:`\phi(x)^\top \Phi^+ y` for :math:`\lambda = 0`. As
    :math:`P \to \infty` it tends to kernel ridge regression with the arc-cosine kernel,
    :math:`k(x, X)(K + n\lambda I)^{-1} y`.

    Parameters
    ----------
    x_train : Tensor of shape (n, d)
    y_train : Tensor of shape (n,) or (n, k)
    x_test : Tensor of shape (n_test, d)
    n_features : int
        :math:`P \ge 1`.
    ridges : float, sequence of floats or 1-D Tensor
        :math:`\lambda \ge 0` values, fitted from one SVD.
    generator : torch.Generator or int or None
        Source of :math:`W`, drawn as ``torch.randn(d, P, dtype=torch.float64,
        generator=generator)`` on the CPU (an int is a seed, ``None`` means seed 0).

    Returns
    -------
    Tensor of shape (n_ridges, n_test) or (n_ridges, n_test, k)
        As ``y_train`` is 1-D or 2-D; computed in float64, returned in ``x_train``'s dtype on
        its device. Not differentiable.
    """
    xa, ya, xb = _check_regression_inputs(x_train, y_train, x_test)
    features = integer("n_features", n_features, 1)
    lam = _ridges(ridges)
    pred = _fit_predict(xa, ya, xb, features, lam, _generator(generator))
    pred = pred if ya.ndim == 2 else pred[..., 0]
    return pred.to(xa.dtype)


@dataclass(frozen=True)
class RandomFeaturesRisk:
    """Test risks of random-features regression over repeated draws of the weights.

    Attributes
    ----------
    risks : Tensor of shape (repeats, n_ridges)
        Test mean squared error :math:`\\frac{1}{n_{test} k}\\sum (\\hat f - y)^2` (float64).
    ridges : Tensor of shape (n_ridges,)
    mean, median : Tensor of shape (n_ridges,)
        Over repeats; near :math:`P = n` the mean is dominated by rare blow-ups, so claim C1
        reads the median.
    n_features : int
    """

    risks: Tensor
    ridges: Tensor
    mean: Tensor
    median: Tensor
    n_features: int


def random_features_risk(
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    *,
    n_features: int,
    ridges: float | Sequence[float] | Tensor = 0.0,
    repeats: int = 1,
    generator: torch.Generator | int | None = None,
) -> RandomFeaturesRisk:
    r"""Test MSE of :func:`random_features_regression` over ``repeats`` draws of the features.

    .. math:: \mathrm{MSE}_\lambda = \frac{1}{n_{test} k}\sum_{j, c}
              \big(\hat f_\lambda(x^{test}_j)_c - y^{test}_{jc}\big)^2 .

    Parameters
    ----------
    x_train, y_train, x_test
        As in :func:`random_features_regression`.
    y_test : Tensor of shape (n_test,) or (n_test, k)
        Same number of dimensions as ``y_train``.
    n_features : int
    ridges : float, sequence of floats or 1-D Tensor
    repeats : int
        Independent draws of :math:`W` (>= 1).
    generator : torch.Generator or int or None

    Returns
    -------
    RandomFeaturesRisk
    """
    xa, ya, xb = _check_regression_inputs(x_train, y_train, x_test)
    yb = real_tensor("y_test", y_test, (1, 2), shape_text="(n_test,) or (n_test, k)")
    expected = (xb.shape[0], *ya.shape[1:])
    if tuple(yb.shape) != expected:
        raise NtklabValueError(
            f"y_test: expected shape {expected} (x_test's rows, y_train's columns), got "
            f"{tuple(yb.shape)}"
        )
    features = integer("n_features", n_features, 1)
    count = integer("repeats", repeats, 1)
    lam = _ridges(ridges)
    gen = _generator(generator)
    target = yb.detach().double().reshape(yb.shape[0], -1).to(xa.device)
    risks = torch.empty(count, lam.shape[0], dtype=torch.float64)
    for i in range(count):
        pred = _fit_predict(xa, ya, xb, features, lam, gen)
        risks[i] = (pred - target[None]).square().mean(dim=(1, 2)).cpu()
    return RandomFeaturesRisk(
        risks=risks,
        ridges=lam,
        mean=risks.mean(dim=0),
        median=risks.quantile(0.5, dim=0),
        n_features=features,
    )
