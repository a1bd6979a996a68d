"""``ntklab.nets.train``: GD/SGD against closed forms on linear models, gradient-flow time,
weight decay, hinge loss, lazy scaling, divergence and the logged diagnostics.

References are independent of the trainer: matrix powers of the linear GD map, hand-written
minibatch and hinge updates, plain autograd Jacobians for the kernel drift.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import ntklab as nl
from ntklab.analysis.rates import fit_power_law
from ntklab.errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ntklab.nets import ScaledOutput, TrainingRecord, TrainOptions, data_loss, train

F64 = torch.float64
ARCH = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))


def _linear_gd(x: Tensor, y: Tensor, w0: Tensor, eta: float, c: float, wd: float, k: int) -> Tensor:
    """W^T after k GD steps on (c/2)||X W^T - Y||^2 + (wd/2)||W||^2, by a matrix power.

    The affine map W^T <- (I - eta (c X^T X + wd I)) W^T + eta c X^T Y is linear on the
    augmented state [W^T; I_k].
    """
    d, k_out = w0.shape[1], w0.shape[0]
    a = torch.eye(d, dtype=F64) - eta * (c * x.T @ x + wd * torch.eye(d, dtype=F64))
    m = torch.zeros(d + k_out, d + k_out, dtype=F64)
    m[:d, :d] = a
    m[:d, d:] = eta * c * x.T @ y
    m[d:, d:] = torch.eye(k_out, dtype=F64)
    state = torch.cat([w0.T, torch.eye(k_out, dtype=F64)])
    return (torch.linalg.matrix_power(m, k) @ state)[:d]


def _data(gen: torch.Generator, n: int = 6, d: int = 4, k: int = 2) -> tuple[Tensor, Tensor]:
    x = torch.randn(n, d, generator=gen, dtype=F64)
    y = torch.randn(n, k, generator=gen, dtype=F64)
    return x, y


@pytest.mark.parametrize("normalization", ["mean", "sum"])
def test_gd_on_linear_model_equals_matrix_power(gen: torch.Generator, normalization: str) -> None:
    x, y = _data(gen)
    net = nn.Linear(4, 2, bias=False, dtype=F64)
    w0 = net.weight.detach().clone()
    eta, steps = 0.05, 40
    run = train(net, x, y, learning_rate=eta, t=steps, normalization=normalization)  # type: ignore[arg-type]
    c = 1.0 / y.numel() if normalization == "mean" else 1.0
    expected = _linear_gd(x, y, w0, eta, c, 0.0, steps)
    torch.testing.assert_close(net.weight.detach().T, expected, rtol=0.0, atol=1e-10)
    final_loss = 0.5 * c * float((x @ expected - y).square().sum())
    assert run.steps == steps and not run.diverged
    assert math.isclose(float(run.history.train_loss[-1]), final_loss, rel_tol=1e-10)
    loss0 = 0.5 * c * float((x @ w0.T - y).square().sum())
    assert math.isclose(float(run.history.train_loss[0]), loss0, rel_tol=1e-12)


def test_weight_decay_matches_ridge_gd(gen: torch.Generator) -> None:
    x, y = _data(gen)
    net = nn.Linear(4, 2, bias=False, dtype=F64)
    with torch.no_grad():  # seeded, not torch's global generator: the test is reproducible
        net.weight.copy_(torch.randn(2, 4, generator=gen, dtype=F64))
    w0 = net.weight.detach().clone()
    eta, wd, c = 0.1, 0.3, 1.0 / y.numel()
    train(net, x, y, learning_rate=eta, t=30, weight_decay=wd)
    expected = _linear_gd(x, y, w0, eta, c, wd, 30)
    torch.testing.assert_close(net.weight.detach().T, expected, rtol=0.0, atol=1e-10)
    # run to convergence: the ridge solution (c X^T X + wd I)^{-1} c X^T Y
    train(net, x, y, learning_rate=eta, t=600, weight_decay=wd)
    ridge = torch.linalg.solve(c * x.T @ x + wd * torch.eye(4, dtype=F64), c * x.T @ y)
    torch.testing.assert_close(net.weight.detach().T, ridge, rtol=0.0, atol=1e-9)


def test_sgd_with_full_batches_equals_gd(gen: torch.Generator) -> None:
    x = torch.randn(10, 3, generator=gen, dtype=F64)
    y = torch.randn(10, 1, generator=gen, dtype=F64)
    net = ARCH.to_torch(16, 1, in_features=3, generator=gen, dtype=F64)
    other = copy.deepcopy(net)
    gd = train(net, x, y, learning_rate=0.2, t=15, log_every=5)
    sgd = train(other, x, y, learning_rate=0.2, t=15, batch_size=10, log_every=5, generator=gen)
    for p, q in zip(net.parameters(), other.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    torch.testing.assert_close(gd.history.train_loss, sgd.history.train_loss)


@pytest.mark.parametrize("normalization", ["mean", "sum"])
def test_sgd_minibatch_is_an_unbiased_rescaled_batch_step(
    gen: torch.Generator, normalization: str
) -> None:
    """One SGD step (n=4, B=2) equals the hand update of one of the 6 batches, and the hand
    updates average to the GD step: the minibatch loss is normalized to be unbiased."""
    n, b, eta = 4, 2, 0.1
    x = torch.randn(n, 3, generator=gen, dtype=F64)
    y = torch.randn(n, 1, generator=gen, dtype=F64)
    net = nn.Linear(3, 1, bias=False, dtype=F64)
    w0 = net.weight.detach().clone().T  # shape: (3, 1)
    run = train(
        net,
        x,
        y,
        learning_rate=eta,
        t=1,
        batch_size=b,
        normalization=normalization,  # type: ignore[arg-type]
        generator=gen,
    )
    assert run.steps == 1

    def step(rows: list[int]) -> Tensor:
        xs, ys = x[rows], y[rows]
        scale = 1.0 / len(rows) if normalization == "mean" else n / len(rows)
        return w0 - eta * scale * xs.T @ (xs @ w0 - ys)

    candidates = [step(list(s)) for s in itertools.combinations(range(n), b)]
    distances = [float((net.weight.detach().T - c).abs().max()) for c in candidates]
    assert min(distances) < 1e-13, distances
    full = step(list(range(n)))
    torch.testing.assert_close(torch.stack(candidates).mean(0), full)


def test_sgd_epochs_cover_each_example_once(gen: torch.Generator) -> None:
    """n=5, B=2: an epoch is batches of 2, 2 and 1 rows that cover every example once."""
    n, eta = 5, 1e-3
    x = torch.randn(n, 3, generator=gen, dtype=F64)
    y = torch.randn(n, 1, generator=gen, dtype=F64)
    seen: list[Tensor] = []
    net = nn.Linear(3, 1, bias=False, dtype=F64)
    hook = net.register_forward_hook(lambda m, args, out: seen.append(args[0].detach().clone()))
    train(net, x, y, learning_rate=eta, t=3, batch_size=2, generator=gen)
    hook.remove()
    batches = [b for b in seen if b.shape[0] < n]  # the others are full-batch evaluations
    assert [b.shape[0] for b in batches] == [2, 2, 1]
    rows = torch.cat(batches)
    torch.testing.assert_close(rows[rows[:, 0].argsort()], x[x[:, 0].argsort()])


def test_gradient_flow_time_makes_learning_rates_comparable(gen: torch.Generator) -> None:
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    y = torch.randn(8, 1, generator=gen, dtype=F64)
    net0 = ARCH.to_torch(16, 1, in_features=3, generator=gen, dtype=F64)
    outs = {}
    for lr in (0.2, 0.1, 0.05):
        net = copy.deepcopy(net0)
        run = train(net, x, y, learning_rate=lr, t=round(2.0 / lr))
        assert run.steps == round(2.0 / lr)
        assert math.isclose(run.flow_time, 2.0, rel_tol=1e-12)
        assert math.isclose(float(run.history.flow_time[-1]), 2.0, rel_tol=1e-12)
        with torch.no_grad():
            outs[lr] = net(x)
    with torch.no_grad():
        moved = float(torch.linalg.norm(outs[0.05] - net0(x)))
    d1 = float(torch.linalg.norm(outs[0.2] - outs[0.1]))
    d2 = float(torch.linalg.norm(outs[0.1] - outs[0.05]))
    assert 1.6 < d1 / d2 < 2.5, (d1, d2)  # first-order (Euler) convergence in the step size
    assert d2 < 0.05 * moved, (d2, moved)


@pytest.mark.parametrize("normalization", ["mean", "sum"])
def test_hinge_loss_step_matches_hand_gradient(gen: torch.Generator, normalization: str) -> None:
    n, eta = 12, 0.3
    x = torch.randn(n, 3, generator=gen, dtype=F64)
    y = torch.where(torch.randn(n, 1, generator=gen, dtype=F64) > 0, 1.0, -1.0).to(F64)
    net = nn.Linear(3, 1, bias=False, dtype=F64)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.9, -0.4, 0.7]], dtype=F64))
    w0 = net.weight.detach().clone().T
    margins = y * (x @ w0)
    active = (margins < 1).to(F64)
    assert 0 < int(active.sum()) < n and float((margins - 1).abs().min()) > 1e-3
    run = train(net, x, y, learning_rate=eta, t=1, loss="hinge", normalization=normalization)  # type: ignore[arg-type]
    c = 1.0 / n if normalization == "mean" else 1.0
    expected = w0 + eta * c * x.T @ (active * y)
    torch.testing.assert_close(net.weight.detach().T, expected, rtol=0.0, atol=1e-14)
    loss0 = c * float(torch.relu(1 - margins).sum())
    assert math.isclose(float(run.history.train_loss[0]), loss0, rel_tol=1e-12)


def test_data_loss_closed_forms() -> None:
    f = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=F64)
    y = torch.tensor([[0.0, -1.0], [1.0, 1.0]], dtype=F64)
    assert float(data_loss(f, y)) == pytest.approx((1 + 1 + 0.25 + 4) / 8)
    assert float(data_loss(f, y, normalization="sum")) == pytest.approx((1 + 1 + 0.25 + 4) / 2)
    labels = torch.tensor([[1.0, 1.0], [-1.0, 1.0]], dtype=F64)
    # hinge: y f = 1, -2, -0.5, 3, so max(0, 1 - y f) = 0, 3, 1.5, 0
    assert float(data_loss(f, labels, loss="hinge")) == pytest.approx(4.5 / 4)
    assert float(data_loss(f, labels, loss="hinge", normalization="sum")) == pytest.approx(4.5)
    with pytest.raises(NtklabValueError, match="target"):
        data_loss(f, y[:, :1])
    with pytest.raises(NtklabValueError, match="target: expected labels"):
        data_loss(f, y, loss="hinge")


def _ntk_autograd(net: nn.Module, x: Tensor) -> Tensor:
    """J J^T of the scalar output, by plain autograd."""
    params = [p for p in net.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(net(x[i : i + 1]).sum(), params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    jac = torch.stack(rows)
    return jac @ jac.T


def test_logged_kernel_drift_and_weight_movement_match_direct(gen: torch.Generator) -> None:
    x = torch.randn(10, 3, generator=gen, dtype=F64)
    y = torch.randn(10, 1, generator=gen, dtype=F64)
    x_test = torch.randn(5, 3, generator=gen, dtype=F64)
    y_test = torch.randn(5, 1, generator=gen, dtype=F64)
    xk = torch.randn(4, 3, generator=gen, dtype=F64)
    net = ARCH.to_torch(16, 1, in_features=3, generator=gen, dtype=F64)
    net0 = copy.deepcopy(net)
    seen: list[TrainingRecord] = []
    run = train(
        net,
        x,
        y,
        learning_rate=0.3,
        t=12,
        log_every=5,
        kernel_inputs=xk,
        x_test=x_test,
        y_test=y_test,
        callback=lambda s, r: seen.append(r),
    )
    h = run.history
    assert h.step.tolist() == [0, 5, 10, 12] and len(h) == 4
    torch.testing.assert_close(h.flow_time, 0.3 * h.step.to(F64))
    assert h.kernel_drift is not None and h.test_loss is not None
    assert float(h.kernel_drift[0]) == 0.0 and float(h.weight_movement[0]) == 0.0
    theta0, theta = _ntk_autograd(net0, xk), _ntk_autograd(net, xk)
    drift = float(torch.linalg.norm(theta - theta0) / torch.linalg.norm(theta0))
    assert drift > 1e-3
    assert math.isclose(float(h.kernel_drift[-1]), drift, rel_tol=1e-9)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    flat0 = torch.cat([p.detach().reshape(-1) for p in net0.parameters()])
    movement = float(torch.linalg.norm(flat - flat0) / torch.linalg.norm(flat0))
    assert math.isclose(float(h.weight_movement[-1]), movement, rel_tol=1e-12)
    for (name, p), p0 in zip(net.named_parameters(), net0.parameters(), strict=True):
        p0 = p0.detach()
        rel = float(torch.linalg.norm(p.detach() - p0) / torch.linalg.norm(p0))
        assert math.isclose(float(h.parameter_movement[name][-1]), rel, rel_tol=1e-12)
    with torch.no_grad():
        test_loss = 0.5 * float((net(x_test) - y_test).square().mean())
    assert math.isclose(float(h.test_loss[-1]), test_loss, rel_tol=1e-12)
    assert [r.step for r in seen] == h.step.tolist()
    assert [r.train_loss for r in seen] == h.train_loss.tolist()


class _Centered(nn.Module):
    """f(x; theta) - f(x; theta_0) with a frozen copy: Chizat et al.'s centered model."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.reference = copy.deepcopy(net).requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x) - self.reference(x)
        return out


