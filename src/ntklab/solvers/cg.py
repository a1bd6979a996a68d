"""Preconditioned conjugate gradients for :math:`(K + \\rho I) X = Y` with many right-hand sides.

The right-hand sides are iterated together (one operator product per iteration for all of
them), each with its own step sizes. Scalars, residual norms and the iterates are kept in
float64 whatever the operator's dtype. Hestenes & Stiefel (1952); the preconditioned form is
that of Saad, *Iterative Methods for Sparse Linear Systems*, Alg. 9.1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CGResult", "conjugate_gradient"]

Apply = Callable[[Tensor], Tensor]


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
    """
    b = b.to(torch.float64)
    x = torch.zeros_like(b) if x0 is None else x0.to(torch.float64).clone()
    r = b - apply(x) if x0 is not None else b.clone()
    bnorm = torch.linalg.vector_norm(b, dim=0).clamp_min(1e-300)  # shape: (k,)
    z = precondition(r) if precondition is not None else r
    p = z.clone()
    rz = (r * z).sum(0)  # shape: (k,)
    history = [float((torch.linalg.vector_norm(r, dim=0) / bnorm).max())]
    it = 0
    converged = history[0] <= tol
    while not converged and it < max_iter:
        ap = apply(p)
        pap = (p * ap).sum(0)
        active = pap > 0
        alpha = torch.where(active, rz / torch.where(active, pap, 1.0), 0.0)
        x.add_(alpha * p)
        r.sub_(alpha * ap)
        z = precondition(r) if precondition is not None else r
        rz_new = (r * z).sum(0)
        beta = torch.where(rz != 0, rz_new / torch.where(rz != 0, rz, 1.0), 0.0)
        p = z + beta * p
        rz = rz_new
        it += 1
        rel = float((torch.linalg.vector_norm(r, dim=0) / bnorm).max())
        history.append(rel)
        if callback is not None:
            callback(it, rel)
        converged = rel <= tol or not bool(active.any())
    return CGResult(
        solution=x,
        iterations=it,
        residuals=torch.tensor(history, dtype=torch.float64),
        converged=converged and history[-1] <= tol,
    )
