"""Self-attention kernels: parity with neural-tangents 0.6.5, Monte Carlo over finite
networks, layouts and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    Conv,
    Flatten,
    GlobalAvgPool,
    GlobalSelfAttention,
    LayerNorm,
    Residual,
)
from ntklab.kernels.attention import SelfAttentionLayer, positional_covariance

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_attention.json"
DECAYS = {None: None, "exp": lambda d: torch.exp(-d), "power": lambda d: 1.0 / (1.0 + d)}


def build(spec: list[dict[str, Any]]) -> nl.kernels.Architecture:
    """ntklab layers from the JSON spec of make_nt_attention_reference.py."""
    layers: list[nl.kernels.Layer] = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Conv":
            layers.append(
                Conv(
                    layer["width"],
                    tuple(layer["filter"]),
                    w_std=layer["w_std"],
                    b_std=layer["b_std"],
                )
            )
        elif kind == "Dense":
            layers.append(nl.Dense(w_std=layer["w_std"], b_std=layer["b_std"]))
        elif kind == "Relu":
            layers.append(nl.Relu())
        elif kind == "GlobalAvgPool":
            layers.append(GlobalAvgPool())
        elif kind == "Flatten":
            layers.append(Flatten())
        elif kind == "LayerNorm":
            layers.append(LayerNorm("channel", eps=layer["eps"]))
        elif kind == "Residual":
            layers.append(Residual(build(layer["branch"])))
        else:
            assert kind == "GlobalSelfAttention"
            kw = {k: v for k, v in layer.items() if k not in ("layer", "pos_emb_decay")}
            layers.append(
                GlobalSelfAttention(pos_emb_decay_fn=DECAYS[layer["pos_emb_decay"]], **kw)
            )
    return nl.serial(*layers)


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_matches_neural_tangents(case: dict[str, Any]) -> None:
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = build(case["architecture"]).kernel(x1, x2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=0)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=0)


def test_reference_covers_every_mechanism_scaling_and_embedding() -> None:
    seen = set()
    for case in _cases():
        for layer in case["architecture"]:
            if layer["layer"] == "GlobalSelfAttention":
                seen.add((layer["attention_mechanism"], layer["linear_scaling"]))
                seen.add(layer["pos_emb_type"])
    assert {("SOFTMAX", True), ("IDENTITY", True), ("ABS", True), ("RELU", True)} <= seen
    assert {("IDENTITY", False), "NONE", "SUM", "CONCAT"} <= seen


def _mc_nngp(
    arch: nl.kernels.Architecture, x: torch.Tensor, n_nets: int, outputs: int, width: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard error of f(x) f(x)^T / outputs over ``n_nets`` finite networks."""
    gen = torch.Generator().manual_seed(1)
    samples = []
    for _ in range(n_nets):
        net = arch.to_torch(width, out_features=outputs, generator=gen, dtype=F64)
        with torch.no_grad():
            f = net(x)
        samples.append(f @ f.T / outputs)
    s = torch.stack(samples)
    return s.mean(0), s.std(0) / n_nets**0.5


@pytest.mark.parametrize(
    ("mechanism", "linear", "n_chan_key", "n_heads"),
    [("IDENTITY", False, 8, 16), ("SOFTMAX", True, 2048, 2)],
)
def test_finite_networks_average_to_the_nngp(
    mechanism: str, linear: bool, n_chan_key: int, n_heads: int
) -> None:
    # On the inputs themselves the square-root identity attention is unbiased at any width
    # (its output covariance is a product of exact Gaussian moments); the softmax's
    # finite-width bias is O(1 / n_chan_key), negligible at 2048 keys. Square-root logits stay
    # random at any key width: only the heads average them (hence 16 heads).
    x = torch.randn(3, 3, 5, dtype=F64, generator=torch.Generator().manual_seed(0))
    attention = GlobalSelfAttention(
        n_chan_key=n_chan_key,
        n_chan_val=16,
        n_heads=n_heads,
        linear_scaling=linear,
        attention_mechanism=mechanism,  # type: ignore[arg-type]
        w_key_std=1.1,
        w_query_std=0.9,
        w_value_std=1.2,
        b_std=0.1,
    )
    arch = nl.serial(attention, GlobalAvgPool(), nl.Dense(w_std=1.2, b_std=0.05))
    analytic = arch.kernel(x).nngp
    mean, se = _mc_nngp(arch, x, n_nets=300, outputs=32)
    # a precise estimate: an analytic NNGP off by 30% on the diagonal lies beyond 4 SE
    assert float(se.max()) < 0.07 * float(analytic.diagonal().mean())
    assert bool(((mean - analytic).abs() <= 4 * se).all()), (mean, analytic, se)


