"""Dask: kernel matrices as blockwise arrays (zarr on disk), the empirical NTK of a torch
module written to zarr tile by tile, experiment sweeps on a cluster.

Needs the optional extra ``pip install "ntklab[dask]"`` (dask, distributed, zarr); importing
this package does not import dask, and a call without it raises
:class:`MissingExtraError` saying what to install.
"""

from ._deps import MissingExtraError
from .arrays import DEFAULT_CHUNK, kernel_array, kernel_to_zarr, read_zarr
from .empirical import empirical_ntk_to_zarr
from .sweeps import (
    DEFAULT_CONNECT_TIMEOUT,
    SweepTask,
    connect,
    run_sweep,
    sweep_tasks,
    torch_threads_plugin,
)

__all__ = [
    "DEFAULT_CHUNK",
    "DEFAULT_CONNECT_TIMEOUT",
    "MissingExtraError",
    "SweepTask",
    "connect",
    "empirical_ntk_to_zarr",
    "kernel_array",
    "kernel_to_zarr",
    "read_zarr",
    "run_sweep",
    "sweep_tasks",
    "torch_threads_plugin",
]
