r"""Nystrom-preconditioned CG (FALKON) against the exact kernel ridge solve.

Data: a smooth target on the sphere S^{d-1} (d = 10), ``y = sin(3 <w, x>) + 0.1 noise``, the
NTK of ``depth x [Dense(1.5, 0.1), Relu()] + Dense(1.5)`` (depth 3 by default), ridge
``sqrt(n)`` (FALKON's :math:`\lambda = 1/\sqrt{n}`, for which :math:`M \sim \sqrt{n}` centres
suffice; Rudi et al. arXiv:1705.10958), float64.

- exact: ``solve(op, y, ridge, method="cholesky")`` (dense kernel, Cholesky);
- nystrom: ``solve(op, y, ridge, method="nystrom", n_centres=M)`` with uniform centres.

Printed: test mean squared error of each, their relative difference (the target is 2%),
wall times and their ratio, FALKON's iterations. ``--no-exact`` skips the exact solve for n
beyond dense reach (e.g. ``--n 1000000 --no-exact``: one product then costs n M kernel
entries, recomputed in tiles when K_nM does not fit ``--budget``). Usage::

    python benchmarks/bench_solvers.py [--n 30000] [--centres 2000] [--budget-mib 2048]
                                       [--float32-blocks] [--no-exact]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import ntklab as nl
from ntklab.solvers import kernel_operator, predict, solve


def sphere(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True) * d**0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--n-test", type=int, default=2_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--depth", type=int, default=3, help="hidden ReLU layers")
    parser.add_argument(
        "--exact-n",
        type=int,
        default=None,
        help="exact solve on the first EXACT_N points (default: all n); the best exact solve "
        "that fits a 24 GiB machine is about 30,000",
    )
    parser.add_argument("--centres", type=int, default=2_000)
    parser.add_argument("--budget-mib", type=int, default=2048)
    parser.add_argument("--ridge", type=float, default=None, help="default: sqrt(n)")
    parser.add_argument("--float32-blocks", action="store_true")
    parser.add_argument("--no-exact", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(args.d, generator=gen, dtype=torch.float64) / args.d**0.5
    x, xt = sphere(args.n, args.d, gen), sphere(args.n_test, args.d, gen)
    y = torch.sin(3 * x @ w / args.d**0.5) + 0.1 * torch.randn(
        args.n, generator=gen, dtype=torch.float64
    )
    yt = torch.sin(3 * xt @ w / args.d**0.5)
    arch = nl.serial(
        *([nl.Dense(w_std=1.5, b_std=0.1), nl.Relu()] * args.depth), nl.Dense(w_std=1.5)
    )
    ridge = args.ridge if args.ridge is not None else args.n**0.5
    op = kernel_operator(
        arch,
        x,
        max_memory=args.budget_mib * 2**20,
        block_dtype=torch.float32 if args.float32_blocks else None,
    )
    print(
        f"n = {args.n}, d = {args.d}, M = {args.centres}, ridge = {ridge:g}, tile {op.tile_shape()}"
    )

    t0 = time.perf_counter()
    res = solve(
        op,
        y,
        ridge,
        method="nystrom",
        n_centres=args.centres,
        generator=gen,
        tol=1e-7,
        max_memory=args.budget_mib * 2**20,
    )
    pred = predict(op, res, xt)
    t_nys = time.perf_counter() - t0
    err_nys = float((pred - yt).square().mean())
    print(
        f"nystrom: test MSE {err_nys:.5f}, {t_nys:.1f} s, {res.iterations} iterations, "
        f"timings { ({k: round(v, 2) for k, v in res.timings.items()}) }"
    )
    print(
        f"end to end (data, kernel, solve, prediction): {time.perf_counter() - start:.1f} s; "
        f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"
    )
    if args.no_exact:
        return
    m = args.n if args.exact_n is None else min(args.exact_n, args.n)
    ridge_exact = args.ridge if args.ridge is not None else m**0.5
    op_exact = (
        op if m == args.n else kernel_operator(arch, x[:m], max_memory=args.budget_mib * 2**20)
    )
    t0 = time.perf_counter()
    exact = solve(op_exact, y[:m], ridge_exact, method="cholesky")
    pred_exact = predict(op_exact, exact, xt)
    t_exact = time.perf_counter() - t0
    err_exact = float((pred_exact - yt).square().mean())
    print(f"exact:   test MSE {err_exact:.5f}, {t_exact:.1f} s (n = {m}, ridge {ridge_exact:g})")
    print(
        f"relative test-error difference {abs(err_nys - err_exact) / err_exact:.2%}; "
        f"time ratio exact / nystrom {t_exact / t_nys:.1f}"
    )


if __name__ == "__main__":
    main()
