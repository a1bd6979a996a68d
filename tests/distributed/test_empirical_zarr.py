"""The empirical NTK written to zarr tile by tile: round trips against the dense
``ntklab.empirical.ntk``, only the upper tiles computed for x2 = None, progress to 1.0."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab.errors import NtklabValueError

pytest.importorskip("dask")
pytest.importorskip("distributed")
pytest.importorskip("zarr")

from ntklab.distributed import empirical_ntk_to_zarr, read_zarr

F64 = torch.float64


def _cnn(k: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, k),
    ).to(F64)


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


@pytest.mark.parametrize("outputs", ["trace", "pseudo", "full", "diagonal"])
def test_zarr_round_trip(gen: torch.Generator, tmp_path: Path, outputs: str) -> None:
    net = _cnn()
    x1 = torch.randn(11, 1, 8, 8, generator=gen, dtype=F64)
    x2 = torch.randn(6, 1, 8, 8, generator=gen, dtype=F64)
    for name, second in (("sym", None), ("cross", x2)):
        path = tmp_path / f"{name}.zarr"
        z = empirical_ntk_to_zarr(net, x1, second, path=path, outputs=outputs, chunk=4)
        dense = nl.empirical.ntk(net, x1, second, outputs=outputs)  # type: ignore[arg-type]
        assert z.shape == tuple(dense.shape)
        assert z.chunks[:2] == (4, 4) and z.chunks[2:] == tuple(dense.shape[2:])
        got = torch.from_numpy(np.asarray(z[:]))
        torch.testing.assert_close(got, dense, rtol=1e-12, atol=1e-12 * float(dense.abs().max()))
        back = read_zarr(path)
        torch.testing.assert_close(torch.from_numpy(back.compute(scheduler="sync")), got)


def test_symmetric_computes_upper_tiles_only(
    gen: torch.Generator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ntklab.empirical

    calls: list[tuple[int, bool]] = []
    real = ntklab.empirical.ntk

    def counting(model: nn.Module, x1: torch.Tensor, x2: torch.Tensor | None, **kw: Any) -> Any:
        calls.append((x1.shape[0], x2 is None))
        return real(model, x1, x2, **kw)

    monkeypatch.setattr(ntklab.empirical, "ntk", counting)
    net = _cnn()
    x = torch.randn(10, 1, 8, 8, generator=gen, dtype=F64)
    reports: list[tuple[float, str]] = []
    z = empirical_ntk_to_zarr(
        net,
        x,
        path=tmp_path / "k.zarr",
        chunk=4,
        outputs="full",
        progress=lambda f, m: reports.append((f, m)),
    )
    # tiles start at 0, 4, 8: 3 diagonal tiles (x2 None) and 3 above the diagonal
    assert sorted(calls) == sorted(
        [(4, True), (4, True), (2, True), (4, False), (4, False), (4, False)]
    )
    full = torch.from_numpy(np.asarray(z[:]))
    mirror = full.permute(1, 0, 3, 2)
    tiles = [slice(0, 4), slice(4, 8), slice(8, 10)]
    for rows, cols in itertools.permutations(tiles, 2):  # tiles off the diagonal: exact copies
        assert torch.equal(full[rows, cols], mirror[rows, cols])
    torch.testing.assert_close(full, mirror, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(full, real(net, x, outputs="full"))
    fractions = [f for f, _ in reports]
    assert len(fractions) == 6
    assert all(a < b for a, b in itertools.pairwise(fractions)) and fractions[-1] == 1.0


def test_on_a_client_with_progress(gen: torch.Generator, tmp_path: Path, client: Any) -> None:
    net = _cnn().float()
    x = torch.randn(9, 1, 8, 8, generator=gen)
    reports: list[float] = []
    z = empirical_ntk_to_zarr(
        net,
        x,
        path=tmp_path / "k.zarr",
        outputs="pseudo",
        chunk=4,
        client=client,
        progress=lambda f, _m: reports.append(f),
    )
    assert z.dtype == np.float32
    dense = nl.empirical.ntk(net, x, outputs="pseudo")
    torch.testing.assert_close(torch.from_numpy(np.asarray(z[:])), dense, rtol=1e-5, atol=1e-5)
    assert len(reports) == 6 and reports[-1] == 1.0
    assert all(a < b for a, b in itertools.pairwise(reports))


def test_bad_input(gen: torch.Generator, tmp_path: Path) -> None:
    net = _cnn()
    x = torch.randn(5, 1, 8, 8, generator=gen, dtype=F64)
    path = tmp_path / "k.zarr"
    empirical_ntk_to_zarr(net, x, path=path, chunk=4)
    with pytest.raises(NtklabValueError, match="path: expected a new location"):
        empirical_ntk_to_zarr(net, x, path=path, chunk=4)
    z = empirical_ntk_to_zarr(net, x, path=path, outputs="diagonal", chunk=4, overwrite=True)
    assert z.shape == (5, 5, 3)
    with pytest.raises(NtklabValueError, match="outputs: expected one of"):
        empirical_ntk_to_zarr(net, x, path=tmp_path / "a.zarr", outputs="sum")
    with pytest.raises(NtklabValueError, match="chunk: expected a tile whose result"):
        empirical_ntk_to_zarr(net, x, path=tmp_path / "b.zarr", chunk=4, max_memory=100)
    with pytest.raises(NtklabValueError, match="x2: expected inputs of the shape of x1's"):
        empirical_ntk_to_zarr(
            net, x, torch.randn(3, 1, 8, 8, 1, dtype=F64), path=tmp_path / "c.zarr"
        )