def test_lazy_scale_makes_training_lazier(gen: torch.Generator) -> None:
    """Chizat et al. (arXiv:1812.07956): trained on loss / alpha^2 from a zero output, the
    weights move by O(1/alpha) and the function-space dynamics do not depend on alpha at
    leading order. The kernel drift is O(1/alpha) for a centered model, and O(1/alpha^2) for
    the antisymmetric pair, whose two halves move in opposite directions (first-order kernel
    changes cancel). A smooth activation: ReLU's kernel jumps when a unit flips."""
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Erf(), nl.Dense(w_std=1.5, b_std=0.1))
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    y = torch.randn(8, 1, generator=gen, dtype=F64)
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    alphas = [2.0, 8.0, 32.0]
    measured: dict[str, list[list[float]]] = {"pair": [[], [], []], "centered": [[], [], []]}
    for alpha in alphas:
        pair = arch.to_torch(
            32,
            1,
            in_features=3,
            alpha=alpha,
            zero_output=True,
            generator=torch.Generator().manual_seed(seed),
            dtype=F64,
        )
        assert isinstance(pair, ScaledOutput)
        half = arch.to_torch(
            16, 1, in_features=3, generator=torch.Generator().manual_seed(seed), dtype=F64
        )
        centered = ScaledOutput(_Centered(half), alpha)
        for name, net in (("pair", pair), ("centered", centered)):
            run = train(net, x, y, learning_rate=0.5, t=20, kernel_inputs=x)
            assert run.alpha == alpha and run.history.kernel_drift is not None
            measured[name][0].append(float(run.history.kernel_drift[-1]))
            measured[name][1].append(float(run.history.weight_movement[-1]))
            measured[name][2].append(float(run.history.train_loss[-1]))
    for name, drift_slope in (("pair", -2.0), ("centered", -1.0)):
        drifts, moves, losses = measured[name]
        fit = fit_power_law(alphas, drifts)
        assert abs(fit.slope - drift_slope) < 0.15, (name, fit.slope, drifts)
        assert abs(fit_power_law(alphas, moves).slope + 1.0) < 0.1, (name, moves)
        assert max(losses) < 1.05 * min(losses), (name, losses)
        assert losses[-1] < 0.6 * float(data_loss(torch.zeros_like(y), y)), (name, losses)


