"""Masked (padded) inputs, ``Architecture.kernel(..., mask_constant=c)``: parity with
neural-tangents 0.6.5, the padded-then-masked kernel against the kernel of the short
sequences, and bad input."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    ConvTranspose,
    Dense,
    Erf,
    FanInConcat,
    FanInSum,
    FanOut,
    Flatten,
    GlobalAvgPool,
    GlobalSelfAttention,
    Identity,
    ImageResize,
    Index,
    LayerNorm,
    Relu,
    Residual,
    Slice,
    parallel,
)

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_masks.json"
PAD = -7.0


def attention() -> GlobalSelfAttention:
    return GlobalSelfAttention(
        n_chan_out=64,
        n_chan_key=64,
        n_chan_val=64,
        n_heads=2,
        linear_scaling=True,
        w_key_std=1.1,
        w_value_std=1.2,
        w_query_std=0.9,
        w_out_std=1.05,
        b_std=0.1,
        attention_mechanism="SOFTMAX",
        pos_emb_type="NONE",
    )


def conv(filt: int, padding: str = "SAME", w: float = 1.5, b: float = 0.1) -> Conv:
    return Conv(filter_shape=(filt,), padding=padding, w_std=w, b_std=b)  # type: ignore[arg-type]


# the stacks of make_nt_mask_reference.py, in ntklab's spelling
ARCHITECTURES: dict[str, Callable[[], nl.kernels.Architecture]] = {
    "conv_relu_gap_dense": lambda: nl.serial(
        conv(3), Relu(), GlobalAvgPool(), Dense(w_std=1.2, b_std=0.05)
    ),
    "conv_relu_attention_gap_dense": lambda: nl.serial(
        conv(3), Relu(), attention(), GlobalAvgPool(), Dense(w_std=1.2, b_std=0.05)
    ),
    "conv_valid_avgpool_flatten_dense": lambda: nl.serial(
        conv(3, "VALID"),
        Relu(),
        AvgPool((2,), strides=(2,), padding="VALID"),
        conv(2, w=1.3, b=0.2),
        Erf(),
        Flatten(),
        Dense(w_std=1.2, b_std=0.05),
    ),
    "conv_index_reverse_conv_gap_dense": lambda: nl.serial(
        conv(3),
        Relu(),
        Index(Slice[:, :, ::-1]),
        conv(3, w=1.3, b=0.2),
        Erf(),
        GlobalAvgPool(),
        Dense(w_std=1.2, b_std=0.05),
    ),
    "conv_index_stride_flatten_dense": lambda: nl.serial(
        conv(3),
        Relu(),
        Index(Slice[:, :, 1::2]),
        conv(2, w=1.3, b=0.2),
        Relu(),
        Flatten(),
        Dense(w_std=1.2, b_std=0.05),
    ),
    "conv_layernorm_all_relu_gap_dense": lambda: nl.serial(
        conv(3),
        LayerNorm(axes="all", eps=1e-12),
        Relu(),
        GlobalAvgPool(),
        Dense(w_std=1.2, b_std=0.05),
    ),
}


def cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_matches_neural_tangents(case: dict[str, Any]) -> None:
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    constant = math.nan if case["mask_constant"] == "nan" else float(case["mask_constant"])
    k = ARCHITECTURES[case["architecture"]]().kernel(x1, x2, mask_constant=constant)
    for name in ("nngp", "ntk"):
        ref = torch.tensor(case[name], dtype=F64)
        got = getattr(k, name)
        assert got.shape == ref.shape
        scale = float(ref.abs().max())
        assert float((got - ref).abs().max()) <= 1e-6 * scale, name


def test_reference_padding_matters() -> None:
    """The NT references differ from the unmasked kernel of the zero-padded sequences (so
    the parity above tests the masks, not a kernel that ignores them)."""
    case = cases()[0]
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = torch.tensor(case["x2"], dtype=F64)
    zeroed = [torch.where(x == PAD, 0.0, x) for x in (x1, x2)]
    k = ARCHITECTURES[case["architecture"]]().kernel(*zeroed)
    ref = torch.tensor(case["ntk"], dtype=F64)
    assert float((k.ntk - ref).abs().max()) > 1e-2 * float(ref.abs().max())


def eager(arch: nl.kernels.Architecture, x1: torch.Tensor, x2: torch.Tensor | None = None) -> Any:
    """The unmasked kernel on the eager path (inputs that require gradients skip the fused
    convolution kernel, whose diagonal differs from the eager one by rounding of order
    sqrt(eps) near correlation 1), as the masked kernel is computed."""
    k = arch.kernel(x1.clone().requires_grad_(), None if x2 is None else x2.clone())
    return k.to(F64)


def padded(x: torch.Tensor, size: int, constant: float = PAD) -> torch.Tensor:
    """``x`` ``(n, C, L)`` padded on the right to ``size`` positions with ``constant``."""
    pad = x.new_full((x.shape[0], x.shape[1], size - x.shape[2]), constant)
    return torch.cat([x, pad], dim=2)


SHORT_ARCHITECTURES = {
    # SAME convolutions read zeros past the end of the short sequence; the masked positions
    # of the padded one hold zeros: the two kernels agree
    "conv_gap": lambda: nl.serial(
        conv(3), Relu(), conv(3, w=1.3, b=0.2), Relu(), GlobalAvgPool(), Dense(w_std=1.2)
    ),
    "attention_gap": lambda: nl.serial(
        conv(1), Erf(), attention(), Relu(), GlobalAvgPool(), Dense(w_std=1.2, b_std=0.05)
    ),
    "layernorm_channel": lambda: nl.serial(
        conv(3), LayerNorm(axes="channel"), Relu(), GlobalAvgPool(), Dense()
    ),
    # normalized over the unmasked positions only
    "layernorm_all": lambda: nl.serial(
        conv(3), LayerNorm(axes="all"), Relu(), GlobalAvgPool(), Dense()
    ),
    # branches run their own chains (eager too: the fused kernels carry no masks)
    "residual": lambda: nl.serial(
        conv(3), Residual(nl.serial(conv(3), Relu(), conv(3))), Relu(), GlobalAvgPool(), Dense()
    ),
    "residual_layernorm_all": lambda: nl.serial(
        conv(3),
        Residual([Relu(), conv(3), LayerNorm(axes="all")], scale=0.7),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
    "fan_out": lambda: nl.serial(
        conv(3),
        FanOut(2),
        parallel(nl.serial(conv(3), Relu(), conv(3)), nl.serial(conv(1), Erf(), conv(1))),
        FanInSum(),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
    # square-root scaling: the sums over position pairs skip the masked positions
    "attention_sqrt_identity": lambda: nl.serial(
        conv(1),
        Erf(),
        GlobalSelfAttention(
            attention_mechanism="IDENTITY", linear_scaling=False, w_query_std=0.5, b_std=0.2
        ),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
    # indexing carries the mask: strided and reversed positions
    "index_stride": lambda: nl.serial(
        conv(3), Relu(), Index(Slice[:, :, ::2]), conv(3), Relu(), GlobalAvgPool(), Dense()
    ),
    "index_reverse": lambda: nl.serial(
        conv(3), Relu(), Index(Slice[:, :, ::-1]), conv(3), Erf(), GlobalAvgPool(), Dense()
    ),
    # positional embeddings of the first positions are those of the short sequence
    "attention_abs_pos_emb": lambda: nl.serial(
        conv(1),
        Erf(),
        GlobalSelfAttention(
            n_chan_out=64,
            n_chan_key=64,
            n_chan_val=64,
            n_heads=2,
            attention_mechanism="ABS",
            pos_emb_type="SUM",
            pos_emb_decay_fn=lambda d: torch.exp(-d),
            val_pos_emb=True,
        ),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
}


@pytest.mark.parametrize("name", sorted(SHORT_ARCHITECTURES))
@pytest.mark.parametrize("constant", [PAD, math.nan])
def test_padded_and_masked_equals_short_sequences(name: str, constant: float) -> None:
    g = torch.Generator().manual_seed(3)
    short1 = torch.randn(3, 2, 5, dtype=F64, generator=g)
    short2 = torch.randn(2, 2, 5, dtype=F64, generator=g)
    arch = SHORT_ARCHITECTURES[name]()
    ref = eager(arch, short1, short2)
    got = arch.kernel(
        padded(short1, 9, constant), padded(short2, 9, constant), mask_constant=constant
    )
    torch.testing.assert_close(got.nngp, ref.nngp, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got.ntk, ref.ntk, rtol=1e-10, atol=1e-12)
    # on the diagonal: sequences of different lengths padded into one batch
    mixed = torch.cat([padded(short1[:1], 9, constant), padded(short2[:1, :, :3], 9, constant)])
    k = arch.kernel(mixed, mask_constant=constant)
    first, second = eager(arch, short1[:1]), eager(arch, short2[:1, :, :3])
    # self-kernels: in-place and out-of-place rounding near correlation 1 differ by ~1e-9
    for got_k, want in ((k.ntk, "ntk"), (k.nngp, "nngp")):
        alone = torch.stack([getattr(first, want)[0, 0], getattr(second, want)[0, 0]])
        torch.testing.assert_close(got_k.diagonal(), alone, rtol=1e-8, atol=0.0)
    torch.testing.assert_close(k.var1, torch.cat([first.var1, second.var1]), rtol=1e-8, atol=0.0)


def test_no_masked_entry_is_the_plain_kernel() -> None:
    """A constant that never occurs masks nothing: the masked kernel equals the plain one
    (on the eager path; the fused convolution kernel agrees to its rounding)."""
    x = torch.randn(4, 3, 8, dtype=F64, generator=torch.Generator().manual_seed(0))
    arch = ARCHITECTURES["conv_relu_gap_dense"]()
    plain, masked = eager(arch, x), arch.kernel(x, mask_constant=123.0)
    fused = arch.kernel(x)
    torch.testing.assert_close(masked.ntk, fused.ntk, rtol=1e-8, atol=0.0)
    torch.testing.assert_close(masked.ntk, plain.ntk, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(masked.nngp, plain.nngp, rtol=1e-12, atol=1e-14)


def test_partially_masked_position_counts_as_zero() -> None:
    """An entry equal to the constant in some channels only is zero, its position kept
    (neural-tangents' rule)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 6, dtype=F64, generator=g)
    x[0, 1, 2] = PAD
    arch = ARCHITECTURES["conv_relu_gap_dense"]()
    zeroed = x.clone()
    zeroed[0, 1, 2] = 0.0
    torch.testing.assert_close(arch.kernel(x, mask_constant=PAD).ntk, arch.kernel(zeroed).ntk)


def test_blocks_carry_the_masks() -> None:
    """Blocks of input pairs (a small ``max_memory``) slice the masks with the inputs."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 2, 7, dtype=F64, generator=g)
    for i, length in enumerate([7, 3, 5, 2, 6]):
        x[i, :, length:] = PAD
    arch = ARCHITECTURES["conv_relu_attention_gap_dense"]()
    whole = arch.kernel(x, mask_constant=PAD)
    blocks = arch.kernel(x, mask_constant=PAD, max_memory=200_000)
    torch.testing.assert_close(blocks.ntk, whole.ntk, rtol=1e-12, atol=1e-14)
    other = arch.kernel(x[:2], x[2:], mask_constant=PAD, max_memory=200_000)
    torch.testing.assert_close(other.ntk, whole.ntk[:2, 2:], rtol=1e-12, atol=1e-14)


def test_errors() -> None:
    x = padded(torch.randn(2, 2, 4, dtype=F64), 6)
    arch = ARCHITECTURES["conv_relu_gap_dense"]()
    with pytest.raises(NtklabTypeError, match="mask_constant"):
        arch.kernel(x, mask_constant="pad")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="mask_constant"):
        arch.kernel(x, mask_constant=True)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="mask_constant: expected an architecture"):
        nl.serial(Dense(), Relu(), Dense()).kernel(torch.randn(3, 4, dtype=F64), mask_constant=0.0)
    empty = x.clone()
    empty[1] = PAD
    with pytest.raises(NtklabValueError, match="at least one unmasked position"):
        arch.kernel(empty, mask_constant=PAD)
    with pytest.raises(NtklabValueError, match="finite values"):
        arch.kernel(padded(torch.randn(2, 2, 4, dtype=F64), 6, math.nan), mask_constant=PAD)
    with pytest.raises(NtklabValueError, match="x2: expected the channels and spatial shape"):
        arch.kernel(x, x[:, :, :5], mask_constant=PAD)
    with pytest.raises(NtklabValueError, match=r"x1: expected sequences \(n, C, L\)"):
        arch.kernel(x[:, :, 0], mask_constant=PAD)
    up = nl.serial(ConvTranspose(None, (2,), (2,)), Relu(), Flatten(), Dense())
    with pytest.raises(NtklabValueError, match="ConvTranspose: masked inputs"):
        up.kernel(x, mask_constant=PAD)


# --------------------------------------------------------------------------------------------
# finite networks


@pytest.mark.parametrize("name", ["attention_gap", "conv_gap", "layernorm_all", "index_reverse"])
def test_finite_network_on_padding_is_the_network_on_short_sequences(name: str) -> None:
    """The same weights give the same outputs on the padded (masked) and on the short
    sequences: the forward pass ignores the padding as the kernel does."""
    arch = SHORT_ARCHITECTURES[name]()
    net = arch.to_torch(
        16, mask_constant=PAD, generator=torch.Generator().manual_seed(0), dtype=F64
    )
    short = torch.randn(3, 2, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    out = net(padded(short, 9))
    plain = net.net(short)  # the unmasked modules, now initialized
    torch.testing.assert_close(out, plain, rtol=1e-12, atol=1e-12)
    zero_padded = net.net(padded(short, 9, 0.0))
    assert float((zero_padded - plain).detach().abs().max()) > 1e-3


BRANCH_ARCHITECTURES: dict[str, Callable[[], nl.kernels.Architecture]] = {
    "residual": lambda: nl.serial(
        conv(3),
        Residual(nl.serial(conv(3), Relu(), conv(3)), scale=0.7),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
    "fan_in_sum": lambda: nl.serial(
        conv(3),
        FanOut(3),
        parallel(
            nl.serial(conv(3), Relu(), conv(3)), nl.serial(conv(1), Erf(), conv(1)), Identity()
        ),
        FanInSum(),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
    "fan_in_concat": lambda: nl.serial(
        conv(3),
        FanOut(2),
        parallel(
            nl.serial(conv(3), Relu(), Conv(8, (3,), padding="SAME")),
            nl.serial(conv(1), Residual([Relu(), conv(1)]), Conv(4, (1,))),
        ),
        FanInConcat(),
        attention(),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    ),
}


@pytest.mark.parametrize("name", [*sorted(BRANCH_ARCHITECTURES), "residual_layernorm_all"])
def test_finite_branches_on_padding_are_the_network_on_short_sequences(name: str) -> None:
    """Branches carry their own masks: the same weights give the same outputs on the padded
    (masked) and on the short sequences, not those of the network on zero padding."""
    net = {**SHORT_ARCHITECTURES, **BRANCH_ARCHITECTURES}[name]().to_torch(
        16, mask_constant=PAD, generator=torch.Generator().manual_seed(0), dtype=F64
    )
    short = torch.randn(3, 2, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = net.net(short)
        torch.testing.assert_close(net(padded(short, 9)), plain, rtol=1e-12, atol=1e-12)
        zero_padded = net.net(padded(short, 9, 0.0))
    assert float((zero_padded - plain).abs().max()) > 1e-3


def test_finite_residual_monte_carlo_nngp() -> None:
    """The output covariance over initializations of masked finite networks with a
    ``Residual`` block after a VALID convolution is the masked NNGP within its standard
    error (4 standard errors per entry), and the unmasked NNGP is not (over 5)."""
    x = torch.randn(3, 2, 12, dtype=F64, generator=torch.Generator().manual_seed(4))
    for i, length in enumerate([12, 5, 4]):
        x[i, :, length:] = PAD
    block = Residual(nl.serial(conv(3, b=1.0), Relu(), conv(3, w=1.3, b=1.0)), scale=0.8)
    arch = nl.serial(  # large biases: the padding of an unmasked network weighs
        conv(3, "VALID", b=1.0), Relu(), block, Erf(), GlobalAvgPool(), Dense(w_std=1.2, b_std=0.3)
    )
    want = arch.kernel(x, mask_constant=PAD).nngp
    unmasked = arch.kernel(torch.where(x == PAD, 0.0, x)).nngp
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        f = torch.stack(
            [
                arch.to_torch(64, mask_constant=PAD, generator=gen, dtype=F64)(x)[:, 0]
                for _ in range(1000)
            ]
        )  # shape: (draws, n)
    products = f[:, :, None] * f[:, None, :]
    got, se = products.mean(0), products.std(0) / math.sqrt(f.shape[0])
    assert float(((got - want) / se).abs().max()) < 4.0
    assert float(((unmasked - want) / se).abs().max()) > 5.0


def test_finite_networks_monte_carlo_nngp() -> None:
    """The output covariance over initializations of masked finite networks (VALID
    convolution, AvgPool, Flatten) approaches the masked NNGP, not the unmasked one."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 2, 9, dtype=F64, generator=g)
    for i, length in enumerate([9, 5, 4]):
        x[i, :, length:] = PAD
    arch = nl.serial(  # large biases: the padding of an unmasked network weighs
        conv(3, "VALID", b=1.0),
        Relu(),
        AvgPool((2,), strides=(2,), padding="VALID"),
        conv(2, b=1.0),
        Erf(),
        Flatten(),
        Dense(w_std=1.2),
    )
    want = arch.kernel(x, mask_constant=PAD).nngp
    unmasked = arch.kernel(torch.where(x == PAD, 0.0, x)).nngp
    outs = []
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _ in range(400):
            net = arch.to_torch(64, mask_constant=PAD, generator=gen, dtype=F64)
            outs.append(net(x)[:, 0])
    f = torch.stack(outs)  # shape: (draws, n)
    got = f.T @ f / f.shape[0]
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) < 0.12 * scale
    assert float((unmasked - want).abs().max()) > 0.3 * scale


