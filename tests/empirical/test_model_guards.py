"""One example at a time, or an error: the empirical kernels refuse models whose forward is
random (Dropout in training mode), mixes examples across the batch, or returns another batch
size than its input's; legitimate models (BatchNorm in eval mode, LayerNorm, attention over
the tokens of one example) are unaffected and agree with the naive per-example reference.
An empty batch gives an empty kernel of the right shape and dtype, as ``Architecture.kernel``.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional

import ntklab as nl
from conftest import F64, batchnorm_net, naive_ntk
from ntklab.empirical import nngp, ntk, ntk_operator
from ntklab.errors import NtklabValueError

METHODS = ["auto", "structured", "jacobian", "ntk_vp"]


def _mlp_with(middle: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), middle, nn.Linear(16, 2)).to(F64)


def _x(n: int = 5, *shape: int) -> Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.randn(n, *(shape or (4,)), dtype=F64, generator=gen)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "factory",
    [lambda: nn.Dropout(0.3), lambda: nn.AlphaDropout(0.3), nn.RReLU],
    ids=["Dropout", "AlphaDropout", "RReLU"],
)
def test_random_modules_in_training_mode_are_refused_with_the_fix(
    factory: type[nn.Module], method: str
) -> None:
    """Before: Dropout gave a random kernel (two calls differ) or a raw vmap error."""
    layer = factory()
    net = _mlp_with(layer)
    with pytest.raises(NtklabValueError, match=rf"{type(layer).__name__} '2'.*model\.eval\(\)"):
        ntk(net, _x(), method=method)  # type: ignore[arg-type]
    if isinstance(layer, nn.RReLU):
        return  # in eval mode a leaky ReLU, but vmap does not support its kernel
    net.eval()  # the fix: then the kernel is the per-example one
    torch.testing.assert_close(
        ntk(net, _x(), method=method),  # type: ignore[arg-type]
        naive_ntk(net, _x()).diagonal(dim1=2, dim2=3).mean(-1),
    )


def test_feature_dropout_in_training_mode_is_refused() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1), nn.Dropout2d(0.5), nn.Flatten(), nn.Linear(3 * 16, 1)
    ).to(F64)
    with pytest.raises(NtklabValueError, match=r"Dropout2d.*model.eval"):
        ntk(net, _x(3, 2, 4, 4))
    net[1] = nn.FeatureAlphaDropout(0.5)
    with pytest.raises(NtklabValueError, match=r"FeatureAlphaDropout.*model.eval"):
        ntk(net, _x(3, 2, 4, 4))


class _FunctionalDropout(nn.Module):
    """Random without any Dropout module: only the generic probe can catch it."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 16), nn.Linear(16, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(functional.dropout(torch.tanh(self.a(x)), 0.5, training=self.training))


def test_a_random_forward_without_a_known_module_is_caught_by_the_probe() -> None:
    net = _FunctionalDropout().to(F64)
    with pytest.raises(NtklabValueError, match=r"deterministic forward.*model.eval"):
        ntk(net, _x(), method="structured")
    with pytest.raises(NtklabValueError, match="deterministic forward"):
        ntk_operator(net, _x())
    with pytest.raises(NtklabValueError, match="deterministic forward"):
        nngp(net, _x())


@pytest.mark.parametrize("method", METHODS)
def test_batchnorm_in_training_mode_is_refused_by_every_method(method: str) -> None:
    net = batchnorm_net().to(F64).train()
    with pytest.raises(NtklabValueError, match=r"BatchNorm1d '1'.*batch statistics.*eval"):
        ntk(net, _x(), method=method)  # type: ignore[arg-type]


class _CenterBatch(nn.Module):
    """Subtracts the batch mean: each example's output depends on the others."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.tanh(self.a(x))
        return self.b(h - h.mean(0, keepdim=True))


class _AttendAcrossBatch(nn.Module):
    """Attention over the batch axis (a common mistake: batch_first forgotten)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 1)  # reads (L, N, E): the batch becomes L
        self.out = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        seq = x.unsqueeze(1)  # shape: (n, 1, 4): n tokens of one sequence
        return self.out(self.attn(seq, seq, seq, need_weights=False)[0][:, 0])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("factory", [_CenterBatch, _AttendAcrossBatch])
def test_a_forward_that_mixes_examples_is_refused(factory: type[nn.Module], method: str) -> None:
    """Before: a kernel far from the per-example one, without a word."""
    torch.manual_seed(0)
    net = factory().to(F64).eval()
    with pytest.raises(NtklabValueError, match="evaluates each example on its own"):
        ntk(net, _x(), method=method)  # type: ignore[arg-type]