def test_divergence_is_reported_not_nan(gen: torch.Generator) -> None:
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    y = torch.randn(8, 1, generator=gen, dtype=F64)
    net = ARCH.to_torch(16, 1, in_features=3, generator=gen, dtype=F64)
    with pytest.warns(NumericalWarning, match=r"step \d+ \(learning_rate=50"):
        run = train(net, x, y, learning_rate=50.0, t=200, log_every=1)
    assert run.diverged and 0 < run.steps < 200
    assert bool(torch.isfinite(run.history.train_loss).all())
    assert int(run.history.step[-1]) <= run.steps


def test_optimizer_factory_and_lazy_model(gen: torch.Generator) -> None:
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    y = torch.randn(8, 1, generator=gen, dtype=F64)
    net = ARCH.to_torch(16, 1, generator=gen, dtype=F64)  # lazy input layer
    run = train(
        net, x, y, learning_rate=0.01, t=1, optimizer=lambda p: torch.optim.Adam(p, lr=0.01)
    )
    assert run.steps == 1
    reference = copy.deepcopy(net)
    run = train(
        net, x, y, learning_rate=0.01, t=5, optimizer=lambda p: torch.optim.Adam(p, lr=0.01)
    )
    opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        (0.5 * (reference(x) - y).square().mean()).backward()  # type: ignore[no-untyped-call]
        opt.step()
    for p, q in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)


