"""Time the empirical NTK methods on two anchor networks (float32, 2 threads).

- MLP 784-512-512-512-10 (ReLU, NTK parameterization) on 256 inputs (structured) and 64
  inputs (Jacobian contraction, NTK-vector products, and the Jacobian-contraction recipe of
  the PyTorch NTK tutorial: ``vmap(jacrev)`` per example, then one einsum per parameter);
- CNN on 256 inputs of 32x32x3: Conv(16, 3x3, stride 2, SAME), ReLU, Conv(32, 3x3, stride 2,
  SAME), ReLU, global average pooling, Dense(10).

Anchors (neural-tangents 0.6.5 on this kind of machine, measured earlier): MLP
structured 0.09-0.10 s (trace, 256) and 0.31 s (full, 256); Jacobian contraction 6.8 s and
NTK-vector products 2.5 s (trace, 64); CNN structured 0.5 s (trace) and 0.9 s (full),
Jacobian contraction 0.55 s and 1.0 s. Usage::

    python benchmarks/bench_empirical.py [--json PATH] [--repeats 3]

The comparison with the peers in one run (ntklab, the ``torch.func`` recipes, neural-tangents
0.6.5 in its own interpreter, nngeometry 0.4 when importable; see ``peers_empirical.py``)::

    python benchmarks/bench_empirical.py --peers [--nt-python PATH] [--json PATH]
        [--markdown PATH] [--rows mlp10,cnn,...] [--memory-cap-gib 10]

The cost model of ``method="auto"`` against measured times (per model and dtype: each
method's predicted flops, bytes and seconds beside its measured time, auto's pick, and the
``torch.func`` recipes; see ``cost_model_empirical.py``)::

    python benchmarks/bench_empirical.py --cost-model [--cost-rows cnn-128-float64,...]
        [--max-predicted 40] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from torch import Tensor, nn

import ntklab as nl

ANCHORS = {
    ("mlp", "structured", "trace", 256): 0.095,
    ("mlp", "structured", "full", 256): 0.31,
    ("mlp", "jacobian", "trace", 64): 6.8,
    ("mlp", "ntk_vp", "trace", 64): 2.5,
    ("cnn", "structured", "trace", 256): 0.5,
    ("cnn", "structured", "full", 256): 0.9,
    ("cnn", "jacobian", "trace", 256): 0.55,
    ("cnn", "jacobian", "full", 256): 1.0,
}


def mlp() -> nn.Module:
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    arch = nl.serial(block, block, block, nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
    return arch.to_torch(512, 10, in_features=784, generator=torch.Generator().manual_seed(0))


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def tutorial_recipe(model: nn.Module, x1: Tensor, x2: Tensor) -> Tensor:
    """The PyTorch NTK tutorial's Jacobian contraction: per-example Jacobians of every
    parameter by ``vmap(jacrev)``, then ``einsum('Naf,Mbf->NMab')`` per parameter, summed;
    traced over outputs at the end (mean over the diagonal, as ``outputs="trace"``)."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def single(p: dict[str, Tensor], x: Tensor) -> Tensor:
        return torch.func.functional_call(model, p, (x.unsqueeze(0),)).squeeze(0)

    jac = torch.func.vmap(torch.func.jacrev(single), (None, 0))
    j1 = [j.flatten(2) for j in jac(params, x1).values()]
    j2 = [j.flatten(2) for j in jac(params, x2).values()]
    full = torch.stack([torch.einsum("Naf,Mbf->NMab", a, b) for a, b in zip(j1, j2, strict=True)])
    return full.sum(0).diagonal(dim1=2, dim2=3).mean(-1)


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    import peers_empirical  # the peer comparison (--peers): its own section, own module

    peers_empirical.add_arguments(parser)
    import cost_model_empirical  # predicted against measured cost (--cost-model): own module

    cost_model_empirical.add_arguments(parser)
    args = parser.parse_args()
    if peers_empirical.dispatch(args):
        return
    if cost_model_empirical.dispatch(args):
        return
    gen = torch.Generator().manual_seed(1)
    nets = {"mlp": (mlp(), (784,)), "cnn": (cnn(), (3, 32, 32))}
    rows: list[dict[str, Any]] = []
    for (net_name, method, outputs, n), anchor in ANCHORS.items():
        net, shape = nets[net_name]
        x = torch.randn(n, *shape, generator=gen)
        t = best_of(
            lambda net=net, x=x, method=method, outputs=outputs: nl.empirical.ntk(
                net, x, outputs=outputs, method=method
            ),
            args.repeats,
        )
        rows.append(
            {
                "net": net_name,
                "method": method,
                "outputs": outputs,
                "n": n,
                "ntklab_s": t,
                "anchor_s": anchor,
                "ratio": t / anchor,
            }
        )
        print(f"{net_name} {method} {outputs} n={n}: {t:.3f} s", flush=True)
    net, shape = nets["mlp"]
    x = torch.randn(64, *shape, generator=gen)
    recipe = best_of(lambda: tutorial_recipe(net, x, x), args.repeats)
    best = min(r["ntklab_s"] for r in rows if r["net"] == "mlp" and r["n"] == 64)
    structured_64 = best_of(lambda: nl.empirical.ntk(net, x, method="structured"), args.repeats)
    fastest = min(best, structured_64)
    print()
    print("| network | method | outputs | n | ntklab s | neural-tangents s (issue) | ratio |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['net']} | {r['method']} | {r['outputs']} | {r['n']} | {r['ntklab_s']:.3f} "
            f"| {r['anchor_s']:.3g} | {r['ratio']:.2f} |"
        )
    print(
        f"\nMLP, traced NTK of 64 inputs: PyTorch tutorial recipe {recipe:.3f} s, ntklab "
        f"best {fastest:.3f} s: {recipe / fastest:.1f}x faster"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "tutorial_s": recipe, "ntklab_best_64_s": fastest}, indent=2)
        )


if __name__ == "__main__":
    main()