def test_the_mixing_probe_uses_x2_when_x1_has_one_example() -> None:
    torch.manual_seed(0)
    net = _CenterBatch().to(F64)
    with pytest.raises(NtklabValueError, match="evaluates each example on its own"):
        ntk(net, _x(1), _x(3) + 1.0)


class _BatchSum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.a(x).sum(0, keepdim=True)  # shape: (1, 2) whatever the batch


@pytest.mark.parametrize("method", METHODS)
def test_an_output_batch_other_than_the_inputs_is_refused_naming_both(method: str) -> None:
    """Before: results that depended on the method (or a raw torch error)."""
    net = _BatchSum().to(F64)
    with pytest.raises(NtklabValueError) as err:
        ntk(net, _x(), method=method)  # type: ignore[arg-type]
    message = str(err.value)
    assert "input batch size 2" in message and "output batch size 1" in message, message


class _TokenAttention(nn.Module):
    """Self-attention over the tokens of each example (batch_first): legitimate."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True, dropout=0.1)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 2)

    def forward(self, x: Tensor) -> Tensor:  # x: (n, tokens, 3)
        h = self.embed(x)
        h = self.norm(h + self.attn(h, h, h, need_weights=False)[0])
        return self.out(h.mean(1))


def test_attention_over_tokens_is_refused_in_training_mode_only_for_its_dropout() -> None:
    torch.manual_seed(0)
    net = _TokenAttention().to(F64)
    x = _x(4, 5, 3)
    with pytest.raises(NtklabValueError, match=r"MultiheadAttention 'attn'.*model.eval"):
        ntk(net, x)
    net.eval()
    expected = naive_ntk(net, x).diagonal(dim1=2, dim2=3).mean(-1)
    for method in ["auto", "structured", "jacobian"]:  # no forward AD in torch's attention
        torch.testing.assert_close(ntk(net, x, method=method), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", METHODS)
def test_legitimate_models_pass_the_guards_and_match_the_reference(method: str) -> None:
    """BatchNorm in eval mode and LayerNorm, in float32 (the probe's tolerance is the
    dtype's, not float64's), and Dropout with p = 0 in training mode (deterministic)."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(4, 32), nn.LayerNorm(32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 3)
    )
    bn = batchnorm_net()
    x = _x(6).float()
    for model in (net, bn):
        got = ntk(model, x, method=method, outputs="full")  # type: ignore[arg-type]
        torch.testing.assert_close(
            got, naive_ntk(model.double(), x.double()).float(), rtol=1e-4, atol=1e-5
        )
        model.float()


@pytest.mark.parametrize("outputs", ["trace", "full", "diagonal", "pseudo"])
@pytest.mark.parametrize("method", METHODS)
def test_an_empty_batch_gives_an_empty_kernel_as_the_analytic_one(
    outputs: str, method: str
) -> None:
    """Before: NtklabValueError 'expected a batch of inputs'. Now as Architecture.kernel:
    (0, 0) for an empty x1, (n1, 0) for an empty x2, in the model's dtype."""
    net = _mlp_with(nn.Identity())  # k = 2
    tail = {"trace": (), "full": (2, 2), "diagonal": (2,), "pseudo": ()}[outputs]
    empty = torch.empty(0, 4, dtype=F64)
    arch = nl.serial(nl.Dense(), nl.Relu(), nl.Dense())
    assert tuple(arch.kernel(empty).ntk.shape) == (0, 0)
    for x1, x2, n1, n2 in [(empty, None, 0, 0), (_x(3), empty, 3, 0), (empty, _x(2), 0, 2)]:
        got = ntk(net, x1, x2, outputs=outputs, method=method)  # type: ignore[arg-type]
        assert got.shape == (n1, n2, *tail) and got.dtype == F64
    with pytest.raises(NtklabValueError, match="x1"):  # still validated: a wrong feature count
        ntk(net, torch.empty(0, 7, dtype=F64))


def test_a_kernel_with_non_finite_entries_is_refused() -> None:
    """sqrt at 0 has an infinite derivative: no silent inf or NaN in the result."""

    class Sqrt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 1, bias=False)

        def forward(self, x: Tensor) -> Tensor:
            return self.a(x).abs().sqrt()

    net = Sqrt().to(F64)
    with pytest.raises(NtklabValueError, match="finite derivatives"):
        ntk(net, torch.zeros(2, 2, dtype=F64) + torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=F64))
