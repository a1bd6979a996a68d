"""Generate reference kernels of neural-tangents' (NT) 0.6.5 image layers that ntklab added
after the CNTK basics: ``SumPool``, ``GlobalSumPool``, ``AvgPool(normalize_edges=True)``,
``ImageResize``, ``Index``, ``ConvLocal`` and ``ConvTranspose``.

Writes ``tests/data/nt_reference_spatial.json`` next to this file; ntklab's tests read that
JSON only (neural-tangents and jax are not dependencies of ntklab). Run it with the
neural-tangents virtualenv::

    JAX_ENABLE_X64=1 JAX_PLATFORMS=cpu /tmp/nt-venv/bin/python \\
        tests/data/make_nt_spatial_reference.py

Everything is float64; inputs come from ``np.random.default_rng(seed)`` and are stored
channels-first, torch's ``(n, C, H, W)`` or ``(n, C, L)``, then transposed to NT's ``NHWC``.

JSON layout: ``cases``: a list of ``{name, seed, x1, x2, architecture, nngp, ntk}`` (``x2``
``null`` for the self-kernel). Layer dicts, besides those of ``make_nt_conv_reference.py``
(``Conv``, ``Dense``, ``Relu``, ``Erf``, ``Flatten``, ``GlobalAvgPool``, ``AvgPool``):

- ``{"layer": "AvgPool" | "SumPool", "window", "strides", "padding", "normalize_edges"}``;
- ``{"layer": "GlobalSumPool"}``;
- ``{"layer": "ImageResize", "shape", "method", "antialias"}``: ``shape`` is the spatial
  output shape (``-1`` keeps an axis), NT ``ImageResize((-1, *shape, -1), method,
  antialias)``;
- ``{"layer": "Index", "spatial"}``: one entry per spatial axis, an int or ``[start, stop,
  step]`` (``null`` for a missing bound), NT ``Index((slice(None), *spatial,
  slice(None)))``;
- ``{"layer": "ConvLocal" | "ConvTranspose", ...}`` with the fields of ``Conv``.

Cases with 3-D filters take inputs ``(n, C, D, H, W)`` (NT's ``NDHWC``).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_spatial.json")
WIDTH = 64  # ignored by NT's kernels in NTK parameterization
RELU = {"layer": "Relu"}
FLATTEN = {"layer": "Flatten"}
GAP = {"layer": "GlobalAvgPool"}


def conv(filt, strides=None, padding="SAME", w=1.5, b=0.1, param="ntk", width=WIDTH, kind="Conv"):
    return {
        "layer": kind,
        "filter": list(filt),
        "strides": list(strides or [1] * len(filt)),
        "padding": padding,
        "w_std": w,
        "b_std": b,
        "parameterization": param,
        "width": width,
    }


def dense(w=1.2, b=0.05):
    return {"layer": "Dense", "w_std": w, "b_std": b, "parameterization": "ntk", "width": 1}


def pool(kind, window, strides, padding="VALID", normalize_edges=False):
    return {
        "layer": kind,
        "window": list(window),
        "strides": list(strides),
        "padding": padding,
        "normalize_edges": normalize_edges,
    }


def resize(shape, method="linear", antialias=True):
    return {"layer": "ImageResize", "shape": list(shape), "method": method, "antialias": antialias}


def index(*spatial):
    return {"layer": "Index", "spatial": list(spatial)}


def _slice(entry):
    return entry if isinstance(entry, int) else slice(*entry)


def to_stax(spec):
    layers = []
    for layer in spec:
        kind = layer["layer"]
        if kind in ("Conv", "ConvLocal", "ConvTranspose"):
            make = {
                "Conv": stax.Conv,
                "ConvLocal": stax.ConvLocal,
                "ConvTranspose": stax.ConvTranspose,
            }
            layers.append(
                make[kind](
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
                stax.AvgPool(
                    tuple(layer["window"]),
                    tuple(layer["strides"]),
                    layer["padding"],
                    normalize_edges=layer["normalize_edges"],
                )
            )
        elif kind == "SumPool":
            layers.append(
                stax.SumPool(tuple(layer["window"]), tuple(layer["strides"]), layer["padding"])
            )
        elif kind == "GlobalSumPool":
            layers.append(stax.GlobalSumPool())
        elif kind == "GlobalAvgPool":
            layers.append(stax.GlobalAvgPool())
        elif kind == "Flatten":
            layers.append(stax.Flatten())
        elif kind == "ImageResize":
            shape = (-1, *layer["shape"], -1)
            layers.append(stax.ImageResize(shape, layer["method"], antialias=layer["antialias"]))
        elif kind == "Index":
            idx = (slice(None), *(_slice(e) for e in layer["spatial"]), slice(None))
            layers.append(stax.Index(idx))
        elif kind == "Relu":
            layers.append(stax.Relu())
        elif kind == "Erf":
            layers.append(stax.Erf())
        else:
            raise ValueError(kind)
    return stax.serial(*layers)


# NT's ImageResize and ConvLocal read the axes of a full-layout kernel in input order, which a
# shared Conv reverses in NT's storage (``is_reversed``); so they follow 0 or 2 shared Convs
# here, where NT's storage order is the input's.
CONV2 = conv((2, 3), w=1.3, b=0.2)

CASES = [
    # ---------------------------------------------------------------- sum pooling
    (
        "sumpool_valid_gap",
        2,
        [conv((3, 3)), RELU, pool("SumPool", (2, 2), (2, 2)), conv((2, 2)), RELU, GAP, dense()],
    ),
    (
        "sumpool_same_circular",
        2,
        [
            conv((3, 3), padding="VALID"),
            RELU,
            pool("SumPool", (3, 3), (1, 1), "SAME"),
            conv((3, 3)),
            RELU,
            pool("SumPool", (2, 2), (1, 1), "CIRCULAR"),
            FLATTEN,
            dense(),
        ],
    ),
    (
        "sumpool_1d_strided_same",
        1,
        [conv((3,)), RELU, pool("SumPool", (3,), (2,), "SAME"), FLATTEN, dense()],
    ),
    (
        "global_sum_pool",
        2,
        [
            conv((3, 3), (2, 2)),
            RELU,
            conv((2, 2)),
            {"layer": "Erf"},
            {"layer": "GlobalSumPool"},
            dense(),
        ],
    ),
    ("global_sum_pool_1d", 1, [conv((2,)), RELU, {"layer": "GlobalSumPool"}, dense()]),
    (
        "avgpool_normalize_edges",
        2,
        [
            conv((3, 3)),
            RELU,
            pool("AvgPool", (3, 3), (1, 1), "SAME", True),
            conv((3, 3)),
            RELU,
            pool("AvgPool", (3, 2), (2, 2), "SAME", True),
            GAP,
            dense(),
        ],
    ),
    (
        "avgpool_normalize_edges_1d",
        1,
        [conv((3,)), RELU, pool("AvgPool", (4,), (3,), "SAME", True), FLATTEN, dense()],
    ),
    # ---------------------------------------------------------------- resizing
    ("resize_linear_up", 2, [resize((9, 8)), conv((3, 3)), RELU, FLATTEN, dense()]),
    (
        "resize_linear_down_antialias",
        2,
        [conv((3, 3)), RELU, CONV2, RELU, resize((4, 3)), GAP, dense()],
    ),
    (
        "resize_linear_down_no_antialias",
        2,
        [conv((3, 3)), RELU, CONV2, RELU, resize((4, 3), "bilinear", False), FLATTEN, dense()],
    ),
    (
        "resize_one_axis",
        2,
        [conv((3, 3)), RELU, CONV2, RELU, resize((-1, 10)), conv((2, 2)), RELU, FLATTEN, dense()],
    ),
    (
        "resize_nearest_flatten",
        2,
        [resize((9, 4), "nearest"), conv((3, 3)), RELU, FLATTEN, dense()],
    ),
    (
        "resize_nearest_gap",
        2,
        [conv((3, 3)), RELU, CONV2, RELU, resize((4, 11), "nearest"), GAP, dense()],
    ),
    ("resize_1d_linear", 1, [conv((3,)), RELU, resize((11,)), conv((3,)), RELU, GAP, dense()]),
    # ---------------------------------------------------------------- indexing
    (
        "index_crop_reverse_flatten",
        2,
        [
            conv((3, 3)),
            RELU,
            index([1, None, None], [None, None, -2]),
            conv((2, 2)),
            RELU,
            FLATTEN,
            dense(),
        ],
    ),
    (
        "index_crop_pool",
        2,
        [
            conv((3, 3)),
            RELU,
            index([None, 4, None], [1, 5, 2]),
            pool("AvgPool", (2, 2), (1, 1)),
            GAP,
            dense(),
        ],
    ),
    ("index_drop_axis", 2, [conv((3, 3)), RELU, index(2, [None, None, None]), FLATTEN, dense()]),
    ("index_drop_axis_gap", 2, [conv((3, 3)), RELU, index([None, None, None], -1), GAP, dense()]),
    (
        "index_1d",
        1,
        [
            conv((3,)),
            RELU,
            index([None, None, -1]),
            conv((2,), padding="VALID"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "index_drop_axis_then_conv1d",
        2,
        [
            conv((3, 3)),
            RELU,
            index(2, [None, None, None]),
            conv((2,), padding="VALID"),
            RELU,
            pool("AvgPool", (2,), (1,)),
            GAP,
            dense(),
        ],
    ),
    # ---------------------------------------------------------------- locally connected
    (
        "conv_local_flatten",
        2,
        [conv((3, 3)), RELU, conv((3, 3), kind="ConvLocal"), RELU, FLATTEN, dense()],
    ),
    (
        "conv_local_gap",
        2,
        [
            conv((3, 3), (2, 2), "VALID", 1.3, 0.2, kind="ConvLocal"),
            RELU,
            conv((2, 2)),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv_local_circular_pool",
        2,
        [
            conv((3, 3)),
            RELU,
            CONV2,
            RELU,
            conv((3, 2), padding="CIRCULAR", kind="ConvLocal"),
            RELU,
            pool("AvgPool", (2, 2), (2, 2)),
            FLATTEN,
            dense(),
        ],
    ),
    (
        "conv_local_1d",
        1,
        [
            conv((3,), kind="ConvLocal"),
            RELU,
            conv((2,), (2,), kind="ConvLocal"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv_local_standard",
        2,
        [
            conv((3, 3), param="standard", width=5, w=1.4),
            RELU,
            conv((2, 2), param="standard", width=7, kind="ConvLocal"),
            RELU,
            FLATTEN,
            {
                "layer": "Dense",
                "w_std": 1.1,
                "b_std": 0.1,
                "parameterization": "standard",
                "width": 1,
            },
        ],
    ),
    # ---------------------------------------------------------------- transposed
    (
        "conv_transpose_valid",
        2,
        [
            conv((3, 3)),
            RELU,
            conv((3, 3), (2, 2), "VALID", kind="ConvTranspose"),
            RELU,
            FLATTEN,
            dense(),
        ],
    ),
    (
        "conv_transpose_same_gap",
        2,
        [
            conv((3, 3)),
            RELU,
            conv((2, 3), (3, 1), "SAME", kind="ConvTranspose"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv_transpose_same_big_filter",
        2,
        [
            conv((3, 3)),
            RELU,
            conv((4, 5), (2, 2), "SAME", kind="ConvTranspose"),
            RELU,
            FLATTEN,
            dense(),
        ],
    ),
    (
        "conv_transpose_circular",
        2,
        [
            conv((3, 3)),
            RELU,
            conv((3, 3), (2, 2), "CIRCULAR", kind="ConvTranspose"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv_transpose_circular_flatten",
        2,
        [
            conv((3, 3)),
            RELU,
            conv((4, 2), (1, 2), "CIRCULAR", kind="ConvTranspose"),
            RELU,
            FLATTEN,
            dense(),
        ],
    ),
    (
        "conv_transpose_1d_small_filter",
        1,
        [
            conv((3,)),
            RELU,
            conv((2,), (3,), "VALID", b=None, kind="ConvTranspose"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv_transpose_first_1d_same",
        1,
        [conv((3,), (2,), "SAME", kind="ConvTranspose"), RELU, FLATTEN, dense()],
    ),
    (
        "conv_transpose_standard",
        2,
        [
            conv((3, 3), param="standard", width=5, w=1.4),
            RELU,
            conv((3, 3), (2, 2), param="standard", width=7, kind="ConvTranspose"),
            RELU,
            FLATTEN,
            {
                "layer": "Dense",
                "w_std": 1.1,
                "b_std": 0.1,
                "parameterization": "standard",
                "width": 1,
            },
        ],
    ),
    # ---------------------------------------------------------------- 3-D convolutions
    (
        "conv3d_flatten",
        3,
        [conv((2, 2, 2)), RELU, conv((3, 2, 2), (2, 1, 1), "VALID"), RELU, FLATTEN, dense()],
    ),
    (
        "conv3d_pool_circular_gap",
        3,
        [
            conv((3, 3, 3)),
            RELU,
            pool("AvgPool", (2, 2, 2), (1, 1, 1)),
            conv((2, 2, 2), padding="CIRCULAR"),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv3d_transpose_sumpool",
        3,
        [
            conv((2, 2, 2)),
            RELU,
            conv((2, 2, 2), (2, 1, 1), "SAME", kind="ConvTranspose"),
            RELU,
            pool("SumPool", (2, 2, 2), (2, 2, 2)),
            GAP,
            dense(),
        ],
    ),
    # 3-D resizing (appended last: the seeds of the cases above are their positions; after 0
    # or 2 shared Convs, see CONV2)
    (
        "conv3d_resize_linear",
        3,
        [
            conv((2, 2, 2)),
            RELU,
            conv((2, 1, 2), w=1.3, b=0.2),
            RELU,
            resize((3, 6, -1)),
            conv((2, 2, 2)),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "conv3d_resize_nearest_flatten",
        3,
        [resize((5, 3, 4), "nearest"), conv((2, 2, 2)), RELU, FLATTEN, dense()],
    ),
]


def main() -> None:
    cases = []
    for seed, (name, ndim, spec) in enumerate(CASES):
        rng = np.random.default_rng(300 + seed)
        shape = {1: (2, 7), 2: (2, 6, 5), 3: (2, 4, 4, 3)}[ndim]
        x1 = rng.standard_normal((3, *shape))
        x2 = rng.standard_normal((2, *shape))
        _, _, kernel_fn = to_stax(spec)
        perm = (0, *range(2, ndim + 2), 1)  # NCHW -> NHWC
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
        "generator": "tests/data/make_nt_spatial_reference.py, neural-tangents 0.6.5, float64",
        "layout": "inputs channels-first (torch); transposed to NHWC for NT",
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
