"""Generate reference CNTK values from Google's neural-tangents (NT) 0.6.5.

Writes ``tests/data/nt_reference_conv.json`` next to this file. ntklab's tests read that JSON
only; neural-tangents / jax are NOT dependencies of ntklab and this script is never imported
by the test suite.

Run it inside the throw-away virtualenv described in ``make_nt_reference.py`` (outside the
repository)::

    OMP_WAIT_POLICY=PASSIVE /tmp/ntvenv/bin/python tests/data/make_nt_conv_reference.py

Everything is float64 (``jax_enable_x64``); inputs come from ``np.random.default_rng(seed)``.

JSON layout: ``cases``: a list of ``{name, seed, x1, x2, architecture, nt_code, nngp, ntk}``.
``x1``/``x2`` are stored channels-first, torch's ``(n, C, H, W)`` or ``(n, C, L)``; they are
transposed to NT's channels-last layout (``NHWC``) before calling NT. ``x2`` is ``null`` for
the self-kernel. ``architecture`` is a list of layer dicts:

- ``{"layer": "Conv", "filter", "strides", "padding", "w_std", "b_std", "parameterization",
  "width"}`` (NT ``stax.Conv(width, filter, strides, padding, W_std, b_std, parameterization)``);
- ``{"layer": "AvgPool", "window", "strides", "padding"}`` (``normalize_edges=False``);
- ``{"layer": "GlobalAvgPool"}``, ``{"layer": "Flatten"}``;
- ``{"layer": "LayerNorm", "axes": "channel" | "all", "eps"}`` (NT ``axis=-1`` or all
  non-batch axes);
- ``{"layer": "Dropout", "rate"}``: torch's drop probability; NT ``Dropout(1 - rate,
  mode="test")``;
- ``{"layer": "Residual", "branch": [...]}``: NT ``FanOut(2), parallel(Identity(), branch),
  FanInSum()``;
- ``{"layer": "Dense", ...}`` and activations ``Relu``, ``Erf``, ``Gelu`` as in
  ``make_nt_reference.py``.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_conv.json")
WIDTH = 64  # ignored by NT's kernels in NTK parameterization


def conv(filt, strides=None, padding="SAME", w=1.5, b=0.1, param="ntk", width=WIDTH):
    return {
        "layer": "Conv",
        "filter": list(filt),
        "strides": list(strides or [1] * len(filt)),
        "padding": padding,
        "w_std": w,
        "b_std": b,
        "parameterization": param,
        "width": width,
    }


def dense(w=1.2, b=0.05, param="ntk", width=1):
    return {"layer": "Dense", "w_std": w, "b_std": b, "parameterization": param, "width": width}


def pool(window, strides, padding="VALID"):
    return {
        "layer": "AvgPool",
        "window": list(window),
        "strides": list(strides),
        "padding": padding,
    }


def to_stax(spec, ndim):
    layers = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Conv":
            layers.append(
                stax.Conv(
                    layer["width"],
                    tuple(layer["filter"]),
                    tuple(layer["strides"]),
                    layer["padding"],
                    W_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                )
            )
        elif kind == "Dense":
            layers.append(
                stax.Dense(
                    layer["width"],
                    W_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                )
            )
        elif kind == "AvgPool":
            layers.append(
                stax.AvgPool(tuple(layer["window"]), tuple(layer["strides"]), layer["padding"])
            )
        elif kind == "GlobalAvgPool":
            layers.append(stax.GlobalAvgPool())
        elif kind == "Flatten":
            layers.append(stax.Flatten())
        elif kind == "LayerNorm":
            axis = -1 if layer["axes"] == "channel" else tuple(range(1, ndim + 2))
            layers.append(stax.LayerNorm(axis=axis, eps=layer["eps"]))
        elif kind == "Dropout":
            layers.append(stax.Dropout(1.0 - layer["rate"], mode="test"))
        elif kind == "Residual":
            branch = to_stax(layer["branch"], ndim)
            layers.append(
                stax.serial(stax.FanOut(2), stax.parallel(stax.Identity(), branch), stax.FanInSum())
            )
        elif kind == "Relu":
            layers.append(stax.Relu())
        elif kind == "Erf":
            layers.append(stax.Erf())
        elif kind == "Gelu":
            layers.append(stax.Gelu(approximate=False))
        else:
            raise ValueError(kind)
    return stax.serial(*layers)


RELU = {"layer": "Relu"}
CASES = [
    ("conv_flatten", 2, [conv((3, 3)), RELU, conv((3, 3)), RELU, {"layer": "Flatten"}, dense()]),
    (
        "conv_valid_strided_erf",
        2,
        [
            conv((3, 3), (2, 2), "VALID", 1.3, 0.2),
            {"layer": "Erf"},
            conv((2, 1), (1, 1), "VALID", 1.1, None),
            {"layer": "Gelu"},
            {"layer": "Flatten"},
            dense(),
        ],
    ),
    (
        "conv_circular_gap",
        2,
        [
            conv((3, 3), padding="CIRCULAR"),
            RELU,
            conv((3, 3), (2, 2), "CIRCULAR", 1.4, 0.3),
            RELU,
            {"layer": "GlobalAvgPool"},
            dense(),
        ],
    ),
    (
        "conv_avgpool_gap",
        2,
        [
            conv((3, 3)),
            RELU,
            pool((2, 2), (2, 2)),
            conv((2, 2), padding="SAME"),
            RELU,
            {"layer": "GlobalAvgPool"},
            dense(),
        ],
    ),
    (
        "avgpool_same_circular",
        2,
        [
            conv((3, 3), padding="VALID"),
            RELU,
            pool((3, 3), (1, 1), "SAME"),
            conv((3, 3)),
            RELU,
            pool((2, 2), (1, 1), "CIRCULAR"),
            {"layer": "Flatten"},
            dense(),
        ],
    ),
    (
        "layernorm_dropout",
        2,
        [
            conv((3, 3)),
            {"layer": "LayerNorm", "axes": "channel", "eps": 1e-3},
            RELU,
            {"layer": "Dropout", "rate": 0.3},
            conv((3, 3)),
            {"layer": "LayerNorm", "axes": "all", "eps": 1e-3},
            RELU,
            {"layer": "GlobalAvgPool"},
            dense(),
        ],
    ),
    (
        "residual_gap",
        2,
        [
            conv((3, 3)),
            {"layer": "Residual", "branch": [RELU, conv((3, 3), w=1.2, b=0.0)]},
            {"layer": "Residual", "branch": [RELU, conv((3, 3), w=0.9, b=0.1)]},
            RELU,
            {"layer": "GlobalAvgPool"},
            dense(),
        ],
    ),
    (
        "residual_flatten",
        2,
        [
            conv((3, 3)),
            {"layer": "Residual", "branch": [RELU, conv((3, 3), w=1.2, b=0.0)]},
            RELU,
            {"layer": "Flatten"},
            dense(),
        ],
    ),
    (
        "standard_parameterization",
        2,
        [
            conv((3, 3), param="standard", width=5, w=1.4, b=0.1),
            RELU,
            conv((3, 3), (2, 2), param="standard", width=7, w=1.3, b=0.2),
            RELU,
            {"layer": "Flatten"},
            dense(param="standard", width=1),
        ],
    ),
    (
        "conv1d_pool",
        1,
        [
            conv((3,)),
            RELU,
            pool((2,), (2,)),
            conv((2,), padding="VALID"),
            RELU,
            {"layer": "GlobalAvgPool"},
            dense(),
        ],
    ),
    ("gap_only_relu", 2, [conv((1, 1)), RELU, {"layer": "GlobalAvgPool"}, dense()]),
]


def main() -> None:
    cases = []
    for seed, (name, ndim, spec) in enumerate(CASES):
        rng = np.random.default_rng(100 + seed)
        shape = (2, 6, 6) if ndim == 2 else (2, 7)
        x1 = rng.standard_normal((3, *shape))
        x2 = rng.standard_normal((2, *shape))
        _, _, kernel_fn = to_stax(spec, ndim)
        perm = (0, *range(2, ndim + 2), 1)  # NCHW -> NHWC
        for pair in (True, False):
            a = np.transpose(x1, perm)
            b = np.transpose(x2, perm) if pair else None
            k = kernel_fn(a, b, ("nngp", "ntk"))
            cases.append(
                {
                    "name": name + ("" if pair else "_self"),
                    "seed": 100 + seed,
                    "x1": x1.tolist(),
                    "x2": x2.tolist() if pair else None,
                    "architecture": spec,
                    "nngp": np.asarray(k.nngp).tolist(),
                    "ntk": np.asarray(k.ntk).tolist(),
                }
            )
            print(name, pair, np.asarray(k.ntk).ravel()[:3])
    out = {
        "generator": "tests/data/make_nt_conv_reference.py, neural-tangents 0.6.5, float64",
        "layout": "inputs channels-first (torch); transposed to NHWC for NT",
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
