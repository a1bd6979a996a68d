"""CG never hands back garbage: at condition number 1e6 it converges with its default iteration
limit or raises ConvergenceError, and what it returns is its best iterate.

Before, the default limit was ``n`` iterations and the last iterate was returned with only a
warning: at condition 1e6 its residual was several times the right-hand side (worse than 0).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.stats
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import ConvergenceError, ConvergenceWarning, NtklabError
from ntklab.solvers import conjugate_gradient, falkon, solve
from ntklab.solvers.cg import cg_iteration_bound

F64 = torch.float64


def _spd(n: int, condition: float, seed: int = 1) -> torch.Tensor:
    """An SPD matrix with eigenvalues placed log-uniformly in [1 / condition, 1] in a
    Haar-random basis (scipy's ortho_group)."""
    q = torch.from_numpy(scipy.stats.ortho_group.rvs(n, random_state=seed))
    values = torch.logspace(-math.log10(condition), 0.0, n, dtype=F64)
    a = (q * values) @ q.T
    return 0.5 * (a + a.T)


def _close_points_ntk(n: int = 200) -> torch.Tensor:
    """The NTK Gram matrix of Dense-Relu-Dense on points close together (condition ~1e6)."""
    gen = torch.Generator().manual_seed(0)
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5))
    centre = torch.randn(1, 3, generator=gen, dtype=F64)
    x = centre + 0.05 * torch.randn(n, 3, generator=gen, dtype=F64)
    return arch.kernel(x).ntk


def _relative_residual(a: torch.Tensor, x: torch.Tensor, b: torch.Tensor) -> float:
    r = torch.linalg.vector_norm(a @ x - b, dim=0) / torch.linalg.vector_norm(b, dim=0)
    return float(r.max())


@pytest.mark.parametrize("name", ["synthetic", "ntk"])
def test_condition_1e6_converges_with_the_default_limit(name: str) -> None:
    a = _spd(120, 1e6) if name == "synthetic" else _close_points_ntk()
    values = torch.linalg.eigvalsh(a)
    assert 5e5 < float(values[-1] / values[0]) < 1e7  # the regime of the issue
    n = a.shape[0]
    b = torch.randn(n, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converges: no warning
        res = solve(a, b, 0.0, method="cg")
    assert res.converged and res.iterations > n  # more than n: finite-precision CG
    assert _relative_residual(a, res.solution, b) <= 1e-8 * 1.5
    exact = torch.linalg.solve(a, b)
    # forward error within condition x tol
    assert float(torch.linalg.vector_norm(res.solution - exact) / exact.norm()) < 1e-6
    # the plain CG routine has the same default
    direct = conjugate_gradient(lambda v: a @ v, b)
    assert direct.converged and _relative_residual(a, direct.solution, b) <= 1.5e-8


def test_condition_1e6_with_too_few_iterations_raises_with_the_best_iterate() -> None:
    a = _spd(120, 1e6)
    b = torch.randn(120, 1, generator=torch.Generator().manual_seed(2), dtype=F64)
    with pytest.raises(ConvergenceError, match=r"max_iter = 120 .* > tol = 1\.000e-08") as info:
        solve(a, b, 0.0, method="cg", max_iter=120)
    err = info.value
    assert isinstance(err, NtklabError) and isinstance(err, RuntimeError)
    assert err.iterations == 120 and err.best.shape == (120, 1)
    # the residual it carries is its best iterate's true residual, and never worse than x = 0
    true = _relative_residual(a, err.best, b)
    assert err.residual == pytest.approx(true, rel=1e-9)
    assert 1e-8 < true <= 1.0
    # the best of all iterates: no iterate of scipy's CG (same steps, unpreconditioned, in
    # exact agreement for the first steps) does better than it by more than rounding
    with pytest.warns(ConvergenceWarning, match="max_iter = 120"):
        res = solve(a, b, 0.0, method="cg", preconditioner="none", max_iter=120, on_failure="warn")
    history = res.residuals
    assert float(history[-1]) > float(history.min())  # CG's residual is not monotone here
    assert _relative_residual(a, res.solution, b) == pytest.approx(float(history.min()), rel=1e-6)


def test_falkon_raises_with_coefficients_as_best() -> None:
    a = _close_points_ntk(80)
    y = torch.randn(80, 1, generator=torch.Generator().manual_seed(3), dtype=F64)
    centres = torch.arange(0, 80, 4)
    with pytest.raises(ConvergenceError, match="falkon: max_iter = 1 ") as info:
        falkon(nl.solvers.as_operator("a", a), y, 1e-9, centres, tol=1e-14, max_iter=1)
    with pytest.warns(ConvergenceWarning, match="falkon: max_iter = 1 "):
        fit = falkon(
            nl.solvers.as_operator("a", a),
            y,
            1e-9,
            centres,
            tol=1e-14,
            max_iter=1,
            on_failure="warn",
        )
    assert_close(info.value.best, fit.coefficients, rtol=0, atol=0)
    assert fit.coefficients.shape == (20, 1)


def test_iteration_bound_matches_the_chebyshev_bound() -> None:
    """The default limit is the first k with 2 sqrt(kappa) rho^k <= tol."""
    for kappa, tol in [(1e6, 1e-8), (1e4, 1e-6), (1e6, 0.0)]:
        k = cg_iteration_bound(kappa, tol)
        s = math.sqrt(kappa)
        rho = (s - 1) / (s + 1)
        t = max(tol, float(np.finfo(np.float64).eps))
        assert 2 * s * rho**k <= t < 2 * s * rho ** (k - 1)
    assert cg_iteration_bound(1e6, 1e-8) == 13011
