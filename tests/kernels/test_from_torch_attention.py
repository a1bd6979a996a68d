"""``from_torch`` on attention: ntklab's ``SelfAttentionLayer`` is read back into
``GlobalSelfAttention`` (the round trip gives the kernel of the architecture that built it,
and wide finite modules approach the kernel read); torch's softmax attention
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``) and channels-last models are
refused with the module's path and the reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab import kernels as nk
from ntklab.errors import NtklabValueError
from ntklab.kernels.attention import SelfAttentionLayer


def _transformer(norm_first: bool, attention: nk.GlobalSelfAttention) -> nk.Architecture:
    """Embedding, one transformer block (post- or pre-norm), mean pooling, a linear readout."""
    ff = (nk.Conv(filter_shape=(1,)), nk.Gelu(), nk.Conv(filter_shape=(1,)))
    if norm_first:
        block = [
            nk.Residual((nk.LayerNorm(), attention)),
            nk.Residual((nk.LayerNorm(), *ff)),
        ]
    else:
        block = [nk.Residual((attention,)), nk.LayerNorm(), nk.Residual(ff), nk.LayerNorm()]
    return nl.serial(nk.Conv(filter_shape=(1,)), *block, nk.GlobalAvgPool(), nk.Dense())


ATTENTIONS = {
    "softmax": nk.GlobalSelfAttention(),
    "heads-scales-bias": nk.GlobalSelfAttention(
        n_heads=2, w_key_std=0.7, w_query_std=1.3, w_value_std=1.2, w_out_std=0.9, b_std=0.3
    ),
    "sqrt-identity": nk.GlobalSelfAttention(linear_scaling=False, attention_mechanism="IDENTITY"),
    "pos-emb": nk.GlobalSelfAttention(
        pos_emb_type="SUM", pos_emb_decay_fn=lambda d: torch.exp(-d), w_pos_emb_std=0.8
    ),
}


def _x(n: int = 4, c: int = 3, length: int = 5) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, c, length, dtype=torch.float64, generator=gen)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_round_trip_gives_the_same_kernel(name: str, norm_first: bool) -> None:
    arch = _transformer(norm_first, ATTENTIONS[name])
    x = _x()
    model = arch.to_torch(16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    read = nk.from_torch(model)
    attention = [
        layer
        for top in read.layers
        if isinstance(top, nk.Residual)
        for layer in top.branch
        if isinstance(layer, nk.GlobalSelfAttention)
    ]
    assert len(attention) == 1
    expected, got = arch.kernel(x), read.kernel(x)
    torch.testing.assert_close(got.nngp, expected.nngp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.ntk, expected.ntk, rtol=1e-12, atol=1e-12)


def test_attention_in_a_residual_branch_keeps_the_width() -> None:
    """``to_torch`` gives the attention of a residual branch the width of its input (its key,
    value and output widths default to the input's channels), as the kernel assumes."""
    model = _transformer(False, nk.GlobalSelfAttention(n_heads=2)).to_torch(16, dtype=torch.float64)
    model(_x())
    (attention,) = [m for m in model.modules() if isinstance(m, SelfAttentionLayer)]
    assert tuple(attention.key.shape) == (2, 16, 16)
    assert tuple(attention.value.shape) == (2, 16, 16)
    assert tuple(attention.out.shape) == (32, 16)
    assert attention.out_features == 16


def test_the_read_scales_change_the_kernel() -> None:
    """The scales are read from the module, not defaulted: doubling w_out_std in the finite
    module doubles sigma_OV and changes the kernel read."""
    x = _x()
    base = _transformer(False, nk.GlobalSelfAttention()).to_torch(8, dtype=torch.float64)
    other = _transformer(False, nk.GlobalSelfAttention(w_out_std=2.0)).to_torch(
        8, dtype=torch.float64
    )
    k1, k2 = nk.from_torch(base).kernel(x).ntk, nk.from_torch(other).kernel(x).ntk
    assert (k1 - k2).abs().max() > 1e-2


def test_a_wide_module_read_back_approaches_its_kernel() -> None:
    """The empirical NTK of the module that was read (width 512) is within 15% of the read
    kernel, and much closer than at width 16: the module read is the module's own limit."""
    x = _x()
    arch = _transformer(False, nk.GlobalSelfAttention())
    errors = []
    for width in (16, 512):
        model = arch.to_torch(
            width, generator=torch.Generator().manual_seed(2), dtype=torch.float64
        )
        model(x)
        theta = nk.from_torch(model).kernel(x).ntk
        emp = nl.empirical.ntk(model, x)
        errors.append(float((emp - theta).abs().max() / theta.abs().max()))
    assert errors[1] < 0.15, errors
    assert errors[1] < errors[0] / 2, errors


# --- refusals ----------------------------------------------------------------------------------


class _Block(nn.Module):
    """A residual torch attention block on ``(L, n, E)`` or ``(n, L, E)`` sequences."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(x, x, x)[0]


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_is_refused_with_its_path_and_the_reason(batch_first: bool) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(_Block(batch_first)), nn.Linear(8, 1))
    with pytest.raises(NtklabValueError) as info:
        nk.from_torch(model)
    msg = str(info.value)
    assert "MultiheadAttention at path '1.0.attn'" in msg, msg
    assert "sqrt(head_dim)" in msg and "no closed form" in msg
    assert "SelfAttentionLayer" in msg and "to_torch" in msg


def test_bare_multihead_attention_is_refused() -> None:
    with pytest.raises(NtklabValueError, match=r"MultiheadAttention at path '0'.*sqrt\(head_dim\)"):
        nk.from_torch(nn.Sequential(nn.MultiheadAttention(8, 2), nn.Linear(8, 1)))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_is_refused(norm_first: bool, activation: str) -> None:
    layer = nn.TransformerEncoderLayer(
        8, 2, dim_feedforward=16, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()
    model = nn.Sequential(nn.Linear(8, 8), layer, nn.Linear(8, 1))
    with pytest.raises(NtklabValueError) as info:
        nk.from_torch(model)
    msg = str(info.value)
    assert "TransformerEncoderLayer at path '1'" in msg, msg
    assert "nn.MultiheadAttention" in msg and "sqrt(head_dim)" in msg


def test_transformer_encoder_is_refused() -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    with pytest.raises(NtklabValueError, match="TransformerEncoder at path '0'"):
        nk.from_torch(nn.Sequential(enc, nn.Linear(8, 1)))


class _ChannelsLast(nn.Module):
    """A per-position Linear on channels-last ``(n, L, C)`` between two transposes."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.transpose(1, 2)).transpose(1, 2)


def test_channels_last_models_are_refused_with_the_layout() -> None:
    model = nn.Sequential(nn.Conv1d(3, 3, 1), _ChannelsLast())
    with pytest.raises(NtklabValueError) as info:
        nk.from_torch(model)
    msg = str(info.value)
    assert "_ChannelsLast at path '1'" in msg, msg
    assert "channels-first" in msg and "'transpose'" in msg and "Conv1d(C, C', 1)" in msg


class _Softmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv1d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x), dim=-1)


def test_hand_written_softmax_attention_is_refused() -> None:
    with pytest.raises(NtklabValueError, match=r"_Softmax at path '1'.*'softmax'.*sqrt"):
        nk.from_torch(nn.Sequential(nn.Conv1d(3, 4, 1), _Softmax()))
