"""Kernel matrices as blockwise Dask arrays, and written to zarr for out-of-core use.

A kernel matrix :math:`K_{ij} = k(x^{(1)}_i, x^{(2)}_j)` of an
:class:`~ntklab.kernels.Architecture` is split into square tiles of ``chunk x chunk`` entries;
each tile is one call of ``arch.kernel`` on two row blocks of the inputs, so memory per tile
is bounded by the chunk size and never by ``n1 * n2`` (for ``K(x, x)`` only the tiles on and
above the diagonal are computed). Images go through the same recursion as in ``arch.kernel``
(the exact CNTK, its fused kernels included), one tile per task. The chunk is the largest (at
most :data:`DEFAULT_CHUNK`) whose tile fits ``max_memory`` (default: the policy of
:mod:`ntklab.memory`), and a given chunk whose tile does not fit is refused before any tile
is computed. The tiles form a lazy :class:`dask.array.Array`; :func:`kernel_to_zarr` streams
them into a zarr array on disk.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from ntklab._checks import check_positive_int
from ntklab._inputs import check_kernel_inputs
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.memory import format_bytes, resolve_max_memory

from ._deps import require

if TYPE_CHECKING:
    from ntklab.kernels import Architecture

__all__ = ["DEFAULT_CHUNK", "kernel_array", "kernel_to_zarr", "read_zarr"]

#: Rows and columns of a tile when ``chunk`` is not given and ``max_memory`` allows it.
DEFAULT_CHUNK = 4096

Get = Literal["ntk", "nngp"]


def _check_get(get: object) -> Get:
    if get not in ("ntk", "nngp"):
        raise NtklabValueError(f"get: expected 'ntk' or 'nngp', got {get!r}")
    return get


def _check_arch(arch: object) -> None:
    from ntklab.kernels import Architecture

    if not isinstance(arch, Architecture):
        raise NtklabTypeError(
            f"arch: expected an ntklab Architecture (ntklab.serial(...)), got {type(arch).__name__}"
        )


def _tile_bytes(
    arch: Architecture, get: Get, chunk: int, shape: tuple[int, ...], dtype: torch.dtype
) -> int:
    """Bytes one ``chunk x chunk`` tile takes while it is computed on inputs of shape
    ``shape`` each (``(d,)`` or ``(C, *S)``): the kernel recursion's scratch
    (:meth:`ntklab.solvers.ArchitectureKernel.block_bytes`: both kernels and four
    temporaries, and the spatial covariances for images) and the tile's host copy."""
    from ntklab.solvers.operator import ArchitectureKernel

    item = torch.empty((), dtype=dtype).element_size()
    kernel = ArchitectureKernel(arch, get, shape if len(shape) > 1 else ())
    recursion = kernel.block_bytes(chunk, chunk, math.prod(shape), dtype)
    return int(recursion) + item * chunk * chunk


def _resolve_chunk(
    chunk: int | None,
    n: int,
    max_memory: int,
    tile_bytes: Callable[[int], int],
) -> int:
    """``chunk`` checked against ``max_memory``, or the largest default that fits."""
    if chunk is not None:
        chunk = check_positive_int("chunk", chunk)
        need = tile_bytes(min(chunk, n))
        if need > max_memory:
            raise NtklabValueError(
                f"chunk: expected a tile that fits max_memory = {max_memory:,} bytes, got "
                f"chunk = {chunk}, whose tile needs {need:,} bytes ({format_bytes(need)}); "
                "pass a smaller chunk or a larger max_memory"
            )
        return chunk
    size = DEFAULT_CHUNK
    while size > 1 and tile_bytes(min(size, n)) > max_memory:
        size //= 2
    need = tile_bytes(min(size, n))
    if need > max_memory:
        raise NtklabValueError(
            f"max_memory: expected at least {need:,} bytes (a 1 x 1 tile), got {max_memory:,}"
        )
    return min(size, n)


