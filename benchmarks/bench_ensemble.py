"""Time the vectorized ensemble trainer against its GEMM floor (issue #4).

M one-hidden-layer networks f(x) = v . tanh(W x / sqrt d) / sqrt n (NTK parameterization, no
bias, the networks of claim E1), width n, trained together by full-batch GD on 16 points
(d = 8) for 1,000 steps, float32. The floor is the same number of batched GEMMs of the same
shapes that one GD step needs (forward: x W and h v; backward: g v^T, h^T g and x^T dz), with
preallocated outputs, timed both over the whole ensemble at once and chunk by chunk as the
trainer runs them; the ratio is trainer / the faster floor. Also timed, on fewer steps and
members and scaled to the full size: the same trainer with autograd for the backward pass, and
the generic path (``torch.func.stack_module_state`` + ``vmap(grad(functional_call))`` over
``to_torch`` networks). Usage::

    python benchmarks/bench_ensemble.py [--members 10000] [--steps 1000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import ntklab as nl
from ntklab.nets.ensemble import ensemble, stack_modules, train_ensemble


def floor_time(members: int, n: int, d: int, width: int, steps: int, chunk: int) -> float:
    """Seconds for ``steps`` repetitions of one GD step's five batched GEMMs, ``chunk``
    members at a time (all steps on one chunk, then the next, as the trainer)."""
    gen = torch.Generator().manual_seed(0)
    total = 0.0
    for start in range(0, members, chunk):
        c = min(chunk, members - start)
        x = torch.randn(c, n, d, generator=gen)
        w1 = torch.randn(c, d, width, generator=gen)
        w2 = torch.randn(c, width, 1, generator=gen)
        h = torch.randn(c, n, width, generator=gen)
        g = torch.randn(c, n, 1, generator=gen)
        out = torch.empty(c, n, 1)
        dh = torch.empty(c, n, width)
        gw2 = torch.empty(c, width, 1)
        gw1 = torch.empty(c, d, width)
        z = torch.empty(c, n, width)
        tick = time.perf_counter()
        for _ in range(steps):
            torch.bmm(x, w1, out=z)  # forward, first layer
            torch.bmm(h, w2, out=out)  # forward, readout
            torch.bmm(g, w2.mT, out=dh)  # backward, input gradient of the readout
            torch.bmm(h.mT, g, out=gw2)  # backward, readout weights
            torch.bmm(x.mT, dh, out=gw1)  # backward, first-layer weights
        total += time.perf_counter() - tick
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--chunk-size", type=int, default=None, help="members per chunk")
    parser.add_argument("--floor-steps", type=int, default=100, help="timed, then scaled")
    parser.add_argument("--slow-steps", type=int, default=10, help="autograd and vmap paths")
    parser.add_argument("--slow-members", type=int, default=1000, help="vmap path")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    m, n, d, width, steps = args.members, args.n, args.d, args.width, args.steps
    gen = torch.Generator().manual_seed(0)
    arch = nl.serial(nl.Dense(w_std=1.0, b_std=None), nl.Tanh(), nl.Dense(w_std=1.0, b_std=None))
    ens = ensemble(arch, m, width, in_features=d, generator=gen)
    x = torch.randn(n, d, generator=gen)
    y = torch.randn(n, 1, generator=gen)
    x_test = torch.randn(4, d, generator=gen)
    lr = 0.01
    chunk = args.chunk_size
    if chunk is None:  # the trainer's default: about 2**18 activations per buffer
        chunk = max(1, min(m, 2**18 // (n * width)))
    print(
        f"M={m} width={width} n={n} d={d} steps={steps} float32, "
        f"{torch.get_num_threads()} threads, chunk={chunk} members",
        flush=True,
    )

    tick = time.perf_counter()
    run = train_ensemble(
        ens,
        x,
        y,
        learning_rate=lr,
        t=steps,
        normalization="sum",
        x_test=x_test,
        chunk_size=chunk,
    )
    trainer = time.perf_counter() - tick
    assert bool(torch.isfinite(run.train_losses).all())
    print(f"trainer (closed-form backward): {trainer:.1f} s", flush=True)

    fs = min(args.floor_steps, steps)
    floor_chunked = floor_time(m, n, d, width, fs, chunk) * steps / fs
    floor_full = floor_time(m, n, d, width, fs, m) * steps / fs
    floor = min(floor_chunked, floor_full)
    print(
        f"GEMM floor: chunked {floor_chunked:.1f} s, whole ensemble {floor_full:.1f} s "
        f"(timed on {fs} steps, scaled)",
        flush=True,
    )

    ss = min(args.slow_steps, steps)
    tick = time.perf_counter()
    train_ensemble(
        ens,
        x,
        y,
        learning_rate=lr,
        t=ss,
        normalization="sum",
        backward="autograd",
        chunk_size=chunk,
    )
    autograd = (time.perf_counter() - tick) * steps / ss
    print(
        f"same trainer, autograd backward: {autograd:.1f} s (timed on {ss} steps, scaled)",
        flush=True,
    )

    sm = min(args.slow_members, m)
    small = ensemble(arch, sm, width, in_features=d, generator=gen)
    stacked = stack_modules(small.modules())
    tick = time.perf_counter()
    train_ensemble(stacked, x, y, learning_rate=lr, t=ss, normalization="sum")
    vmap = (time.perf_counter() - tick) * (steps / ss) * (m / sm)
    print(
        f"generic vmap(grad(functional_call)): {vmap:.1f} s (timed on {sm} members x {ss} "
        "steps, scaled)",
        flush=True,
    )

    rows: list[dict[str, Any]] = [
        {"path": "trainer, closed-form backward", "seconds": trainer, "measured": "full"},
        {"path": "trainer, autograd backward", "seconds": autograd, "measured": f"{ss} steps"},
        {
            "path": "generic vmap(grad(functional_call))",
            "seconds": vmap,
            "measured": f"{sm} members, {ss} steps",
        },
        {"path": "GEMM floor, chunked", "seconds": floor_chunked, "measured": f"{fs} steps"},
        {"path": "GEMM floor, whole ensemble", "seconds": floor_full, "measured": f"{fs} steps"},
    ]
    print()
    print(f"| path (M={m}, width {width}, {steps} GD steps) | seconds | / floor | timed on |")
    print("|---|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['path']} | {r['seconds']:.1f} | {r['seconds'] / floor:.2f} | {r['measured']} |"
        )
    per = trainer / (m * steps)
    print(
        f"\ntrainer: {per * 1e6:.2f} us per network-step; floor = the faster GEMM floor "
        f"({floor:.1f} s); {math.floor(autograd / trainer * 10) / 10}x faster than autograd, "
        f"{vmap / trainer:.0f}x faster than vmap"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": None}, "rows": rows, "floor_s": floor},
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
