"""Predicted cost against measured time of each empirical-NTK method
(``bench_empirical.py --cost-model``).

For each row (a model on ``n`` inputs, traced kernel, float32 or float64) it prints, per
method of :func:`ntklab.empirical.ntk` (``structured``, ``jacobian``, ``ntk_vp``), the cost
model's prediction (:mod:`ntklab.empirical.cost`: matrix-product flops, bytes moved by
memory-bound passes, and predicted seconds, their matrix-product-equivalent flops divided by
the matrix-product rate measured at the start of the run) beside the measured time (median
of ``--repeats`` runs after a warm-up), which method ``method="auto"`` picks, and whether
that pick is the fastest ntklab method or within 10 % of it. The ``torch.func`` recipes
(Jacobian contraction of the PyTorch NTK tutorial, NTK-vector products; from
``peers_empirical.py``) are timed alongside, so the row also says how much faster ntklab's
auto is than the faster recipe. A method whose prediction exceeds ``--max-predicted``
seconds is not run (its prediction is still printed). The machine's load average is
recorded per row: on a shared machine, compare rows measured under similar load.

The models are those of ``peers_empirical.py`` (``build``): MLP 784-512-512-10, the CNN
3-32-64 with global average pooling, the ResNet block with BatchNorm in eval mode, and
ResNet-18 (CIFAR stem, 11.2 M parameters) at small ``n``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

#: (model, n, dtype) rows of the cost-model table; all traced kernels of x1 = x2.
ROWS = (
    ("mlp10", 256, "float32"),
    ("mlp10", 256, "float64"),
    ("cnn", 128, "float32"),
    ("cnn", 128, "float64"),
    ("resblock", 64, "float32"),
    ("resblock", 64, "float64"),
    ("resnet18", 8, "float32"),
)
METHODS = ("structured", "jacobian", "ntk_vp")
WITHIN = 1.10  # auto's pick counts as right if at most 10 % slower than the fastest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cost model (--cost-model)")
    group.add_argument(
        "--cost-model",
        action="store_true",
        help="print predicted cost and measured time of each method per model",
    )
    group.add_argument(
        "--cost-rows",
        default=None,
        help="comma-separated model-n-dtype keys, e.g. cnn-128-float64 (default: all)",
    )
    group.add_argument(
        "--max-predicted",
        type=float,
        default=40.0,
        help="do not run a method predicted to take longer than this many seconds",
    )


def dispatch(args: argparse.Namespace) -> bool:
    """Run the cost-model table if ``--cost-model`` was given; True if it ran."""
    if not args.cost_model:
        return False
    rows = ROWS
    if args.cost_rows:
        wanted = set(args.cost_rows.split(","))
        rows = tuple(r for r in ROWS if f"{r[0]}-{r[1]}-{r[2]}" in wanted)
    import peers_empirical as peers

    results = [
        {**peers.run_facts(), **measure_row(*row, repeats=args.repeats, limit=args.max_predicted)}
        for row in rows
    ]
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return True


def matmul_rate(dtype: torch.dtype, size: int = 1024) -> float:
    """Matrix-product flops per second now (median of 3 after a warm-up)."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    return 2.0 * size**3 / median_time(lambda: a @ b, 3)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_row(model_name: str, n: int, dtype_name: str, *, repeats: int, limit: float) -> dict:
    import ntklab as nl
    import peers_empirical as peers
    from ntklab.empirical import cost
    from ntklab.empirical.jacobian import probe

    dtype = getattr(torch, dtype_name)
    model = peers.build(model_name).to(dtype)
    x = peers.inputs(model_name, n).to(dtype)
    fm = nl.empirical.functional_model(model)
    info = probe(fm, x)
    k = info.n_outputs
    rate = matmul_rate(dtype)
    predicted = {
        "structured": cost.structured_cost(fm, n, n, k, "trace", x, info, symmetric=True),
        "jacobian": cost.jacobian_cost(fm, n, n, k, "trace", info, symmetric=True),
        "ntk_vp": cost.ntk_vp_cost(fm, n, n, k, "trace", info, symmetric=True),
    }
    auto = nl.empirical.plan(fm, x, None, "trace").method
    load = os.getloadavg()[0]
    row: dict[str, Any] = {
        "model": model_name,
        "n": n,
        "dtype": dtype_name,
        "k": k,
        "n_params": fm.n_params,
        "matmul_gflops": rate / 1e9,
        "load_before": load,
        "auto": auto,
        "methods": {},
        "recipes": {},
    }
    reference: Tensor | None = None
    for name in METHODS:
        c = predicted[name]
        entry: dict[str, Any] = {
            "flops": c.flops,
            "bytes": c.bytes,
            "predicted_s": c.seconds(rate),
            "measured_s": None,
        }
        if c.seconds(rate) <= limit:

            def run(name: str = name) -> Tensor:
                return nl.empirical.ntk(model, x, method=name)  # type: ignore[arg-type]

            entry["measured_s"] = median_time(run, repeats)
            result = run().double()
            if reference is None:
                reference = result
            entry["rel_diff"] = float((result - reference).norm() / reference.norm())
        row["methods"][name] = entry
        print(f"  {model_name} n={n} {dtype_name} {name}: {entry}", flush=True)
    recipes: dict[str, Callable[[], Tensor]] = {
        "torch_jc": lambda: peers.torch_jacobian_contraction(model, x, "trace"),
        "torch_vp": lambda: peers.torch_ntk_vector_products(model, x, "trace"),
    }
    like = {"torch_jc": "jacobian", "torch_vp": "ntk_vp"}
    jacobian_bytes = n * k * fm.n_params * x.element_size()
    for name, fn in recipes.items():
        expected = predicted[like[name]].seconds(rate)
        too_big = name == "torch_jc" and jacobian_bytes > 4 * 2**30
        row["recipes"][name] = None if expected > limit or too_big else median_time(fn, repeats)
        print(f"  {model_name} n={n} {dtype_name} {name}: {row['recipes'][name]}", flush=True)
    row["load_after"] = os.getloadavg()[0]
    measured = {m: e["measured_s"] for m, e in row["methods"].items() if e["measured_s"]}
    best = min(measured.values())
    row["fastest"] = min(measured, key=lambda m: measured[m])
    row["auto_ok"] = auto in measured and measured[auto] <= WITHIN * best
    recipe_times = [t for t in row["recipes"].values() if t]
    if recipe_times and auto in measured:
        row["speedup_vs_recipes"] = min(recipe_times) / measured[auto]
    return row


