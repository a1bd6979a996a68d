"""Kernel matrices of image and 1-D signal batches as Dask arrays: tiles are row blocks of the
first axis, and the assembled matrix equals ``arch.kernel``."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool

pytest.importorskip("dask.array")

from ntklab.distributed import kernel_array

F64 = torch.float64
CNN2 = nl.serial(
    Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense(w_std=1.2)
)
CNN1 = nl.serial(
    Conv(filter_shape=(3,), w_std=1.4, b_std=0.1), nl.Relu(), Flatten(), nl.Dense(w_std=1.2)
)


@pytest.mark.parametrize(
    ("arch", "shape"),
    [pytest.param(CNN2, (2, 4, 4), id="images"), pytest.param(CNN1, (3, 6), id="signals")],
)
def test_kernel_array_of_images_equals_the_dense_kernel(arch: object, shape: tuple) -> None:
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randn(7, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(5, *shape, dtype=F64, generator=gen)
    k = kernel_array(arch, x1, x2, get="nngp", chunk=3)
    assert k.chunks == ((3, 3, 1), (3, 2))
    got = torch.from_numpy(k.compute(scheduler="synchronous"))
    assert_close(got, arch.kernel(x1, x2).nngp, rtol=1e-12, atol=1e-12)  # type: ignore[attr-defined]


def test_kernel_array_image_errors() -> None:
    x = torch.randn(4, 2, 4, 4, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"x1: expected a 2-D tensor .*4-D shape"):
        kernel_array(nl.serial(nl.Dense(), nl.Relu(), nl.Dense()), x)
    with pytest.raises(NtklabValueError, match=r"x2: expected the channels and spatial shape"):
        kernel_array(CNN2, x, torch.randn(2, 2, 5, 5, dtype=F64))
