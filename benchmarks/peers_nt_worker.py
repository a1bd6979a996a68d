"""neural-tangents 0.6.5 on the models of ``peers_empirical.py``, in its own interpreter.

Run by ``bench_empirical.py --peers --nt-python PATH`` with the python of a separate virtual
environment (jax/jaxlib 0.4.25, numpy 1.26.4, scipy 1.11.4, tensorflow 2.15.1, tf2jax 0.3.5,
frozendict 2.4.6, neural-tangents 0.6.5); it never imports torch or ntklab. Each network is
written with ``jax.lax`` / ``jax.numpy`` ops in NCHW layout (``OIHW`` weights, the torch
layout) and takes the torch weights, by their torch names, from ``<model>-weights.npz``; the
kernel is ``nt.empirical_ntk_fn(f, trace_axes=(-1,) or (), vmap_axes=0,
implementation=...)``, jitted, on ``x1 = x2`` (``x2=None``). One warm-up (compilation), then
``--repeats`` timed calls (``block_until_ready``; one if the warm-up took over 60 s);
prints one JSON line with the times and the growth of the peak resident set, and saves the
kernel (float64) for the agreement check.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

EPS = 1e-5  # torch BatchNorm's default
SLOW_CALL = 20.0  # a warm-up (compilation included) slower than this: one timed run only


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def network(
    model: str, weights: dict[str, np.ndarray]
) -> tuple[dict[str, Any], Callable[..., Any]]:
    """(params, f(params, x)) for the named model; BatchNorm statistics are constants."""
    import jax.numpy as jnp
    from jax import lax

    consts = {k: jnp.asarray(v) for k, v in weights.items() if "running_" in k}
    params = {
        k: jnp.asarray(v)
        for k, v in weights.items()
        if "running_" not in k and "num_batches_tracked" not in k
    }

    def conv(p: dict[str, Any], name: str, x: Any, stride: int = 1, pad: int = 1) -> Any:
        y = lax.conv_general_dilated(
            x,
            p[f"{name}.weight"],
            (stride, stride),
            [(pad, pad), (pad, pad)],
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )
        bias = p.get(f"{name}.bias")
        return y if bias is None else y + bias[None, :, None, None]

    def bn(p: dict[str, Any], name: str, x: Any) -> Any:
        mean = consts[f"{name}.running_mean"][None, :, None, None]
        var = consts[f"{name}.running_var"][None, :, None, None]
        w = p[f"{name}.weight"][None, :, None, None]
        b = p[f"{name}.bias"][None, :, None, None]
        return (x - mean) / jnp.sqrt(var + EPS) * w + b

    def linear(p: dict[str, Any], name: str, x: Any) -> Any:
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    relu = lambda t: jnp.maximum(t, 0)  # noqa: E731

    if model in ("mlp10", "mlp1"):

        def f(p: dict[str, Any], x: Any) -> Any:
            h = relu(linear(p, "0", x))
            h = relu(linear(p, "2", h))
            return linear(p, "4", h)

    elif model == "cnn":

        def f(p: dict[str, Any], x: Any) -> Any:
            h = relu(conv(p, "0", x))
            h = relu(conv(p, "2", h))
            return linear(p, "6", h.mean((2, 3)))

    elif model == "resblock":

        def f(p: dict[str, Any], x: Any) -> Any:
            h = relu(bn(p, "stem_bn", conv(p, "stem", x)))
            r = relu(bn(p, "bn1", conv(p, "conv1", h)))
            h = relu(bn(p, "bn2", conv(p, "conv2", r)) + h)
            return linear(p, "fc", h.mean((2, 3)))

    elif model == "resnet18":

        def block(p: dict[str, Any], name: str, x: Any, stride: int) -> Any:
            h = relu(bn(p, f"{name}.bn1", conv(p, f"{name}.conv1", x, stride)))
            h = bn(p, f"{name}.bn2", conv(p, f"{name}.conv2", h))
            if f"{name}.shortcut.0.weight" in p:
                x = bn(p, f"{name}.shortcut.1", conv(p, f"{name}.shortcut.0", x, stride, 0))
            return relu(h + x)

        def f(p: dict[str, Any], x: Any) -> Any:
            h = relu(bn(p, "bn1", conv(p, "conv1", x)))
            for layer, stride in ((1, 1), (2, 2), (3, 2), (4, 2)):
                h = block(p, f"layer{layer}.0", h, stride)
                h = block(p, f"layer{layer}.1", h, 1)
            return linear(p, "fc", h.mean((2, 3)))

    else:
        raise ValueError(f"model: unknown {model!r}")
    return params, f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--outputs", choices=("trace", "full"), required=True)
    parser.add_argument("--dtype", choices=("float32", "float64"), required=True)
    parser.add_argument("--implementation", choices=("jc", "vp", "sd", "auto"), required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()

    import jax

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import neural_tangents as nt

    folder = Path(args.workdir)
    store = np.load(folder / f"{args.model}-weights.npz")
    dtype = np.dtype(args.dtype)
    weights = {k: store[k].astype(dtype) for k in store.files}
    params, f = network(args.model, weights)
    x = jnp.asarray(np.load(folder / f"{args.model}-n{args.n}-x.npy").astype(dtype))
    impl = {
        "jc": nt.NtkImplementation.JACOBIAN_CONTRACTION,
        "vp": nt.NtkImplementation.NTK_VECTOR_PRODUCTS,
        "sd": nt.NtkImplementation.STRUCTURED_DERIVATIVES,
        "auto": nt.NtkImplementation.AUTO,
    }[args.implementation]
    trace_axes = (-1,) if args.outputs == "trace" else ()
    kernel_fn = jax.jit(
        nt.empirical_ntk_fn(f, trace_axes=trace_axes, vmap_axes=0, implementation=impl)
    )

    def run() -> Any:
        return kernel_fn(x, None, params).block_until_ready()

    _reset_peak()
    before = _status("VmRSS")
    start = time.perf_counter()
    result = run()  # compilation
    repeats = args.repeats if time.perf_counter() - start <= SLOW_CALL else 1
    times = []
    for _ in range(repeats):
        result = None
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    peak = max(0, _status("VmHWM") - before)
    out = np.asarray(result, dtype=np.float64)
    if args.outputs == "full":  # neural-tangents' full layout is (n1, n2, k, k) already
        assert out.ndim == 4
    np.save(folder / f"{args.key}-nt-{args.implementation}.npy", out)
    print(json.dumps({"times": times, "peak_bytes": peak}), flush=True)


if __name__ == "__main__":
    main()
