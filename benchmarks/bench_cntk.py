"""Time the CNTK (NNGP + NTK) of ``Architecture.kernel`` on CIFAR-sized images: the fused C
kernel against the eager path, a GEMM floor and neural-tangents, measured in the same run.

Architecture: 5 x [Conv(3x3, SAME, sqrt 2, 0.1), Relu()], then ``Flatten()`` (only the
spatial diagonal is propagated, ``(n, n, 32, 32)``) or ``GlobalAvgPool()`` (the full spatial
covariance, ``(n, n, 32, 32, 32, 32)``), then ``Dense``; inputs ``(n, 3, 32, 32)`` float32,
``x2 = None``, under ``torch.no_grad``.

- fused: ``arch.kernel(x)`` as shipped (the fused ``[Conv, Relu]`` kernel,
  :mod:`ntklab.kernels._fused_conv`); entries per second = :math:`n^2` / time;
- eager: the same with ``NTKLAB_DISABLE_FUSED=1`` (torch ops only);
- floor: the GEMM that writes the same layout's input covariance once, from the same data
  (full: ``(n HW, C) @ (C, n HW)``; diagonal: ``HW`` batched ``(n, C) @ (C, n)``) — with
  ``C = 3`` this is one write of the kernel tensor, which the eager recursion rewrites several
  times per layer; ratio = time / floor;
- neural-tangents 0.6.5: the jitted ``stax`` kernel_fn of the same architecture on the same
  inputs (``NHWC``, float32), measured by ``--nt-python`` (an interpreter of the separate venv
  that ``tests/data/make_nt_reference.py`` describes) or in this process when
  ``neural_tangents`` is importable; lead = neural-tangents time / fused time.

Each time is the best of 3 runs after a warm-up (the warm-up compiles the fused kernel on
first use, and jit-compiles neural-tangents). Usage::

    python benchmarks/bench_cntk.py [--n-flatten 128] [--n-gap 8] [--json PATH]
                                    [--nt-python /tmp/nt-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

import ntklab as nl
from ntklab.kernels import Conv, Flatten, GlobalAvgPool, _fused

DEPTH = 5
# ratios to the floor before the fused kernel (README, 2026-11-29, n = 128 and 8)
BEFORE = {"Flatten": 85.0, "GlobalAvgPool": 504.0}
# the goals: ratio to the floor at most, and lead over neural-tangents at least
GOALS = {"Flatten": (10.0, 4.0), "GlobalAvgPool": (30.0, 30.0)}


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


def time_kernel(arch: nl.Architecture, x: torch.Tensor, *, eager: bool) -> tuple[float, Any]:
    """Best time of ``arch.kernel(x)`` (fused or eager) and its result."""
    previous = os.environ.get("NTKLAB_DISABLE_FUSED")
    os.environ["NTKLAB_DISABLE_FUSED"] = "1" if eager else "0"
    try:
        with torch.no_grad():
            return best_of(lambda: arch.kernel(x)), arch.kernel(x)
    finally:
        if previous is None:
            del os.environ["NTKLAB_DISABLE_FUSED"]
        else:
            os.environ["NTKLAB_DISABLE_FUSED"] = previous


_NT_SCRIPT = """
import math, sys, time
import jax, numpy as np
from neural_tangents import stax
pool, depth, repeats = sys.argv[2] == "gap", int(sys.argv[3]), int(sys.argv[4])
conv = stax.Conv(1, (3, 3), padding="SAME", W_std=math.sqrt(2.0), b_std=0.1)
top = stax.GlobalAvgPool() if pool else stax.Flatten()
_, _, kernel_fn = stax.serial(
    *([conv, stax.Relu()] * depth), top, stax.Dense(1, W_std=math.sqrt(2.0), b_std=0.1)
)
kernel_fn = jax.jit(kernel_fn, static_argnames="get")
x = jax.numpy.asarray(np.load(sys.argv[1]).transpose(0, 2, 3, 1))  # NHWC
jax.block_until_ready(kernel_fn(x, None, get=("nngp", "ntk")))
best = math.inf
for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(kernel_fn(x, None, get=("nngp", "ntk")))
    best = min(best, time.perf_counter() - start)