Bad = Callable[[dict[str, Any]], None]


def _set(**changes: Any) -> Bad:
    return lambda kw: kw.update(changes)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (_set(t=None), NtklabTypeError, "t: expected a whole number of steps"),
        (_set(t=2.5), NtklabTypeError, "t: expected a whole number of steps"),
        (_set(t=0), NtklabValueError, "t: expected a whole number of steps >= 1"),
        (_set(learning_rate=-0.1), NtklabValueError, "learning_rate"),
        (_set(learning_rate=float("nan")), NtklabValueError, "learning_rate"),
        (_set(loss="l1"), NtklabValueError, "loss"),
        (_set(normalization="avg"), NtklabValueError, "normalization"),
        (_set(batch_size=9), NtklabValueError, "batch_size: expected at most"),
        (_set(batch_size=0), NtklabValueError, "batch_size"),
        (_set(weight_decay=-1.0), NtklabValueError, "weight_decay"),
        (_set(log_every=0), NtklabValueError, "log_every"),
        (_set(loss="hinge"), NtklabValueError, "y: expected labels"),
        (
            _set(y=torch.zeros(8, dtype=F64)),
            NtklabValueError,
            r"y: expected the shape of model\(x\)",
        ),
        (_set(y=torch.zeros(7, 1, dtype=F64)), NtklabValueError, "y: expected 8 rows"),
        (_set(x=torch.zeros(8, 3)), NtklabTypeError, "x: expected the dtype"),
        (_set(x=torch.full((8, 3), math.nan, dtype=F64)), NtklabValueError, "x: expected finite"),
        (_set(x_test=torch.zeros(2, 3, dtype=F64)), NtklabValueError, "x_test, y_test"),
        (
            _set(x_test=torch.zeros(2, 4, dtype=F64), y_test=torch.zeros(2, 1, dtype=F64)),
            NtklabValueError,
            "x_test: expected inputs of the shape",
        ),
        (
            _set(x_test=torch.zeros(2, 3, dtype=F64), y_test=torch.zeros(3, 1, dtype=F64)),
            NtklabValueError,
            r"y_test: expected the shape of model\(x_test\)",
        ),
        (_set(optimizer=3), NtklabTypeError, "optimizer"),
        (_set(optimizer=lambda p: 3), NtklabTypeError, "optimizer: expected the factory"),
        (_set(generator=3), NtklabTypeError, "generator"),
        (_set(model="net"), NtklabTypeError, "model"),
    ],
)
def test_bad_inputs_name_the_argument(change: Bad, error: type[Exception], match: str) -> None:
    gen = torch.Generator().manual_seed(0)
    kwargs: dict[str, Any] = {
        "model": nn.Linear(3, 1, dtype=F64),
        "x": torch.randn(8, 3, generator=gen, dtype=F64),
        "y": torch.randn(8, 1, generator=gen, dtype=F64),
        "learning_rate": 0.1,
        "t": 3,
    }
    change(kwargs)
    model, x, y = kwargs.pop("model"), kwargs.pop("x"), kwargs.pop("y")
    with pytest.raises(error, match=match):
        train(model, x, y, **kwargs)