def _kernel_block(a: Any, b: Any, *, arch: Architecture, get: Get, device: str) -> Any:
    """One tile: ``arch.kernel`` between two row blocks (numpy in, numpy out, on ``device``);
    ``b=None``: the block with itself (a symmetric tile)."""
    with torch.no_grad():
        ta = torch.from_numpy(a).to(device)
        tb = None if b is None else torch.from_numpy(b).to(device)
        block = getattr(arch.kernel(ta, tb), get)  # shape: (len(a), len(b))
        return block.cpu().numpy()


def _symmetric_tiles(rows: Any, tile: Callable[..., Any], name: str, dtype: Any) -> Any:
    """The tiles ``(I, J)`` of ``K(x, x)`` over the row blocks ``rows`` (a Dask array chunked
    along its first axis only): ``tile(x[I], x[J])`` for ``I < J``, ``tile(x[I], None)`` on
    the diagonal, and the transpose of tile ``(J, I)`` below it."""
    da = require("dask.array")
    graph_module = require("dask.highlevelgraph")
    blocks = list(rows.__dask_keys__())  # nested one level per axis: one key per row block
    while blocks and isinstance(blocks[0], list):
        blocks = [k for sub in blocks for k in sub]
    tasks: dict[tuple[Any, ...], Any] = {}
    for i, block_i in enumerate(blocks):
        tasks[(name, i, i)] = (tile, block_i, None)
        for j in range(i + 1, len(blocks)):
            tasks[(name, i, j)] = (tile, block_i, blocks[j])
            tasks[(name, j, i)] = (np.transpose, (name, i, j))
    graph = graph_module.HighLevelGraph.from_collections(name, tasks, dependencies=[rows])
    return da.Array(graph, name, chunks=(rows.chunks[0], rows.chunks[0]), dtype=dtype)


def kernel_array(
    arch: Architecture,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    get: Get = "ntk",
    chunk: int | None = None,
    max_memory: int | None = None,
) -> Any:
    r"""The kernel matrix of ``arch`` as a lazy blockwise Dask array.

    Parameters
    ----------
    arch : Architecture
        An architecture (``ntklab.serial(Dense(...), Relu(), ...)``, or with Conv layers).
    x1 : Tensor of shape (n1, d), or channels-first images (n1, C, *S)
        Whatever ``arch.kernel`` takes (:func:`ntklab._inputs.check_kernel_inputs`); tiles
        are blocks of rows (the first axis), each input whole.
    x2 : Tensor of shape (n2, ...) with the trailing shape of ``x1``, optional
        Defaults to ``x1``: then only the tiles on and above the diagonal are computed, the
        diagonal ones as ``arch.kernel(x1[I])`` (whose diagonal is the per-input recursion,
        as in ``arch.kernel(x1)``), and those below are their transposes.
    get : {"ntk", "nngp"}
        Which kernel to tile.
    chunk : int, optional
        Rows and columns of one tile. One tile holds ``chunk**2`` entries plus the
        temporaries of ``arch.kernel`` (a few times that, :func:`tile_bytes`) while it is
        computed. Default: the largest power-of-two fraction of :data:`DEFAULT_CHUNK` whose
        tile fits ``max_memory``.
    max_memory : int, optional
        Bytes one tile may take while it is computed (each Dask thread computes one tile at
        a time). Default ``None``: the policy of :mod:`ntklab.memory` on the machine that
        builds the graph (half of the memory this process may still use on ``x1``'s
        device); on a cluster, pass what one worker thread may use.

    Returns
    -------
    dask.array.Array of shape (n1, n2)
        Lazy, numpy-backed, chunks ``(chunk, chunk)``, dtype of ``x1``. Tile ``(I, J)`` is

        .. math:: K[I, J] = \mathrm{arch.kernel}(x_1[I], x_2[J]),

        computed on ``x1``'s device and returned to host memory. Not differentiable.

    Raises
    ------
    MissingExtraError
        When dask is not installed (``pip install "ntklab[dask]"``).
    NtklabValueError
        A given ``chunk`` whose tile does not fit ``max_memory``.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.distributed import kernel_array
    >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5))
    >>> k = kernel_array(arch, torch.randn(10, 3, dtype=torch.float64), chunk=4)
    >>> k.chunks
    ((4, 4, 2), (4, 4, 2))
    """
    da = require("dask.array")
    _check_arch(arch)
    a, b = check_kernel_inputs(arch, x1, x2)
    get = _check_get(get)
    budget = resolve_max_memory(max_memory, a.device)
    n = max(a.shape[0], 0 if b is None else b.shape[0])
    shape, dtype = tuple(int(s) for s in a.shape[1:]), a.dtype
    chunk = _resolve_chunk(chunk, n, budget, lambda c: _tile_bytes(arch, get, c, shape, dtype))
    device = str(a.device)
    a_np = a.detach().cpu().numpy()
    # Row blocks along the first axis only; the feature axes (d, or C and S) stay whole.
    A = da.from_array(a_np, chunks=(chunk, *a_np.shape[1:]), name=False)
    if b is None:
        tile = functools.partial(_kernel_block, arch=arch, get=get, device=device)
        name = "ntklab-kernel-" + require("dask.base").tokenize(A.name, arch, get, device)
        return _symmetric_tiles(A, tile, name, a_np.dtype)
    b_np = b.detach().cpu().numpy()
    B = da.from_array(b_np, chunks=(chunk, *b_np.shape[1:]), name=False)
    features = "klmn"[: a_np.ndim - 1]  # contracted: each tile sees whole inputs
    with warnings.catch_warnings():
        # n1/chunk x n2/chunk tiles from n1/chunk + n2/chunk row blocks: the growth is the point
        warnings.simplefilter("ignore", da.PerformanceWarning)
        return da.blockwise(
            _kernel_block,
            "ij",
            A,
            "i" + features,
            B,
            "j" + features,
            dtype=a_np.dtype,
            concatenate=True,
            arch=arch,
            get=get,
            device=device,
        )