print(best)
"""


def time_neural_tangents(x: torch.Tensor, pool: bool, python: str | None) -> float | None:
    """neural-tangents' jitted kernel_fn on the same architecture and inputs (float32),
    measured by ``python`` or in this process; ``None`` when neither has neural-tangents."""
    if python is None:
        try:
            import neural_tangents  # noqa: F401
        except ImportError:
            return None
        python = sys.executable
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64="0")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, x.numpy())
        args = [str(path), "gap" if pool else "flatten", str(DEPTH), "3"]
        done = subprocess.run(
            [python, "-c", _NT_SCRIPT, *args], capture_output=True, text=True, check=True, env=env
        )
    return float(done.stdout.strip().splitlines()[-1])


def measure(pool: bool, n: int, nt_python: str | None) -> dict[str, Any]:
    x = torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    arch = architecture(pool)
    t_fused, k_fused = time_kernel(arch, x, eager=False)
    t_eager, k_eager = time_kernel(arch, x, eager=True)
    with torch.no_grad():
        t_floor = best_of(floor(x, pool))
    diff = max(
        float(
            (getattr(k_fused, k) - getattr(k_eager, k)).abs().max()
            / getattr(k_eager, k).abs().max()
        )
        for k in ("nngp", "ntk")
    )
    top = "GlobalAvgPool" if pool else "Flatten"
    t_nt = time_neural_tangents(x, pool, nt_python)
    return {
        "top": top,
        "n": n,
        "fused_s": t_fused,
        "eager_s": t_eager,
        "floor_s": t_floor,
        "nt_s": t_nt,
        "fused_ratio": t_fused / t_floor,
        "eager_ratio": t_eager / t_floor,
        "before_ratio": BEFORE[top],
        "nt_lead": None if t_nt is None else t_nt / t_fused,
        "fused_vs_eager_max_rel_diff": diff,
        "entries_per_s": n * n / t_fused,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-flatten", type=int, default=128)
    parser.add_argument("--n-gap", type=int, default=8)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument(
        "--nt-python",
        default=None,
        help="a Python interpreter with neural-tangents 0.6.5 (e.g. /tmp/nt-venv/bin/python)",
    )
    args = parser.parse_args()
    rows = []
    for pool, n in ((False, args.n_flatten), (True, args.n_gap)):
        rows.append(measure(pool, n, args.nt_python))
        print(f"{rows[-1]['top']}: done", flush=True)
    print()
    print(
        f"CNTK depth {DEPTH}, 32x32x3 float32, {torch.get_num_threads()} threads, fused kernel "
        f"{'available' if _fused.available() else 'UNAVAILABLE (eager twice)'}"
    )
    print()
    print(
        "| top | n | fused s | eager s | floor s | fused/floor | eager/floor | before | "
        "NT s | NT/fused | fused-eager |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        nt = "-" if r["nt_s"] is None else f"{r['nt_s']:.3f}"
        lead = "-" if r["nt_lead"] is None else f"{r['nt_lead']:.1f}"
        print(
            f"| {r['top']} | {r['n']} | {r['fused_s']:.3f} | {r['eager_s']:.3f} | "
            f"{r['floor_s']:.4f} | {r['fused_ratio']:.1f} | {r['eager_ratio']:.1f} | "
            f"{r['before_ratio']:.0f} | {nt} | {lead} | {r['fused_vs_eager_max_rel_diff']:.1e} |"
        )
    print()
    for r in rows:
        max_ratio, min_lead = GOALS[r["top"]]
        met = r["fused_ratio"] <= max_ratio
        line = f"{r['top']}: fused/floor {r['fused_ratio']:.1f} (goal <= {max_ratio:g}: "
        line += f"{'met' if met else 'NOT met'})"
        if r["nt_lead"] is not None:
            lead_met = r["nt_lead"] >= min_lead
            line += f"; NT/fused {r['nt_lead']:.1f} (goal >= {min_lead:g}: "
            line += f"{'met' if lead_met else 'NOT met'})"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
