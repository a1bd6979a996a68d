"""The blocked kernel operator on images and 1-D signals against the dense ``arch.kernel``."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool
from ntklab.solvers import kernel_operator, predict, solve

F64 = torch.float64
CNN2 = nl.serial(
    Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense(w_std=1.2)
)
CNN1 = nl.serial(
    Conv(filter_shape=(3,), w_std=1.4, b_std=0.1), nl.Relu(), Flatten(), nl.Dense(w_std=1.2)
)
CASES = [
    pytest.param(CNN2, (2, 4, 4), 2**20, id="images"),
    pytest.param(CNN1, (3, 6), 2**13, id="signals"),
]


@pytest.mark.parametrize(("arch", "shape", "budget"), CASES)
def test_matvec_on_images_equals_the_dense_kernel(arch: object, shape: tuple, budget: int) -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(13, *shape, dtype=F64, generator=gen)
    k = arch.kernel(x).ntk  # type: ignore[attr-defined]
    op = kernel_operator(arch, x, max_memory=budget)
    b, _ = op.tile_shape()
    assert 1 < b < 13  # several tiles of rows: the blocking over the first axis is exercised
    v = torch.randn(13, 2, dtype=F64, generator=gen)
    assert_close(op @ v, k @ v, rtol=1e-12, atol=1e-12)
    assert_close(op.diagonal(), k.diagonal(), rtol=1e-12, atol=0.0)
    rows, cols = torch.tensor([12, 0, 5]), torch.tensor([7, 1])
    assert_close(op.block(rows, cols), k[rows][:, cols], rtol=1e-12, atol=1e-12)
    xt = torch.randn(5, *shape, dtype=F64, generator=gen)
    assert_close(op.cross(xt) @ v, arch.kernel(xt, x).ntk @ v, rtol=1e-12, atol=1e-12)  # type: ignore[attr-defined]


def test_image_tiles_account_for_the_spatial_covariances() -> None:
    """With pooling the tile holds |S|^2 covariances per pair: a budget that fits a flat tile
    of 13 rows does not fit an image tile of as many."""
    x = torch.randn(13, 2, 4, 4, dtype=F64)
    op = kernel_operator(CNN2, x, max_memory=2**20)
    flat = kernel_operator(
        nl.serial(nl.Dense(), nl.Relu(), nl.Dense()), x.flatten(1), max_memory=2**20
    )
    assert op.tile_shape()[0] < flat.tile_shape()[0] == 13


def test_solve_and_predict_on_images_and_nystrom_centres() -> None:
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(20, 2, 4, 4, dtype=F64, generator=gen)
    xt = torch.randn(6, 2, 4, 4, dtype=F64, generator=gen)
    y = torch.randn(20, dtype=F64, generator=gen)
    op = kernel_operator(CNN2, x, max_memory=2**21)
    ridge = 0.3
    res = solve(op, y, ridge, method="cg", tol=1e-12)
    k = CNN2.kernel(x).ntk
    expected = CNN2.kernel(xt, x).ntk @ torch.linalg.solve(k + ridge * torch.eye(20, dtype=F64), y)
    assert_close(predict(op, res, xt), expected, rtol=1e-7, atol=1e-9)
    # Nystrom: centres are rows of the image batch (chosen by index on the first axis)
    res_n = solve(op, y, ridge, method="nystrom", n_centres=8, generator=gen, tol=1e-12)
    assert res_n.centres is not None
    c = x[res_n.centres]
    k_nm = CNN2.kernel(x, c).ntk
    k_mm = CNN2.kernel(c).ntk
    alpha = torch.linalg.solve(k_nm.T @ k_nm + ridge * k_mm, k_nm.T @ y)
    assert_close(predict(op, res_n, xt), CNN2.kernel(xt, c).ntk @ alpha, rtol=1e-5, atol=1e-7)


def test_image_input_errors() -> None:
    x = torch.randn(5, 2, 4, 4, dtype=F64)
    mlp = nl.serial(nl.Dense(), nl.Relu(), nl.Dense())
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x1: expected a 2-D tensor .*4-D shape \(5, 2, 4, 4\); the architecture has no sp"
            r"atial layer"
        ),
    ):
        kernel_operator(mlp, x)
    with pytest.raises(NtklabValueError, match=r"x1: expected a channels-first batch"):
        kernel_operator(CNN2, torch.randn(5, 8, 8, 3, dtype=F64))
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x2: expected the channels and spatial shape of x1, \(2, 4, 4\), got shape \(3, 2"
            r", 5, 5\)"
        ),
    ):
        kernel_operator(CNN2, x, torch.randn(3, 2, 5, 5, dtype=F64))
    op = kernel_operator(CNN2, x)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x: expected the channels and spatial shape of x1, \(2, 4, 4\), got shape \(3, 2,"
            r" 5, 5\)"
        ),
    ):
        op.cross(torch.randn(3, 2, 5, 5, dtype=F64))
