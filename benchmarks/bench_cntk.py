"""Time the CNTK (NNGP + NTK) of ``Architecture.kernel`` on CIFAR-sized images against a
GEMM floor measured in the same run.

Architecture: 5 x [Conv(3x3, SAME, sqrt 2, 0.1), Relu()], then ``Flatten()`` (only the
spatial diagonal is propagated, ``(n, n, 32, 32)``) or ``GlobalAvgPool()`` (the full spatial
covariance, ``(n, n, 32, 32, 32, 32)``), then ``Dense``; inputs ``(n, 3, 32, 32)`` float32,
``x2 = None``, under ``torch.no_grad``.

- ntklab: ``arch.kernel(x)``; entries per second = :math:`n^2` / time;
- floor: the GEMM that writes the same layout's input covariance once, from the same data
  (full: ``(n HW, C) @ (C, n HW)``; diagonal: ``HW`` batched ``(n, C) @ (C, n)``) — with
  ``C = 3`` this is one write of the kernel tensor, which every layer of the recursion
  rewrites several times; ratio = ntklab / floor.

Each time is the best of 3 runs after a warm-up. Usage::

    python benchmarks/bench_cntk.py [--n-flatten 128] [--n-gap 8] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import ntklab as nl
from ntklab.kernels import Conv, Flatten, GlobalAvgPool

DEPTH = 5


def architecture(pool: bool) -> nl.Architecture:
    block = [Conv(filter_shape=(3, 3), w_std=math.sqrt(2.0), b_std=0.1), nl.Relu()]
    top = GlobalAvgPool() if pool else Flatten()
    return nl.serial(*(block * DEPTH), top, nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def floor(x: torch.Tensor, full: bool) -> Callable[[], object]:
    n, c, h, w = x.shape
    if full:
        rows = x.permute(0, 2, 3, 1).reshape(n * h * w, c)
        out = torch.empty(n * h * w, n * h * w, dtype=x.dtype)
        return lambda: torch.mm(rows, rows.T, out=out)
    per_pos = x.permute(2, 3, 0, 1).reshape(h * w, n, c)
    out = torch.empty(h * w, n, n, dtype=x.dtype)
    return lambda: torch.bmm(per_pos, per_pos.transpose(1, 2), out=out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-flatten", type=int, default=128)
    parser.add_argument("--n-gap", type=int, default=8)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for pool, n in ((False, args.n_flatten), (True, args.n_gap)):
        x = torch.randn(n, 3, 32, 32, generator=gen)
        arch = architecture(pool)
        with torch.no_grad():
            t = best_of(lambda arch=arch, x=x: arch.kernel(x))
            t_floor = best_of(floor(x, pool))
        rows.append(
            {
                "top": "GlobalAvgPool" if pool else "Flatten",
                "n": n,
                "seconds": t,
                "entries_per_s": n * n / t,
                "floor_seconds": t_floor,
                "ratio": t / t_floor,
            }
        )
        print(f"{rows[-1]['top']}: done", flush=True)
    print()
    print(f"CNTK depth {DEPTH}, 32x32x3 float32, {torch.get_num_threads()} threads")
    print()
    print("| top | n | time (s) | entries/s | GEMM floor (s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['top']} | {r['n']} | {r['seconds']:.3f} | {r['entries_per_s']:.1f} | "
            f"{r['floor_seconds']:.4f} | {r['ratio']:.1f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
