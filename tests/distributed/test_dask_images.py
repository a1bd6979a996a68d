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


CNTK_GAP = nl.serial(
    Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1),
    nl.Relu(),
    Conv(filter_shape=(3, 3), w_std=1.3, b_std=0.2),
    nl.Relu(),
    GlobalAvgPool(),
    nl.Dense(w_std=1.1, b_std=0.05),
)


def test_exact_cntk_over_threaded_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact CNTK with global average pooling, tile by tile on a threaded scheduler,
    equals ``arch.kernel`` on all images at once, with and without ``x2``; for ``K(x, x)``
    only the tiles on and above the diagonal are computed and the result is symmetric."""
    gen = torch.Generator().manual_seed(3)
    x1 = torch.randn(7, 2, 5, 5, dtype=F64, generator=gen)
    x2 = torch.randn(4, 2, 5, 5, dtype=F64, generator=gen)
    calls: list[int] = []
    real = nl.kernels.Architecture.kernel

    def counted(self: nl.Architecture, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    for b in (None, x2):
        ref = CNTK_GAP.kernel(x1, b)
        for get in ("ntk", "nngp"):
            k = kernel_array(CNTK_GAP, x1, b, get=get, chunk=3)
            with monkeypatch.context() as m:
                m.setattr(nl.kernels.Architecture, "kernel", counted)
                calls.clear()
                got = torch.from_numpy(k.compute(scheduler="threads", num_workers=2))
            want = getattr(ref, get)
            assert got.shape == want.shape
            assert_close(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))
            # three row blocks of x1: 6 tiles (upper triangle) for K(x, x), 3 x 2 with x2
            assert len(calls) == 6
            if b is None:
                assert torch.equal(got, got.T)
