"""Preconditioned conjugate gradients for :math:`(K + \\rho I) X = Y` with many right-hand sides.

The right-hand sides are iterated together (one operator product per iteration for all of
them), each with its own step sizes. Scalars, residual norms and the iterates are kept in
float64 whatever the operator's dtype. Hestenes & Stiefel (1952); the preconditioned form is
that of Saad, *Iterative Methods for Sparse Linear Systems*, Alg. 9.1.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._repr import short_repr
from ..errors import ConvergenceWarning, NtklabValueError

__all__ = ["CGResult", "conjugate_gradient"]

Apply = Callable[[Tensor], Tensor]


@short_repr
@dataclass(frozen=True)
class CGResult:
    """The iterate and its diagnostics.

    Attributes
    ----------
    solution : Tensor of shape (n, k), float64
    iterations : int
    residuals : Tensor of shape (iterations + 1,)
        The largest relative residual :math:`\\|b - A x\\| / \\|b\\|` over the columns, per
        iteration (the recursively updated residual).
    converged : bool
    """

    solution: Tensor
    iterations: int
    residuals: Tensor
    converged: bool


def conjugate_gradient(
    apply: Apply,
    b: Tensor,
    *,
    precondition: Apply | None = None,
    x0: Tensor | None = None,
    tol: float = 1e-8,
    max_iter: int = 1000,
    callback: Callable[[int, float], None] | None = None,
) -> CGResult:
    """Solve :math:`A X = B` for a symmetric positive definite ``apply`` by (preconditioned) CG.

    .. math::
        r_0 = b - A x_0,\\; z_0 = M r_0,\\; p_0 = z_0; \\quad
        \\alpha_j = \\frac{r_j^T z_j}{p_j^T A p_j},\\;
        x_{j+1} = x_j + \\alpha_j p_j,\\; r_{j+1} = r_j - \\alpha_j A p_j,\\;
        \\beta_j = \\frac{r_{j+1}^T z_{j+1}}{r_j^T z_j},\\; p_{j+1} = z_{j+1} + \\beta_j p_j.

    Parameters
    ----------
    apply : callable, Tensor (n, k) -> Tensor (n, k)
        :math:`A X`, in float64.
    b : Tensor of shape (n, k)
    precondition : callable, optional
        :math:`M \\approx A^{-1}` (symmetric positive definite).
    x0 : Tensor of shape (n, k), optional
    tol : float
        Stop when every column has :math:`\\|r\\| \\le` ``tol`` :math:`\\|b\\|`.
    max_iter : int
    callback : callable(iteration, relative residual), optional

    Returns
    -------
    CGResult
        ``converged=False`` when ``max_iter`` ran out first.

    Raises
    ------
    NtklabValueError
        When a column that has not converged meets a search direction of negative or zero
        curvature, :math:`p_j^T A p_j \\le 0` (or NaN): ``apply`` is not positive definite (an
        indefinite or singular operator, or rounding that makes it so). The message names the
        iteration, the column and the curvature.

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` iterations did not reach ``tol``, naming the iterations and the
        relative residual reached.
    """
    b = b.to(torch.float64)
    x = torch.zeros_like(b) if x0 is None else x0.to(torch.float64).clone()
    r = b - apply(x) if x0 is not None else b.clone()
    bnorm = torch.linalg.vector_norm(b, dim=0).clamp_min(1e-300)  # shape: (k,)
    z = precondition(r) if precondition is not None else r
    p = z.clone()
    rz = (r * z).sum(0)  # shape: (k,)
    rel_cols = torch.linalg.vector_norm(r, dim=0) / bnorm  # shape: (k,)
    history = [float(rel_cols.max())]
    it = 0
    converged = history[0] <= tol
    while not converged and it < max_iter:
        ap = apply(p)
        pap = (p * ap).sum(0)  # shape: (k,)
        active = pap > 0
        _check_curvature(pap, (p * p).sum(0), ~active & (rel_cols > tol), it)
        alpha = torch.where(active, rz / torch.where(active, pap, 1.0), 0.0)
        x.add_(alpha * p)
        r.sub_(alpha * ap)
        z = precondition(r) if precondition is not None else r
        rz_new = (r * z).sum(0)
        beta = torch.where(rz != 0, rz_new / torch.where(rz != 0, rz, 1.0), 0.0)
        p = z + beta * p
        rz = rz_new
        it += 1
        rel_cols = torch.linalg.vector_norm(r, dim=0) / bnorm
        rel = float(rel_cols.max())
        history.append(rel)
        if callback is not None:
            callback(it, rel)
        converged = rel <= tol
    if not converged:
        warnings.warn(
            f"conjugate_gradient: max_iter = {max_iter} iterations ran out with relative "
            f"residual {history[-1]:.3e} > tol = {tol:.3e} (after {it} iterations); the "
            "solution does not meet the tolerance (raise max_iter, add a ridge or a "
            "preconditioner)",
            ConvergenceWarning,
            stacklevel=2,
        )
    return CGResult(
        solution=x,
        iterations=it,
        residuals=torch.tensor(history, dtype=torch.float64),
        converged=converged,
    )


def _check_curvature(pap: Tensor, pp: Tensor, bad: Tensor, iteration: int) -> None:
    """Raise when a column that has not converged has curvature :math:`p^T A p \\le 0`."""
    if not bool(bad.any()):
        return
    j = int(torch.nonzero(bad)[0, 0])
    value, norm2 = float(pap[j]), float(pp[j])
    quotient = f"{value / norm2:.3e}" if norm2 > 0 else "undefined (p = 0)"
    raise NtklabValueError(
        f"apply: expected a symmetric positive definite operator, got curvature p^T A p = "
        f"{value:.3e} <= 0 (Rayleigh quotient p^T A p / p^T p = {quotient}) at CG iteration "
        f"{iteration}, right-hand side {j}: the operator is not positive definite (add a ridge "
        "> 0, or check that the operator is symmetric positive semi-definite)"
    )
