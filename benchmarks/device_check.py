"""Device-agnosticism check and GPU timing of the analytic kernels (run on a CUDA machine).

    PYTHONPATH=src python benchmarks/device_check.py [--n 4000] [--cntk-n 32] [--only cntk]

Checks that kernels computed from CUDA inputs stay on CUDA, agree with the CPU float64
result, are differentiable there, that ``Elementwise`` quadrature and ``to_torch`` work on the
device, and times the depth-10 ReLU benchmark architecture against the same floor as
``bench_kernels.py`` (one GEMM plus one arccos pass per layer), measured in the same run.

The convolutional kernels (:func:`check_cntk`, :func:`bench_cntk`): on CUDA inputs runs of
``[Conv, Relu]`` take the compiled (``torch.compile``) step (``ntklab.kernels._compiled_conv``);
the check compares it with the CPU float64 result on 2-D and 1-D architectures (SAME, VALID,
CIRCULAR, strides, ``GlobalAvgPool`` and ``Flatten``) and confirms that it ran without
falling back; the bench times it against the eager recursion (``NTKLAB_COMPILED_CONV=0``) on
the ``bench_cntk.py`` architecture (depth 5, 3x3 SAME, 32x32x3 images, float32), first call
(with the compile) and best of five, with the peak GPU memory of each against the
``max_memory`` planner's estimate (``block_bytes``). Without CUDA both run on the CPU with
``NTKLAB_COMPILED_CONV=1`` (inductor's CPU backend; slow to compile, for information).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

import ntklab as nl


def _time(fn, device: torch.device, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    fn()
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def check(device: torch.device) -> None:
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randn(64, 7, dtype=torch.float64, generator=gen)
    x2 = torch.randn(33, 7, dtype=torch.float64, generator=gen)
    archs = {
        "relu": nl.serial(
            nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1)
        ),
        "erf-gelu": nl.serial(
            nl.Dense(w_std=1.2, b_std=0.2),
            nl.Erf(),
            nl.Dense(w_std=1.1, b_std=0.1),
            nl.Gelu(),
            nl.Dense(w_std=1.0),
        ),
        "tanh": nl.serial(
            nl.Dense(w_std=1.0, b_std=0.1), nl.Tanh(), nl.Dense(w_std=1.0, b_std=0.1)
        ),
    }
    for name, arch in archs.items():
        ref = arch.kernel(x1, x2)
        k = arch.kernel(x1.to(device), x2.to(device))
        assert k.ntk.device.type == device.type and k.nngp.dtype == torch.float64, name
        err = float((k.ntk.cpu() - ref.ntk).abs().max() / ref.ntk.abs().max())
        assert err < 1e-10, (name, err)
        xg = x1.to(device, copy=True).requires_grad_()
        (grad,) = torch.autograd.grad(arch.kernel(xg, x2.to(device)).ntk.sum(), xg)
        assert grad.device.type == device.type and torch.isfinite(grad).all(), name
        print(f"{name}: {device} vs cpu max rel err {err:.1e}, gradient finite on {device}")
    net = archs["relu"].to_torch(256, 1, in_features=7, device=device, dtype=torch.float64)
    assert net(x1.to(device)).device.type == device.type
    print("to_torch forward on", device, "ok")
    check_empirical(device)


def check_empirical(device: torch.device) -> None:
    """Every empirical-NTK method, the operator and the Monte Carlo estimator on ``device``
    agree with the CPU float64 result."""
    torch.manual_seed(0)
    models = {
        "mlp": (
            torch.nn.Sequential(torch.nn.Linear(7, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)),
            (7,),
        ),
        "cnn": (
            torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(8, 2),
            ),
            (3, 8, 8),
        ),
    }
    for name, (model, shape) in models.items():
        model = model.double()
        x = torch.randn(6, *shape, dtype=torch.float64)
        ref = nl.empirical.ntk(model, x, outputs="full", method="jacobian")
        dev_model = model.to(device)
        for method in nl.empirical.METHODS:
            got = nl.empirical.ntk(dev_model, x.to(device), outputs="full", method=method)
            assert got.device.type == device.type, (name, method)
            err = float((got.cpu() - ref).abs().max() / ref.abs().max())
            assert err < 1e-10, (name, method, err)
            print(f"empirical {name} {method}: {device} vs cpu max rel err {err:.1e}")
        op = nl.empirical.ntk_operator(dev_model, x.to(device))
        v = torch.randn(6, op.n_outputs, dtype=torch.float64)
        dense = ref.permute(0, 2, 1, 3).reshape(v.numel(), v.numel())
        err = float(((op @ v.to(device)).cpu().reshape(-1) - dense @ v.reshape(-1)).abs().max())
        assert err < 1e-9, (name, "operator", err)
        model.cpu()
    mc = nl.empirical.monte_carlo_kernel(
        archs_relu(),
        x1_small(device),
        width=64,
        n_samples=8,
        generator=torch.Generator(device=device).manual_seed(0),
    )
    assert mc.ntk.device.type == device.type
    print("operator and monte_carlo_kernel on", device, "ok")


def archs_relu() -> nl.Architecture:
    return nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))


def x1_small(device: torch.device) -> torch.Tensor:
    return torch.randn(4, 3, dtype=torch.float64, device=device)


def bench(device: torch.device, n: int) -> None:
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    arch = nl.serial(*([block] * 10), nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
    print(f"\n| d | dtype | ntklab s | floor s | ratio |  (n = {n}, {device})")
    print("|---|---|---|---|---|")
    for d in (10, 784):
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(n, d, dtype=dtype, device=device)
            buf = torch.empty(n, n, dtype=dtype, device=device)
            out = torch.empty_like(buf)

            def floor(
                x: torch.Tensor = x, buf: torch.Tensor = buf, out: torch.Tensor = out
            ) -> None:
                torch.mm(x, x.T, out=buf)
                buf.clamp_(-1.0, 1.0)
                for _ in range(10):
                    torch.arccos(buf, out=out)

            def ours(x: torch.Tensor = x) -> None:
                with torch.no_grad():
                    arch.kernel(x)

            t_ours, t_floor = _time(ours, device), _time(floor, device)
            print(
                f"| {d} | {str(dtype)[6:]} | {t_ours:.4f} | {t_floor:.4f} | "
                f"{t_ours / t_floor:.2f} |"
            )


@contextmanager
def _environ(name: str, setting: str) -> Iterator[None]:
    """The environment variable ``name`` set to ``setting`` within the block."""
    previous = os.environ.get(name)
    os.environ[name] = setting
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def _compiled_conv(setting: str) -> Any:
    """``NTKLAB_COMPILED_CONV`` set to ``setting`` within the block."""
    return _environ("NTKLAB_COMPILED_CONV", setting)


def _cntk(
    conv: tuple[tuple[int, ...], tuple[int, ...], str], top: str, depth: int = 2
) -> nl.Architecture:
    from ntklab.kernels import Conv, Flatten, GlobalAvgPool

    filt, strides, padding = conv
    second = "CIRCULAR" if padding == "CIRCULAR" else "SAME"
    layers: list[nl.kernels.Layer] = [
        Conv(filter_shape=filt, strides=strides, padding=padding, w_std=1.4, b_std=0.1),
        nl.Relu(),
    ]
    for _ in range(depth - 1):
        layers += [Conv(filter_shape=(3,) * len(filt), padding=second, w_std=1.4), nl.Relu()]
    top_layer = GlobalAvgPool() if top == "gap" else Flatten()
    return nl.serial(*layers, top_layer, nl.Dense(w_std=1.1, b_std=0.05))


def check_cntk(device: torch.device) -> None:
    """The compiled CNTK step on ``device`` against the CPU float64 result (eager): four
    geometries in float64, one in float32 (a few compiles: Triton takes seconds for each
    step configuration)."""
    from ntklab.kernels import _compiled_conv as cc

    cases = [
        (((3, 3), (1, 1), "SAME"), "gap", (8, 8), (torch.float64, torch.float32)),
        (((3, 3), (2, 2), "VALID"), "gap", (9, 7), (torch.float64,)),
        (((3, 3), (1, 1), "CIRCULAR"), "flatten", (8, 6), (torch.float64,)),
        (((3,), (2,), "SAME"), "gap", (11,), (torch.float64,)),
    ]
    tolerances = {torch.float64: 1e-10, torch.float32: 1e-5}
    gen = torch.Generator().manual_seed(0)
    setting = "auto" if device.type == "cuda" else "1"
    for conv, top, size, dtypes in cases:
        arch = _cntk(conv, top)
        x1 = torch.randn(9, 3, *size, dtype=torch.float64, generator=gen)
        x2 = torch.randn(5, 3, *size, dtype=torch.float64, generator=gen)
        for b in (None, x2):
            with _environ("NTKLAB_DISABLE_FUSED", "1"):
                # the eager recursion on the CPU (the C kernel snaps correlations within 8
                # ulp of 1, which moves the diagonal of K(x) under pooling by ~1e-10)
                ref = arch.kernel(x1, b)
            for dtype in dtypes:
                with _compiled_conv(setting):
                    start = time.perf_counter()
                    bb = None if b is None else b.to(device, dtype)
                    k = arch.kernel(x1.to(device, dtype), bb)
                    seconds = time.perf_counter() - start
                assert cc._failure.reason is None, cc._failure.reason
                assert k.ntk.device.type == device.type and k.ntk.dtype == dtype
                err = 0.0
                for name in ("nngp", "ntk"):
                    want = getattr(ref, name)
                    got = getattr(k, name).cpu().double()
                    err = max(err, float((got - want).abs().max() / want.abs().max()))
                assert err < tolerances[dtype], (conv, top, str(dtype), err)
                print(
                    f"compiled CNTK {conv} {top} x2={'no' if b is None else 'yes'} "
                    f"{str(dtype)[6:]}: {device} vs cpu float64 max rel err {err:.1e} "
                    f"({seconds:.1f} s, compiling included)"
                )
    print(f"compiled CNTK step configurations built: {cc._compiled.cache_info().currsize}")


def bench_cntk(device: torch.device, n: int) -> None:
    """Compiled vs eager CNTK on ``device``: the bench_cntk.py architecture, float32."""
    from ntklab.kernels.engine import block_bytes

    setting = "auto" if device.type == "cuda" else "1"
    print(
        f"\n| top | n | compiled first s | compiled s | eager s | eager / compiled | "
        f"peak compiled / eager / planned GiB |  ({device}, depth 5, 32x32x3, float32)"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for top, count in (("flatten", 4 * n), ("gap", n)):
        arch = _cntk(((3, 3), (1, 1), "SAME"), top, depth=5)
        x = torch.randn(count, 3, 32, 32, device=device)
        peaks: list[float] = []
        times: list[tuple[float, float]] = []
        kernels: list[torch.Tensor] = []
        for mode in (_compiled_conv(setting), _environ("NTKLAB_DISABLE_FUSED", "1")):
            with mode:  # the compiled step, then the eager recursion

                def run() -> None:
                    with torch.no_grad():
                        arch.kernel(x)  # noqa: B023 - called within the iteration

                start = time.perf_counter()
                run()  # the first call compiles
                if device.type == "cuda":
                    torch.cuda.synchronize()
                first = time.perf_counter() - start
                if device.type == "cuda":  # the peak of a warm call
                    torch.cuda.reset_peak_memory_stats()
                    run()
                    torch.cuda.synchronize()
                    peaks.append(torch.cuda.max_memory_allocated() / 2**30)
                times.append((first, _time(run, device)))
                with torch.no_grad():
                    kernels.append(arch.kernel(x[:8]).ntk.double().cpu())
        planned = block_bytes(x, count, count, top == "gap") / 2**30
        peak = " / ".join(f"{p:.2f}" for p in peaks) + f" / {planned:.2f}" if peaks else "-"
        (first_c, best_c), (_, best_e) = times
        err = float((kernels[0] - kernels[1]).abs().max() / kernels[1].abs().max())
        assert err < 1e-5, (top, err)  # float32: compiled and eager agree to rounding
        print(
            f"| {top} | {count} | {first_c:.2f} | {best_c:.4f} | {best_e:.4f} | "
            f"{best_e / best_c:.1f} | {peak} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--cntk-n", type=int, default=32, help="images under GlobalAvgPool")
    parser.add_argument("--only", choices=["all", "cntk"], default="all")
    args = parser.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print("torch", torch.__version__, "device", dev)
    if args.only == "all":
        check(dev)
        bench(dev, args.n)
    check_cntk(dev)
    bench_cntk(dev, args.cntk_n)
