"""Kernel ridge regression and GP posteriors: the :math:`t = \\infty` ends of the dynamics.

Kernel ridge regression with ridge :math:`\\rho` minimizes
:math:`\\frac12\\|f(X) - Y\\|^2 + \\frac{\\rho}{2}\\|f\\|_{\\mathcal H}^2` and predicts

.. math:: \\hat f(x) = k_{xX} (K + \\rho I)^{-1} Y,

which is gradient flow on the kernel at infinite time with ``ridge = rho`` (absolute), and,
with :math:`\\rho \\to 0`, the minimum-norm interpolant. The ridge can be chosen by
leave-one-out cross-validation, which is closed-form for KRR: with
:math:`G = K + \\rho I` and :math:`\\alpha = G^{-1}Y`, the prediction error at :math:`x_i` of
the fit without :math:`x_i` is :math:`\\alpha_i / (G^{-1})_{ii}` (Rifkin & Lippert 2007), and one
eigendecomposition of :math:`K` serves every :math:`\\rho`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_matrix
from .._repr import short_repr
from ..errors import NtklabValueError
from ..kernels.kernel import Kernel
from ..solvers.dense import check_symmetric, cholesky_with_jitter, psd_eigh
from .descent import Schedule
from .function_space import Gaussian, Get, as_targets, gaussian_at
from .train_kernel import TrainKernel

__all__ = ["RidgeSelection", "gp_posterior", "kernel_ridge_regression", "select_ridge_loo"]


def _check_ridge(name: str, ridge: float, *, positive: bool = False) -> float:
    if isinstance(ridge, bool) or not isinstance(ridge, int | float):
        raise NtklabValueError(f"{name}: expected a float, got {type(ridge).__name__}")
    ok = math.isfinite(ridge) and (ridge > 0 if positive else ridge >= 0)
    if not ok:
        want = "> 0" if positive else ">= 0"
        raise NtklabValueError(f"{name}: expected a finite value {want}, got {ridge}")
    return float(ridge)


def kernel_ridge_regression(
    k_train_train: Tensor,
    y_train: Tensor,
    k_test_train: Tensor | None = None,
    *,
    ridge: float = 0.0,
) -> Tensor:
    """Kernel ridge regression predictions (or, with ``ridge=0``, minimum-norm interpolation).

    Parameters
    ----------
    k_train_train : Tensor of shape (n, n)
    y_train : Tensor of shape (n, k) or (n,)
    k_test_train : Tensor of shape (m, n), optional
        Defaults to ``k_train_train`` (in-sample predictions).
    ridge : float
        :math:`\\rho \\ge 0`, absolute. A singular kernel with ``ridge=0`` is factorized with
        a jitter (and a :class:`~ntklab.NumericalWarning`).

    Returns
    -------
    Tensor of shape (m, k) (or (m,) for 1-D targets)

    Examples
    --------
    >>> import torch
    >>> from ntklab.dynamics import kernel_ridge_regression
    >>> k = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
    >>> kernel_ridge_regression(k, torch.tensor([1.0, -1.0], dtype=torch.float64), ridge=1.0)
    tensor([ 0.5000, -0.5000], dtype=torch.float64)
    """
    k = check_symmetric("k_train_train", k_train_train)
    rho = _check_ridge("ridge", ridge)
    y, vector = as_targets(y_train, int(k.shape[0]), like=k)
    ktd = k if k_test_train is None else check_matrix("k_test_train", k_test_train).to(k.dtype)
    if ktd.shape[1] != k.shape[0]:
        raise NtklabValueError(
            f"k_test_train: expected shape (m, {k.shape[0]}), got {tuple(ktd.shape)}"
        )
    g = 0.5 * (k + k.T) + rho * torch.eye(k.shape[0], dtype=k.dtype, device=k.device)
    alpha = cholesky_with_jitter(g, name="k_train_train + ridge").solve(y)
    out = ktd @ alpha
    return out[:, 0] if vector else out


@short_repr
@dataclass(frozen=True)
class RidgeSelection:
    """The result of choosing a ridge by leave-one-out cross-validation.

    Attributes
    ----------
    ridge : float
        The ridge with the smallest leave-one-out mean squared error.
    ridges : Tensor of shape (R,)
        The candidates.
    loo_mse : Tensor of shape (R,)
        Leave-one-out mean squared error of each (averaged over points and outputs).
    """

    ridge: float
    ridges: Tensor
    loo_mse: Tensor


def select_ridge_loo(
    k_train_train: Tensor, y_train: Tensor, ridges: Sequence[float] | Tensor
) -> RidgeSelection:
    """Choose the KRR ridge by exact leave-one-out cross-validation.

    Parameters
    ----------
    k_train_train : Tensor of shape (n, n)
    y_train : Tensor of shape (n, k) or (n,)
    ridges : sequence of float
        Candidates, each > 0 (absolute).

    Returns
    -------
    RidgeSelection
    """
    k = check_symmetric("k_train_train", k_train_train)
    y, _ = as_targets(y_train, int(k.shape[0]), like=k)
    r = torch.as_tensor(ridges, dtype=k.dtype, device=k.device).reshape(-1)
    if r.numel() == 0:
        raise NtklabValueError("ridges: expected at least one candidate, got none")
    for value in r.tolist():
        _check_ridge("ridges", value, positive=True)
    eig = psd_eigh(0.5 * (k + k.T))
    z = eig.vectors.T @ y  # shape: (n, k)
    inv = 1.0 / (eig.values[None, :] + r[:, None])  # shape: (R, n)
    # G^-1 y = V diag(inv_r) z for each ridge r, shape: (R, n, k); a batched matmul (a
    # three-operand einsum would build an (R, n, n) temporary: 8.7 GB at R = 17, n = 8000)
    alpha = eig.vectors @ (inv[:, :, None] * z)
    diag = torch.einsum("ij,rj->ri", eig.vectors.square(), inv)  # (G^-1)_ii, shape: (R, n)
    residuals = alpha / diag[:, :, None]
    mse = residuals.square().mean(dim=(1, 2))
    best = int(torch.argmin(mse))
    return RidgeSelection(ridge=float(r[best]), ridges=r, loo_mse=mse)


def gp_posterior(
    k_train_train: Kernel,
    y_train: Tensor,
    k_test_train: Kernel,
    k_test_test: Tensor,
    *,
    get: Get = "nngp",
    ridge: float = 0.0,
) -> Gaussian:
    """Posterior of the NNGP (Bayesian inference), or law of the NTK-trained ensemble at
    :math:`t=\\infty`.

    .. math::

        \\mu = \\Theta_{xX}\\Theta_r^{-1} Y, \\qquad
        \\Sigma = K_{xx} - \\Theta_{xX}\\Theta_r^{-1}K_{Xx} - K_{xX}\\Theta_r^{-1}\\Theta_{Xx}
                 + \\Theta_{xX}\\Theta_r^{-1} K_{XX} \\Theta_r^{-1}\\Theta_{Xx}

    with :math:`\\Theta = K` for ``get="nngp"`` (then :math:`\\Sigma = K_{xx} -
    K_{xX}K_r^{-1}K_{Xx}`, the GP posterior with noise variance ``ridge``).

    Parameters
    ----------
    k_train_train : Kernel
        Train-train NNGP and NTK.
    y_train : Tensor of shape (n, k) or (n,)
    k_test_train : Kernel
        Test-train kernels, shape (m, n).
    k_test_test : Tensor of shape (m, m)
        The NNGP on the test inputs.
    get : {"nngp", "ntk"}
    ridge : float
        Absolute (observation-noise variance for the NNGP).

    Returns
    -------
    Gaussian
        Mean (m, k) and covariance (m, m).
    """
    if get not in ("nngp", "ntk"):
        raise NtklabValueError(f"get: expected 'nngp' or 'ntk', got {get!r}")
    rho = _check_ridge("ridge", ridge)
    theta = getattr(k_train_train, get)
    fac = TrainKernel(theta, Schedule("flow", 1.0, 1.0), rho, False, name=f"k_train_train.{get}")
    y, vector = as_targets(y_train, fac.n, like=theta)
    out = gaussian_at(
        fac,
        None,
        y,
        k_train_train.nngp.to(theta.dtype),
        theta_td=getattr(k_test_train, get),
        nngp_td=k_test_train.nngp,
        nngp_tt=k_test_test,
        compute_cov=True,
        get=get,
        vector=vector,
    )
    assert isinstance(out, Gaussian)
    return out