def test_empirical_ntk_approaches_the_analytic_ntk_as_the_width_grows() -> None:
    x = torch.randn(3, 2, 4, dtype=F64, generator=torch.Generator().manual_seed(2))

    def mean_error(width: int) -> float:
        arch = nl.serial(
            GlobalSelfAttention(width, width, width, 2, b_std=0.1, w_key_std=1.2),
            GlobalAvgPool(),
            nl.Dense(w_std=1.1, b_std=0.1),
        )
        analytic = arch.kernel(x).ntk
        errors = []
        for seed in range(3):
            net = arch.to_torch(width, generator=torch.Generator().manual_seed(seed), dtype=F64)
            net(x)  # materialize the lazy parameters
            empirical = nl.empirical.ntk(net, x)
            errors.append(float((empirical - analytic).norm() / analytic.norm()))
        return sum(errors) / len(errors)

    narrow, wide = mean_error(32), mean_error(1024)
    # O(width^-1/2) fluctuations: measured about 0.2 at 32 and 0.04 at 1024
    assert wide < 0.1
    assert wide < 0.4 * narrow


def test_image_attention_reads_all_positions_jointly() -> None:
    # Softmax over all H*W positions: permuting the positions of both inputs together
    # permutes nothing in the readout of GlobalAvgPool.
    x = torch.randn(3, 2, 3, 2, dtype=F64, generator=torch.Generator().manual_seed(4))
    arch = nl.serial(GlobalSelfAttention(b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense())
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(5))
    xp = x.flatten(2)[:, :, perm].reshape(3, 2, 3, 2)
    torch.testing.assert_close(arch.kernel(xp).ntk, arch.kernel(x).ntk)
    net = arch.to_torch(8, generator=torch.Generator().manual_seed(6), dtype=F64)
    assert net(x).shape == (3, 1)


def test_blocks_under_a_memory_budget_equal_one_block() -> None:
    x1 = torch.randn(5, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(7))
    x2 = torch.randn(3, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(8))
    arch = nl.serial(
        Conv(filter_shape=(1,)),
        nl.Relu(),
        GlobalSelfAttention(),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(),
    )
    for b in (None, x2):
        whole = arch.kernel(x1, b)
        blocked = arch.kernel(x1, b, max_memory=8 * 36 * 12 * 3)
        torch.testing.assert_close(blocked.ntk, whole.ntk)
        torch.testing.assert_close(blocked.nngp, whole.nngp)


def test_diagonal_readout_after_attention() -> None:
    # Flatten after attention reads the same-position kernels only: the engine drops the
    # off-diagonal positions after the attention layer (its output stays full only if needed).
    x = torch.randn(3, 3, 5, dtype=F64, generator=torch.Generator().manual_seed(9))
    arch = nl.serial(GlobalSelfAttention(b_std=0.2), nl.Relu(), Flatten(), nl.Dense())
    # the same through an explicit average of the self-variances of the readout layer
    k = arch.kernel(x)
    torch.testing.assert_close(k.nngp.diagonal(), k.var1)


def test_positional_covariance() -> None:
    r = positional_covariance((2, 3), 1.0, lambda d: torch.exp(-d))
    # positions (0,0) and (1,2) are at L1 distance 3
    assert r.shape == (6, 6)
    torch.testing.assert_close(r[0, 5], torch.tensor(torch.e**-3, dtype=F64))
    torch.testing.assert_close(positional_covariance((4,), 2.0, None), torch.eye(4, dtype=F64))


def test_finite_module_shapes_and_embeddings() -> None:
    x = torch.randn(2, 3, 5)
    for options in (
        {"pos_emb_type": "SUM", "pos_emb_decay_fn": lambda d: torch.exp(-d)},
        {"pos_emb_type": "CONCAT", "n_chan_pos_emb": 4, "val_pos_emb": True},
        {"linear_scaling": False, "attention_mechanism": "ABS"},
    ):
        layer = GlobalSelfAttention(7, 5, 6, 3, b_std=0.1, **options)  # type: ignore[arg-type]
        module = layer.module(None, 7, generator=None, dtype=torch.float32, device=None)
        assert isinstance(module, SelfAttentionLayer)
        assert module(x).shape == (2, 7, 5)


