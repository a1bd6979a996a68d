r"""Early-stopped kernel gradient descent on the circle, in closed form, with its exact risk.

Kernel gradient descent (or flow) on the squared loss :math:`\frac{1}{2n}\|f(X) - Y\|^2`,
started at :math:`f_0 = 0`, stopped at time :math:`t`, is the spectral filter

.. math::

    \hat f_t = \sum_i \alpha_i\, \kappa(\langle \cdot, x_i \rangle), \qquad
    \alpha = \Theta^{-1}\bigl(I - D_t(\Theta)\bigr) Y,

with :math:`D_t(\lambda) = e^{-\eta t \lambda / n}` (flow) or :math:`(1 - \eta\lambda/n)^t`
(descent), the convention of :mod:`ntklab.dynamics` (``linearized_dynamics(...).test(t,
...)`` with ``fx_train_0 = 0``). Its excess risk decays at the minimax rate
:math:`n^{-2\beta/(2\beta+\gamma)}` when it is stopped at :math:`\eta t \asymp
n^{1/(2\beta+\gamma)}` (Yao, Rosasco & Caponnetto 2007; Lin & Rosasco 2017,
arXiv:1605.08882; for wide networks, the seed of claims B1-B3), for a target with source
condition :math:`\beta` and a kernel of capacity :math:`\gamma`
(:func:`ntklab.data.source_condition_target`).

On :math:`S^1` a dot-product kernel with eigenvalues :math:`\mu_k` (``circle_eigenvalues``)
has the Mercer feature map
:math:`\phi(a) = (\sqrt{\mu_0}, \sqrt{2\mu_k}\cos ka, \sqrt{2\mu_k}\sin ka)_{k=1..K}`, so that
:math:`\kappa(\cos(a - b)) = \phi(a)^\top\phi(b)` exactly for the kernel truncated at
frequency ``K``. By the push-through identity
:math:`\Phi^\top h(\Phi\Phi^\top) = h(\Phi^\top\Phi)\Phi^\top`,

.. math::

    \hat f_t = \phi(\cdot)^\top w_t, \qquad
    w_t = h_t(\Phi^\top \Phi)\, \Phi^\top Y, \qquad h_t(\lambda) = (1 - D_t(\lambda))/\lambda,

which costs one :math:`(2K+1)^2` eigendecomposition instead of an :math:`n \times n` one, and
gives the predictor's Fourier coefficients, hence its excess risk, exactly (Parseval): the
predictor has no frequency above ``K``. The truncated kernel differs from the full one by at
most :math:`2\sum_{k>K}|\mu_k|` uniformly; pass eigenvalues to a ``K`` where that is
negligible (ReLU NTK: :math:`\mu_k \sim k^{-2}`; smooth activations: geometric decay).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_positive_int
from ..data import excess_risk_s1
from ..errors import NtklabTypeError, NtklabValueError
from ..solvers.dense import psd_eigh
from .descent import Schedule

__all__ = [
    "early_stopping_time",
    "kernel_gd_coefficients_s1",
    "kernel_gd_excess_risk_s1",
]

_SQRT2 = math.sqrt(2.0)
_ZERO_RTOL = 1e-12
_BLOCK_ELEMENTS = 1 << 22


def _positive_real(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a real number, got {type(value).__name__}")
    v = float(value)
    ok = v >= 0 if allow_zero else v > 0
    if not (math.isfinite(v) and ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise NtklabValueError(f"{name}: expected a finite value {bound}, got {value!r}")
    return v


def early_stopping_time(n: int, beta: float, gamma: float, scale: float = 1.0) -> float:
    r"""The early-stopping rule of kernel gradient descent: a flow time growing with ``n``.

    .. math:: \tau(n) = c\, n^{1 / (2\beta + \gamma)}

    Stopping kernel gradient flow at time :math:`\tau` keeps the eigen-directions with
    :math:`\lambda \gtrsim 1/\tau` (eigenvalues of the integral operator); balancing the bias
    :math:`\tau^{-2\beta}` against the variance :math:`\tau^{\gamma}/n` gives this rule and
    the minimax excess risk :math:`n^{-2\beta/(2\beta + \gamma)}` (Yao et al. 2007; Lin &
    Rosasco 2017, arXiv:1605.08882). For gradient descent with step :math:`\eta` (mean-
    normalized loss) the number of steps is :math:`\tau/\eta`.

    Parameters
    ----------
    n : int
        Sample size (>= 1).
    beta : float
        Source exponent :math:`\beta > 0`.
    gamma : float
        Capacity :math:`\gamma \ge 0`.
    scale : float
        The constant :math:`c > 0`.

    Returns
    -------
    float
        :math:`\tau(n)`.

    Examples
    --------
    >>> round(early_stopping_time(1024, 1.0, 0.5), 12)  # 1024 ** (1 / 2.5)
    16.0
    """
    n = check_positive_int("n", n)
    beta = _positive_real("beta", beta)
    gamma = _positive_real("gamma", gamma, allow_zero=True)
    scale = _positive_real("scale", scale)
    return float(scale * float(n) ** (1.0 / (2.0 * beta + gamma)))


def _check_eigenvalues(eigenvalues: object) -> Tensor:
    if not isinstance(eigenvalues, Tensor):
        raise NtklabTypeError(
            f"eigenvalues: expected a torch.Tensor of shape (K + 1,), got "
            f"{type(eigenvalues).__name__}"
        )
    if eigenvalues.ndim != 1 or eigenvalues.shape[0] == 0 or not eigenvalues.is_floating_point():
        raise NtklabValueError(
            f"eigenvalues: expected a real floating tensor of shape (K + 1,), got dtype "
            f"{eigenvalues.dtype} and shape {tuple(eigenvalues.shape)}"
        )
    if not bool(torch.isfinite(eigenvalues).all()):
        raise NtklabValueError("eigenvalues: expected finite values, got NaN or inf")
    scale = float(eigenvalues.abs().max())
    negative = eigenvalues < -_ZERO_RTOL * scale
    if bool(negative.any()):
        raise NtklabValueError(
            f"eigenvalues: expected values >= 0 (a positive semi-definite kernel) up to "
            f"{_ZERO_RTOL:g} max|mu|, got negative values at frequencies "
            f"{negative.nonzero().flatten().tolist()[:8]}"
        )
    # rounding-level negatives (FFT of an even profile) are exact zeros
    return eigenvalues.clamp(min=0.0)


def _angles(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise NtklabTypeError(
            f"{name}: expected a real floating tensor of angles (n,) or points (n, 2), got "
            f"{type(x).__name__ if not isinstance(x, Tensor) else x.dtype}"
        )
    if x.ndim == 1:
        angles = x
    elif x.ndim == 2 and x.shape[1] == 2:
        angles = torch.atan2(x[:, 1], x[:, 0])
    else:
        raise NtklabValueError(
            f"{name}: expected angles of shape (n,) or points of shape (n, 2), got shape "
            f"{tuple(x.shape)}"
        )
    if angles.shape[0] == 0:
        raise NtklabValueError(f"{name}: expected at least one point, got none")
    if not bool(torch.isfinite(angles).all()):
        raise NtklabValueError(f"{name}: expected finite values, got NaN or inf")
    return angles


def _basis(angles: Tensor, n_freq: int) -> Tensor:
    """Orthonormal basis ``[1, sqrt2 cos ka, sqrt2 sin ka]_{k=1..K}`` at ``angles``: (n, 2K+1)."""
    k = torch.arange(1, n_freq, dtype=angles.dtype, device=angles.device)
    phase = angles[:, None] * k  # shape: (n, K)
    ones = torch.ones_like(angles)[:, None]
    return torch.cat([ones, _SQRT2 * torch.cos(phase), _SQRT2 * torch.sin(phase)], dim=1)


def kernel_gd_coefficients_s1(
    x: Tensor,
    y: Tensor,
    eigenvalues: Tensor,
    t: Tensor | float,
    *,
    schedule: Literal["flow", "gd"] = "flow",
    learning_rate: float = 1.0,
) -> Tensor:
    r"""Fourier coefficients of kernel gradient descent on :math:`S^1`, started at zero.

    The predictor :math:`\hat f_t = \Theta_{\cdot X}\Theta^{-1}(I - D_t(\Theta)) Y` of
    kernel gradient flow (``schedule="flow"``, :math:`D_t = e^{-\eta t\Theta/n}`) or descent
    (``"gd"``, :math:`D_t = (I - \eta\Theta/n)^t`, integer ``t``) on the mean squared loss,
    for the dot-product kernel :math:`\kappa(\cos(a - b)) = \mu_0 + 2\sum_{k=1}^{K}\mu_k
    \cos k(a - b)`, computed in its Mercer feature space (see the module docstring):

    .. math::

        \hat f_t(a) = \sum_{j} \sqrt{\mu_{k(j)}}\, (w_t)_j\, e_j(a), \qquad
        w_t = V h_t(\Lambda) V^\top \Phi^\top Y,

    with :math:`e_j` the orthonormal basis :math:`\{1, \sqrt2\cos ka, \sqrt2\sin ka\}`,
    :math:`\Phi^\top\Phi = V\Lambda V^\top` and :math:`h_t(\lambda) = (1 - D_t(\lambda))/
    \lambda` (:math:`\eta t / n` at :math:`\lambda = 0`). Equal, up to rounding, to
    ``linearized_dynamics(K_XX, Y, learning_rate=eta, schedule=...).test(t, K_xX)`` with the
    same (truncated) kernel, at cost :math:`O(nK^2 + K^3)` instead of :math:`O(n^3)`.

    Parameters
    ----------
    x : Tensor of shape (n,) or (n, 2)
        Training inputs, as angles or as points :math:`(\cos a, \sin a)`.
    y : Tensor of shape (n,)
        Training targets.
    eigenvalues : Tensor of shape (K + 1,)
        :math:`\mu_0..\mu_K` of the kernel (``circle_eigenvalues``), non-negative up to
        rounding.
    t : float or Tensor of shape (T,)
        Stopping times in steps at ``learning_rate`` (neural-tangents' ``t``; the flow time is
        :math:`\eta t`); whole numbers for ``"gd"``.
    schedule : {"flow", "gd"}
    learning_rate : float
        :math:`\eta > 0`.

    Returns
    -------
    Tensor of shape (T, K + 1, 2) (or (K + 1, 2) for a float ``t``)
        S^1 tables (:mod:`ntklab.data.targets` convention) of the predictors, in ``y``'s
        dtype; compare with a target by :func:`ntklab.data.excess_risk_s1`.

    Warns
    -----
    NumericalWarning
        For ``"gd"`` with a step above the critical :math:`2n/\lambda_{max}`.

    Examples
    --------
    >>> mu = torch.tensor([0.5, 0.25], dtype=torch.float64)  # kappa(t) = 0.5 + 0.5 t
    >>> a = torch.tensor([0.0, math.pi / 2], dtype=torch.float64)
    >>> y = 0.5 + 0.5 * torch.cos(a)  # interpolated by the kernel's own kappa(cos(a - 0))
    >>> table = kernel_gd_coefficients_s1(a, y, mu, 1e6)
    >>> torch.round(table, decimals=6) + 0.0
    tensor([[0.5000, 0.0000],
            [0.3536, 0.0000]], dtype=torch.float64)
    """
    angles = _angles("x", x)
    if not isinstance(y, Tensor) or not y.is_floating_point():
        raise NtklabTypeError(
            f"y: expected a real floating tensor of shape (n,), got "
            f"{type(y).__name__ if not isinstance(y, Tensor) else y.dtype}"
        )
    if y.shape != angles.shape:
        raise NtklabValueError(
            f"y: expected shape ({angles.shape[0]},) (one target per input), got {tuple(y.shape)}"
        )
    if not bool(torch.isfinite(y).all()):
        raise NtklabValueError("y: expected finite values, got NaN or inf")
    mu = _check_eigenvalues(eigenvalues)
    if schedule not in ("flow", "gd"):
        raise NtklabValueError(f"schedule: expected 'flow' or 'gd', got {schedule!r}")
    n = int(angles.shape[0])
    sched = Schedule(kind=schedule, learning_rate=learning_rate, normalizer=float(n))
    dtype, device = y.dtype, y.device
    scalar = not isinstance(t, Tensor)
    t = torch.as_tensor(t, dtype=dtype, device=device).reshape(-1)
    sched.check_times(t)

    n_freq = int(mu.shape[0])
    mu = mu.to(dtype=dtype, device=device)
    root = torch.cat([mu[:1], mu[1:], mu[1:]]).sqrt()  # shape: (2K+1,)
    angles = angles.to(dtype=dtype, device=device)
    p = 2 * n_freq - 1
    gram = torch.zeros(p, p, dtype=dtype, device=device)
    rhs = torch.zeros(p, dtype=dtype, device=device)
    block = max(1, _BLOCK_ELEMENTS // p)
    for start in range(0, n, block):
        feats = _basis(angles[start : start + block], n_freq) * root  # shape: (b, 2K+1)
        gram.addmm_(feats.T, feats)
        rhs.addmv_(feats.T, y[start : start + block])
    eig = psd_eigh(gram)
    sched.check_stable(float(eig.values[-1]))
    filt = sched.integrated(eig.values, t)  # shape: (T, 2K+1)
    proj = eig.vectors.T @ rhs  # shape: (2K+1,)
    w = (filt * proj) @ eig.vectors.T  # shape: (T, 2K+1)
    coef = w * root
    table = torch.zeros(t.shape[0], n_freq, 2, dtype=dtype, device=device)
    table[:, 0, 0] = coef[:, 0]
    table[:, 1:, 0] = coef[:, 1:n_freq]
    table[:, 1:, 1] = coef[:, n_freq:]
    return table[0] if scalar else table


def kernel_gd_excess_risk_s1(
    x: Tensor,
    y: Tensor,
    eigenvalues: Tensor,
    target: Tensor,
    t: Tensor | float,
    *,
    schedule: Literal["flow", "gd"] = "flow",
    learning_rate: float = 1.0,
) -> Tensor:
    r"""Exact excess risk of early-stopped kernel gradient descent on :math:`S^1`.

    .. math::

        \mathcal{E}(\hat f_t) = \|\hat f_t - f\|_{L^2(da/2\pi)}^2
        = \sum_{k} (\hat a_k - a_k)^2 + (\hat b_k - b_k)^2,

    with :math:`\hat f_t` from :func:`kernel_gd_coefficients_s1` (exact: the predictor has
    no frequency above ``K``) and :math:`f` the target's S^1 table (e.g.
    ``source_condition_target(...).function.coefficients``). For labels
    :math:`y = f(x) + \varepsilon` with uniform inputs this is the excess squared-loss risk
    over the Bayes predictor.

    Parameters
    ----------
    x, y, eigenvalues, t, schedule, learning_rate
        As in :func:`kernel_gd_coefficients_s1`.
    target : Tensor of shape (K_t + 1, 2)
        The target's S^1 table (any ``K_t``).

    Returns
    -------
    Tensor of shape (T,) (or () for a float ``t``)

    Examples
    --------
    >>> mu = torch.tensor([0.5, 0.25], dtype=torch.float64)
    >>> a = torch.tensor([0.0, math.pi / 2], dtype=torch.float64)
    >>> f = torch.tensor([[0.5, 0.0], [0.5 * math.sqrt(0.5), 0.0]], dtype=torch.float64)
    >>> risk = kernel_gd_excess_risk_s1(a, f[0, 0] + math.sqrt(2) * f[1, 0] * torch.cos(a),
    ...                                 mu, f, torch.tensor([0.0, 1e6], dtype=torch.float64))
    >>> [round(float(r), 9) for r in risk]  # ||f||^2 at t = 0, then the interpolant is f
    [0.375, 0.0]
    """
    tables = kernel_gd_coefficients_s1(
        x, y, eigenvalues, t, schedule=schedule, learning_rate=learning_rate
    )
    if not isinstance(target, Tensor):
        raise NtklabTypeError(
            f"target: expected a torch.Tensor S^1 table of shape (K+1, 2), got "
            f"{type(target).__name__}"
        )
    return excess_risk_s1(tables, target.to(dtype=tables.dtype, device=tables.device))
