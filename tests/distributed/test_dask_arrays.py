"""Kernel matrices as blockwise Dask arrays and zarr round trips, against ``arch.kernel``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError

pytest.importorskip("dask.array")
pytest.importorskip("distributed")
pytest.importorskip("zarr")

from ntklab.distributed import kernel_array, kernel_to_zarr, read_zarr


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        yield c


def _arch() -> nl.kernels.Architecture:
    return nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.2, b_std=0.2),
        nl.Erf(),
        nl.Dense(w_std=1.0),
    )


def test_import_ntklab_does_not_import_dask() -> None:
    code = "import sys, ntklab, ntklab.distributed; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("which", ["ntk", "nngp"])
def test_blockwise_matches_dense_kernel(gen: torch.Generator, which: str) -> None:
    x1 = torch.randn(23, 4, generator=gen, dtype=torch.float64)
    x2 = torch.randn(17, 4, generator=gen, dtype=torch.float64)
    arr = kernel_array(_arch(), x1, x2, get=which, chunk=5)  # type: ignore[arg-type]
    assert arr.shape == (23, 17)
    assert arr.chunks == ((5, 5, 5, 5, 3), (5, 5, 5, 2))
    dense = getattr(_arch().kernel(x1, x2), which)
    torch.testing.assert_close(torch.from_numpy(arr.compute(scheduler="threads")), dense)


def test_symmetric_float32_on_client(gen: torch.Generator, client: Any) -> None:
    x = torch.randn(30, 3, generator=gen)
    arr = kernel_array(_arch(), x, chunk=8)
    assert arr.dtype == np.float32
    got = torch.from_numpy(client.compute(arr, sync=True))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, _arch().kernel(x).ntk, rtol=1e-5, atol=1e-5)


def test_zarr_round_trip(gen: torch.Generator, tmp_path: Path, client: Any) -> None:
    x1 = torch.randn(21, 5, generator=gen, dtype=torch.float64)
    x2 = torch.randn(12, 5, generator=gen, dtype=torch.float64)
    path = tmp_path / "k.zarr"
    z = kernel_to_zarr(_arch(), x1, x2, path=path, chunk=8, client=client)
    assert z.shape == (21, 12)
    assert z.chunks == (8, 8)
    dense = _arch().kernel(x1, x2).ntk
    torch.testing.assert_close(torch.from_numpy(np.asarray(z[:])), dense)
    back = read_zarr(path)
    assert back.chunks == ((8, 8, 5), (8, 4))
    torch.testing.assert_close(torch.from_numpy(back.compute(scheduler="sync")), dense)
    # an existing array is not replaced silently; overwrite=True replaces it
    with pytest.raises(NtklabValueError, match="path: expected a new location"):
        kernel_to_zarr(_arch(), x1, path=path, chunk=8)
    z2 = kernel_to_zarr(_arch(), x1, path=path, get="nngp", chunk=8, overwrite=True)
    assert z2.shape == (21, 21)
    torch.testing.assert_close(torch.from_numpy(np.asarray(z2[:])), _arch().kernel(x1).nngp)


def test_bad_input(gen: torch.Generator, tmp_path: Path) -> None:
    x = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    with pytest.raises(NtklabValueError, match="get: expected 'ntk' or 'nngp', got 'gp'"):
        kernel_array(_arch(), x, get="gp")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="chunk: expected an int >= 1, got 0"):
        kernel_array(_arch(), x, chunk=0)
    with pytest.raises(NtklabTypeError, match="arch: expected an ntklab Architecture"):
        kernel_array("relu", x)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="x2: expected the feature dimension of x1"):
        kernel_array(_arch(), x, torch.randn(4, 2, generator=gen, dtype=torch.float64))
    with pytest.raises(NtklabValueError, match="path: expected a zarr array"):
        read_zarr(tmp_path / "missing.zarr")


def test_tiles_fit_max_memory(gen: torch.Generator) -> None:
    """A tile of c x c entries needs 8 (7 c^2 + 4 c d + 8 c) bytes in float64 (both kernels,
    four temporaries and the host copy, the scaled inputs): c = 4 with d = 3 needs 1,536."""
    x = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    k = kernel_array(_arch(), x, max_memory=1_600)  # the default chunk shrinks to fit
    assert k.chunks[0][0] == 4
    torch.testing.assert_close(torch.from_numpy(k.compute()), _arch().kernel(x).ntk)
    assert kernel_array(_arch(), x, max_memory=2**30).chunks == ((30,), (30,))
    with pytest.raises(NtklabValueError, match=r"chunk: expected a tile that fits max_memory"):
        kernel_array(_arch(), x, chunk=8, max_memory=1_600)
    with pytest.raises(NtklabValueError, match="max_memory: expected at least"):
        kernel_array(_arch(), x, max_memory=10)
    with pytest.raises(NtklabTypeError, match="max_memory"):
        kernel_array(_arch(), x, max_memory=1e9)  # type: ignore[arg-type]
