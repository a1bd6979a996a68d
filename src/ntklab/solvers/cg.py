"""Preconditioned conjugate gradients for :math:`(K + \\rho I) X = Y` with many right-hand sides.

The right-hand sides are iterated together (one operator product per iteration for all of
them), each with its own step sizes. Scalars, residual norms and the iterates are kept in
float64 whatever the operator's dtype. Hestenes & Stiefel (1952); the preconditioned form is
that of Saad, *Iterative Methods for Sparse Linear Systems*, Alg. 9.1.

No garbage is handed back: CG's residual is not monotone (only the :math:`A`-norm of the
error is), so the iterate of least residual is kept for each right-hand side and returned; its
true residual :math:`\\|b - A x\\|` is computed once at the end, and when the recursively updated
residual has drifted from it (rounding), CG restarts from that iterate with the true residual
(residual replacement, van der Vorst & Ye, 2000). When even the best iterate misses the
tolerance, :class:`~ntklab.errors.ConvergenceError` is raised, carrying it, unless the caller
asked for the best effort (``on_failure="warn"``).

The default iteration limit is what the CG bound needs at condition number
:math:`\\kappa = 10^6` (of the preconditioned operator),

.. math:: \\frac{\\|r_k\\|}{\\|r_0\\|} \\le 2\\sqrt{\\kappa}
          \\left(\\frac{\\sqrt{\\kappa} - 1}{\\sqrt{\\kappa} + 1}\\right)^k
          \\quad\\Rightarrow\\quad
          k = \\left\\lceil \\ln\\frac{2\\sqrt{\\kappa}}{\\mathrm{tol}} \\Big/
          \\ln\\frac{\\sqrt{\\kappa} + 1}{\\sqrt{\\kappa} - 1} \\right\\rceil

(13,011 at ``tol = 1e-8``), and at least ``n``: a kernel at condition :math:`10^6` converges
within it or the solver says so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_positive_int
from .._repr import short_repr
from ..errors import ConvergenceError, ConvergenceWarning, NtklabValueError, NumericalWarning

__all__ = ["CGResult", "OnFailure", "cg_iteration_bound", "conjugate_gradient"]

Apply = Callable[[Tensor], Tensor]
OnFailure = Literal["raise", "warn"]
_ON_FAILURE = ("raise", "warn")

DESIGN_CONDITION = 1e6
"""The condition number the default iteration limit is sized for."""

_MAX_RESTARTS = 3


@short_repr
@dataclass(frozen=True)
class CGResult:
    """The best iterate and its diagnostics.

    Attributes
    ----------
    solution : Tensor of shape (n, k), float64
        For each right-hand side, the iterate of least residual.
    iterations : int
    residuals : Tensor of shape (iterations + 1,)
        The largest relative residual :math:`\\|b - A x\\| / \\|b\\|` over the columns, per
        iteration (the recursively updated residual).
    converged : bool
        Whether the best iterate of every column reached ``tol`` (by the recursive residual).
    residual : float
        The true relative residual :math:`\\max_j \\|b_j - A x_j\\| / \\|b_j\\|` of ``solution``.
    """

    solution: Tensor
    iterations: int
    residuals: Tensor
    converged: bool
    residual: float = math.nan


def cg_iteration_bound(condition: float, tol: float) -> int:
    """Iterations after which the CG bound guarantees a relative residual below ``tol``.

    .. math:: k = \\left\\lceil \\ln\\frac{2\\sqrt{\\kappa}}{\\mathrm{tol}} \\Big/
              \\ln\\frac{\\sqrt{\\kappa} + 1}{\\sqrt{\\kappa} - 1} \\right\\rceil,

    from :math:`\\|r_k\\|/\\|r_0\\| \\le \\sqrt{\\kappa}\\,\\|e_k\\|_A/\\|e_0\\|_A` and the
    Chebyshev bound on the :math:`A`-norm of the error (Saad, Thm. 6.29). A ``tol`` below the
    float64 machine epsilon counts as the epsilon.

    Parameters
    ----------
    condition : float
        :math:`\\kappa > 1` of the (preconditioned) operator.
    tol : float

    Returns
    -------
    int

    Examples
    --------
    >>> cg_iteration_bound(1e6, 1e-8)
    13011
    """
    if not math.isfinite(condition) or condition <= 1.0:
        raise NtklabValueError(f"condition: expected a finite value > 1, got {condition}")
    s = math.sqrt(condition)
    t = max(float(tol), float(torch.finfo(torch.float64).eps))
    return max(1, math.ceil(math.log(2.0 * s / t) / math.log((s + 1.0) / (s - 1.0))))


def conjugate_gradient(
    apply: Apply,
    b: Tensor,
    *,
    precondition: Apply | None = None,
    x0: Tensor | None = None,
    tol: float = 1e-8,
    max_iter: int | None = None,
    callback: Callable[[int, float], None] | None = None,
    on_failure: OnFailure = "raise",
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
    max_iter : int, optional
        Default: :math:`\\max(n,` :func:`cg_iteration_bound` :math:`(10^6, \\mathrm{tol}))`,
        enough for an operator of condition number :math:`10^6`.
    callback : callable(iteration, relative residual), optional
    on_failure : {"raise", "warn"}
        What happens when ``max_iter`` runs out before the best iterate reaches ``tol``:
        ``"raise"`` (default) raises :class:`~ntklab.errors.ConvergenceError` carrying the best
        iterate; ``"warn"`` is the best effort: the best iterate is returned (with
        ``converged=False``) and a :class:`~ntklab.errors.ConvergenceWarning` is issued.

    Returns
    -------
    CGResult
        The iterate of least residual for each column.

    Raises
    ------
    ConvergenceError
        When ``max_iter`` iterations did not bring the best iterate to ``tol`` (and
        ``on_failure="raise"``), naming the iterations and the relative residual reached; its
        ``best`` is the best iterate, ``residual`` its true relative residual.
    NtklabValueError
        When a column that has not converged meets a search direction of negative or zero
        curvature, :math:`p_j^T A p_j \\le 0` (or NaN): ``apply`` is not positive definite (an
        indefinite or singular operator, or rounding that makes it so). The message names the
        iteration, the column and the curvature. Also for an unknown ``on_failure``.

    Warns
    -----
    ConvergenceWarning
        With ``on_failure="warn"``, when ``max_iter`` iterations did not reach ``tol``.
    NumericalWarning
        When the recursive residual reached ``tol`` but the true residual of the solution,
        even after restarts, did not: the rounding of ``apply`` (a float32 operator) limits the
        attainable accuracy; the message names both.

    Examples
    --------
    >>> import torch
    >>> a = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    >>> res = conjugate_gradient(lambda v: a @ v, torch.ones(2, 1, dtype=torch.float64))
    >>> res.converged, res.solution[:, 0]
    (True, tensor([0.1818, 0.2727], dtype=torch.float64))
    """
    check_on_failure(on_failure)
    if max_iter is None:
        max_iter = default_max_iter(b.shape[0], tol)
    res = run_cg(
        apply, b, precondition=precondition, x0=x0, tol=tol, max_iter=max_iter, callback=callback
    )
    report(
        res,
        tol=tol,
        max_iter=max_iter,
        on_failure=on_failure,
        best=res.solution,
        name="conjugate_gradient",
        stacklevel=3,
    )
    return res


