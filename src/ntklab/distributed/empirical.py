r"""The empirical NTK of a torch module written to a zarr array, tile by tile, with Dask.

For kernels too large for memory (``outputs="full"`` on many inputs) or to be computed on a
cluster: the ``(n1, n2)`` input pairs are split into ``chunk x chunk`` tiles, each tile is one
call of :func:`ntklab.empirical.ntk` on two row blocks of the inputs (itself blocked under
``max_memory``), and each tile is written into its chunk of a zarr array as soon as it is
computed, so memory holds a few tiles per Dask thread whatever ``n1 n2`` is. For the
symmetric kernel (``x2`` None) only the tiles on and above the diagonal are computed; each
is written twice, to its place and, transposed, to its mirror,

.. math:: \Theta(x_j, x_i)_{ba} = \Theta(x_i, x_j)_{ab}.

The tiles are Dask tasks (``dask.delayed``), computed by Dask's current scheduler or by a
``distributed.Client``; ``progress(fraction, message)`` is called as tiles finish. The array
reads back lazily with :func:`ntklab.distributed.read_zarr`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ntklab._checks import check_positive_int
from ntklab.errors import NtklabValueError
from ntklab.memory import format_bytes, resolve_max_memory

from ._deps import require

__all__ = ["DEFAULT_TILE", "empirical_ntk_to_zarr"]

#: Inputs per side of a tile when ``chunk`` is not given and ``max_memory`` allows it.
DEFAULT_TILE = 4096

#: A tile's result is held at most this many times at once (the result, its transposed
#: copy for the mirror, zarr's encoding buffer); the rest of ``max_memory`` is scratch.
_TILE_COPIES = 3


def _write_tile(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None,
    rows: slice,
    cols: slice,
    *,
    path: str,
    mirror: bool,
    options: dict[str, Any],
) -> int:
    """Compute tile ``(rows, cols)`` with :func:`ntklab.empirical.ntk`, write it (and, for
    ``mirror``, its transpose at ``(cols, rows)``) into the zarr array at ``path``; returns
    the number of kernel entries written. The model is copied first: methods attach hooks
    to the module while they run, and Dask may run several tiles at once in threads."""
    from ntklab.empirical import ntk

    zarr = require("zarr")
    # a private copy: methods hook the module while they run, and tiles may run in threads
    block = ntk(copy.deepcopy(model), x1, x2, **options).detach().cpu()
    target = zarr.open_array(path, mode="r+")
    target[rows, cols] = block.numpy()
    entries = block.shape[0] * block.shape[1]
    if mirror:
        swapped = block.transpose(0, 1)
        if block.ndim == 4:
            swapped = swapped.transpose(2, 3)
        target[cols, rows] = swapped.contiguous().numpy()
        entries *= 2
    return int(entries)


def _result_tail(
    model: nn.Module, x: Tensor, outputs: str, params: Any, name: str = "x1"
) -> tuple[tuple[int, ...], torch.dtype]:
    """The trailing shape of one input pair's entries (() for trace and pseudo, (k,) for
    diagonal, (k, k) for full) and the result's dtype; ``x`` is validated on the way."""
    from ntklab.empirical import functional_model
    from ntklab.empirical._functional import check_batch

    fm = functional_model(model, params)
    a = check_batch(name, x, fm)
    with torch.no_grad():
        k = int(fm(fm.params, a[:1]).shape[1])
    return {"full": (k, k), "diagonal": (k,)}.get(outputs, ()), fm.dtype


def _resolve_tile(chunk: int | None, n: int, entry_bytes: int, budget: int) -> int:
    """``chunk`` checked against ``budget``, or the largest power-of-two fraction of
    :data:`DEFAULT_TILE` whose tile result, held :data:`_TILE_COPIES` times, fits."""

    def need(c: int) -> int:
        return _TILE_COPIES * c * c * entry_bytes

    if chunk is not None:
        chunk = check_positive_int("chunk", chunk)
        if need(min(chunk, n)) >= budget:
            raise NtklabValueError(
                f"chunk: expected a tile whose result ({_TILE_COPIES} copies) fits max_memory = "
                f"{budget:,} bytes with room for scratch, got chunk = {chunk}, needing "
                f"{need(min(chunk, n)):,} bytes ({format_bytes(need(min(chunk, n)))})"
            )
        return min(chunk, n)
    size = DEFAULT_TILE
    while size > 1 and need(min(size, n)) * 2 > budget:  # half the budget left for scratch
        size //= 2
    if need(min(size, n)) >= budget:
        raise NtklabValueError(
            f"max_memory: expected more than {need(1):,} bytes (a 1 x 1 tile), got {budget:,}"
        )
    return min(size, n)


