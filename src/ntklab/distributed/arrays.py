"""Kernel matrices as blockwise Dask arrays, and written to zarr for out-of-core use.

A kernel matrix :math:`K_{ij} = k(x^{(1)}_i, x^{(2)}_j)` of an
:class:`~ntklab.kernels.Architecture` is split into square tiles of ``chunk x chunk`` entries;
each tile is one call of ``arch.kernel`` on two row blocks of the inputs, so memory per tile
is bounded by the chunk size and never by ``n1 * n2``. The tiles form a lazy
:class:`dask.array.Array`; :func:`kernel_to_zarr` streams them into a zarr array on disk.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ntklab._checks import check_inputs, check_positive_int
from ntklab.errors import NtklabTypeError, NtklabValueError

from ._deps import require

if TYPE_CHECKING:
    from ntklab.kernels import Architecture

__all__ = ["DEFAULT_CHUNK", "kernel_array", "kernel_to_zarr", "read_zarr"]

DEFAULT_CHUNK = 4096

Which = Literal["ntk", "nngp"]


def _check_which(which: object) -> Which:
    if which not in ("ntk", "nngp"):
        raise NtklabValueError(f"which: expected 'ntk' or 'nngp', got {which!r}")
    return which


def _check_arch(arch: object) -> None:
    from ntklab.kernels import Architecture

    if not isinstance(arch, Architecture):
        raise NtklabTypeError(
            f"arch: expected an ntklab Architecture (ntklab.serial(...)), got {type(arch).__name__}"
        )


def _kernel_block(a: Any, b: Any, *, arch: Architecture, which: Which, device: str) -> Any:
    """One tile: ``arch.kernel`` between two row blocks (numpy in, numpy out, on ``device``)."""
    with torch.no_grad():
        ta = torch.from_numpy(a).to(device)
        tb = torch.from_numpy(b).to(device)
        block = getattr(arch.kernel(ta, tb), which)  # shape: (len(a), len(b))
        return block.cpu().numpy()


def kernel_array(
    arch: Architecture,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    which: Which = "ntk",
    chunk: int = DEFAULT_CHUNK,
) -> Any:
    r"""The kernel matrix of ``arch`` as a lazy blockwise Dask array.

    Parameters
    ----------
    arch : Architecture
        An architecture on flat inputs (``ntklab.serial(Dense(...), Relu(), ...)``).
    x1 : Tensor of shape (n1, d)
    x2 : Tensor of shape (n2, d), optional
        Defaults to ``x1`` (every tile is computed; symmetry is not exploited).
    which : {"ntk", "nngp"}
        Which kernel to tile.
    chunk : int
        Rows and columns of one tile. One tile holds ``chunk**2`` entries plus the
        temporaries of ``arch.kernel`` (a few times that) while it is computed.

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

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.distributed import kernel_array
    >>> arch = nl.serial(nl.Dense(1.5, 0.1), nl.Relu(), nl.Dense(1.5))
    >>> k = kernel_array(arch, torch.randn(10, 3, dtype=torch.float64), chunk=4)
    >>> k.chunks
    ((4, 4, 2), (4, 4, 2))
    """
    da = require("dask.array")
    _check_arch(arch)
    a, b = check_inputs(x1, x2)
    which = _check_which(which)
    chunk = check_positive_int("chunk", chunk)
    if b is None:
        b = a
    device = str(a.device)
    a_np = a.detach().cpu().numpy()
    b_np = a_np if b is a else b.detach().cpu().numpy()
    A = da.from_array(a_np, chunks=(chunk, a_np.shape[1]), name=False)
    B = A if b_np is a_np else da.from_array(b_np, chunks=(chunk, b_np.shape[1]), name=False)
    with warnings.catch_warnings():
        # n1/chunk x n2/chunk tiles from n1/chunk + n2/chunk row blocks: the growth is the point
        warnings.simplefilter("ignore", da.PerformanceWarning)
        return da.blockwise(
            _kernel_block,
            "ij",
            A,
            "ik",
            B,
            "jk",
            dtype=a_np.dtype,
            concatenate=True,
            arch=arch,
            which=which,
            device=device,
        )


def kernel_to_zarr(
    arch: Architecture,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    path: str | Path,
    which: Which = "ntk",
    chunk: int = DEFAULT_CHUNK,
    overwrite: bool = False,
    client: Any | None = None,
) -> Any:
    """Compute the kernel matrix tile by tile and write it to a zarr array at ``path``.

    Tiles are computed and written one at a time per Dask thread or worker, so peak memory
    is a few tiles per thread, whatever ``n1 * n2`` is (see ``benchmarks/bench_dask_zarr.py``).

    Parameters
    ----------
    arch, x1, x2, which, chunk
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
    array = kernel_array(arch, x1, x2, which=which, chunk=chunk)
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