def check_on_failure(on_failure: object) -> None:
    """Refuse an ``on_failure`` other than ``"raise"`` or ``"warn"``."""
    if on_failure not in _ON_FAILURE:
        raise NtklabValueError(f"on_failure: expected one of {_ON_FAILURE}, got {on_failure!r}")


def default_max_iter(n: int, tol: float) -> int:
    """:math:`\\max(n,` :func:`cg_iteration_bound` :math:`(10^6, \\mathrm{tol}))`."""
    return max(n, cg_iteration_bound(DESIGN_CONDITION, tol))


def report(
    res: CGResult,
    *,
    tol: float,
    max_iter: int,
    on_failure: OnFailure,
    best: Tensor,
    name: str,
    stacklevel: int,
) -> None:
    """Raise :class:`ConvergenceError` or warn (per ``on_failure``) when ``res`` missed ``tol``.

    ``best`` is what the caller would return (``res.solution`` mapped to its output), carried
    by the error.
    """
    if res.converged:
        if res.residual > tol:
            warnings.warn(
                f"{name}: the recursive residual reached tol = {tol:.3e} but the true relative "
                f"residual of the solution is {res.residual:.3e} (after restarts from the "
                "best iterate): the rounding of the operator limits the attainable accuracy "
                "(use a float64 operator, or a tol above it)",
                NumericalWarning,
                stacklevel=stacklevel,
            )
        return
    message = (
        f"{name}: max_iter = {max_iter} iterations ran out with relative residual "
        f"{res.residual:.3e} > tol = {tol:.3e} at the best iterate (after {res.iterations} "
        "iterations); the solution does not meet the tolerance (raise max_iter, add a ridge "
        "or a preconditioner"
    )
    if on_failure == "raise":
        raise ConvergenceError(
            message + ', or pass on_failure="warn" for the best effort)',
            residual=res.residual,
            iterations=res.iterations,
            best=best,
        )
    warnings.warn(message + ")", ConvergenceWarning, stacklevel=stacklevel)


