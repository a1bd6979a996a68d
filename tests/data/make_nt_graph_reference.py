"""Generate reference kernels of graph architectures from Google's neural-tangents (NT) 0.6.5.

Writes ``tests/data/nt_reference_graphs.json`` next to this file. ntklab's tests read that
JSON only; neural-tangents / jax are NOT dependencies of ntklab and this script is never
imported by the test suite.

Run it inside the throw-away virtualenv described in ``make_nt_reference.py`` (outside the
repository)::

    OMP_WAIT_POLICY=PASSIVE /tmp/ntvenv/bin/python tests/data/make_nt_graph_reference.py

Everything is float64 (``jax_enable_x64``); inputs come from ``np.random.default_rng(seed)``.
The JSON layout is that of ``make_nt_conv_reference.py`` (image inputs stored channels-first,
transposed to NHWC for NT; flat inputs ``(n, d)`` as they are), with these layer dicts besides
its own:

- ``{"layer": "FanOut", "n"}``: NT ``stax.FanOut(n)``;
- ``{"layer": "parallel", "branches": [[...], ...]}``: NT ``stax.parallel(*branches)``, each
  branch a ``stax.serial`` of its layer dicts;
- ``{"layer": "FanInSum"}``, ``{"layer": "FanInProd"}``, ``{"layer": "FanInConcat"}``
  (NT ``axis=-1``, the channel axis of NHWC; ntklab's ``axis=1`` of NCHW);
- ``{"layer": "Identity"}``: NT ``stax.Identity()``.

``width`` of ``Dense``/``Conv`` is NT's ``out_dim``/``out_chan``: the concatenation's kernel
weighs the branches by it.
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_nt_conv_reference as conv_ref
from neural_tangents import stax

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_graphs.json")

warnings.filterwarnings("ignore", message="`FanIn` layers assume independent inputs")


def to_stax(spec, ndim):
    layers = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "FanOut":
            layers.append(stax.FanOut(layer["n"]))
        elif kind == "parallel":
            layers.append(stax.parallel(*[to_stax(b, ndim) for b in layer["branches"]]))
        elif kind == "FanInSum":
            layers.append(stax.FanInSum())
        elif kind == "FanInProd":
            layers.append(stax.FanInProd())
        elif kind == "FanInConcat":
            layers.append(stax.FanInConcat(axis=-1))
        elif kind == "Identity":
            layers.append(stax.Identity())
        else:
            layers.append(conv_ref.to_stax([layer], ndim))
    return stax.serial(*layers)


def dense(w=1.2, b=0.05, width=8):
    return conv_ref.dense(w, b, "ntk", width)


def conv(filt, strides=None, padding="SAME", w=1.5, b=0.1, width=8):
    return conv_ref.conv(filt, strides, padding, w, b, "ntk", width)


def pool(window, strides, padding="VALID"):
    return conv_ref.pool(window, strides, padding)


RELU, ERF, IDENTITY = {"layer": "Relu"}, {"layer": "Erf"}, {"layer": "Identity"}
FLATTEN, GAP = {"layer": "Flatten"}, {"layer": "GlobalAvgPool"}
SUM, PROD, CONCAT = {"layer": "FanInSum"}, {"layer": "FanInProd"}, {"layer": "FanInConcat"}


def fan_out(n):
    return {"layer": "FanOut", "n": n}


def par(*branches):
    return {"layer": "parallel", "branches": [list(b) for b in branches]}


# (name, spatial dims (0: flat), architecture)
CASES = [
    (
        "dense_fanout_sum",
        0,
        [
            dense(1.3, 0.1),
            fan_out(2),
            par([RELU, dense(1.4, 0.0)], [ERF, dense(1.1, 0.2)]),
            SUM,
            RELU,
            dense(1.0, 0.1, 1),
        ],
    ),
    (
        "dense_identity_sum",
        0,
        [dense(), fan_out(2), par([IDENTITY], [RELU, dense(0.9, 0.1)]), SUM, RELU, dense(width=1)],
    ),
    (
        "dense_concat_widths",
        0,
        [
            dense(1.3, 0.1, 8),
            fan_out(3),
            par([RELU, dense(1.4, 0.0, 4)], [ERF, dense(1.1, 0.2, 12)], [IDENTITY]),
            CONCAT,
            dense(1.1, 0.1),
            RELU,
            dense(1.0, 0.1, 1),
        ],
    ),
    (
        "dense_prod_relu",
        0,
        [
            dense(1.2, 0.1),
            fan_out(2),
            par([dense(0.8, 0.3)], [RELU, dense(1.4, 0.1)]),
            PROD,
            dense(1.1, 0.1),
            RELU,
            dense(1.0, 0.1, 1),
        ],
    ),
    (
        "dense_prod_three",
        0,
        [
            dense(1.2, 0.1),
            fan_out(3),
            par([dense(0.8, 0.3)], [RELU, dense(1.4, 0.1)], [ERF, dense(1.0, 0.0)]),
            PROD,
            dense(1.0, 0.1, 1),
        ],
    ),
    (
        "dense_nested",
        0,
        [
            dense(1.2, 0.1),
            fan_out(2),
            par(
                [fan_out(2), par([RELU, dense(1.3, 0.1)], [dense(0.7, 0.0)]), SUM],
                [IDENTITY],
            ),
            CONCAT,
            dense(1.1, 0.1),
            RELU,
            dense(1.0, 0.1, 1),
        ],
    ),
    (
        "conv_fanout_sum_flatten",
        2,
        [
            conv((3, 3)),
            fan_out(2),
            par([RELU, conv((3, 3), w=1.2, b=0.0)], [RELU, conv((1, 1), w=0.9, b=0.2)]),
            SUM,
            RELU,
            FLATTEN,
            dense(width=1),
        ],
    ),
    (
        "conv_concat_pool_in_branch",
        2,
        [
            conv((3, 3)),
            fan_out(2),
            par(
                [RELU, conv((3, 3), w=1.2, b=0.0, width=4)],
                [RELU, pool((3, 3), (1, 1), "SAME"), conv((1, 1), w=1.1, b=0.1, width=12)],
            ),
            CONCAT,
            conv((1, 1), w=1.2, b=0.1),
            RELU,
            GAP,
            dense(width=1),
        ],
    ),
    (
        "conv_prod_then_pool",
        2,
        [
            conv((3, 3)),
            fan_out(2),
            par([conv((3, 3), w=0.8, b=0.3)], [RELU, conv((3, 3), w=1.3, b=0.0)]),
            PROD,
            pool((2, 2), (2, 2)),
            conv((3, 3)),
            RELU,
            GAP,
            dense(width=1),
        ],
    ),
    (
        "conv_pool_only_in_branch_flatten",
        2,
        [
            conv((3, 3)),
            fan_out(2),
            par([RELU, pool((3, 3), (1, 1), "SAME"), conv((3, 3), w=1.2, b=0.0)], [IDENTITY]),
            SUM,
            RELU,
            FLATTEN,
            dense(width=1),
        ],
    ),
    (
        "conv_strided_branches_concat",
        2,
        [
            conv((3, 3)),
            fan_out(2),
            par(
                [RELU, conv((3, 3), (2, 2), w=1.2, b=0.0, width=4)],
                [pool((2, 2), (2, 2)), conv((1, 1), w=1.1, b=0.1, width=8)],
            ),
            CONCAT,
            FLATTEN,
            dense(width=1),
        ],
    ),
]


def main() -> None:
    cases = []
    for seed, (name, ndim, spec) in enumerate(CASES):
        rng = np.random.default_rng(300 + seed)
        shape = (5,) if ndim == 0 else (2, 6, 6)
        x1 = rng.standard_normal((3, *shape))
        x2 = rng.standard_normal((2, *shape))
        _, _, kernel_fn = to_stax(spec, ndim)
        perm = (0, *range(2, ndim + 2), 1) if ndim else (0, 1)  # NCHW -> NHWC
        for pair in (True, False):
            a = np.transpose(x1, perm)
            b = np.transpose(x2, perm) if pair else None
            k = kernel_fn(a, b, ("nngp", "ntk"))
            cases.append(
                {
                    "name": name + ("" if pair else "_self"),
                    "seed": 300 + seed,
                    "x1": x1.tolist(),
                    "x2": x2.tolist() if pair else None,
                    "architecture": spec,
                    "nngp": np.asarray(k.nngp).tolist(),
                    "ntk": np.asarray(k.ntk).tolist(),
                }
            )
            print(name, pair, np.asarray(k.ntk).ravel()[:3])
    out = {
        "generator": "tests/data/make_nt_graph_reference.py, neural-tangents 0.6.5, float64",
        "layout": "image inputs channels-first (torch); transposed to NHWC for NT",
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
