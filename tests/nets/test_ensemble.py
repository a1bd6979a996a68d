"""Vectorized ensembles: batched weights vs single networks vs the generic vmap path."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ntklab.nets.ensemble import (
    MLPEnsemble,
    ModuleEnsemble,
    ensemble,
    stack_modules,
    train_ensemble,
)

F64 = torch.float64
TIGHT = {"rtol": 1e-10, "atol": 1e-10}


def _deep(act: nl.kernels.Activation) -> nl.kernels.Architecture:
    return nl.serial(
        nl.Dense(w_std=1.3, b_std=0.2),
        act,
        nl.Dense(w_std=1.1, b_std=0.3),
        act,
        nl.Dense(w_std=0.9, b_std=0.1),
    )


def _e1(act: nl.kernels.Activation) -> nl.kernels.Architecture:
    return nl.serial(nl.Dense(w_std=1.0, b_std=None), act, nl.Dense(w_std=1.0, b_std=None))


def _data(gen: torch.Generator, n: int = 5, d: int = 3, k: int = 2) -> tuple[torch.Tensor, ...]:
    x = torch.randn(n, d, generator=gen, dtype=F64)
    y = torch.randn(n, k, generator=gen, dtype=F64)
    x_test = torch.randn(4, d, generator=gen, dtype=F64)
    return x, y, x_test


@pytest.mark.parametrize(
    ("parameterization", "zero_output", "alpha"),
    [(None, False, 1.0), ("standard", False, 1.0), ("mup", True, 1.0), ("ntk", True, 3.0)],
)
def test_members_are_to_torch_networks(
    gen: torch.Generator, parameterization: str | None, zero_output: bool, alpha: float
) -> None:
    arch = _deep(nl.Tanh())
    ens = ensemble(
        arch,
        4,
        6,
        2,
        in_features=3,
        parameterization=parameterization,  # type: ignore[arg-type]
        alpha=alpha,
        zero_output=zero_output,
        generator=gen,
        dtype=F64,
    )
    x, _, _ = _data(gen)
    xs = torch.randn(4, 5, 3, generator=gen, dtype=F64)
    shared, own = ens(x), ens(xs)
    for i in range(4):
        net = ens.member(i)
        reference = arch.to_torch(
            6,
            2,
            in_features=3,
            parameterization=parameterization,  # type: ignore[arg-type]
            alpha=alpha,
            zero_output=zero_output,
            dtype=F64,
        )
        assert type(net) is type(reference)
        assert [p.shape for p in net.parameters()] == [p.shape for p in reference.parameters()]
        assert_close(net(x), shared[i], **TIGHT)
        assert_close(net(xs[i]), own[i], **TIGHT)
    if zero_output:
        assert bool((shared == 0).all())


@pytest.mark.parametrize("normalization", ["mean", "sum"])
@pytest.mark.parametrize("zero_output", [False, True])
def test_training_matches_single_networks_and_vmap(
    gen: torch.Generator, normalization: str, zero_output: bool
) -> None:
    arch = _deep(nl.Erf())
    alpha = 2.0 if zero_output else 1.0  # lazy-training scale: loss L(alpha f) / alpha^2
    ens = ensemble(
        arch,
        3,
        8,
        2,
        in_features=3,
        zero_output=zero_output,
        alpha=alpha,
        generator=gen,
        dtype=F64,
    )
    x, y, x_test = _data(gen)
    kwargs = {"learning_rate": 0.2, "t": 6, "normalization": normalization}
    run = train_ensemble(ens, x, y, x_test=x_test, weight_decay=0.05, record_t=[0, 2, 6], **kwargs)
    generic = train_ensemble(
        stack_modules(ens.modules()),
        x,
        y,
        x_test=x_test,
        weight_decay=0.05,
        record_t=[0, 2, 6],
        **kwargs,
    )
    assert run.test_outputs is not None and generic.test_outputs is not None
    assert run.test_outputs.shape == (3, 3, 4, 2)
    assert_close(run.test_outputs, generic.test_outputs, **TIGHT)
    assert_close(run.train_losses, generic.train_losses, **TIGHT)
    assert run.test_outputs[1].sub(run.test_outputs[0]).abs().max() > 1e-3  # it did move
    for i in range(3):
        net = ens.member(i)
        single = nl.nets.train(net, x, y, weight_decay=0.05, **kwargs)  # plain torch SGD
        with torch.no_grad():
            assert_close(net(x_test), run.test_outputs[-1, i], **TIGHT)
        assert_close(
            torch.as_tensor(single.history.train_loss[-1], dtype=F64),
            run.train_losses[-1, i],
            **TIGHT,
        )
        trained = run.ensemble.member(i)
        for p, q in zip(trained.parameters(), net.parameters(), strict=True):
            assert_close(p, q, **TIGHT)


@pytest.mark.parametrize(
    "act", [nl.Relu(), nl.Erf(), nl.Tanh(), nl.Sigmoid(), nl.Gelu(), nl.Identity()]
)
def test_closed_form_backward_equals_autograd(gen: torch.Generator, act: object) -> None:
    arch = _deep(act)  # type: ignore[arg-type]
    ens = ensemble(arch, 5, 7, 2, in_features=3, generator=gen, dtype=F64)
    x, y, x_test = _data(gen)
    xs = torch.randn(5, 5, 3, generator=gen, dtype=F64)
    for inputs in (x, xs):
        runs = [
            train_ensemble(
                ens,
                inputs,
                y,
                learning_rate=0.1,
                t=4,
                x_test=x_test,
                backward=backward,
                weight_decay=0.01,
                record_t=[0, 1, 4],
                chunk_size=2,
            )
            for backward in ("manual", "autograd")
        ]
        assert_close(runs[0].test_outputs, runs[1].test_outputs, **TIGHT)
        assert_close(runs[0].train_losses, runs[1].train_losses, **TIGHT)
        assert isinstance(runs[0].ensemble, MLPEnsemble)
        assert isinstance(runs[1].ensemble, MLPEnsemble)
        for a, b in zip(runs[0].ensemble.dense, runs[1].ensemble.dense, strict=True):
            assert_close(a.weight, b.weight, **TIGHT)


@pytest.mark.parametrize("act", [nl.Relu(), nl.Erf(), nl.Tanh(), nl.Sigmoid()])
@pytest.mark.parametrize("zero_output", [False, True])
def test_one_hidden_layer_fast_path_equals_autograd(
    gen: torch.Generator, act: object, zero_output: bool
) -> None:
    """One hidden layer and one output take the rank-one shortcut; biases and pairs too."""
    arch = nl.serial(nl.Dense(w_std=1.3, b_std=0.4), act, nl.Dense(w_std=0.8, b_std=0.2))  # type: ignore[arg-type]
    ens = ensemble(
        arch, 5, 8, in_features=3, zero_output=zero_output, alpha=2.0, generator=gen, dtype=F64
    )
    x, y, x_test = _data(gen, k=1)
    xs = torch.randn(5, 5, 3, generator=gen, dtype=F64)
    for inputs in (x, xs):
        runs = [
            train_ensemble(
                ens,
                inputs,
                y,
                learning_rate=0.1,
                t=5,
                x_test=x_test,
                backward=backward,
                weight_decay=0.02,
                record_t=[0, 5],
                chunk_size=3,
            )
            for backward in ("manual", "autograd")
        ]
        assert runs[0].test_outputs is not None and runs[1].test_outputs is not None
        assert_close(runs[0].test_outputs, runs[1].test_outputs, **TIGHT)
        assert_close(runs[0].train_losses, runs[1].train_losses, **TIGHT)
        assert runs[0].test_outputs[1].sub(runs[0].test_outputs[0]).abs().max() > 1e-3
        trained = [r.ensemble for r in runs]
        assert isinstance(trained[0], MLPEnsemble) and isinstance(trained[1], MLPEnsemble)
        for a, b in zip(trained[0].dense, trained[1].dense, strict=True):
            assert_close(a.weight, b.weight, **TIGHT)
            assert a.bias is not None and b.bias is not None
            assert_close(a.bias, b.bias, **TIGHT)


def test_one_step_gradient_by_hand(gen: torch.Generator) -> None:
    """One GD step of f = v . tanh(W x / sqrt d) / sqrt n against the formula."""
    n_hidden, d = 5, 3
    ens = ensemble(_e1(nl.Tanh()), 2, n_hidden, in_features=d, generator=gen, dtype=F64)
    x, y, _ = _data(gen, n=4, d=d, k=1)
    run = train_ensemble(ens, x, y, learning_rate=0.3, t=1, normalization="sum")
    assert isinstance(run.ensemble, MLPEnsemble)
    w, v = ens.dense[0].weight, ens.dense[1].weight  # (M, d, n), (M, n, 1)
    pre = x @ w / math.sqrt(d)
    h = torch.tanh(pre)
    r = h @ v / math.sqrt(n_hidden) - y  # (M, 4, 1)
    grad_v = h.mT @ r / math.sqrt(n_hidden)
    grad_w = x.T @ ((r @ v.mT / math.sqrt(n_hidden)) * (1 - h * h)) / math.sqrt(d)
    assert_close(run.ensemble.dense[1].weight, v - 0.3 * grad_v, **TIGHT)
    assert_close(run.ensemble.dense[0].weight, w - 0.3 * grad_w, **TIGHT)
    assert_close(run.train_losses[0], 0.5 * r.square().sum(dim=(1, 2)), **TIGHT)


def test_chunking_and_per_member_targets(gen: torch.Generator) -> None:
    ens = ensemble(_deep(nl.Relu()), 7, 6, 1, in_features=3, generator=gen, dtype=F64)
    xs = torch.randn(7, 4, 3, generator=gen, dtype=F64)
    ys = torch.randn(7, 4, 1, generator=gen, dtype=F64)
    x_test = torch.randn(7, 2, 3, generator=gen, dtype=F64)
    runs = [
        train_ensemble(
            ens,
            xs,
            ys,
            learning_rate=0.05,
            t=10,
            x_test=x_test,
            chunk_size=c,
            record_t=[0, 4, 10],
        )
        for c in (1, 3, None)
    ]
    assert runs[0].steps.tolist() == [0, 4, 10]
    assert_close(runs[0].flow_times, torch.tensor([0.0, 0.2, 0.5], dtype=F64))
    for other in runs[1:]:
        assert_close(other.test_outputs, runs[0].test_outputs, **TIGHT)
        assert_close(other.train_losses, runs[0].train_losses, **TIGHT)
    # member 5 alone, trained on its own data
    net = ens.member(5)
    nl.nets.train(net, xs[5], ys[5], learning_rate=0.05, t=10)
    with torch.no_grad():
        assert_close(net(x_test[5]), runs[0].test_outputs[-1, 5], **TIGHT)  # type: ignore[index]


@pytest.mark.parametrize(
    ("act", "parameterization"), [(nl.Erf(), None), (nl.Relu(), "standard"), (nl.Tanh(), None)]
)
def test_output_covariance_at_init_is_the_nngp(
    gen: torch.Generator, act: object, parameterization: str | None
) -> None:
    """One hidden layer, unit-variance readout: E[f(x) f(x')] is the NNGP at any width, so the
    empirical covariance over M members is within Monte Carlo error of ``arch.kernel``."""
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.5), act, nl.Dense(w_std=1.2, b_std=0.3))  # type: ignore[arg-type]
    members = 20_000
    ens = ensemble(
        arch,
        members,
        64,
        in_features=2,
        parameterization=parameterization,  # type: ignore[arg-type]
        generator=gen,
        dtype=F64,
    )
    x = torch.randn(3, 2, generator=gen, dtype=F64)
    f = ens(x)[:, :, 0]  # (M, 3)
    empirical = f.T @ f / members
    k = arch.kernel(x).nngp
    sd = torch.sqrt((k.diagonal()[:, None] * k.diagonal()[None, :] + k * k) / members)
    assert bool(((empirical - k).abs() <= 5 * sd).all()), (empirical, k)
    assert bool((f.mean(0).abs() <= 5 * k.diagonal().sqrt() / math.sqrt(members)).all())
    # and it is a real test: a wrong scale (width 64 readout std) is far outside the error bars
    assert bool(((1.1 * empirical - k).abs() > 5 * sd).any())


def test_zero_output_is_exactly_zero_and_halves_are_copies(gen: torch.Generator) -> None:
    ens = ensemble(_e1(nl.Erf()), 6, 8, in_features=2, zero_output=True, generator=gen, dtype=F64)
    x = torch.randn(5, 2, generator=gen, dtype=F64)
    assert bool((ens(x) == 0).all())
    w = ens.dense[0].weight
    assert w.shape == (12, 2, 4)  # 2M half-networks of width 8 // 2, interleaved
    assert_close(w[0::2], w[1::2], rtol=0, atol=0)
    assert w[0].sub(w[2]).abs().max() > 0


def test_divergence_warns(gen: torch.Generator) -> None:
    ens = ensemble(_e1(nl.Relu()), 2, 8, in_features=2, generator=gen, dtype=F64)
    x = 10 * torch.randn(5, 2, generator=gen, dtype=F64)
    y = torch.randn(5, 1, generator=gen, dtype=F64)
    with pytest.warns(NumericalWarning, match="non-finite"):
        train_ensemble(ens, x, y, learning_rate=1e3, t=200, normalization="sum")


def test_stack_modules_trains_any_module(gen: torch.Generator) -> None:
    nets = []
    for _ in range(2):
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        nets.append(net.double())
    x, y, _ = _data(gen, k=1)
    ens = stack_modules(nets)
    run = train_ensemble(ens, x, y, learning_rate=0.1, t=3, chunk_size=1)
    assert isinstance(run.ensemble, ModuleEnsemble)
    for i, net in enumerate(nets):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (0.5 * (net(x) - y).square().mean()).backward()
            opt.step()
        with torch.no_grad():
            assert_close(run.ensemble.member(i)(x), net(x), **TIGHT)
            assert_close(run.ensemble(x)[i], net(x), **TIGHT)


def test_validation(gen: torch.Generator) -> None:
    arch = _e1(nl.Relu())
    with pytest.raises(NtklabValueError, match="n_samples"):
        ensemble(arch, 0, 4, in_features=2)
    with pytest.raises(NtklabTypeError, match="dtype"):
        ensemble(arch, 2, 4, in_features=2, dtype=torch.float16)
    with pytest.raises(NtklabValueError, match="Dense or activation"):
        ensemble(nl.serial(nl.Dense(), nl.kernels.LayerNorm(), nl.Dense()), 2, 4, in_features=2)
    with pytest.raises(NtklabValueError, match="width"):
        ensemble(arch, 2, 5, in_features=2, zero_output=True)
    ens = ensemble(arch, 3, 4, in_features=2, generator=gen, dtype=F64)
    x, y, _ = _data(gen, n=5, d=2, k=1)
    with pytest.raises(NtklabValueError, match="features"):
        ens(torch.zeros(5, 3, dtype=F64))
    with pytest.raises(NtklabValueError, match="n_samples=3"):
        ens(torch.zeros(2, 5, 2, dtype=F64))
    with pytest.raises(NtklabTypeError, match="dtype"):
        ens(x.float())
    with pytest.raises(NtklabValueError, match=r"y: expected shape \(n=5"):
        train_ensemble(ens, x, y[:4], learning_rate=0.1, t=1)
    with pytest.raises(NtklabTypeError, match="t: expected a whole number of steps"):
        train_ensemble(ens, x, y, learning_rate=0.1, t=0.5)
    with pytest.raises(NtklabValueError, match="record_t"):
        train_ensemble(ens, x, y, learning_rate=0.1, t=2, record_t=[3])
    with pytest.raises(NtklabValueError, match="learning_rate"):
        train_ensemble(ens, x, y, learning_rate=-1.0, t=2)
    with pytest.raises(NtklabValueError, match="backward"):
        train_ensemble(ens, x, y, learning_rate=0.1, t=2, backward="nope")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="finite"):
        train_ensemble(ens, x, y * math.nan, learning_rate=0.1, t=2)
    with pytest.raises(NtklabValueError, match="i: expected"):
        ens.member(3)
    with pytest.raises(NtklabValueError, match=r"modules\[1\]"):
        stack_modules([torch.nn.Linear(2, 1), torch.nn.Linear(3, 1)])
    with pytest.raises(NtklabValueError, match="modules"):
        stack_modules([])
