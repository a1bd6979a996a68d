"""Random features of the NTK and NNGP against the exact kernel, in one run.

For each architecture and number of features F, the time of ``arch.features(x, F)`` (all n
inputs, float64) and the relative Frobenius error :math:`\\|\\Phi\\Phi^T - K\\|_F/\\|K\\|_F`
(mean over ``seeds`` seeds), beside the time of the exact ``arch.kernel(x)`` measured in the
same run (best of ``repeats``). Architectures:

- ``fc3``: ``3 x [Dense(w_std=sqrt 2, b_std=0.1), Relu] + Dense`` on n inputs of dimension 20;
- ``cnn_gap``: ``2 x [Conv 3x3 SAME, Relu] + GlobalAvgPool + Dense`` on n 8x8 images with 3
  channels (the exact kernel carries the full (n, n, 8, 8, 8, 8) covariance).

The error falls as :math:`F^{-1/2}`; the features cost :math:`O(n F^2)` (CNN:
:math:`O(n |S| |f| F^2)`) against :math:`O(n^2)` for the exact kernel, so they win at large n,
where the exact kernel does not fit. Usage::

    python benchmarks/bench_features.py [--n-fc 1000] [--n-cnn 32] [--features-fc 256 1024 4096]
        [--features-cnn 128 256 512]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import ntklab as nl
from ntklab.kernels import Conv, GlobalAvgPool


def architectures() -> dict[str, nl.kernels.Architecture]:
    """The benchmarked architectures (NTK parameterization)."""
    w, b = math.sqrt(2.0), 0.1
    fc = nl.serial(*([nl.Dense(w_std=w, b_std=b), nl.Relu()] * 3), nl.Dense(w_std=w, b_std=b))
    conv = [Conv(filter_shape=(3, 3), w_std=w, b_std=b), nl.Relu()]
    cnn = nl.serial(*(conv * 2), GlobalAvgPool(), nl.Dense(w_std=w, b_std=b))
    return {"fc3": fc, "cnn_gap": cnn}


def best_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best wall time of ``repeats`` calls, and the last result."""
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def benchmark_features(
    n_fc: int = 1000,
    n_cnn: int = 32,
    features_fc: tuple[int, ...] = (256, 1024, 4096),
    features_cnn: tuple[int, ...] = (128, 256, 512),
    *,
    seeds: int = 3,
    repeats: int = 2,
) -> list[dict[str, object]]:
    """Measure and print one table row per (architecture, get, F); return the rows."""
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "fc3": torch.randn(n_fc, 20, generator=gen, dtype=torch.float64),
        "cnn_gap": torch.randn(n_cnn, 3, 8, 8, generator=gen, dtype=torch.float64),
    }
    rows: list[dict[str, object]] = []
    print("| architecture | n | kernel | F | features s | exact kernel s | rel. error |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, arch in architectures().items():
        x = inputs[name]
        exact_s, k = best_time(lambda: arch.kernel(x), repeats)  # noqa: B023
        assert isinstance(k, nl.kernels.Kernel)
        for get in ("ntk", "nngp"):
            target = k.ntk if get == "ntk" else k.nngp
            norm = float(torch.linalg.norm(target))
            for f in features_fc if name == "fc3" else features_cnn:
                seconds, errors = math.inf, []
                for seed in range(seeds):
                    t, phi = best_time(lambda: arch.features(x, f, seed=seed, get=get), 1)  # noqa: B023
                    assert isinstance(phi, torch.Tensor)
                    seconds = min(seconds, t)
                    errors.append(float(torch.linalg.norm(phi @ phi.T - target)) / norm)
                row = {
                    "architecture": name,
                    "n": int(x.shape[0]),
                    "get": get,
                    "F": f,
                    "features_s": seconds,
                    "exact_s": exact_s,
                    "error": sum(errors) / len(errors),
                }
                rows.append(row)
                print(
                    f"| {name} | {row['n']} | {get} | {f} | {seconds:.3f} | {exact_s:.3f} | "
                    f"{row['error']:.4f} |"
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-fc", type=int, default=1000)
    parser.add_argument("--n-cnn", type=int, default=32)
    parser.add_argument("--features-fc", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--features-cnn", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    benchmark_features(
        args.n_fc,
        args.n_cnn,
        tuple(args.features_fc),
        tuple(args.features_cnn),
        seeds=args.seeds,
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
