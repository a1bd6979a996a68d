"""Generate reference kernels of masked (padded) sequences from neural-tangents (NT) 0.6.5.

Writes ``tests/data/nt_reference_masks.json`` next to this file. ntklab's tests read that
JSON only; neural-tangents / jax are NOT dependencies of ntklab. Run it in the throw-away NT
virtualenv::

    JAX_ENABLE_X64=1 JAX_PLATFORMS=cpu /tmp/nt-venv/bin/python tests/data/make_nt_mask_reference.py

Everything is float64. Each case pads sequences of different lengths to a common length
``L`` with ``mask_constant`` (``"nan"`` stands for NaN) and calls NT's
``kernel_fn(x1, x2, ("nngp", "ntk"), mask_constant=...)``.

JSON layout: ``cases``: a list of ``{name, architecture, mask_constant, x1, x2, nngp, ntk}``;
``x1``/``x2`` are channels-first ``(n, C, L)`` (transposed to NT's ``(n, L, C)``), with the
padded entries written as ``mask_constant`` (NaN as JSON ``NaN``); ``x2`` is ``null`` for the
self-kernel. ``architecture`` names one of the stacks of :data:`ARCHITECTURES`, which the
test builds in ntklab's spelling.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_masks.json")
WIDTH = 64  # ignored by NT's kernels in NTK parameterization


def _attention():
    return stax.GlobalSelfAttention(
        WIDTH,
        WIDTH,
        WIDTH,
        2,
        linear_scaling=True,
        W_key_std=1.1,
        W_value_std=1.2,
        W_query_std=0.9,
        W_out_std=1.05,
        b_std=0.1,
        attention_mechanism="SOFTMAX",
        pos_emb_type="NONE",
    )


ARCHITECTURES = {
    "conv_relu_gap_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.5, b_std=0.1),
        stax.Relu(),
        stax.GlobalAvgPool(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
    "conv_relu_attention_gap_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.5, b_std=0.1),
        stax.Relu(),
        _attention(),
        stax.GlobalAvgPool(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
    "conv_valid_avgpool_flatten_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="VALID", W_std=1.5, b_std=0.1),
        stax.Relu(),
        stax.AvgPool((2,), strides=(2,), padding="VALID"),
        stax.Conv(WIDTH, (2,), padding="SAME", W_std=1.3, b_std=0.2),
        stax.Erf(),
        stax.Flatten(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
    # indexing carries the mask (NT: ``mask[idx]``)
    "conv_index_reverse_conv_gap_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.5, b_std=0.1),
        stax.Relu(),
        stax.Index((slice(None), slice(None, None, -1), slice(None))),
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.3, b_std=0.2),
        stax.Erf(),
        stax.GlobalAvgPool(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
    "conv_index_stride_flatten_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.5, b_std=0.1),
        stax.Relu(),
        stax.Index((slice(None), slice(1, None, 2), slice(None))),
        stax.Conv(WIDTH, (2,), padding="SAME", W_std=1.3, b_std=0.2),
        stax.Relu(),
        stax.Flatten(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
    # normalization over the unmasked positions and all channels
    "conv_layernorm_all_relu_gap_dense": lambda: stax.serial(
        stax.Conv(WIDTH, (3,), padding="SAME", W_std=1.5, b_std=0.1),
        stax.LayerNorm(axis=(1, 2)),  # eps=1e-12: NT counts eps at the padding too
        stax.Relu(),
        stax.GlobalAvgPool(),
        stax.Dense(1, W_std=1.2, b_std=0.05),
    ),
}


def padded(rng, lengths, channels, size, constant):
    """Sequences of the given lengths, ``(n, C, size)``, padded with ``constant``."""
    x = rng.standard_normal((len(lengths), channels, size))
    for i, n in enumerate(lengths):
        x[i, :, n:] = constant
    return x


def case(name, arch, constant, seed, lengths1, lengths2, channels=2, size=9):
    rng = np.random.default_rng(seed)
    c = float("nan") if constant == "nan" else constant
    x1 = padded(rng, lengths1, channels, size, c)
    x2 = None if lengths2 is None else padded(rng, lengths2, channels, size, c)
    _, _, kernel_fn = ARCHITECTURES[arch]()
    k = kernel_fn(
        np.moveaxis(x1, 1, -1),
        None if x2 is None else np.moveaxis(x2, 1, -1),
        ("nngp", "ntk"),
        mask_constant=c,
    )
    return {
        "name": name,
        "architecture": arch,
        "mask_constant": constant,
        "x1": x1.tolist(),
        "x2": None if x2 is None else x2.tolist(),
        "nngp": np.asarray(k.nngp).tolist(),
        "ntk": np.asarray(k.ntk).tolist(),
    }


def main():
    cases = [
        case("gap", "conv_relu_gap_dense", -7.0, 0, [9, 5, 3], [6, 9]),
        case("gap_self_nan", "conv_relu_gap_dense", "nan", 1, [4, 9, 7], None),
        case("attention", "conv_relu_attention_gap_dense", -7.0, 2, [9, 5, 3], [6, 4]),
        case("attention_self_nan", "conv_relu_attention_gap_dense", "nan", 3, [8, 3], None),
        case("avgpool_flatten", "conv_valid_avgpool_flatten_dense", -7.0, 4, [9, 6, 4], [7, 5]),
        case("layernorm_all", "conv_layernorm_all_relu_gap_dense", -7.0, 5, [9, 5, 3], [6, 4]),
        case("index_reverse", "conv_index_reverse_conv_gap_dense", -7.0, 6, [9, 5, 3], [6, 4]),
        case("index_stride_self_nan", "conv_index_stride_flatten_dense", "nan", 7, [9, 6, 4], None),
    ]
    for c in cases:
        assert np.all(np.isfinite(c["nngp"])) and np.all(np.isfinite(c["ntk"])), c["name"]
    with open(OUT_PATH, "w") as f:
        json.dump({"generator": "neural-tangents 0.6.5, float64", "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT_PATH}")


if __name__ == "__main__":
    main()