def empirical_ntk_to_zarr(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    path: str | Path,
    outputs: str = "trace",
    params: Any = None,
    method: str = "auto",
    chunk: int | None = None,
    max_memory: int | None = None,
    overwrite: bool = False,
    client: Any | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> Any:
    """Compute the empirical NTK of ``model`` tile by tile into a zarr array at ``path``.

    Parameters
    ----------
    model : nn.Module
        As in :func:`ntklab.empirical.ntk` (put BatchNorm in eval mode). On a cluster it is
        pickled to the workers.
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1``: then only the tiles on and above the diagonal are computed, each
        written to its place and to its mirror.
    path : str or Path
        Where the zarr array is written (a folder); on a cluster, a path every worker can
        write.
    outputs : {"trace", "full", "diagonal", "pseudo"}
        As in :func:`ntklab.empirical.ntk` (``"pseudo"``: the pseudo-NTK of Mohamadi, Bae &
        Sutherland 2023, :math:`\\frac{1}{k} \\sum_{a,b} \\Theta_{ab}`).
    params, method
        As in :func:`ntklab.empirical.ntk`.
    chunk : int, optional
        Inputs per side of a tile (the zarr chunks are ``(chunk, chunk)`` plus the output
        axes). Default: the largest power-of-two fraction of :data:`DEFAULT_TILE` whose tile
        result takes at most a sixth of ``max_memory`` (three copies in half of it).
    max_memory : int, optional
        Bytes one tile may take while it is computed and written: the call of
        :func:`ntklab.empirical.ntk` on the tile gets ``max_memory`` minus the tile's
        result. Each Dask thread computes one tile at a time, so on a threaded scheduler or
        a cluster pass what one thread may use. Default ``None``: the policy of
        :mod:`ntklab.memory` on the machine that calls this function.
    overwrite : bool
        Replace an existing array at ``path``; otherwise an existing one is an error.
    client : distributed.Client, optional
        Compute the tiles on this client; default: Dask's current scheduler.
    progress : callable, optional
        ``progress(fraction, message)`` in this process as tiles finish: the fraction of the
        array's entries written (a mirrored tile counts twice), increasing, exactly 1.0 at
        the end.

    Returns
    -------
    zarr.Array of shape (n1, n2), (n1, n2, k, k) or (n1, n2, k)
        The written array, opened read-only; in the model's dtype.

    Raises
    ------
    MissingExtraError
        When dask or zarr is not installed (``pip install "ntklab[dask]"``).
    NtklabValueError
        ``path`` exists and ``overwrite`` is false; bad ``outputs``; a ``chunk`` whose tile
        does not fit ``max_memory``; inputs the model rejects.

    Examples
    --------
    >>> import tempfile, torch
    >>> from ntklab.distributed import empirical_ntk_to_zarr
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> folder = tempfile.mkdtemp()
    >>> z = empirical_ntk_to_zarr(net, torch.randn(10, 3), path=f"{folder}/k.zarr", chunk=4)
    >>> z.shape, z.chunks
    ((10, 10), (4, 4))
    """
    from ntklab.empirical.ntk import _OUTPUTS
    from ntklab.empirical.streaming import check_progress

    dask = require("dask")
    zarr = require("zarr")
    if outputs not in _OUTPUTS:
        raise NtklabValueError(f"outputs: expected one of {_OUTPUTS}, got {outputs!r}")
    progress = check_progress(progress)
    target = Path(path)
    if target.exists() and not overwrite:
        raise NtklabValueError(
            f"path: expected a new location (or overwrite=True), received {str(target)!r}, "
            "which exists"
        )
    tail, dtype = _result_tail(model, x1, outputs, params)
    if x2 is not None:
        if isinstance(x2, Tensor) and x2.shape[1:] != x1.shape[1:]:
            raise NtklabValueError(
                f"x2: expected inputs of the shape of x1's, {tuple(x1.shape[1:])}, got "
                f"{tuple(x2.shape[1:])}"
            )
        _result_tail(model, x2, outputs, params, "x2")  # validated like x1
    entry_bytes = torch.empty((), dtype=dtype).element_size() * math.prod(tail)
    budget = resolve_max_memory(max_memory, x1.device)
    n1 = x1.shape[0]
    n2 = n1 if x2 is None else x2.shape[0]
    tile = _resolve_tile(chunk, max(n1, n2), entry_bytes, budget)
    scratch = budget - tile * tile * entry_bytes
    numpy_dtype = torch.empty((), dtype=dtype).numpy().dtype
    zarr.open_array(
        str(target),
        mode="w",
        shape=(n1, n2, *tail),
        chunks=(tile, tile, *tail),
        dtype=numpy_dtype,
    )
    options = {"outputs": outputs, "params": params, "method": method, "max_memory": scratch}
    write = dask.delayed(_write_tile, pure=False)
    tasks = []
    for i in range(0, n1, tile):
        rows = slice(i, min(i + tile, n1))
        if x2 is None:
            for j in range(i, n1, tile):
                cols = slice(j, min(j + tile, n1))
                second = None if j == i else x1[cols]
                tasks.append(
                    write(
                        model,
                        x1[rows],
                        second,
                        rows,
                        cols,
                        path=str(target),
                        mirror=j != i,
                        options=options,
                    )
                )
        else:
            for j in range(0, n2, tile):
                cols = slice(j, min(j + tile, n2))
                tasks.append(
                    write(
                        model,
                        x1[rows],
                        x2[cols],
                        rows,
                        cols,
                        path=str(target),
                        mirror=False,
                        options=options,
                    )
                )
    _run(dask, tasks, client, n1 * n2, progress)
    return zarr.open_array(str(target), mode="r")


def _run(
    dask: Any,
    tasks: list[Any],
    client: Any | None,
    total: int,
    progress: Callable[[float, str], None] | None,
) -> None:
    """Compute the tile tasks, reporting the fraction of entries written after each."""
    count = len(tasks)
    state = {"done": 0, "entries": 0}

    def report(entries: int) -> None:
        state["done"] += 1
        state["entries"] += entries
        if progress is not None:
            last = state["done"] == count
            fraction = 1.0 if last else min(state["entries"] / total, 1.0)
            progress(fraction, f"tile {state['done']}/{count} written")

    if client is not None:
        distributed = require("distributed")
        futures = client.compute(tasks)
        for future in distributed.as_completed(futures, loop=client.loop):
            report(int(future.result()))
        return
    callbacks = require("dask.callbacks")
    keys: set[Hashable] = {task.key for task in tasks}

    def posttask(key: Hashable, result: Any, *_: Any) -> None:
        if key in keys:
            report(int(result))

    with callbacks.Callback(posttask=posttask):
        dask.compute(*tasks)
