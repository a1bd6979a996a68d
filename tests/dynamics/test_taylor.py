"""``taylor_expand``: exact for models polynomial in their parameters up to the degree, error
of order eps^(k+1) for a smooth network, degree 1 is ``linearize``, degree 0 is constant, and
the expansion trains with ``ntklab.nets.train``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ntklab import nets
from ntklab.dynamics import TaylorModel, linearize, taylor_expand
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


class Cube(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x**3


def bilinear(seed: int = 0) -> nn.Module:
    """W2 (W1 x + b1) + b2: a polynomial of degree 2 in its parameters."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2)).double()


def cubic(seed: int = 0) -> nn.Module:
    """W2 (W1 x)^3: a polynomial of degree 4 in its parameters (3 in W1, 1 in W2)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4, bias=False), Cube(), nn.Linear(4, 2, bias=False)).double()


def tanh_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)
    ).double()


def move(model: nn.Module, direction: dict[str, torch.Tensor], eps: float) -> None:
    """Add ``eps * direction`` to a network's or an expansion's parameters (by network name)."""
    with torch.no_grad():
        if isinstance(model, TaylorModel):
            for name in model.names:
                model.params[name.replace(".", "__")].add_(direction[name], alpha=eps)
        else:
            for name, p in model.named_parameters():
                p.add_(direction[name], alpha=eps)


def directions(model: nn.Module, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        n: torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in model.named_parameters()
    }


def expansion_error(make: type | object, degree: int, eps: float) -> float:
    """max |f_k(theta0 + eps v) - f(theta0 + eps v)| on fixed inputs."""
    net = make()  # type: ignore[operator]
    expanded = taylor_expand(net, degree)
    v = directions(net)
    move(net, v, eps)
    move(expanded, v, eps)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(2), dtype=F64)
    with torch.no_grad():
        return float((expanded(x) - net(x)).abs().max())


@pytest.mark.parametrize(
    ("make", "poly_degree"), [(bilinear, 2), (cubic, 4)], ids=["bilinear", "cubic"]
)
def test_exact_for_polynomials_up_to_their_degree(make: object, poly_degree: int) -> None:
    for degree in range(poly_degree + 2):
        err = expansion_error(make, degree, 0.7)
        if degree >= poly_degree:
            assert err < 1e-12, (degree, err)
        else:  # one degree short is visibly wrong
            assert err > 1e-3, (degree, err)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_error_falls_as_eps_to_the_degree_plus_one(degree: int) -> None:
    eps = [10 ** (-3 + 0.5 * i) for i in range(4)]  # 1e-3 .. 3e-2
    errs = [expansion_error(tanh_mlp, degree, e) for e in eps]
    xs, ys = [math.log(e) for e in eps], [math.log(e) for e in errs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sum(
        (a - mx) ** 2 for a in xs
    )
    assert abs(slope - (degree + 1)) < 0.3, (slope, errs)


def test_degree_one_is_linearize() -> None:
    net = tanh_mlp()
    lin, tay = linearize(net), taylor_expand(net, 1)
    v = directions(net)
    x = torch.randn(6, 3, dtype=F64)
    for model in (lin, tay):
        with torch.no_grad():
            for name in model.names:
                model.params[name.replace(".", "__")].add_(v[name], alpha=0.3)
    torch.testing.assert_close(tay(x), lin(x), rtol=1e-12, atol=1e-12)
    # And its gradient: one step of training moves both identically.
    for model in (lin, tay):
        model(x).square().sum().backward()
    for name in lin.params:
        torch.testing.assert_close(tay.params[name].grad, lin.params[name].grad)
    assert float((tay(x) - net(x)).detach().abs().max()) > 1e-2  # moved from the network


def test_degree_zero_is_constant_and_terms_sum_to_forward() -> None:
    net = tanh_mlp()
    const = taylor_expand(net, 0)
    x = torch.randn(6, 3, dtype=F64)
    f0 = net(x).detach()
    move(const, directions(net), 0.5)
    torch.testing.assert_close(const(x), f0, rtol=0, atol=0)
    cubic_model = taylor_expand(net, 3)
    move(cubic_model, directions(net), 0.2)
    terms = cubic_model.terms(x)
    assert len(terms) == 4
    torch.testing.assert_close(terms[0], f0)
    torch.testing.assert_close(sum(terms), cubic_model(x))
    assert "degree=3" in repr(cubic_model)


def test_quadratic_model_trains_like_the_bilinear_network() -> None:
    # The degree-2 expansion of a bilinear network is that network: trained by
    # ntklab.nets.train with the same steps, both follow the same trajectory (this checks
    # the gradients through the nested jvps).
    net = bilinear()
    quad = taylor_expand(net, 2)
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(3), dtype=F64)
    y = torch.randn(8, 2, generator=torch.Generator().manual_seed(4), dtype=F64)
    before = net(x).detach()
    nets.train(net, x, y, learning_rate=0.1, t=30)
    nets.train(quad, x, y, learning_rate=0.1, t=30)
    with torch.no_grad():
        torch.testing.assert_close(quad(x), net(x), rtol=1e-10, atol=1e-10)
        assert float((net(x) - before).abs().max()) > 0.1


def test_bad_arguments() -> None:
    net = tanh_mlp()
    with pytest.raises(NtklabValueError, match="degree: expected an int >= 0, got -1"):
        taylor_expand(net, -1)
    for bad in (1.5, True, "2", None):
        with pytest.raises(NtklabTypeError, match="degree: expected an int >= 0"):
            taylor_expand(net, bad)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"model: expected a torch\.nn\.Module"):
        taylor_expand(lambda x: x, 2)  # type: ignore[arg-type]
    frozen = tanh_mlp().requires_grad_(False)
    with pytest.raises(NtklabValueError, match="model: expected a module with trainable"):
        taylor_expand(frozen, 2)