def test_images_padded_and_masked() -> None:
    """2-D: images padded at the bottom and on the right, kernel and finite network."""
    g = torch.Generator().manual_seed(6)
    x1 = torch.randn(2, 2, 4, 5, dtype=F64, generator=g)
    x2 = torch.randn(3, 2, 4, 5, dtype=F64, generator=g)

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = torch.full((x.shape[0], 2, 6, 7), PAD, dtype=F64)
        out[:, :, :4, :5] = x
        return out

    arch = nl.serial(
        Conv(None, (3, 3), w_std=1.5, b_std=0.1),
        Relu(),
        Conv(None, (3, 3), b_std=0.3),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    )
    ref = eager(arch, x1, x2)
    got = arch.kernel(pad(x1), pad(x2), mask_constant=PAD)
    torch.testing.assert_close(got.ntk, ref.ntk, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got.nngp, ref.nngp, rtol=1e-10, atol=1e-12)
    net = arch.to_torch(8, mask_constant=PAD, dtype=F64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(net(pad(x1)), net.net(x1), rtol=1e-12, atol=1e-12)


def test_finite_network_errors() -> None:
    with pytest.raises(NtklabTypeError, match="mask_constant"):
        SHORT_ARCHITECTURES["conv_gap"]().to_torch(8, mask_constant="x")  # type: ignore[arg-type]
    unclosed = nl.serial(conv(3), FanOut(2))
    net = unclosed.to_torch(8, mask_constant=PAD, dtype=F64)
    with pytest.raises(NtklabValueError, match="one output, got 2 branches"):
        net(padded(torch.randn(2, 2, 4, dtype=F64), 6))
    net = SHORT_ARCHITECTURES["conv_gap"]().to_torch(8, mask_constant=PAD, dtype=F64)
    with pytest.raises(NtklabValueError, match="at least one unmasked position"):
        net(torch.full((2, 2, 5), PAD, dtype=F64))


def test_gradients_in_the_inputs() -> None:
    """The masked kernel is differentiable in the inputs (finite differences), with zero
    gradient at the padding."""
    g = torch.Generator().manual_seed(8)
    x = padded(torch.randn(2, 2, 4, dtype=F64, generator=g), 6).requires_grad_()
    other = padded(torch.randn(2, 2, 5, dtype=F64, generator=g), 6)
    arch = ARCHITECTURES["conv_relu_attention_gap_dense"]()

    def ntk(x: torch.Tensor) -> torch.Tensor:
        # against other inputs: the self-kernel's diagonal sits at correlation 1, where
        # the ReLU dual is not differentiable
        return arch.kernel(x, other, mask_constant=PAD).ntk

    unmasked, base = (x != PAD).detach(), x.detach().clone()
    # finite differences move the unmasked entries only (a moved padding entry is data)
    assert torch.autograd.gradcheck(
        lambda v: ntk(torch.where(unmasked, v, base)), (x,), eps=1e-6, atol=1e-6
    )
    ntk(x).sum().backward()
    assert x.grad is not None
    assert bool((x.grad[:, :, 4:] == 0).all())
    assert float(x.grad[:, :, :4].abs().max()) > 0


def test_branches_that_change_the_spatial_shape() -> None:
    """Branches with VALID convolutions carry their own masks: the sum of two independent
    branches is one branch with the variances doubled."""
    x = torch.randn(3, 2, 9, dtype=F64, generator=torch.Generator().manual_seed(9))
    for i, length in enumerate([9, 6, 5]):
        x[i, :, length:] = PAD
    r = math.sqrt(2.0)
    two = nl.serial(
        conv(3, "VALID"),
        Relu(),
        FanOut(2),
        parallel(conv(3, "VALID", w=1.3, b=0.2), conv(3, "VALID", w=1.3, b=0.2)),
        FanInSum(),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    )
    one = nl.serial(
        conv(3, "VALID"),
        Relu(),
        conv(3, "VALID", w=1.3 * r, b=0.2 * r),
        Relu(),
        GlobalAvgPool(),
        Dense(),
    )
    got, want = two.kernel(x, mask_constant=PAD), one.kernel(x, mask_constant=PAD)
    torch.testing.assert_close(got.ntk, want.ntk, rtol=1e-10, atol=1e-12)
    unmasked = one.kernel(torch.where(x == PAD, 0.0, x))
    assert float((unmasked.ntk - want.ntk).abs().max()) > 1e-2 * float(want.ntk.abs().max())


def test_layers_that_move_positions_refuse_masks() -> None:
    x = padded(torch.randn(2, 2, 4, dtype=F64), 6)
    resize = nl.serial(conv(3), ImageResize((9,)), Relu(), GlobalAvgPool(), Dense())
    with pytest.raises(NtklabValueError, match="ImageResize: masked inputs"):
        resize.kernel(x, mask_constant=PAD)


def test_index_refuses_to_select_masked_positions_only() -> None:
    x = padded(torch.randn(2, 2, 4, dtype=F64), 9)
    tail = nl.serial(conv(3), Index(Slice[:, :, 5:]), Relu(), GlobalAvgPool(), Dense())
    with pytest.raises(NtklabValueError, match="Index: expected at least one unmasked"):
        tail.kernel(x, mask_constant=PAD)
    with pytest.raises(NtklabValueError, match="Index: expected at least one unmasked"):
        tail.to_torch(8, mask_constant=PAD, dtype=F64)(x)
