"""The empirical NTK of a small CNN on 10,000 Fashion-MNIST images, streamed in blocks.

CNN: Conv(1 -> 16, 3x3, stride 2, pad 1), ReLU, Conv(16 -> 32, 3x3, stride 2, pad 1), ReLU,
global average pooling, Linear(32 -> 10); float32, PyTorch's default initialization (seed 0).
Inputs: the 10,000 test images of Fashion-MNIST (1 x 28 x 28, standardized) from
:func:`ntklab.data.load_fashion_mnist`, or random N(0, 1) tensors of that shape when the files
are not installed (the output says which).

Each case runs in its own process (peak memory = that process's peak resident set, VmHWM)
under the default ``max_memory`` (the policy of :mod:`ntklab.memory`, read at the call):

- ``pseudo`` / ``trace``: :func:`ntklab.empirical.ntk` with ``outputs="pseudo"`` (the
  pseudo-NTK, Mohamadi, Bae & Sutherland 2023) or ``"trace"``, ``x2=None`` (only the blocks
  on and above the diagonal are computed), into a preallocated tensor, ``block_size`` inputs
  per side of a block (``0``: the largest block the budget allows), with a progress callback;
- ``zarr``: :func:`ntklab.distributed.empirical_ntk_to_zarr` (pseudo), Dask's synchronous
  scheduler, tiles of ``block_size``.

Checks: the result is exactly symmetric and finite, and a random 48 x 48 sub-block (rows and
columns from both ends of the data set) equals the NTK of those inputs computed on its own
in float64 (relative error reported). Usage::

    python benchmarks/bench_empirical_large.py [--n 10000] [--block-size 2048]
        [--cases pseudo,trace,zarr] [--json PATH]

Committed run: ``results/empirical_large.json`` (each row with its date, machine and commit).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from torch import Tensor, nn


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def inputs(n: int) -> tuple[Tensor, str]:
    """``n`` Fashion-MNIST test images, or random tensors of their shape if not installed."""
    try:
        from ntklab.data import load_fashion_mnist

        data = load_fashion_mnist("test")
        if data.x.shape[0] >= n:
            return data.x[:n].contiguous(), f"Fashion-MNIST test split, first {n} images"
    except Exception as err:  # files absent or the loader missing: say so
        note = f"random N(0, 1) tensors of shape (1, 28, 28) (Fashion-MNIST unavailable: {err})"
        return torch.randn(n, 1, 28, 28, generator=torch.Generator().manual_seed(0)), note
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 28, 28, generator=gen), "random N(0, 1) tensors (too few images)"


def _status_bytes(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, in bytes
    (unlike getrusage's ru_maxrss, VmHWM does not carry a parent's peak across execve)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def run_case(case: str, n: int, block_size: int) -> dict[str, Any]:
    """One case in this process; returns its figures."""
    import ntklab as nl
    from ntklab.memory import default_max_memory

    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    net = cnn()
    x, source = inputs(n)
    outputs = "trace" if case == "trace" else "pseudo"
    fm = nl.empirical.functional_model(net)
    budget = default_max_memory()
    chosen = nl.empirical.plan(fm, x, None, outputs)  # type: ignore[arg-type]
    marks: list[tuple[float, float]] = []
    start = time.perf_counter()

    def progress(fraction: float, message: str) -> None:
        marks.append((time.perf_counter() - start, fraction))
        print(f"  {case}: {fraction:6.1%} {message}", file=sys.stderr, flush=True)

    baseline = _status_bytes("VmRSS")
    start = time.perf_counter()
    if case == "zarr":
        from ntklab.distributed import empirical_ntk_to_zarr

        folder = tempfile.mkdtemp(prefix="entk-zarr-")
        import dask

        with dask.config.set(scheduler="synchronous"):
            z = empirical_ntk_to_zarr(
                net,
                x,
                path=Path(folder) / "k.zarr",
                outputs=outputs,
                chunk=block_size or None,
                progress=progress,
            )
        wall = time.perf_counter() - start
        peak = _status_bytes("VmHWM")
        kernel = torch.from_numpy(z[:])
    else:
        out = torch.empty(n, n, dtype=x.dtype)
        kernel = nl.empirical.ntk(
            net, x, outputs=outputs, out=out, block_size=block_size or None, progress=progress
        )
        wall = time.perf_counter() - start
        peak = _status_bytes("VmHWM")
    fractions = [f for _, f in marks]
    gen = torch.Generator().manual_seed(3)
    half = n // 2
    idx = torch.cat(
        [
            torch.randperm(half, generator=gen)[:24],
            half + torch.randperm(n - half, generator=gen)[:24],
        ]
    )
    reference = nl.empirical.ntk(net.double(), x[idx].double(), outputs=outputs)  # type: ignore[arg-type]
    sub = kernel[idx][:, idx].double()
    return {
        "case": case,
        "n": n,
        "outputs": outputs,
        "inputs": source,
        "block_size": block_size or None,
        "method": chosen.method,
        "plan_block": [chosen.block1, chosen.block2],
        "wall_s": wall,
        "peak_rss_bytes": peak,
        "rss_before_bytes": baseline,
        "result_bytes": n * n * kernel.element_size(),
        "max_memory_policy_bytes": budget,
        "progress_calls": len(fractions),
        "progress_monotone": all(a < b for a, b in itertools.pairwise(fractions)),
        "progress_last": fractions[-1] if fractions else None,
        "symmetric": bool(torch.equal(kernel, kernel.T)),
        "finite": bool(torch.isfinite(kernel).all()),
        "subblock_rel_err_vs_float64": float((sub - reference).norm() / reference.norm()),
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--cases", default="pseudo,trace,zarr")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child, args.n, args.block_size)), flush=True)
        return
    from peers_empirical import run_facts

    rows = []
    for case in args.cases.split(","):
        cmd = [sys.executable, __file__, "--child", case, "--n", str(args.n)]
        cmd += ["--block-size", str(args.block_size)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{case}: failed\n{done.stderr[-3000:]}", flush=True)
            continue
        row = {**run_facts(), **json.loads(done.stdout.strip().splitlines()[-1])}
        rows.append(row)
        gib = 2**30
        print(
            f"{case}: n={row['n']} {row['outputs']} method={row['method']} "
            f"block={row['block_size']} wall {row['wall_s']:.1f} s, peak RSS "
            f"{row['peak_rss_bytes'] / gib:.2f} GiB (before {row['rss_before_bytes'] / gib:.2f}"
            f" GiB, result {row['result_bytes'] / gib:.2f} GiB, budget "
            f"{row['max_memory_policy_bytes'] / gib:.2f} GiB), progress "
            f"{row['progress_calls']} calls monotone={row['progress_monotone']} last="
            f"{row['progress_last']}, symmetric={row['symmetric']}, sub-block rel. err "
            f"{row['subblock_rel_err_vs_float64']:.1e}; inputs: {row['inputs']}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