def kernel_to_zarr(
    arch: Architecture,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    path: str | Path,
    get: Get = "ntk",
    chunk: int | None = None,
    max_memory: int | None = None,
    overwrite: bool = False,
    client: Any | None = None,
) -> Any:
    """Compute the kernel matrix tile by tile and write it to a zarr array at ``path``.

    Tiles are computed and written one at a time per Dask thread or worker, so peak memory
    is a few tiles per thread, whatever ``n1 * n2`` is (see ``benchmarks/bench_dask_zarr.py``).

    Parameters
    ----------
    arch, x1, x2, get, chunk, max_memory
        As in :func:`kernel_array`; the zarr chunks are the tiles.
    path : str or Path
        Where the zarr array is written (a folder). On a cluster, a path every worker can
        write.
    overwrite : bool
        Replace an existing array at ``path``; otherwise an existing one is an error.
    client : distributed.Client, optional
        Compute on this client; default: Dask's current scheduler (threads, or the active
        client).

    Returns
    -------
    zarr.Array of shape (n1, n2)
        The written array, opened read-only.

    Raises
    ------
    NtklabValueError
        When ``path`` exists and ``overwrite`` is false.
    """
    zarr = require("zarr")
    target = Path(path)
    if target.exists() and not overwrite:
        raise NtklabValueError(
            f"path: expected a new location (or overwrite=True), received {str(target)!r}, "
            "which exists"
        )
    array = kernel_array(arch, x1, x2, get=get, chunk=chunk, max_memory=max_memory)
    store = array.to_zarr(str(target), overwrite=overwrite, compute=False)
    if client is None:
        store.compute()
    else:
        client.compute(store, sync=True)
    return zarr.open_array(str(target), mode="r")


def read_zarr(path: str | Path) -> Any:
    """A kernel matrix written by :func:`kernel_to_zarr`, as a lazy Dask array.

    Parameters
    ----------
    path : str or Path
        The zarr array's folder.

    Returns
    -------
    dask.array.Array of shape (n1, n2)
        Chunked like the stored tiles.
    """
    da = require("dask.array")
    target = Path(path)
    if not target.exists():
        raise NtklabValueError(
            f"path: expected a zarr array written by kernel_to_zarr, received {str(target)!r}, "
            "which does not exist"
        )
    return da.from_zarr(str(target))
