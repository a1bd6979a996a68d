"""The blocked kernel operator against the dense kernel of the same architecture."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.solvers import kernel_operator


@pytest.mark.parametrize("which", ["ntk", "nngp"])
@pytest.mark.parametrize("budget", [2**14, 2**17, 2**30])
def test_matmul_diagonal_dense_match(relu_arch, xy, gen, which, budget) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    k = getattr(relu_arch.kernel(x), which)
    op = kernel_operator(relu_arch, x, get=which, max_memory=budget)
    v = torch.randn(x.shape[0], 3, generator=gen, dtype=torch.float64)
    assert op.shape == (240, 240) and op.dtype == torch.float64
    if budget < 2**20:
        assert op.tile_shape()[0] < 240  # the budget binds: several tiles
    assert_close(op @ v, k @ v, rtol=1e-12, atol=1e-10)
    assert_close(op.matmul(v[:, 0]), k @ v[:, 0], rtol=1e-12, atol=1e-10)
    assert_close(op.diagonal(), k.diagonal(), rtol=1e-13, atol=0.0)
    assert_close(op.to_dense(), k, rtol=1e-12, atol=1e-12)
    rows, cols = torch.tensor([5, 0, 239, 17]), torch.tensor([3, 17, 100])
    assert_close(op.block(rows, cols), k[rows][:, cols], rtol=1e-12, atol=1e-12)


def test_cross_operator_matches_rectangular_kernel(relu_arch, xy, gen) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    xt = torch.randn(37, 4, generator=gen, dtype=torch.float64)
    op = kernel_operator(relu_arch, x, max_memory=2**15)
    cross = op.cross(xt)
    v = torch.randn(240, 2, generator=gen, dtype=torch.float64)
    assert cross.shape == (37, 240)
    assert_close(cross @ v, relu_arch.kernel(xt, x).ntk @ v, rtol=1e-12, atol=1e-10)
    with pytest.raises(NtklabValueError, match="symmetric"):
        cross.diagonal()


def test_float32_blocks_float64_result(relu_arch, xy, gen) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    op = kernel_operator(relu_arch, x, max_memory=2**15, block_dtype=torch.float32)
    v = torch.randn(240, generator=gen, dtype=torch.float64)
    out = op @ v
    exact = relu_arch.kernel(x).ntk @ v
    assert out.dtype == torch.float64
    assert_close(out, exact, rtol=1e-5, atol=1e-4)
    assert float((out - exact).abs().max()) > 1e-12  # really computed in float32


def test_budget_too_small_for_one_block(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    with pytest.raises(NtklabValueError, match="max_memory: expected at least"):
        kernel_operator(relu_arch, x, max_memory=64)
    with pytest.raises(NtklabValueError, match="max_memory"):
        kernel_operator(relu_arch, x, max_memory=0)
    with pytest.raises(NtklabTypeError, match="max_memory"):
        kernel_operator(relu_arch, x, max_memory=1.5e6)  # type: ignore[arg-type]


def test_bad_vector_and_kernel(relu_arch, xy) -> None:  # type: ignore[no-untyped-def]
    x, _ = xy
    op = kernel_operator(relu_arch, x)
    with pytest.raises(NtklabValueError, match="v: expected a tensor of shape"):
        op @ torch.ones(7, dtype=torch.float64)
    with pytest.raises(NtklabTypeError, match="arch"):
        kernel_operator(object(), x)
