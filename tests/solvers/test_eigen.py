"""Top eigenpairs against torch.linalg.eigh, and flow predictions against the matrix exponential."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from ntklab.dynamics.descent import Schedule
from ntklab.errors import NtklabValueError
from ntklab.solvers import flow_predict, kernel_operator, top_eigenpairs


@pytest.mark.parametrize("method", ["lanczos", "nystrom"])
def test_top_eigenpairs_match_eigh(relu_arch, xy, gen, method) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    k = relu_arch.kernel(x).ntk
    vals, vecs = torch.linalg.eigh(k)
    op = kernel_operator(relu_arch, x, max_memory=2**16)
    eig = top_eigenpairs(op, 6, method=method, generator=gen)
    # randomized Nystrom with 2 subspace iterations: ~1e-5 relative on this slow spectrum
    tol = 1e-8 if method == "lanczos" else 1e-4
    assert_close(eig.values, vals.flip(0)[:6], rtol=tol, atol=tol)
    # eigenvectors up to sign: |<v_ours, v_ref>| = 1
    overlap = (eig.vectors * vecs.flip(1)[:, :6]).sum(0).abs()
    assert_close(overlap, torch.ones(6, dtype=torch.float64), rtol=tol, atol=tol)


def test_flow_predict_matches_matrix_exponential(relu_arch, xy, gen) -> None:  # type: ignore[no-untyped-def]
    x, y = xy
    n = x.shape[0]
    k = relu_arch.kernel(x).ntk
    eig = top_eigenpairs(k, n, method="nystrom", generator=gen)  # all n: exact
    sched = Schedule("flow", learning_rate=1.0, normalizer=float(n))
    t = torch.tensor([0.0, 3.0, 50.0], dtype=torch.float64)
    out = flow_predict(eig, y, t, sched)
    for i, ti in enumerate(t.tolist()):
        ref = (torch.eye(n, dtype=k.dtype) - torch.linalg.matrix_exp(-ti * k / n)) @ y
        assert_close(out[i], ref, rtol=1e-6, atol=1e-6)
    xt = torch.randn(11, 4, generator=gen, dtype=torch.float64)
    cross = kernel_operator(relu_arch, x, max_memory=2**15).cross(xt)
    test = flow_predict(eig, y[:, 0], 50.0, sched, cross=cross)
    lam, vec = torch.linalg.eigh(k)
    phi = vec @ torch.diag(-torch.expm1(-50 * lam / n) / lam) @ vec.T  # K^{-1}(I - e^{-tK/n})
    ref = relu_arch.kernel(xt, x).ntk @ phi @ y[:, 0]
    assert_close(test[0], ref, rtol=1e-5, atol=1e-5)


def test_top_k_truncation_is_the_projection(relu_arch, xy, gen) -> None:  # type: ignore[no-untyped-def]
    """At t -> large, the top-k prediction is the projection of y on the top-k eigenspace."""
    x, y = xy
    k = relu_arch.kernel(x).ntk
    eig = top_eigenpairs(k, 8, generator=gen)
    sched = Schedule("flow", learning_rate=1.0, normalizer=1.0)
    out = flow_predict(eig, y, 1e6, sched)[0]
    _, vecs = torch.linalg.eigh(k)
    top = vecs[:, -8:]
    assert_close(out, top @ (top.T @ y), rtol=1e-6, atol=1e-6)


def test_bad_k(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    op = kernel_operator(relu_arch, x)
    with pytest.raises(NtklabValueError, match="k: expected k < n"):
        top_eigenpairs(op, 240)
    with pytest.raises(NtklabValueError, match="method"):
        top_eigenpairs(op, 3, method="power")  # type: ignore[arg-type]
