"""Closed-form dynamics against independent references: matrix exponentials of the parameter-space
ODE of a linear model (scipy), step-by-step gradient descent, pseudo-inverses, prior laws."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

import ntklab as nl
from ntklab.dynamics import ensemble_dynamics, linearized_dynamics
from ntklab.errors import NtklabValueError, NumericalWarning

F64 = torch.float64


def linear_problem(n: int = 7, d: int = 5, k: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    xt = torch.randn(3, d, generator=g, dtype=F64)
    y = torch.randn(n, k, generator=g, dtype=F64)
    theta0 = torch.randn(d, k, generator=g, dtype=F64)
    return x, xt, y, theta0


@pytest.mark.parametrize("normalization", ["mean", "sum"])
def test_flow_on_a_linear_model_equals_the_parameter_space_expm(
    normalization: str,
) -> None:
    x, xt, y, theta0 = linear_problem()
    lr, t = 0.3, 4.0
    n_norm = y.numel() if normalization == "mean" else 1
    # d theta / d tau = -(lr / N) X^T (X theta - y): an affine ODE, solved by expm of the
    # augmented generator (an independent route: parameter space, scipy).
    d, k = theta0.shape
    a = np.zeros((d + k, d + k))
    rate = lr / n_norm
    xn, yn = x.numpy(), y.numpy()
    a[:d, :d] = -rate * xn.T @ xn
    a[:d, d:] = rate * xn.T @ yn
    z = scipy.linalg.expm(a * t) @ np.vstack([theta0.numpy(), np.eye(k)])
    theta_t = torch.from_numpy(z[:d])
    dyn = linearized_dynamics(x @ x.T, y, learning_rate=lr, normalization=normalization)
    torch.testing.assert_close(dyn.train(t, x @ theta0), x @ theta_t, rtol=0, atol=1e-10)
    torch.testing.assert_close(
        dyn.test(t, xt @ x.T, x @ theta0, xt @ theta0), xt @ theta_t, rtol=0, atol=1e-10
    )


def test_discrete_gd_on_a_linear_model_is_exact() -> None:
    x, xt, y, theta0 = linear_problem()
    lr, steps = 0.4 * y.numel() / float(torch.linalg.eigvalsh(x @ x.T)[-1]), 37
    theta = theta0.clone()
    for _ in range(steps):
        theta -= lr / y.numel() * x.T @ (x @ theta - y)
    dyn = linearized_dynamics(x @ x.T, y, learning_rate=lr, schedule="gd")
    torch.testing.assert_close(dyn.train(steps, x @ theta0), x @ theta, rtol=0, atol=1e-10)
    torch.testing.assert_close(
        dyn.test(steps, xt @ x.T, x @ theta0, xt @ theta0), xt @ theta, rtol=0, atol=1e-10
    )


def test_times_broadcast_and_match_scalar_calls(arch, data) -> None:
    x, y, xt = data
    k = arch.kernel(x).ntk
    dyn = linearized_dynamics(k, y)
    ts = torch.tensor([[0.0, 1.0], [10.0, 1e3]], dtype=F64)
    many = dyn.test(ts, arch.kernel(xt, x).ntk)
    assert many.shape == (2, 2, 5, 2)
    torch.testing.assert_close(many[1, 0], dyn.test(10.0, arch.kernel(xt, x).ntk))
    assert dyn.train(ts).shape == (2, 2, 12, 2)
    torch.testing.assert_close(dyn.train(0.0, 0.25), torch.full_like(y, 0.25))


def test_infinite_time_is_kernel_regression_and_the_limit_of_finite_times(arch, data) -> None:
    x, y, xt = data
    k, ktd = arch.kernel(x).ntk, arch.kernel(xt, x).ntk
    dyn = linearized_dynamics(k, y)
    reference = ktd @ torch.linalg.solve(k, y)
    torch.testing.assert_close(dyn.test(None, ktd), reference, rtol=1e-10, atol=1e-10)
    lam_min = float(torch.linalg.eigvalsh(k)[0])
    t_big = 60.0 * y.numel() / lam_min  # exp(-60) of the slowest mode is left
    torch.testing.assert_close(dyn.test(t_big, ktd), reference, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(dyn.train(t_big), y, rtol=1e-8, atol=1e-9)


def test_infinite_time_without_ridge_is_the_minimum_norm_interpolant() -> None:
    # Overparameterized linear model: GD from 0 converges to the pseudo-inverse solution.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 20, generator=g, dtype=F64)
    xt = torch.randn(4, 20, generator=g, dtype=F64)
    y = torch.randn(6, 1, generator=g, dtype=F64)
    dyn = linearized_dynamics(x @ x.T, y)
    torch.testing.assert_close(
        dyn.test(None, xt @ x.T), xt @ torch.linalg.pinv(x) @ y, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("absolute", [False, True])
def test_ridge_enters_as_documented(arch, data, absolute: bool) -> None:
    x, y, xt = data
    k, ktd = arch.kernel(x).ntk, arch.kernel(xt, x).ntk
    reg = 0.05
    rho = reg if absolute else reg * float(k.diagonal().mean())
    dyn = linearized_dynamics(k, y, ridge=reg, ridge_relative=not absolute)
    expected = ktd @ torch.linalg.solve(k + rho * torch.eye(12, dtype=F64), y)
    torch.testing.assert_close(dyn.test(None, ktd), expected, rtol=1e-10, atol=1e-12)
    krr = nl.dynamics.kernel_ridge_regression(k, y, ktd, ridge=rho)
    torch.testing.assert_close(krr, expected, rtol=1e-10, atol=1e-12)


def test_sum_normalization_only_rescales_time(arch, data) -> None:
    x, y, xt = data
    k, ktd = arch.kernel(x).ntk, arch.kernel(xt, x).ntk
    mean = linearized_dynamics(k, y, normalization="mean")
    total = linearized_dynamics(k, y, normalization="sum")
    torch.testing.assert_close(total.test(0.5, ktd), mean.test(0.5 * y.numel(), ktd))


def test_discrete_descent_converges_to_the_flow_linearly_in_the_step(arch, data) -> None:
    x, y, xt = data
    k, ktd = arch.kernel(x).ntk, arch.kernel(xt, x).ntk
    tau = 2.0 * y.numel() / float(torch.linalg.eigvalsh(k)[-1])  # flow time
    flow = linearized_dynamics(k, y, learning_rate=1.0).test(tau, ktd)
    errors = []
    for steps in (16, 32, 64, 128):
        gd = linearized_dynamics(k, y, learning_rate=tau / steps, schedule="gd")
        errors.append(float((gd.test(steps, ktd) - flow).abs().max()))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert errors[-1] < 0.02 * float(flow.abs().max())
    np.testing.assert_allclose(ratios, 2.0, rtol=0.1)  # first order in the step


def test_singular_kernel_is_stable(arch) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3, generator=g, dtype=F64)
    x = torch.cat([x, x[:3]])  # duplicated inputs: a singular kernel
    y = torch.randn(9, 1, generator=g, dtype=F64)
    y[6:] = y[:3]
    k = arch.kernel(x)
    dyn = linearized_dynamics(k.ntk, y)
    out = dyn.train(torch.logspace(-2, 6, 9, dtype=F64))
    assert bool(torch.isfinite(out).all())
    with pytest.warns(NumericalWarning, match="jitter of"):
        test = dyn.test(None, k.ntk[:2])
    torch.testing.assert_close(test, y[:2], rtol=1e-6, atol=1e-6)
    ens = ensemble_dynamics(arch, x, y)
    gauss = ens.predict(torch.tensor([0.0, 1.0, 100.0], dtype=F64), x[:4], compute_cov=True)
    cov = gauss.covariance
    torch.testing.assert_close(cov, cov.transpose(-1, -2), rtol=0, atol=0)
    assert float(torch.linalg.eigvalsh(cov).min()) > -1e-10 * float(cov.abs().max())


def test_ensemble_at_time_zero_is_the_prior_and_at_infinity_the_posterior(arch, data) -> None:
    x, y, xt = data
    ens = ensemble_dynamics(arch, x, y, ridge=1e-3)
    prior = ens.predict(0.0, xt, "ntk", compute_cov=True)
    torch.testing.assert_close(prior.mean, torch.zeros(5, 2, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(prior.covariance, arch.kernel(xt).nngp, rtol=1e-10, atol=1e-12)
    for get in ("ntk", "nngp"):
        late = ens.predict(None, xt, get, compute_cov=True)
        post = nl.dynamics.gp_posterior(
            arch.kernel(x),
            y,
            arch.kernel(xt, x),
            arch.kernel(xt).nngp,
            get=get,
            ridge=1e-3 * float(getattr(arch.kernel(x), get).diagonal().mean()),
        )
        torch.testing.assert_close(late.mean, post.mean)
        torch.testing.assert_close(late.covariance, post.covariance)


def test_nngp_posterior_is_the_textbook_gp_posterior(arch, data) -> None:
    x, y, xt = data
    k, ktd, ktt = arch.kernel(x).nngp, arch.kernel(xt, x).nngp, arch.kernel(xt).nngp
    noise = 0.1
    post = nl.dynamics.gp_posterior(arch.kernel(x), y, arch.kernel(xt, x), ktt, ridge=noise)
    a = torch.linalg.solve(k + noise * torch.eye(12, dtype=F64), ktd.T).T
    torch.testing.assert_close(post.mean, a @ y)
    torch.testing.assert_close(post.covariance, ktt - a @ ktd.T, rtol=1e-9, atol=1e-12)


def test_ensemble_train_set_covariance_is_the_propagated_prior(arch, data) -> None:
    # Train set: f_t(X) = (I - D) Y + D f_0(X), so Cov = D K D with D = expm(-lr t Theta / N).
    x, y, _ = data
    kern = arch.kernel(x)
    t, lr = 3.0, 0.5
    ens = ensemble_dynamics(arch, x, y, learning_rate=lr)
    d = torch.from_numpy(scipy.linalg.expm(-lr * t * kern.ntk.numpy() / y.numel()))
    g = ens.predict(t, None, "ntk", compute_cov=True)
    torch.testing.assert_close(g.mean, y - d @ y)
    torch.testing.assert_close(g.covariance, d @ kern.nngp @ d)


def test_gd_ensemble_matches_monte_carlo_of_linear_gd(arch, data) -> None:
    # Draw f_0 ~ GP(0, K) jointly on train and test, run the discrete linearized dynamics and
    # compare the empirical mean and covariance with the closed form.
    x, y, xt = data
    allx = torch.cat([x, xt])
    k_all = arch.kernel(allx)
    lr, steps = 2.0, 40
    m = 20000
    gen = torch.Generator().manual_seed(11)
    chol = torch.linalg.cholesky(k_all.nngp + 1e-12 * torch.eye(17, dtype=F64))
    f = chol @ torch.randn(17, m, generator=gen, dtype=F64)  # f_0 jointly, shape: (17, M)
    theta = k_all.ntk
    for _ in range(steps):
        f = f - lr / y.numel() * theta[:, :12] @ (f[:12] - y[:, :1])
    g = ensemble_dynamics(arch, x, y, learning_rate=lr, schedule="gd").predict(
        steps, xt, "ntk", compute_cov=True
    )
    stderr = f[12:].std(dim=1) / m**0.5
    assert bool(((f[12:].mean(dim=1) - g.mean[:, 0]).abs() < 5 * stderr).all())
    scale = float(g.covariance.diagonal().max())
    torch.testing.assert_close(torch.cov(f[12:]), g.covariance, rtol=0, atol=0.05 * scale)


def test_bad_inputs_are_named(arch, data) -> None:
    x, y, xt = data
    k = arch.kernel(x).ntk
    dyn = linearized_dynamics(k, y)
    with pytest.raises(NtklabValueError, match="t: expected times >= 0"):
        dyn.train(-1.0)
    with pytest.raises(NtklabValueError, match=r"t: .*NaN"):
        dyn.train(float("nan"))
    with pytest.raises(NtklabValueError, match="k_test_train: expected shape"):
        dyn.test(1.0, torch.zeros(5, 11, dtype=F64))
    with pytest.raises(NtklabValueError, match="y_train: expected 12 rows"):
        linearized_dynamics(k, y[:10])
    with pytest.raises(NtklabValueError, match="fx_test_0: expected shape"):
        dyn.test(1.0, arch.kernel(xt, x).ntk, 0.0, torch.zeros(4, 2, dtype=F64))
    bad = k.clone()
    bad[0, 1] += 0.1
    with pytest.raises(NtklabValueError, match="k_train_train: expected a symmetric matrix"):
        linearized_dynamics(bad, y)
    with pytest.raises(
        NtklabValueError, match=r"x_test: expected the feature dimension of x_train \(4\)"
    ):
        ensemble_dynamics(arch, x, y).predict(1.0, torch.zeros(3, 5, dtype=F64))
    with pytest.raises(NtklabValueError, match="t: expected whole numbers"):
        linearized_dynamics(k, y, schedule="gd").train(1.5)
    lr_max = nl.predict.max_learning_rate(k, y.numel())
    with pytest.warns(NumericalWarning, match=f"critical learning rate {lr_max:.6g}"):
        linearized_dynamics(k, y, learning_rate=1.1 * lr_max, schedule="gd").train(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        linearized_dynamics(k, y, learning_rate=0.9 * lr_max, schedule="gd").train(3)
    with pytest.raises(NtklabValueError, match="learning_rate: expected a finite value > 0"):
        linearized_dynamics(k, y, learning_rate=0.0)


def test_max_learning_rate_is_the_stability_edge(arch, data) -> None:
    x, y, _ = data
    k = arch.kernel(x).ntk
    lr = nl.predict.max_learning_rate(k, y.numel())
    lam = float(torch.linalg.eigvalsh(k)[-1])
    assert lr == pytest.approx(2 * y.numel() / lam, rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        below = linearized_dynamics(k, y, learning_rate=0.99 * lr, schedule="gd").train(2000)
        above = linearized_dynamics(k, y, learning_rate=1.01 * lr, schedule="gd").train(2000)
    assert float((below - y).abs().max()) < 1e-3
    assert float((above - y).abs().max()) > 1e3