def test_options_as_a_dataclass_or_as_keywords_train_the_same(gen: torch.Generator) -> None:
    x = torch.randn(10, 3, generator=gen, dtype=F64)
    y = torch.randn(10, 1, generator=gen, dtype=F64)
    net = nn.Linear(3, 1, dtype=F64)
    nets = [copy.deepcopy(net) for _ in range(3)]
    sgd = TrainOptions(batch_size=4, weight_decay=0.01, normalization="sum", log_every=2)
    runs = [
        train(nets[0], x, y, learning_rate=0.05, t=7, options=sgd, generator=_gen(3)),
        train(
            nets[1],
            x,
            y,
            learning_rate=0.05,
            t=7,
            batch_size=4,
            weight_decay=0.01,
            normalization="sum",
            log_every=2,
            generator=_gen(3),
        ),
        # keywords override the dataclass's fields
        train(
            nets[2],
            x,
            y,
            learning_rate=0.05,
            t=7,
            options=replace(sgd, batch_size=10),
            batch_size=4,
            generator=_gen(3),
        ),
    ]
    for other, run in zip(nets[1:], runs[1:], strict=True):
        for p, q in zip(nets[0].parameters(), other.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        torch.testing.assert_close(run.history.train_loss, runs[0].history.train_loss)
    assert runs[0].history.step.tolist() == [0, 2, 4, 6, 7]
    with pytest.raises(NtklabTypeError, match=r"steps: .*unknown keyword \(the time is t"):
        train(net, x, y, learning_rate=0.1, t=1, steps=3)  # type: ignore[call-arg]
    with pytest.raises(NtklabTypeError, match="options: expected a TrainOptions"):
        train(net, x, y, learning_rate=0.1, t=1, options={"loss": "mse"})  # type: ignore[arg-type]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
