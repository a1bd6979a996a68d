"""``linearize``: equal to the network at theta_0, linear in theta, trainable by any optimizer, and
trained by GD it follows the closed-form dynamics of its empirical NTK exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab import empirical
from ntklab.dynamics import linearize, linearized_dynamics
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def network(seed: int = 0) -> nn.Module:
    arch = nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Tanh(),
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.0, b_std=0.1),
    )
    g = torch.Generator().manual_seed(seed)
    return arch.to_torch(32, in_features=3, generator=g, dtype=F64)


def test_equals_the_network_at_initialization_and_is_affine_in_theta() -> None:
    net = network()
    lin = linearize(net)
    x = torch.randn(7, 3, dtype=F64)
    torch.testing.assert_close(lin(x), net(x), rtol=0, atol=0)
    # f_lin(theta0 + s v) = f(theta0) + s J v: the output is exactly affine in s.
    direction = {n: torch.randn_like(p) for n, p in lin.params.items()}
    outs = []
    for s in (0.0, 1.0, 2.0):
        with torch.no_grad():
            for n, p in lin.params.items():
                p.copy_(getattr(lin, "theta0__" + n) + s * direction[n])
        outs.append(lin(x))
    torch.testing.assert_close(outs[2] - outs[1], outs[1] - outs[0], rtol=1e-12, atol=1e-12)
    # ... and agrees with the network to first order (finite differences).
    eps = 1e-6
    with torch.no_grad():
        params = {n: p + eps * direction[n.replace(".", "__")] for n, p in net.named_parameters()}
    moved = torch.func.functional_call(net, params, (x,))
    torch.testing.assert_close((moved - net(x)) / eps, outs[1] - outs[0], rtol=1e-4, atol=1e-6)


def test_gd_on_the_linearized_model_is_the_closed_form_with_the_empirical_ntk() -> None:
    net = network(1)
    lin = linearize(net)
    x, xt = torch.randn(10, 3, dtype=F64), torch.randn(4, 3, dtype=F64)
    y = torch.randn(10, 1, dtype=F64)
    k = empirical.ntk(net, x)
    ktd = empirical.ntk(net, xt, x)
    f0, ft0 = net(x).detach(), net(xt).detach()
    lr, steps = 0.5, 25
    opt = torch.optim.SGD(lin.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = (lin(x) - y).square().sum() / (2 * y.numel())
        loss.backward()
        opt.step()
    dyn = linearized_dynamics(k, y, learning_rate=lr, schedule="gd")
    with torch.no_grad():
        torch.testing.assert_close(lin(x), dyn.train(steps, f0), rtol=0, atol=1e-10)
        torch.testing.assert_close(lin(xt), dyn.test(steps, ktd, f0, ft0), rtol=0, atol=1e-10)
    # The wrapped network itself was not touched.
    assert all(p.grad is None for p in net.parameters())


def test_buffers_and_frozen_parameters_are_held_fixed() -> None:
    net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1)).double()
    net[0].bias.requires_grad_(False)
    with torch.no_grad():
        net(torch.randn(20, 3, dtype=F64))  # populate the running statistics
    net.eval()
    lin = linearize(net)
    assert "0__bias" not in lin.params
    x = torch.randn(5, 3, dtype=F64)
    torch.testing.assert_close(lin(x), net(x))
    lin.float()
    assert lin(x.float()).dtype == torch.float32


def test_errors() -> None:
    with pytest.raises(NtklabTypeError, match=r"model: expected a torch\.nn\.Module"):
        linearize(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="model: expected a module with trainable"):
        linearize(nn.ReLU())
    lazy = nl.serial(nl.Dense(), nl.Relu(), nl.Dense()).to_torch(8)
    with pytest.raises(NtklabValueError, match="lazy module"):
        linearize(lazy)
