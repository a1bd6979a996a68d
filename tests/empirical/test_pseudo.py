"""The pseudo-NTK (Mohamadi, Bae & Sutherland 2023): ``outputs="pseudo"`` equals the sum of
all ``k x k`` blocks of the naive full eNTK over ``k``, for every method, and is not the trace."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import ntklab as nl
from conftest import F64, cnn, mlp3, naive_ntk
from ntklab.empirical import functional_model, plan
from ntklab.errors import NtklabValueError

METHODS = ["auto", "structured", "jacobian", "ntk_vp"]


class BasicBlock(nn.Module):
    """A ResNet basic block (conv-BN-ReLU-conv-BN plus a 1x1 projection shortcut) between a
    conv stem and a pooled linear head."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1 = nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.shortcut = nn.Conv2d(4, 6, 1, stride=2, bias=False)
        self.head = nn.Linear(6, k)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        r = torch.relu(self.bn1(self.conv1(h)))
        h = torch.relu(self.bn2(self.conv2(r)) + self.shortcut(h))
        out: Tensor = self.head(h.mean((2, 3)))
        return out


def resnet_block(k: int = 3) -> nn.Module:
    net = BasicBlock(k)
    with torch.no_grad():  # non-trivial running statistics and affine parameters, eval mode
        for bn in (net.bn1, net.bn2):
            assert bn.running_mean is not None and bn.running_var is not None
            bn.running_mean.uniform_(-0.3, 0.3)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return net.eval()


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (lambda: mlp3(4), (5,)),
    "cnn": (lambda: cnn(3), (3, 8, 8)),
    "resnet_block_bn_eval": (resnet_block, (3, 8, 8)),
}


def _pseudo_from_full(full: Tensor) -> Tensor:
    """(n1, n2, k, k) -> (n1, n2): every output block summed, divided by k."""
    return full.sum((2, 3)) / full.shape[-1]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("method", METHODS)
def test_pseudo_is_the_full_entk_summed_over_output_blocks(name: str, method: str) -> None:
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().to(F64)
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randn(5, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(3, *shape, dtype=F64, generator=gen)
    for second in (x2, None):
        want = _pseudo_from_full(naive_ntk(model, x1, second))
        got = nl.empirical.ntk(model, x1, second, outputs="pseudo", method=method)  # type: ignore[arg-type]
        assert got.shape == want.shape and got.dtype == F64
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))


def test_pseudo_differs_from_trace_when_outputs_are_coupled() -> None:
    """Outputs that share every parameter have equal blocks Theta_ab = Theta_00, so the
    pseudo-NTK is k times the trace; outputs with disjoint parameters have no cross blocks,
    so the two are equal."""
    torch.manual_seed(0)
    k = 3

    class Copies(nn.Module):  # f_a = g for every a: fully coupled outputs
        def __init__(self) -> None:
            super().__init__()
            self.g = mlp3(1)

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = self.g(x)
            return out.expand(-1, k)

    class Separate(nn.Module):  # f_a = g_a with disjoint parameters: no cross blocks
        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleList(mlp3(1) for _ in range(k))

        def forward(self, x: Tensor) -> Tensor:
            return torch.cat([h(x) for h in self.heads], dim=1)

    x = torch.randn(6, 5, dtype=F64)
    coupled = Copies().to(F64)
    trace = nl.empirical.ntk(coupled, x, outputs="trace")
    pseudo = nl.empirical.ntk(coupled, x, outputs="pseudo")
    torch.testing.assert_close(pseudo, k * trace, rtol=1e-12, atol=0.0)
    assert float((pseudo - trace).abs().max()) > 0.5 * float(trace.abs().max())
    separate = Separate().to(F64)
    torch.testing.assert_close(
        nl.empirical.ntk(separate, x, outputs="pseudo"),
        nl.empirical.ntk(separate, x, outputs="trace"),
        rtol=1e-12,
        atol=1e-14,
    )
    # a generic multi-output MLP: cross blocks are non-zero at finite width
    net = mlp3(4).to(F64)
    gap = nl.empirical.ntk(net, x, outputs="pseudo") - nl.empirical.ntk(net, x, outputs="trace")
    assert float(gap.abs().max()) > 1e-3


def test_pseudo_is_planned_as_one_output() -> None:
    """The cheap way: one cotangent (ones / sqrt(k)) per input, so every method sees k = 1
    and the result is (n1, n2) whatever k is."""
    torch.manual_seed(0)
    model = mlp3(10).to(F64)
    x = torch.randn(7, 5, dtype=F64)
    fm = functional_model(model)
    assert plan(fm, x, None, "pseudo").n_outputs == 1
    assert plan(fm, x, None, "trace").n_outputs == 10
    assert nl.empirical.ntk(model, x, outputs="pseudo").shape == (7, 7)
    with pytest.raises(NtklabValueError, match=r"'pseudo' kernel"):
        nl.empirical.ntk(model, x, outputs="pseudo", max_memory=64)
    with pytest.raises(NtklabValueError, match=r"outputs: expected one of .*'pseudo'"):
        nl.empirical.ntk(model, x, outputs="sum")  # type: ignore[arg-type]


def test_pseudo_matches_its_definition_by_autograd() -> None:
    """Independently of the full kernel: the NTK of sum_a f_a / sqrt(k) by plain autograd."""
    torch.manual_seed(0)
    model = resnet_block(4).to(F64)
    x = torch.randn(4, 3, 8, 8, dtype=F64)
    params = list(model.parameters())
    rows = []
    for i in range(4):
        s = model(x[i : i + 1]).sum() / 2.0  # sqrt(k) = 2
        rows.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(s, params)]))
    jac = torch.stack(rows)
    torch.testing.assert_close(
        nl.empirical.ntk(model, x, outputs="pseudo"), jac @ jac.T, rtol=1e-10, atol=1e-12
    )
