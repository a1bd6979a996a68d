"""Write an n x n NTK Gram matrix to zarr through Dask; report peak memory and throughput.

Architecture: ``2 x [Dense(w_std=1.5, b_std=0.1), Relu] + Dense(w_std=1.5, b_std=0.1)``,
float32 inputs of
dimension d on the unit-variance Gaussian. The matrix is tiled in ``chunk x chunk`` tiles
(:func:`ntklab.distributed.kernel_to_zarr`), computed by Dask's threaded scheduler with
``--threads`` threads (torch set to one thread each) and written to a zarr array on disk.

- one block: ``arch.kernel`` in memory on one ``chunk x chunk`` tile (best of 3, after a
  warm-up), with torch on ``--threads`` threads: the in-memory rate, entries per second;
- dask+zarr: the whole n x n matrix, computed and written; its rate divided by the one-block
  rate is the reported ratio (1.0 = no overhead from tiling, scheduling and writing);
- peak memory: the process's peak resident set (``ru_maxrss``), which includes the one-block
  measurement and the interpreter (Python + torch + dask, about 0.4 GiB).

Issue #8 asks for n = 100,000 (40 GB of float32 on disk) under 4 GiB of peak memory.
Usage::

    python benchmarks/bench_dask_zarr.py [--n 100000] [--chunk 4096] [--threads 2]
        [--dir PATH] [--keep] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dask
import torch

import ntklab as nl
from ntklab.distributed import kernel_to_zarr


def _arch() -> nl.kernels.Architecture:
    return nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.5, b_std=0.1),
    )


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def one_block_rate(chunk: int, d: int, threads: int) -> float:
    """Entries per second of ``arch.kernel`` on one in-memory chunk x chunk tile."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(chunk, d, generator=gen)
    b = torch.randn(chunk, d, generator=gen)
    arch = _arch()
    best = float("inf")
    with torch.no_grad():
        arch.kernel(a, b)
        for _ in range(3):
            start = time.perf_counter()
            arch.kernel(a, b)
            best = min(best, time.perf_counter() - start)
    return chunk * chunk / best


def dask_zarr_rate(n: int, d: int, chunk: int, threads: int, folder: Path) -> float:
    """Entries per second of the whole n x n matrix computed and written to zarr."""
    torch.set_num_threads(1)
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    path = folder / "ntk.zarr"
    with dask.config.set(scheduler="threads", num_workers=threads):
        start = time.perf_counter()
        z = kernel_to_zarr(_arch(), x, path=path, chunk=chunk, overwrite=True)
        seconds = time.perf_counter() - start
    assert z.shape == (n, n)
    return n * n / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the zarr array")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="ntklab-bench-zarr-", dir=args.dir))
    try:
        block = one_block_rate(args.chunk, args.d, args.threads)
        total = dask_zarr_rate(args.n, args.d, args.chunk, args.threads, folder)
        on_disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    row = {
        "n": args.n,
        "d": args.d,
        "chunk": args.chunk,
        "threads": args.threads,
        "one_block_entries_per_s": block,
        "dask_zarr_entries_per_s": total,
        "ratio": total / block,
        "seconds": args.n**2 / total,
        "zarr_gib": on_disk / 2**30,
        "peak_rss_gib": _peak_gib(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
    }
    print(
        f"n={args.n} chunk={args.chunk} threads={args.threads}: "
        f"one block {block / 1e6:.1f} M entries/s, dask+zarr {total / 1e6:.1f} M entries/s "
        f"(ratio {row['ratio']:.2f}), {row['seconds']:.1f} s, zarr {row['zarr_gib']:.2f} GiB, "
        f"peak RSS {row['peak_rss_gib']:.2f} GiB"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