def run_cg(
    apply: Apply,
    b: Tensor,
    *,
    precondition: Apply | None,
    x0: Tensor | None,
    tol: float,
    max_iter: int,
    callback: Callable[[int, float], None] | None,
) -> CGResult:
    """The CG iteration behind :func:`conjugate_gradient`, without the verdict (no warning,
    no error): the best iterate per column, restarted from it with its true residual when the
    recursive one drifted below ``tol`` without it."""
    check_positive_int("max_iter", max_iter)
    b = b.to(torch.float64)
    bnorm = torch.linalg.vector_norm(b, dim=0).clamp_min(1e-300)  # shape: (k,)
    x = torch.zeros_like(b) if x0 is None else x0.to(torch.float64).clone()
    r = b - apply(x) if x0 is not None else b.clone()
    rel_cols = torch.linalg.vector_norm(r, dim=0) / bnorm  # shape: (k,)
    best, best_rel = x.clone(), rel_cols.clone()
    history = [float(rel_cols.max())]
    it = 0
    restarts = 0
    true_rel = rel_cols
    while True:
        z = precondition(r) if precondition is not None else r
        p = z.clone()
        rz = (r * z).sum(0)  # shape: (k,)
        while bool((best_rel > tol).any()) and it < max_iter:
            ap = apply(p)
            pap = (p * ap).sum(0)  # shape: (k,)
            open_cols = best_rel > tol  # columns done are frozen at their best iterate
            _check_curvature(pap, (p * p).sum(0), ~(pap > 0) & open_cols, it)
            step = (pap > 0) & open_cols
            alpha = torch.where(step, rz / torch.where(step, pap, 1.0), 0.0)
            x.add_(alpha * p)
            r.sub_(alpha * ap)
            z = precondition(r) if precondition is not None else r
            rz_new = (r * z).sum(0)
            beta = torch.where(rz != 0, rz_new / torch.where(rz != 0, rz, 1.0), 0.0)
            p = z + beta * p
            rz = rz_new
            it += 1
            rel_cols = torch.linalg.vector_norm(r, dim=0) / bnorm
            better = rel_cols < best_rel
            best = torch.where(better, x, best)
            best_rel = torch.where(better, rel_cols, best_rel)
            rel = float(rel_cols.max())
            history.append(rel)
            if callback is not None:
                callback(it, rel)
        r_true = b - apply(best)
        previous = float(true_rel.max())
        true_rel = torch.linalg.vector_norm(r_true, dim=0) / bnorm
        worst = float(true_rel.max())
        drifted = bool((best_rel <= tol).all()) and worst > tol
        # residual replacement while it helps: restart from the best iterate
        if not drifted or it >= max_iter or restarts >= _MAX_RESTARTS:
            break
        if restarts > 0 and worst > 0.5 * previous:
            break
        restarts += 1
        x, r = best.clone(), r_true
        best_rel = true_rel.clone()
    return CGResult(
        solution=best,
        iterations=it,
        residuals=torch.tensor(history, dtype=torch.float64),
        converged=bool((best_rel <= tol).all()),
        residual=worst,
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