def test_bad_arguments() -> None:
    with pytest.raises(NtklabValueError, match="attention_mechanism: expected one of"):
        GlobalSelfAttention(attention_mechanism="softmax")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="pos_emb_type: expected one of"):
        GlobalSelfAttention(pos_emb_type="ADD")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="n_heads"):
        GlobalSelfAttention(n_heads=0)
    with pytest.raises(NtklabTypeError, match="n_chan_key"):
        GlobalSelfAttention(n_chan_key=2.5)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="w_key_std"):
        GlobalSelfAttention(w_key_std=-1.0)
    with pytest.raises(NtklabValueError, match="n_chan_pos_emb: expected None"):
        GlobalSelfAttention(pos_emb_type="SUM", n_chan_pos_emb=4)
    with pytest.raises(NtklabValueError, match="pos_emb_p_norm"):
        GlobalSelfAttention(pos_emb_p_norm=0)
    with pytest.raises(NtklabTypeError, match="pos_emb_decay_fn"):
        GlobalSelfAttention(pos_emb_decay_fn=3.0)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="linear_scaling"):
        GlobalSelfAttention(linear_scaling=1)  # type: ignore[arg-type]


def test_kernel_errors() -> None:
    x = torch.randn(3, 2, 4, dtype=F64)
    sqrt_softmax = nl.serial(GlobalSelfAttention(linear_scaling=False), GlobalAvgPool())
    with pytest.raises(NtklabValueError, match="no known closed form"):
        sqrt_softmax.kernel(x)
    flat = nl.serial(nl.Dense(), GlobalSelfAttention(), nl.Dense())
    with pytest.raises(NtklabValueError, match=r"expected sequences \(n, C, L\).*flat"):
        flat.kernel(torch.randn(3, 4, dtype=F64))
    concat = nl.serial(
        nl.Conv(filter_shape=(1,)),
        GlobalSelfAttention(pos_emb_type="CONCAT", n_chan_pos_emb=4),
        GlobalAvgPool(),
    )
    with pytest.raises(NtklabValueError, match="width=None"):
        concat.kernel(x)
    not_pd = GlobalSelfAttention(pos_emb_type="SUM", pos_emb_decay_fn=lambda d: -torch.ones_like(d))
    net = nl.serial(not_pd, GlobalAvgPool(), nl.Dense()).to_torch(4)
    with pytest.raises(NtklabValueError, match="positive definite"):
        net(torch.randn(2, 3, 4))
    with pytest.raises(NtklabValueError, match=r"sequences \(n, C, L\)"):
        SelfAttentionLayer(None, 4, 4, 4, 1)(torch.randn(2, 3))


def test_finite_networks_with_positional_embeddings_average_to_the_nngp() -> None:
    # Summed exp(-|g - g'|) embeddings read by keys and values, after a wide Conv readin (whose
    # empirical covariance, like the embeddings', is exact up to O(1 / width)).
    x = torch.randn(3, 3, 5, dtype=F64, generator=torch.Generator().manual_seed(0))
    attention = GlobalSelfAttention(
        n_heads=2,
        w_key_std=1.1,
        w_query_std=0.9,
        b_std=0.1,
        pos_emb_type="SUM",
        pos_emb_decay_fn=lambda d: torch.exp(-d),
        pos_emb_p_norm=1.0,
        val_pos_emb=True,
    )
    arch = nl.serial(
        Conv(filter_shape=(1,), w_std=1.3, b_std=0.1),
        attention,
        GlobalAvgPool(),
        nl.Dense(w_std=1.2, b_std=0.05),
    )
    analytic = arch.kernel(x).nngp
    mean, se = _mc_nngp(arch, x, n_nets=150, outputs=16, width=128)
    assert float(se.max()) < 0.07 * float(analytic.diagonal().mean())
    assert bool(((mean - analytic).abs() <= 4 * se).all()), (mean, analytic, se)


def test_differentiable_in_the_inputs_and_float32_agrees() -> None:
    x = torch.randn(2, 2, 3, dtype=F64, generator=torch.Generator().manual_seed(10))
    arch = nl.serial(
        GlobalSelfAttention(b_std=0.1, pos_emb_type="SUM"),
        nl.Erf(),
        GlobalSelfAttention(linear_scaling=False, attention_mechanism="IDENTITY"),
        GlobalAvgPool(),
        nl.Dense(),
    )
    assert torch.autograd.gradcheck(lambda a: arch.kernel(a).ntk, (x.requires_grad_(),))
    k64 = arch.kernel(x.detach())
    k32 = arch.kernel(x.detach().float())
    assert k32.ntk.dtype == torch.float32
    torch.testing.assert_close(k32.ntk.double(), k64.ntk, rtol=1e-5, atol=1e-6)
