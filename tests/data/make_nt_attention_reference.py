"""Generate reference self-attention kernels from Google's neural-tangents (NT) 0.6.5.

Writes ``tests/data/nt_reference_attention.json`` next to this file. ntklab's tests read that
JSON only; neural-tangents / jax are NOT dependencies of ntklab and this script is never
imported by the test suite. Run it inside the throw-away virtualenv of
``make_nt_reference.py``::

    JAX_ENABLE_X64=1 JAX_PLATFORMS=cpu /tmp/nt-venv/bin/python \\
        tests/data/make_nt_attention_reference.py

Everything is float64; inputs come from ``np.random.default_rng(seed)``.

JSON layout: ``cases``: a list of ``{name, seed, x1, x2, architecture, nngp, ntk}``. ``x1``
and ``x2`` are stored channels-first, torch's ``(n, C, L)`` or ``(n, C, H, W)``; they are
transposed to NT's channels-last layout before calling NT. ``x2`` is ``null`` for the
self-kernel. ``architecture`` is a list of layer dicts:

- ``{"layer": "Conv", "filter", "w_std", "b_std", "width"}``: NT ``stax.Conv(width, filter,
  padding="SAME", W_std, b_std)`` (a filter of ones is NT's ``Dense`` acting per position);
- ``{"layer": "GlobalSelfAttention", ...}``: the keyword arguments of NT's
  ``stax.GlobalSelfAttention`` in ntklab's spelling (``w_key_std`` for ``W_key_std`` ...);
  ``pos_emb_decay`` names the decay function: ``null`` (NT's ``None``, one-hot embeddings),
  ``"exp"`` (:math:`e^{-d}`) or ``"power"`` (:math:`(1 + d)^{-1}`);
- ``{"layer": "Residual", "branch": [...]}``: NT ``FanOut(2), parallel(Identity(), branch),
  FanInSum()``; ``{"layer": "LayerNorm", "eps"}``: over the channels (NT ``axis=-1``);
- ``{"layer": "Relu"}``, ``{"layer": "GlobalAvgPool"}``, ``{"layer": "Flatten"}``,
  ``{"layer": "Dense", "w_std", "b_std"}``.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_attention.json")
WIDTH = 16  # read by NT's kernel only through CONCAT positional embeddings' channel ratio
DECAYS = {None: None, "exp": lambda d: jnp.exp(-d), "power": lambda d: 1.0 / (1.0 + d)}


def conv(filt=(1,), w=1.3, b=0.1):
    return {"layer": "Conv", "filter": list(filt), "w_std": w, "b_std": b, "width": WIDTH}


def dense(w=1.2, b=0.05):
    return {"layer": "Dense", "w_std": w, "b_std": b}


def gsa(mechanism="SOFTMAX", linear=True, b=0.1, **kw):
    spec = {
        "layer": "GlobalSelfAttention",
        "n_chan_out": WIDTH,
        "n_chan_key": WIDTH,
        "n_chan_val": WIDTH,
        "n_heads": 2,
        "linear_scaling": linear,
        "w_key_std": 1.1,
        "w_value_std": 1.2,
        "w_query_std": 0.9,
        "w_out_std": 1.05,
        "b_std": b,
        "attention_mechanism": mechanism,
        "pos_emb_type": "NONE",
        "pos_emb_p_norm": 2,
        "pos_emb_decay": None,
        "n_chan_pos_emb": None,
        "w_pos_emb_std": 1.0,
        "val_pos_emb": False,
    }
    spec.update(kw)
    return spec


def to_stax(spec):
    layers = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Conv":
            layers.append(
                stax.Conv(
                    layer["width"],
                    tuple(layer["filter"]),
                    padding="SAME",
                    W_std=layer["w_std"],
                    b_std=layer["b_std"],
                )
            )
        elif kind == "GlobalSelfAttention":
            layers.append(
                stax.GlobalSelfAttention(
                    layer["n_chan_out"],
                    layer["n_chan_key"],
                    layer["n_chan_val"],
                    layer["n_heads"],
                    linear_scaling=layer["linear_scaling"],
                    W_key_std=layer["w_key_std"],
                    W_value_std=layer["w_value_std"],
                    W_query_std=layer["w_query_std"],
                    W_out_std=layer["w_out_std"],
                    b_std=layer["b_std"],
                    attention_mechanism=layer["attention_mechanism"],
                    pos_emb_type=layer["pos_emb_type"],
                    pos_emb_p_norm=layer["pos_emb_p_norm"],
                    pos_emb_decay_fn=DECAYS[layer["pos_emb_decay"]],
                    n_chan_pos_emb=layer["n_chan_pos_emb"],
                    W_pos_emb_std=layer["w_pos_emb_std"],
                    val_pos_emb=layer["val_pos_emb"],
                )
            )
        elif kind == "Dense":
            layers.append(stax.Dense(1, W_std=layer["w_std"], b_std=layer["b_std"]))
        elif kind == "Relu":
            layers.append(stax.Relu())
        elif kind == "GlobalAvgPool":
            layers.append(stax.GlobalAvgPool())
        elif kind == "Flatten":
            layers.append(stax.Flatten())
        elif kind == "LayerNorm":
            layers.append(stax.LayerNorm(axis=-1, eps=layer["eps"]))
        elif kind == "Residual":
            branch = to_stax(layer["branch"])
            layers.append(
                stax.serial(stax.FanOut(2), stax.parallel(stax.Identity(), branch), stax.FanInSum())
            )
        else:
            raise ValueError(kind)
    return stax.serial(*layers)


RELU = {"layer": "Relu"}
GAP = {"layer": "GlobalAvgPool"}
FLAT = {"layer": "Flatten"}
CASES = [
    ("softmax_linear", 1, [conv(), gsa(), RELU, gsa(b=None), RELU, GAP, dense()]),
    ("softmax_first_layer", 1, [gsa(b=0.2), RELU, FLAT, dense()]),
    ("identity_linear", 1, [conv(), RELU, gsa("IDENTITY"), RELU, GAP, dense()]),
    ("abs_linear", 1, [conv(), RELU, gsa("ABS", b=None), RELU, FLAT, dense()]),
    ("relu_linear", 1, [conv(), RELU, gsa("RELU"), RELU, GAP, dense()]),
    ("identity_sqrt", 1, [conv(), RELU, gsa("IDENTITY", linear=False), RELU, GAP, dense()]),
    (
        "identity_sqrt_nobias",
        1,
        [conv(), gsa("IDENTITY", linear=False, b=None), RELU, gsa(), GAP, dense()],
    ),
    ("softmax_sum_onehot", 1, [conv(), RELU, gsa(pos_emb_type="SUM"), RELU, GAP, dense()]),
    (
        "softmax_sum_exp_values",
        1,
        [
            conv(),
            RELU,
            gsa(pos_emb_type="SUM", pos_emb_decay="exp", pos_emb_p_norm=1, val_pos_emb=True),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "relu_concat_power",
        1,
        [
            conv(),
            RELU,
            gsa(
                "RELU",
                pos_emb_type="CONCAT",
                pos_emb_decay="power",
                n_chan_pos_emb=8,
                w_pos_emb_std=1.3,
            ),
            RELU,
            FLAT,
            dense(),
        ],
    ),
    (
        "identity_sqrt_concat_values",
        1,
        [
            conv(),
            RELU,
            gsa("IDENTITY", linear=False, pos_emb_type="CONCAT", val_pos_emb=True),
            RELU,
            GAP,
            dense(),
        ],
    ),
    (
        "identity_sqrt_sum",
        1,
        [conv(), RELU, gsa("IDENTITY", linear=False, pos_emb_type="SUM"), RELU, GAP, dense()],
    ),
    (
        "transformer_blocks",
        1,
        [
            conv(),
            {"layer": "Residual", "branch": [gsa(b=0.05)]},
            {"layer": "LayerNorm", "eps": 1e-3},
            {"layer": "Residual", "branch": [conv(), RELU, conv(w=0.8)]},
            {"layer": "LayerNorm", "eps": 1e-3},
            {"layer": "Residual", "branch": [gsa("RELU", pos_emb_type="SUM")]},
            GAP,
            dense(),
        ],
    ),
    ("images_softmax", 2, [conv((1, 1)), RELU, gsa(), RELU, GAP, dense()]),
    (
        "images_abs_sum_exp",
        2,
        [
            conv((2, 2)),
            RELU,
            gsa("ABS", pos_emb_type="SUM", pos_emb_decay="exp", val_pos_emb=True),
            RELU,
            FLAT,
            dense(),
        ],
    ),
]


def main() -> None:
    warnings.simplefilter("ignore")
    cases = []
    for seed, (name, ndim, spec) in enumerate(CASES):
        rng = np.random.default_rng(200 + seed)
        shape = (3, 3, 2) if ndim == 2 else (3, 5)
        x1 = rng.standard_normal((3, *shape))
        x2 = rng.standard_normal((2, *shape))
        _, _, kernel_fn = to_stax(spec)
        perm = (0, *range(2, ndim + 2), 1)  # NCL -> NLC, NCHW -> NHWC
        for pair in (True, False):
            a = np.transpose(x1, perm)
            b = np.transpose(x2, perm) if pair else None
            k = kernel_fn(a, b, ("nngp", "ntk"))
            cases.append(
                {
                    "name": name + ("" if pair else "_self"),
                    "seed": 200 + seed,
                    "x1": x1.tolist(),
                    "x2": x2.tolist() if pair else None,
                    "architecture": spec,
                    "nngp": np.asarray(k.nngp).tolist(),
                    "ntk": np.asarray(k.ntk).tolist(),
                }
            )
            print(name, pair, np.asarray(k.ntk).ravel()[:3])
    out = {
        "generator": "tests/data/make_nt_attention_reference.py, neural-tangents 0.6.5, float64",
        "layout": "inputs channels-first (torch); transposed to channels-last for NT",
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
