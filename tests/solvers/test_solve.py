"""The front door ``solve`` against torch.linalg.solve and scipy's CG."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as sla
import torch
from torch.testing import assert_close

from ntklab.errors import NtklabValueError
from ntklab.solvers import conjugate_gradient, kernel_operator, predict, solve

RIDGE = 0.05


def _exact(k: torch.Tensor, y: torch.Tensor, ridge: float) -> torch.Tensor:
    return torch.linalg.solve(k + ridge * torch.eye(k.shape[0], dtype=k.dtype), y)


@pytest.mark.parametrize("method", ["cholesky", "cg", "auto"])
def test_exact_methods_match_linalg_solve(relu_arch, xy, method) -> None:  # type: ignore[no-untyped-def]
    x, y = xy
    k = relu_arch.kernel(x).ntk
    op = kernel_operator(relu_arch, x, max_memory=2**22)
    res = solve(op, y, RIDGE, method=method, tol=1e-12)
    assert res.method == ("cholesky" if method == "auto" else method)
    assert res.converged and res.solution.shape == y.shape
    assert_close(res.solution, _exact(k, y, RIDGE), rtol=1e-7, atol=1e-7)
    assert "total" in res.timings
    if method == "cg":
        assert res.iterations > 1 and res.residuals.shape == (res.iterations + 1,)
        assert float(res.residuals[-1]) <= 1e-12 < float(res.residuals[0])


def test_cg_matches_scipy_cg_iterates(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    """Unpreconditioned CG takes the same steps as scipy's: same iterate after 8 steps (later,
    rounding makes any two CG codes drift apart on this conditioning)."""
    x, y = xy
    k = relu_arch.kernel(x).ntk + RIDGE * torch.eye(240, dtype=torch.float64)
    ours = conjugate_gradient(lambda v: k @ v, y[:, :1], tol=0.0, max_iter=8)
    ref, _ = sla.cg(k.numpy(), y[:, 0].numpy(), rtol=0.0, atol=0.0, maxiter=8)
    assert_close(ours.solution[:, 0], torch.from_numpy(np.asarray(ref)), rtol=1e-8, atol=1e-10)


def test_vector_rhs_and_float32(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    x, y = xy
    k = relu_arch.kernel(x).ntk
    op = kernel_operator(relu_arch, x.float())
    res = solve(op, y[:, 0].float(), RIDGE, method="cg", tol=1e-6)
    assert res.solution.dtype == torch.float32 and res.solution.shape == (240,)
    assert_close(res.solution.double(), _exact(k, y[:, 0], RIDGE), rtol=1e-3, atol=1e-3)


def test_dense_tensor_and_predict(relu_arch, xy, gen) -> None:  # type: ignore[no-untyped-def]
    x, y = xy
    k = relu_arch.kernel(x).ntk
    res = solve(k, y, RIDGE, method="cholesky")
    assert_close(res.solution, _exact(k, y, RIDGE), rtol=1e-9, atol=1e-9)
    op = kernel_operator(relu_arch, x, max_memory=2**16)
    xt = torch.randn(30, 4, generator=gen, dtype=torch.float64)
    assert_close(
        predict(op, res, xt), relu_arch.kernel(xt, x).ntk @ res.solution, rtol=1e-10, atol=1e-10
    )


def test_bad_input(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    x, y = xy
    op = kernel_operator(relu_arch, x)
    with pytest.raises(NtklabValueError, match="method: expected one of"):
        solve(op, y, RIDGE, method="lu")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="ridge: expected a finite value > 0"):
        solve(op, y, 0.0, method="nystrom")
    with pytest.raises(NtklabValueError, match="ridge"):
        solve(op, y, -1.0, method="cg")
    with pytest.raises(NtklabValueError, match="y: expected shape"):
        solve(op, y[:10], RIDGE)
    with pytest.raises(NtklabValueError, match="symmetric"):
        solve(op.cross(x[:5]), y, RIDGE)
