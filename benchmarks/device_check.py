"""Device-agnosticism check and GPU timing of the analytic kernels (run on a CUDA machine).

    PYTHONPATH=src python benchmarks/device_check.py [--n 4000]

Checks that kernels computed from CUDA inputs stay on CUDA, agree with the CPU float64
result, are differentiable there, that ``Elementwise`` quadrature and ``to_torch`` work on the
device, and times the depth-10 ReLU benchmark architecture against the same floor as
``bench_kernels.py`` (one GEMM plus one arccos pass per layer), measured in the same run.
"""

from __future__ import annotations

import argparse
import math
import time

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4000)
    args = parser.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print("torch", torch.__version__, "device", dev)
    check(dev)
    bench(dev, args.n)
