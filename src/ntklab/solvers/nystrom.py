"""Nystrom kernel ridge regression solved by preconditioned CG, in the manner of FALKON.

With centres :math:`\\tilde X` (``m`` of the ``n`` training points) the Nystrom estimator
:math:`f(x) = \\sum_j \\alpha_j K(x, \\tilde x_j)` minimizes
:math:`\\|K_{nM} \\alpha - y\\|^2 + \\rho\\, \\alpha^T K_{MM} \\alpha`, i.e.

.. math:: H \\alpha = K_{nM}^T y, \\qquad H = K_{nM}^T K_{nM} + \\rho K_{MM}.

FALKON (Rudi, Carratino & Rosasco, arXiv:1705.10958; Meanti et al., arXiv:2006.10350)
preconditions it with :math:`T = \\operatorname{chol}(K_{MM})` (upper, :math:`K_{MM} = T^T T`) and
:math:`A = \\operatorname{chol}(T T^T / m + \\lambda I)`, :math:`\\lambda = \\rho / n`, and runs CG
on :math:`\\beta` with :math:`\\alpha = T^{-1} A^{-1} \\beta` and

.. math:: W \\beta = A^{-T}\\left(\\tfrac{1}{n} T^{-T} K_{nM}^T K_{nM} T^{-1} A^{-1} \\beta
          + \\lambda A^{-1} \\beta\\right) = \\tfrac{1}{n} A^{-T} T^{-T} K_{nM}^T y,

whose condition number is close to 1 once :math:`m` is large enough. With :math:`m = n`
centres the estimator is the exact kernel ridge regression :math:`(K + \\rho I)^{-1} y`.

Centres are chosen uniformly at random or by randomly pivoted Cholesky (Chen, Epperly, Tropp &
Webber, arXiv:2207.06503), which samples each next pivot proportionally to the diagonal of the
current residual kernel. :math:`K_{nM}` is stored when it fits the memory budget and recomputed
tile by tile for every product otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .._repr import short_repr
from ..errors import NtklabValueError
from ..memory import resolve_max_memory
from .cg import CGResult, OnFailure, check_on_failure, report, run_cg
from .dense import cholesky_with_jitter
from .operator import KernelOperator, LinearOperator, operator_columns

__all__ = ["NystromFit", "falkon", "rpcholesky_centres", "select_centres"]

CentreRule = Literal["uniform", "rpcholesky"]


def rpcholesky_centres(op: LinearOperator, m: int, *, generator: torch.Generator | None) -> Tensor:
    """``m`` pivots of randomly pivoted Cholesky (arXiv:2207.06503, Alg. 1).

    .. math:: s_i \\sim d / \\textstyle\\sum d, \\quad g = K_{:, s_i} - F F_{s_i}^T, \\quad
              F_{:, i} = g / \\sqrt{g_{s_i}}, \\quad d \\leftarrow d - F_{:, i}^2.

    Returns
    -------
    Tensor of shape (m,), int64, distinct indices.
    """
    n = op.shape[0]
    d = op.diagonal().reshape(n).to(torch.float64).clamp_min(0.0).cpu()
    f = torch.zeros(n, m, dtype=torch.float64)
    picked: list[int] = []
    for i in range(m):
        total = float(d.sum())
        if total <= 0:  # the kernel has rank i: fill with unpicked points
            rest = torch.ones(n, dtype=torch.bool)
            rest[torch.tensor(picked, dtype=torch.int64)] = False
            extra = torch.nonzero(rest).flatten()
            perm = torch.randperm(extra.numel(), generator=generator)[: m - i]
            picked.extend(extra[perm].tolist())
            break
        s = int(torch.multinomial(d, 1, generator=generator))
        col = operator_columns(op, torch.tensor([s], device=op.device)).reshape(n)
        g = col.to(torch.float64).cpu() - f[:, :i] @ f[s, :i]
        f[:, i] = g / g[s].clamp_min(1e-300).sqrt()
        d = (d - f[:, i].square()).clamp_min(0.0)
        d[s] = 0.0
        picked.append(s)
    return torch.tensor(picked, dtype=torch.int64, device=op.device)


def select_centres(
    op: LinearOperator, m: int, rule: CentreRule, *, generator: torch.Generator | None
) -> Tensor:
    """``m`` distinct centre indices, chosen ``"uniform"``-ly or by ``"rpcholesky"``."""
    n = op.shape[0]
    if rule == "uniform":
        return torch.randperm(n, generator=generator)[:m].sort().values.to(op.device)
    if rule == "rpcholesky":
        return rpcholesky_centres(op, m, generator=generator)
    raise NtklabValueError(f"centres: expected 'uniform' or 'rpcholesky', got {rule!r}")


@short_repr
@dataclass(frozen=True)
class NystromFit:
    """Coefficients on the centres and the CG diagnostics.

    Attributes
    ----------
    coefficients : Tensor of shape (m, k), float64
        :math:`\\alpha`: predictions are :math:`K(x, \\tilde X) \\alpha`.
    centres : Tensor of shape (m,)
        Indices of the centres among the training points.
    cg : CGResult
    stored_knm : bool
        Whether :math:`K_{nM}` was kept in memory.
    """

    coefficients: Tensor
    centres: Tensor
    cg: CGResult
    stored_knm: bool


def _knm_products(
    op: LinearOperator, centres: Tensor, max_memory: int
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor], bool]:
    """``(v -> K_nM v, u -> K_nM^T u, stored)``, in float64."""
    n, m = op.shape[0], centres.numel()
    if n * m * 8 <= max_memory or not isinstance(op, KernelOperator):
        knm = operator_columns(op, centres).to(torch.float64)  # shape: (n, m)
        return (lambda v: knm @ v), (lambda u: knm.T @ u), True
    cols = op.x1.index_select(0, centres)
    rect = KernelOperator(
        kernel=op.kernel, x1=op.x1, x2=cols, max_memory=op.max_memory, block_dtype=op.block_dtype
    )
    rect_t = KernelOperator(
        kernel=op.kernel, x1=cols, x2=op.x1, max_memory=op.max_memory, block_dtype=op.block_dtype
    )

    def fwd(v: Tensor) -> Tensor:
        return rect.matmul(v.to(op.dtype)).to(torch.float64)

    def bwd(u: Tensor) -> Tensor:
        return rect_t.matmul(u.to(op.dtype)).to(torch.float64)

    return fwd, bwd, False


def falkon(
    op: LinearOperator,
    y: Tensor,
    ridge: float,
    centres: Tensor,
    *,
    max_memory: int | None = None,
    tol: float = 1e-8,
    max_iter: int = 200,
    on_failure: OnFailure | None = "raise",
) -> NystromFit:
    """FALKON: Nystrom kernel ridge regression on ``centres`` by preconditioned CG.

    Parameters
    ----------
    op : LinearOperator of shape (n, n)
    y : Tensor of shape (n, k)
    ridge : float
        :math:`\\rho > 0` of :math:`K + \\rho I` (FALKON's :math:`\\lambda = \\rho / n`).
    centres : Tensor of shape (m,)
        Distinct indices of the centres.
    max_memory : int, optional
        :math:`K_{nM}` (``8 n m`` bytes) is stored when it fits, else recomputed per product.
        Default ``None``: the policy of :mod:`ntklab.memory` on the operator's device.
    tol : float
        Relative residual of the preconditioned system at which CG stops.
    max_iter : int
    on_failure : {"raise", "warn"} or None
        When ``max_iter`` runs out before ``tol``: raise
        :class:`~ntklab.errors.ConvergenceError` (whose ``best`` holds the coefficients of the
        best iterate), or warn with a :class:`~ntklab.errors.ConvergenceWarning` and return
        them (best effort); ``None`` leaves the verdict to the caller (``fit.cg.converged``).

    Returns
    -------
    NystromFit

    Raises
    ------
    ConvergenceError
        See ``on_failure``.
    """
    if on_failure is not None:
        check_on_failure(on_failure)
    n = op.shape[0]
    m = centres.numel()
    lam = ridge / n
    if isinstance(op, KernelOperator):
        kmm = op.subset(centres).to_dense().to(torch.float64)
    else:
        kmm = operator_columns(op, centres).to(torch.float64)[centres]
    kmm = 0.5 * (kmm + kmm.T)
    t = cholesky_with_jitter(kmm, name="K_MM").factor.T  # upper: K_MM = T^T T
    a = cholesky_with_jitter(
        t @ t.T / m + lam * torch.eye(m, dtype=torch.float64, device=kmm.device), name="A"
    ).factor.T  # upper
    budget = resolve_max_memory(max_memory, op.device)
    fwd, bwd, stored = _knm_products(op, centres, budget)

    def tinv(v: Tensor) -> Tensor:
        out: Tensor = torch.linalg.solve_triangular(t, v, upper=True)
        return out

    def tinv_t(v: Tensor) -> Tensor:
        out: Tensor = torch.linalg.solve_triangular(t.T, v, upper=False)
        return out

    def ainv(v: Tensor) -> Tensor:
        out: Tensor = torch.linalg.solve_triangular(a, v, upper=True)
        return out

    def ainv_t(v: Tensor) -> Tensor:
        out: Tensor = torch.linalg.solve_triangular(a.T, v, upper=False)
        return out

    def apply(beta: Tensor) -> Tensor:
        v = ainv(beta)
        c = bwd(fwd(tinv(v))) / n
        return ainv_t(tinv_t(c) + lam * v)

    y64 = y.to(torch.float64)
    b = ainv_t(tinv_t(bwd(y64) / n))
    res = run_cg(apply, b, precondition=None, x0=None, tol=tol, max_iter=max_iter, callback=None)
    alpha = tinv(ainv(res.solution))
    if on_failure is not None:
        report(
            res,
            tol=tol,
            max_iter=max_iter,
            on_failure=on_failure,
            best=alpha,
            name="falkon",
            stacklevel=3,
        )
    return NystromFit(coefficients=alpha, centres=centres, cg=res, stored_knm=stored)
