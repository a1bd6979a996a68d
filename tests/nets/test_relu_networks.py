"""The explicit tent-map network against ntklab.data.TentMap, and parameter counts / path
norms against hand computation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ntklab.kernels as nk
from ntklab.data import TentMap
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.nets.relu_networks import parameter_count, path_norm, relu_layers, tent_network


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 8, 10])
def test_tent_network_equals_tent_map(depth: int) -> None:
    gen = torch.Generator().manual_seed(depth)
    x = torch.cat(
        [torch.rand(20000, generator=gen, dtype=torch.float64), torch.linspace(0, 1, 4097).double()]
    )
    net = tent_network(depth)
    with torch.no_grad():
        out = net(x[:, None])[:, 0]
    torch.testing.assert_close(out, TentMap(depth)(x), atol=1e-12, rtol=0.0)


def test_tent_network_has_the_peaks_and_breakpoints_of_s_l() -> None:
    depth = 4
    net = tent_network(depth)
    j = torch.arange(2**depth + 1, dtype=torch.float64)
    with torch.no_grad():
        at_breaks = net((j / 2**depth)[:, None])[:, 0]
    # value 0 at even breakpoints, 1 at odd ones: 2^(L-1) peaks
    torch.testing.assert_close(at_breaks, (j % 2), atol=0.0, rtol=0.0)
    assert int(at_breaks.sum()) == 2 ** (depth - 1)


@pytest.mark.parametrize("depth", [1, 2, 7])
def test_tent_network_parameter_count_is_6l_plus_1(depth: int) -> None:
    net = tent_network(depth)
    assert parameter_count(net) == 6 * depth + 1
    assert parameter_count(net) == sum(p.numel() for p in net.parameters())


def test_path_norm_of_a_small_network_by_hand() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
        net[0].bias.copy_(torch.tensor([-1.0, 0.25]))
        net[2].weight.copy_(torch.tensor([[-4.0, 2.0]]))
        net[2].bias.copy_(torch.tensor([0.5]))
    # paths: inputs -> unit 1 -> out: (1 + 2) * 4, bias 1 -> 1 * 4; unit 2: (0.5 + 3) * 2,
    # bias 0.25 * 2; output bias 0.5
    expected = 3 * 4 + 1 * 4 + 3.5 * 2 + 0.25 * 2 + 0.5
    assert path_norm(net) == pytest.approx(expected, rel=1e-15)
    expected2 = (5 * 16 + 1 * 16 + (0.25 + 9) * 4 + 0.0625 * 4 + 0.25) ** 0.5
    assert path_norm(net, 2) == pytest.approx(expected2, rel=1e-15)
    assert parameter_count(net) == 9


def test_path_norm_of_tent_network_recursion() -> None:
    # v_1 = (1, 1.5); v_{l+1} = (2 + 4 * 1.5 ... ): v_{l+1} = 6 * v_l[0]-ish; closed form
    # below from the recursion a_{l+1} = 2 a_l + 4 b_l, b_{l+1} = a_{l+1} + 1/2
    a, b = 1.0, 1.5
    for depth in range(1, 7):
        assert path_norm(tent_network(depth)) == pytest.approx(2 * a + 4 * b, rel=1e-14)
        a = 2 * a + 4 * b
        b = a + 0.5


def test_path_norm_is_invariant_under_relu_rescaling() -> None:
    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 1))
    net = net.double()
    before = path_norm(net)
    x = torch.randn(10, 3, generator=gen, dtype=torch.float64)
    out = net(x)
    c = torch.rand(5, generator=gen, dtype=torch.float64) + 0.5
    with torch.no_grad():
        net[0].weight.mul_(c[:, None])
        net[0].bias.mul_(c)
        net[2].weight.div_(c[None, :])
    torch.testing.assert_close(net(x), out)
    assert path_norm(net) == pytest.approx(before, rel=1e-12)


def test_dense_layers_use_their_multipliers() -> None:
    arch = nk.serial(nk.Dense(w_std=2.0, b_std=0.5), nk.Relu(), nk.Dense(w_std=2.0, b_std=0.5))
    net = arch.to_torch(4, in_features=3, generator=torch.Generator().manual_seed(1))
    layers = relu_layers(net)
    first = net[0]
    torch.testing.assert_close(layers[0].weight, first.weight.detach() * 2.0 / math.sqrt(3))
    assert layers[0].bias is not None
    torch.testing.assert_close(layers[0].bias, first.bias.detach() * 0.5)
    assert parameter_count(net) == 3 * 4 + 4 + 4 + 1
    # the effective network computes the module's function
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(2))
    h = torch.relu(x @ layers[0].weight.T + layers[0].bias)
    assert layers[1].bias is not None
    torch.testing.assert_close(h @ layers[1].weight.T + layers[1].bias, net(x).detach())


def test_rejects_non_relu_chains() -> None:
    with pytest.raises(NtklabTypeError, match="Tanh"):
        relu_layers(nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1)))
    with pytest.raises(NtklabValueError, match="two affine layers"):
        parameter_count(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1)))
    with pytest.raises(NtklabValueError, match="last layer"):
        parameter_count(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    with pytest.raises(NtklabValueError, match="p:"):
        path_norm(tent_network(1), 0.5)
    with pytest.raises(NtklabValueError, match="depth"):
        tent_network(0)


def test_docstring_examples() -> None:
    import doctest

    import ntklab.nets.relu_networks as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
