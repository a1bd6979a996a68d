"""Time ``Architecture.kernel`` (NNGP + NTK) against the eager path and a memory-pass floor.

Architecture: 10 x [Dense(sqrt 2, 0.1), Relu()] + Dense(sqrt 2, 0.1), on n inputs of
dimension d in {10, 784}, float32 and float64, under ``torch.no_grad``.

- ntklab: ``arch.kernel(x)`` as shipped (the fused C kernel where available);
- eager: the same with ``NTKLAB_DISABLE_FUSED=1`` (torch ops only);
- floor: one ``torch.mm(x, x.T, out=buf)`` plus 10 ``torch.arccos(buf, out=buf2)`` passes
  over preallocated (n, n) buffers (x has rows of norm 0.999, so the buffer needs no clamp):
  the cost of the Gram matrix and of one vectorized transcendental per layer and entry;
- anchor: neural-tangents 0.6.5's jitted ``stax`` kernel_fn on the same inputs in float64,
  measured in the same run by ``--nt-python`` (an interpreter of the separate venv that
  ``tests/data/make_nt_reference.py`` describes) or in this process if ``neural_tangents`` is
  importable; otherwise the earlier measurement (9.4-10 s at n = 4000 on this kind of machine) is
  quoted and marked so.

Each time is the best of 3 runs after a warm-up (the warm-up compiles the fused kernel on
first use). Usage::

    python benchmarks/bench_kernels.py [--n 4000] [--quick] [--json PATH] [--nt-python PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
from torch import Tensor

import ntklab as nl
from ntklab.kernels import _fused

DEPTH = 10
ANCHOR_N = 4000
ANCHOR_S = (9.4, 10.0)  # neural-tangents float64, n = 4000: quoted, not measured


def architecture() -> nl.Architecture:
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    return nl.serial(*([block] * DEPTH), nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def time_floor(x: Tensor, repeats: int) -> float:
    u = 0.999 * x / x.norm(dim=1, keepdim=True)
    buf = torch.empty(x.shape[0], x.shape[0], dtype=x.dtype)
    buf2 = torch.empty_like(buf)

    def floor() -> None:
        torch.mm(u, u.T, out=buf)
        for _ in range(DEPTH):
            torch.arccos(buf, out=buf2)

    return best_of(floor, repeats)


def time_kernel(arch: nl.Architecture, x: Tensor, repeats: int, *, eager: bool) -> float:
    def run() -> None:
        with torch.no_grad():
            arch.kernel(x)

    previous = os.environ.get("NTKLAB_DISABLE_FUSED")
    os.environ["NTKLAB_DISABLE_FUSED"] = "1" if eager else "0"
    try:
        return best_of(run, repeats)
    finally:
        if previous is None:
            del os.environ["NTKLAB_DISABLE_FUSED"]
        else:
            os.environ["NTKLAB_DISABLE_FUSED"] = previous


_NT_SCRIPT = """
import math, sys, time
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from neural_tangents import stax
depth, repeats = int(sys.argv[2]), int(sys.argv[3])
layers = [stax.Dense(512, W_std=math.sqrt(2.0), b_std=0.1), stax.Relu()] * depth
_, _, kernel_fn = stax.serial(*layers, stax.Dense(1, W_std=math.sqrt(2.0), b_std=0.1))
kernel_fn = jax.jit(kernel_fn, static_argnames="get")
x = jax.numpy.asarray(np.load(sys.argv[1]))
jax.block_until_ready(kernel_fn(x, None, get=("nngp", "ntk")))
best = math.inf
for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(kernel_fn(x, None, get=("nngp", "ntk")))
    best = min(best, time.perf_counter() - start)
print(best)
"""


def time_neural_tangents(x: Tensor, repeats: int, python: str | None) -> float | None:
    """neural-tangents' jitted kernel_fn on the same architecture and inputs, measured by
    ``python`` (an interpreter with neural-tangents, jax and x64), or in this process when
    neural-tangents is importable; ``None`` when neither is available."""
    if python is None:
        try:
            import neural_tangents  # noqa: F401
        except ImportError:
            return None
        python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, x.double().numpy())
        done = subprocess.run(
            [python, "-c", _NT_SCRIPT, str(path), str(DEPTH), str(repeats)],
            capture_output=True,
            text=True,
            check=True,
        )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="number of inputs (default 4000)")
    parser.add_argument("--quick", action="store_true", help="n = 1000, one timed run")
    parser.add_argument("--json", type=Path, default=None, help="also save the numbers here")
    parser.add_argument(
        "--nt-python",
        default=None,
        help="a Python interpreter with neural-tangents 0.6.5 (e.g. the venv that "
        "tests/data/make_nt_reference.py describes): measures the anchor in the same run",
    )
    args = parser.parse_args()
    n = args.n if args.n is not None else (1000 if args.quick else 4000)
    repeats = 1 if args.quick else 3

    arch = architecture()
    fused = _fused.available()
    rows: list[dict[str, Any]] = []
    for d in (10, 784):
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(n, d, dtype=dtype, generator=torch.Generator().manual_seed(0))
            row: dict[str, Any] = {"d": d, "dtype": str(dtype).removeprefix("torch.")}
            row["ntklab_s"] = time_kernel(arch, x, repeats, eager=False)
            row["eager_s"] = time_kernel(arch, x, repeats, eager=True)
            row["floor_s"] = time_floor(x, repeats)
            row["ratio_floor"] = row["ntklab_s"] / row["floor_s"]
            row["anchor_s"], row["anchor_source"] = None, None
            if dtype == torch.float64:
                measured = time_neural_tangents(x, repeats, args.nt_python)
                if measured is not None:
                    row["anchor_s"], row["anchor_source"] = measured, "measured"
                elif n == ANCHOR_N:
                    row["anchor_s"], row["anchor_source"] = sum(ANCHOR_S) / 2, "quoted"
            rows.append(row)
            print(f"d={d} {row['dtype']}: done", flush=True)

    print()
    print(
        f"n = {n}, depth {DEPTH}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"fused kernel {'available' if fused else 'UNAVAILABLE (eager twice)'}"
    )
    print()
    print(
        "| d | dtype | ntklab s | eager s | floor s | ntklab/floor | NT anchor s | ntklab/anchor |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["anchor_s"] is None:
            anchor = ratio = "-"
        else:
            quoted = f"{ANCHOR_S[0]}-{ANCHOR_S[1]} (quoted)"
            anchor = quoted if r["anchor_source"] == "quoted" else f"{r['anchor_s']:.3f}"
            ratio = f"{r['ntklab_s'] / r['anchor_s']:.4f}"
        print(
            f"| {r['d']} | {r['dtype']} | {r['ntklab_s']:.3f} | {r['eager_s']:.3f} | "
            f"{r['floor_s']:.3f} | {r['ratio_floor']:.2f} | {anchor} | {ratio} |"
        )
    if args.json is not None:
        meta = {
            "n": n,
            "depth": DEPTH,
            "repeats": repeats,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "machine": platform.machine(),
            "fused_available": fused,
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
