"""Time one product of ``ntk_operator`` against one forward plus one backward pass.

Network: the MLP 784-512-512-512-10 in NTK parameterization with ReLU
(``serial(Dense(sqrt 2, 0.1), Relu(), ...)``), float32, on n inputs (n = 20,000 by default).

- product: ``op @ v`` for a vector ``v`` of shape (n, 10): one ``vjp`` and one ``jvp`` over the
  whole batch (``Theta v = J (J^T v)``), neither Theta (n*k)^2 nor J formed;
- forward + backward: ``torch.autograd.grad(net(x), params, v)``, the cost of one gradient
  step over the same batch.

The ratio product / (forward + backward) is the figure of merit; a ``vjp`` is one forward
plus one backward and a ``jvp`` about two forwards, so about 1.5-2 is expected. Each time is the
best of ``repeats`` rounds after a warm-up, the two timed in
turn within each round. Usage::

    python benchmarks/bench_operator.py [--n 20000] [--repeats 3] [--float64]
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
from ntklab.empirical.operator import ntk_operator

WIDTHS = (784, 512, 512, 512, 10)


def mlp(widths: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.nn.Module:
    """The NTK-parameterized ReLU MLP with layer widths ``widths`` (input first)."""
    hidden = set(widths[1:-1])
    if len(hidden) != 1:
        raise ValueError(f"widths: expected equal hidden widths, got {widths}")
    depth = len(widths) - 1
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    arch = nl.serial(*([block] * (depth - 1)), nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
    return arch.to_torch(
        hidden.pop(),
        widths[-1],
        in_features=widths[0],
        generator=torch.Generator().manual_seed(seed),
        dtype=dtype,
    )


def best_of_interleaved(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Best time of each function over ``repeats`` rounds that run them in turn (after a
    warm-up round), so that a slow spell of a shared machine affects all of them."""
    for fn in fns:
        fn()
    best = [math.inf] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def benchmark_operator(
    n: int = 20_000,
    *,
    widths: tuple[int, ...] = WIDTHS,
    dtype: torch.dtype = torch.float32,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """Time ``op @ v`` and one forward + backward pass on the same batch; print and return
    ``{"product_s", "forward_backward_s", "ratio"}``."""
    gen = torch.Generator().manual_seed(seed + 1)
    net = mlp(widths, dtype, seed)
    x = torch.randn(n, widths[0], dtype=dtype, generator=gen)
    v = torch.randn(n, widths[-1], dtype=dtype, generator=gen)
    op = ntk_operator(net, x)
    params = [p for p in net.parameters() if p.requires_grad]

    def product() -> None:
        op @ v

    def forward_backward() -> None:
        torch.autograd.grad(net(x), params, grad_outputs=v)

    product_s, forward_backward_s = best_of_interleaved([product, forward_backward], repeats)
    ratio = product_s / forward_backward_s
    print(
        f"MLP {'-'.join(map(str, widths))}, n = {n}, {str(dtype).removeprefix('torch.')}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )
    print(f"operator product (vjp + jvp): {product_s:.3f} s")
    print(f"forward + backward pass:      {forward_backward_s:.3f} s")
    print(f"ratio product / (forward + backward): {ratio:.2f}")
    return {"product_s": product_s, "forward_backward_s": forward_backward_s, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="number of inputs")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (best is kept)")
    parser.add_argument("--float64", action="store_true", help="float64 instead of float32")
    args = parser.parse_args()
    benchmark_operator(
        args.n,
        dtype=torch.float64 if args.float64 else torch.float32,
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
