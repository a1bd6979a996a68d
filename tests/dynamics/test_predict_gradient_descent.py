"""``ntklab.predict.gradient_descent``: the function-space ODE of any loss.

Checked against the closed form of the squared loss (``gradient_descent_mse``), against
explicit small-step Euler with the cross-entropy gradient written out by hand, against a
finite network trained by gradient descent whose tangent kernel is exactly block-diagonal,
and against neural-tangents 0.6.5 (tests/data/nt_reference_gradient_descent.json, made by
tests/data/make_nt_gradient_descent_reference.py; same ``t`` and ``learning_rate``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ntklab import predict
from ntklab.dynamics import linearize
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64
REF = json.loads(
    (Path(__file__).parents[1] / "data" / "nt_reference_gradient_descent.json").read_text()
)


def mse(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((f - y) ** 2).mean()


def cross_entropy(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -(y * f.log_softmax(-1)).mean()


def cross_entropy_grad(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """:math:`\\nabla_f` of :func:`cross_entropy` for one-hot rows, by hand."""
    return (f.softmax(-1) * y.sum(-1, keepdim=True) - y) / y.numel()


LOSSES = {"mse": mse, "cross_entropy": cross_entropy}


def problem(n: int = 8, m: int = 4, k: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n + m, 12, generator=g, dtype=F64)
    kern = a @ a.T / 12
    return {
        "k": kern[:n, :n],
        "ktd": kern[n:, :n],
        "y": torch.eye(k, dtype=F64)[torch.randint(0, k, (n,), generator=g)],
        "f0": 0.5 * torch.randn(n, k, generator=g, dtype=F64),
        "ft0": 0.5 * torch.randn(m, k, generator=g, dtype=F64),
    }


def t_(v: object) -> torch.Tensor:
    return torch.tensor(v, dtype=F64)


@pytest.mark.parametrize(
    "case", REF["results"], ids=lambda c: f"{c['loss']}-momentum{c['momentum']}"
)
def test_neural_tangents_reference(case: dict) -> None:
    fn = predict.gradient_descent(
        LOSSES[case["loss"]],
        t_(REF["k_train_train"]),
        t_(REF["y_train"]),
        REF["learning_rate"],
        case["momentum"],
    )
    train, test = fn(
        t_(REF["times"]), t_(REF["fx_train_0"]), t_(REF["fx_test_0"]), t_(REF["k_test_train"])
    )
    torch.testing.assert_close(train, t_(case["fx_train_t"]), rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(test, t_(case["fx_test_t"]), rtol=1e-7, atol=1e-9)
    # The outputs move by O(1) over the stored times: a frozen solver would fail.
    assert float((train[-1] - train[0]).abs().max()) > 0.3


@pytest.mark.parametrize("learning_rate", [1.0, 4.0])
def test_mse_equals_closed_form(learning_rate: float) -> None:
    p = problem()
    times = t_([[30.0, 0.0], [2.5, 30.0]])  # unsorted, repeated, 2-D
    closed = predict.gradient_descent_mse(p["k"], p["y"], learning_rate=learning_rate)
    ode = predict.gradient_descent(mse, p["k"], p["y"], learning_rate=learning_rate)
    want = closed(times, p["f0"], p["ft0"], p["ktd"])
    got = ode(times, p["f0"], p["ft0"], p["ktd"])
    assert got[0].shape == (2, 2, 8, 3) and got[1].shape == (2, 2, 4, 3)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-8)
    assert float((want[0][0, 0] - p["f0"]).abs().max()) > 0.1  # the flow moved


def test_mse_vector_targets_and_test_only() -> None:
    p = problem(k=1)
    y = p["y"][:, 0] - 0.3
    closed = predict.gradient_descent_mse(p["k"], y, learning_rate=0.5)
    ode = predict.gradient_descent(mse, p["k"], y, learning_rate=0.5)
    train = ode(7.0)
    assert train.shape == (8,)
    torch.testing.assert_close(train, closed(7.0), rtol=0, atol=1e-8)
    test = ode(7.0, None, p["ft0"][:, 0], p["ktd"])
    torch.testing.assert_close(test, closed(7.0, None, p["ft0"][:, 0], p["ktd"]), rtol=0, atol=1e-8)


def euler(p: dict[str, torch.Tensor], lr: float, t: float, steps: int) -> torch.Tensor:
    """Train and test outputs after ``steps`` explicit Euler steps of the flow time lr * t."""
    h = lr * t / steps
    f, ft = p["f0"].clone(), p["ft0"].clone()
    for _ in range(steps):
        g = cross_entropy_grad(f, p["y"])
        f, ft = f - h * p["k"] @ g, ft - h * p["ktd"] @ g
    return torch.cat([f, ft])


def test_cross_entropy_matches_small_step_euler() -> None:
    p = problem()
    lr, t = 2.0, 40.0
    fn = predict.gradient_descent(cross_entropy, p["k"], p["y"], learning_rate=lr)
    train, test = fn(t, p["f0"], p["ft0"], p["ktd"])
    exact = torch.cat([train, test])
    err = [float((euler(p, lr, t, s) - exact).abs().max()) for s in (1000, 2000)]
    # Euler is first order: halving its step halves its error, which goes to the ODE's value.
    assert 0.45 < err[1] / err[0] < 0.55, err
    assert err[1] < 2e-3
    assert float((exact[:8] - p["f0"]).abs().max()) > 0.5


def trained_network_gap(lr: float, steps: int) -> tuple[float, float]:
    """(max |network - flow|, max |flow - initial|) after ``steps`` GD steps at ``lr``."""
    # A network with a frozen hidden layer is linear in its trainable readout (W, b): its
    # tangent kernel is exactly (phi phi^T + 1) for every output, and gradient descent on
    # its parameters is Euler on the function-space ODE.
    torch.manual_seed(0)
    n, d, k, width = 10, 3, 3, 64
    net = nn.Sequential(nn.Linear(d, width), nn.Tanh(), nn.Linear(width, k)).double()
    net[0].requires_grad_(False)
    lin = linearize(net)
    x = torch.randn(n + 4, d, dtype=F64)
    y = torch.eye(k, dtype=F64)[torch.randint(0, k, (n,))]
    phi = net[1](net[0](x))
    kern = phi @ phi.T + 1.0
    with torch.no_grad():
        f0 = lin(x)
    opt = torch.optim.SGD(lin.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        cross_entropy(lin(x[:n]), y).backward()
        opt.step()
    with torch.no_grad():
        trained = lin(x)
    fn = predict.gradient_descent(cross_entropy, kern[:n, :n], y, learning_rate=lr)
    train, test = fn(float(steps), f0[:n], f0[n:], kern[n:, :n])
    flow = torch.cat([train, test])
    return float((trained - flow).abs().max()), float((flow - f0).abs().max())


def test_cross_entropy_matches_a_trained_network() -> None:
    # The same flow time at two learning rates: gradient descent is O(lr) from the flow.
    gap_small, moved = trained_network_gap(0.1, 200)
    gap_big, _ = trained_network_gap(0.2, 100)
    assert moved > 1.0
    assert gap_small < 0.005 * moved
    assert 1.8 < gap_big / gap_small < 2.2, (gap_small, gap_big)


def test_momentum_zero_friction_limit_and_dtype() -> None:
    p = problem()
    k32, y32 = p["k"].float(), p["y"].float()
    out = predict.gradient_descent(cross_entropy, k32, y32, 0.5, momentum=0.5)(3.0)
    assert out.dtype == torch.float32 and out.shape == (8, 3)
    # At t = 0 nothing moved, with or without momentum.
    for mom in (None, 0.9):
        fn = predict.gradient_descent(cross_entropy, p["k"], p["y"], 0.5, momentum=mom)
        torch.testing.assert_close(fn(0.0, p["f0"]), p["f0"], rtol=0, atol=0)


def test_errors_name_the_argument() -> None:
    p = problem()
    k, y = p["k"], p["y"]
    with pytest.raises(NtklabTypeError, match="loss"):
        predict.gradient_descent("mse", k, y)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="y_train"):
        predict.gradient_descent(mse, k, y[:-1])
    with pytest.raises(NtklabValueError, match="k_train_train"):
        predict.gradient_descent(mse, k[:, :-1], y)
    with pytest.raises(NtklabValueError, match="learning_rate"):
        predict.gradient_descent(mse, k, y, learning_rate=0.0)
    with pytest.raises(NtklabValueError, match="momentum"):
        predict.gradient_descent(mse, k, y, momentum=1.5)
    fn = predict.gradient_descent(mse, k, y)
    with pytest.raises(NtklabValueError, match="t: expected finite times >= 0"):
        fn(-1.0)
    with pytest.raises(NtklabValueError, match="t: expected finite times"):
        fn(None)
    with pytest.raises(NtklabValueError, match="t: expected finite"):
        fn([1.0, float("inf")])
    with pytest.raises(NtklabValueError, match="k_test_train"):
        fn(1.0, 0.0, p["ft0"])
    with pytest.raises(NtklabValueError, match="k_test_train"):
        fn(1.0, 0.0, p["ft0"], p["ktd"][:, :-1])
    with pytest.raises(NtklabValueError, match="fx_train_0, fx_test_0"):
        fn(1.0, None, None)
    with pytest.raises(NtklabValueError, match="fx_train_0"):
        fn(1.0, p["f0"][:-1])
    with pytest.raises(NtklabValueError, match="loss: expected loss"):
        predict.gradient_descent(lambda f, y: (f - y) ** 2, k, y)(1.0)
    with pytest.raises(NtklabValueError, match="loss: expected a scalar differentiable"):
        predict.gradient_descent(lambda f, y: (f.detach() - y).sum(), k, y)(1.0)
    with pytest.raises(NtklabValueError, match="max_steps"):
        predict.gradient_descent(mse, 1e4 * k, y, max_steps=20)(1e3)