def print_table(results: list[dict]) -> None:
    print()
    print(
        "| model | n | dtype | load | method | GFLOP | GB moved | predicted s | measured s |"
        " auto | torch.func JC s | torch.func VP s | auto vs best recipe |"
    )
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for row in results:
        for i, (name, e) in enumerate(row["methods"].items()):
            measured = "not run" if e["measured_s"] is None else f"{e['measured_s']:.3f}"
            mark = ""
            if name == row["auto"]:
                mark = "auto, " + ("ok" if row["auto_ok"] else f"FAIL (fastest {row['fastest']})")
            first = i == 0
            load = f"{row['load_before']:.1f}" if first else ""
            jc = row["recipes"].get("torch_jc") if first else None
            vp = row["recipes"].get("torch_vp") if first else None
            speed = row.get("speedup_vs_recipes") if first else None
            print(
                f"| {row['model'] if first else ''} | {row['n'] if first else ''} "
                f"| {row['dtype'] if first else ''} "
                f"| {load} | {name} "
                f"| {e['flops'] / 1e9:.1f} | {e['bytes'] / 1e9:.2f} | {e['predicted_s']:.2f} "
                f"| {measured} | {mark} "
                f"| {'' if not first else ('not run' if jc is None else f'{jc:.3f}')} "
                f"| {'' if not first else ('not run' if vp is None else f'{vp:.3f}')} "
                f"| {'' if speed is None else f'{speed:.2f}x'} |"
            )
