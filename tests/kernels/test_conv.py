"""Convolutional, pooling, LayerNorm, Dropout and residual kernels: parity with
neural-tangents, layouts, memory blocks and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    Dropout,
    Flatten,
    GlobalAvgPool,
    LayerNorm,
    Residual,
)

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_conv.json"


def build(spec: list[dict[str, Any]]) -> list[nl.kernels.Layer]:
    """ntklab layers from the JSON architecture spec of make_nt_conv_reference.py."""
    layers: list[nl.kernels.Layer] = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Conv":
            layers.append(
                Conv(
                    filter_shape=tuple(layer["filter"]),
                    strides=tuple(layer["strides"]),
                    padding=layer["padding"],
                    w_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                    width=layer["width"] if layer["parameterization"] == "standard" else None,
                )
            )
        elif kind == "Dense":
            layers.append(
                nl.Dense(
                    w_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                    width=layer["width"],
                )
            )
        elif kind == "AvgPool":
            layers.append(
                AvgPool(tuple(layer["window"]), tuple(layer["strides"]), layer["padding"])
            )
        elif kind == "GlobalAvgPool":
            layers.append(GlobalAvgPool())
        elif kind == "Flatten":
            layers.append(Flatten())
        elif kind == "LayerNorm":
            layers.append(LayerNorm(layer["axes"], eps=layer["eps"]))
        elif kind == "Dropout":
            layers.append(Dropout(layer["rate"]))
        elif kind == "Residual":
            layers.append(Residual(build(layer["branch"])))
        else:
            layers.append({"Relu": nl.Relu, "Erf": nl.Erf, "Gelu": nl.Gelu}[kind]())
    return layers


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_parity_with_neural_tangents(case: dict[str, Any]) -> None:
    arch = nl.serial(*build(case["architecture"]))
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ layouts, blocks, algebra


def _cnn(pool: bool) -> nl.Architecture:
    top = [GlobalAvgPool()] if pool else [Flatten()]
    return nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1),
        nl.Relu(),
        Conv(filter_shape=(3, 3), strides=(2, 2)),
        nl.Relu(),
        *top,
        nl.Dense(w_std=1.0, b_std=0.1),
    )


def _x(n: int, seed: int = 0, size: int = 6) -> torch.Tensor:
    return torch.randn(n, 2, size, size, dtype=F64, generator=torch.Generator().manual_seed(seed))


def test_flatten_on_the_diagonal_equals_flatten_after_the_full_layout() -> None:
    """An identity AvgPool (window 1) forces the full layout; Flatten then reads its
    diagonal, which must equal the diagonal-only propagation."""
    x1, x2 = _x(3), _x(2, 1)
    diag = _cnn(pool=False)
    full = nl.serial(AvgPool((1, 1)), *diag.layers)
    for b in (None, x2):
        torch.testing.assert_close(full.kernel(x1, b).ntk, diag.kernel(x1, b).ntk)
        torch.testing.assert_close(full.kernel(x1, b).nngp, diag.kernel(x1, b).nngp)


def test_blocks_under_a_memory_budget_equal_one_block() -> None:
    arch = _cnn(pool=True)
    x1, x2 = _x(5), _x(3, 1)
    one_pair = 8 * 64**2 * 12  # bytes of one pair at this size (see block_bytes)
    for b in (None, x2):
        whole = arch.kernel(x1, b)
        blocked = arch.kernel(x1, b, max_memory=3 * one_pair)
        torch.testing.assert_close(blocked.ntk, whole.ntk)
        torch.testing.assert_close(blocked.nngp, whole.nngp)
        torch.testing.assert_close(blocked.var1, whole.var1)
        torch.testing.assert_close(blocked.var2, whole.var2)
    with pytest.raises(NtklabValueError, match=r"max_memory: expected at least \d+ bytes"):
        arch.kernel(x1, max_memory=1000)


def test_input_kernel_conv_1x1_and_global_pool_closed_form() -> None:
    """Conv 1x1 (no bias) then global pooling: w^2 * mean over all position pairs of
    <x_h, x'_h'>/C, i.e. w^2 <mean_h x, mean_h' x'>/C."""
    x1, x2 = _x(3), _x(4, 1)
    k = nl.serial(Conv(filter_shape=(1, 1), w_std=1.7, b_std=None), GlobalAvgPool()).kernel(x1, x2)
    m1, m2 = x1.mean(dim=(2, 3)), x2.mean(dim=(2, 3))
    torch.testing.assert_close(k.nngp, 1.7**2 * m1 @ m2.T / 2)


def test_residual_scale_equals_scaled_last_layer() -> None:
    """alpha g, g ending in Conv(w, b), has the kernel of g ending in Conv(alpha w, alpha b)."""
    x = _x(3)
    head = [nl.Relu(), GlobalAvgPool(), nl.Dense(w_std=1.0)]
    scaled = nl.serial(
        Conv(filter_shape=(3, 3)),
        Residual([nl.Relu(), Conv(filter_shape=(3, 3), w_std=1.2, b_std=0.3)], 0.4),
        *head,
    )
    folded = nl.serial(
        Conv(filter_shape=(3, 3)),
        Residual([nl.Relu(), Conv(filter_shape=(3, 3), w_std=0.48, b_std=0.12)]),
        *head,
    )
    torch.testing.assert_close(scaled.kernel(x).ntk, folded.kernel(x).ntk)


def test_gradients_flow_to_inputs_and_scales() -> None:
    w = torch.tensor(1.3, dtype=F64, requires_grad=True)
    x = _x(2).requires_grad_(True)
    arch = nl.serial(
        Conv(filter_shape=(3, 3), w_std=w),
        nl.Relu(),
        AvgPool((2, 2)),
        GlobalAvgPool(),
        nl.Dense(w_std=1.0),
    )
    k = arch.kernel(x)
    gx, gw = torch.autograd.grad(k.ntk.sum(), (x, w))
    assert torch.isfinite(gx).all() and gx.abs().sum() > 0
    eps = 1e-6
    plus = (
        nl.serial(Conv(filter_shape=(3, 3), w_std=1.3 + eps), *arch.layers[1:])
        .kernel(x.detach())
        .ntk.sum()
    )
    minus = (
        nl.serial(Conv(filter_shape=(3, 3), w_std=1.3 - eps), *arch.layers[1:])
        .kernel(x.detach())
        .ntk.sum()
    )
    torch.testing.assert_close(gw, (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-8)


def test_float32_follows_inputs() -> None:
    x = _x(3).float()
    k = _cnn(pool=True).kernel(x)
    assert k.ntk.dtype == torch.float32
    torch.testing.assert_close(
        k.ntk.double(), _cnn(pool=True).kernel(x.double()).ntk, rtol=1e-4, atol=1e-5
    )


# ------------------------------------------------------------------ bad input


def test_bad_inputs_and_layers() -> None:
    arch = _cnn(pool=True)
    with pytest.raises(
        NtklabValueError, match=r"x1: expected a 4-D tensor of shape \(n, C, H, W\)"
    ):
        arch.kernel(torch.randn(3, 12, dtype=F64))
    with pytest.raises(NtklabValueError, match="x2: expected the channels and spatial shape of x1"):
        arch.kernel(_x(2), _x(2, size=5))
    with pytest.raises(NtklabTypeError, match=r"x1: expected a torch\.Tensor"):
        arch.kernel([[1.0]])  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="Dense: expected a flat"):
        nl.serial(Conv(filter_shape=(3, 3)), nl.Dense(w_std=1.0)).kernel(_x(2))
    with pytest.raises(NtklabValueError, match="expected an architecture whose output is flat"):
        nl.serial(Conv(filter_shape=(3, 3)), nl.Relu()).kernel(_x(2))
    with pytest.raises(NtklabValueError, match=r"Conv: expected a spatial size of at least 5"):
        nl.serial(Conv(filter_shape=(5, 5), padding="VALID"), Flatten()).kernel(_x(2, size=4))
    with pytest.raises(NtklabValueError, match="LayerNorm: expected zero-mean Gaussian"):
        nl.serial(Conv(filter_shape=(3, 3)), nl.Relu(), LayerNorm(), Flatten()).kernel(_x(2))
    with pytest.raises(NtklabValueError, match="Residual: expected a branch that ends with"):
        nl.serial(
            Conv(filter_shape=(3, 3)), Residual([Conv(filter_shape=(3, 3)), nl.Relu()]), Flatten()
        ).kernel(_x(2))
    with pytest.raises(NtklabValueError, match=r"layers\[1\]: expected LayerNorm\(affine=True\)"):
        nl.serial(Conv(filter_shape=(3, 3)), LayerNorm(affine=True), nl.Relu())
    with pytest.raises(NtklabValueError, match="padding: expected 'SAME', 'VALID', 'CIRCULAR'"):
        Conv(filter_shape=(3, 3), padding="FULL")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="strides: expected 2 entries"):
        Conv(filter_shape=(3, 3), strides=(1, 1, 1))
    with pytest.raises(NtklabValueError, match="rate: expected a float in"):
        Dropout(1.5)
    with pytest.raises(NtklabValueError, match="layers: expected Conv/AvgPool layers of one"):
        nl.serial(Conv(filter_shape=(3,)), AvgPool((2, 2)), Flatten()).kernel(_x(2))
