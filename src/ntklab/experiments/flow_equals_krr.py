"""C2 ``flow-equals-krr``: gradient flow on the NTK is kernel regression (seed 002, chapter 1).

Claim (CLAIMS.md C2): gradient flow on the squared loss with the NTK :math:`\\Theta` reaches,
as :math:`t \\to \\infty`, the minimum-norm kernel interpolant; at finite :math:`t` it is the
matrix-exponential solution

.. math:: f_t(x) = f_0(x) + \\Theta_{xX}\\,\\Theta^{-1}\\big(I - e^{-\\eta t\\Theta/N}\\big)
          \\big(Y - f_0(X)\\big)

(Jacot et al. arXiv:1806.07572, Lee et al. arXiv:1902.06720); discrete gradient descent
converges to it as the step shrinks; and dropping :math:`f_0` (the chapter's gotcha 1.3)
changes the prediction by a Gaussian whose variance is the NNGP-driven covariance of the
ensemble, :math:`\\Sigma_t(x, x)`, of the order of the NNGP prior variance :math:`K(x, x)`.

Data, computation, measurement, verdict, figure:

1. points on :math:`S^{d-1}`, a smooth target plus noise; the analytic NTK and NNGP of a
   ReLU network; :math:`f_0` = outputs of ``members`` finite networks of that architecture
   at initialization (:func:`ntklab.nets.ensemble`), the first one for parts 2-4;
2. flow at a time where :math:`e^{-\\eta t \\lambda_{min}/N} < 10^{-20}` and at
   :math:`t = \\infty` (:func:`~ntklab.dynamics.linearized_dynamics`) against the min-norm
   interpolant of the residual solved directly (:func:`scipy.linalg.solve`);
3. finite-:math:`t` flow against Van Loan's block exponential
   :math:`\\exp\\begin{pmatrix}-c\\Theta & I\\\\ 0 & 0\\end{pmatrix}t`, whose top-right block is
   :math:`\\int_0^t e^{-c\\Theta s}ds` (:func:`scipy.linalg.expm`, no eigendecomposition);
4. discrete GD (``schedule="gd"``) at steps :math:`\\eta_c 2^{-j}` against the flow at the same
   flow time: the gap must fall monotonically with the step, at first order (Euler);
5. the mean square over the ensemble of the change made by dropping :math:`f_0`, against the
   diagonal of :math:`\\Sigma_t` from :func:`~ntklab.dynamics.ensemble_dynamics`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import torch
from matplotlib.figure import Figure
from torch import Tensor

from .. import kernels as nk
from ..analysis import fit_power_law
from ..data import uniform_sphere
from ..dynamics import Gaussian, ensemble_dynamics, linearized_dynamics
from ..nets import ensemble
from ..predict import max_learning_rate
from . import Experiment, ExperimentConfig, Metric, Outcome, RunContext, register

__all__ = ["FlowEqualsKrrConfig", "flow_by_expm", "relu_network"]

LIMIT_TOL = 1e-8
EXPM_TOL = 1e-8
GD_ORDER = (0.9, 1.1)
GOTCHA_RATIO = (0.9, 1.1)


class FlowEqualsKrrConfig(ExperimentConfig):
    """Grid of ``flow-equals-krr``."""

    dim: int = 5
    n_train: int = 32
    n_test: int = 16
    depth: int = 2
    w_std: float = math.sqrt(2.0)
    b_std: float = 0.1
    noise: float = 0.1
    width: int = 256
    members: int = 1000
    chunk: int = 100
    # flow times, as multiples of N / lambda_max (one unit: the top mode decays by e)
    times: tuple[float, ...] = (1.0, 10.0, 100.0)
    gd_fractions: tuple[float, ...] = (1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128)
    gd_time: float = 10.0


def relu_network(depth: int, w_std: float, b_std: float) -> nk.Architecture:
    """``depth x [Dense(w_std, b_std), Relu] + Dense(w_std, b_std)``."""
    block = nk.serial(nk.Dense(w_std, b_std), nk.Relu())
    return nk.serial(*([block] * depth), nk.Dense(w_std, b_std))


def flow_by_expm(
    theta: Tensor, theta_test: Tensor, residual0: Tensor, f0_test: Tensor, rate: float, t: float
) -> Tensor:
    """Test outputs of gradient flow by Van Loan's block matrix exponential (scipy).

    .. math:: f_t(x) = f_0(x) + c\\,\\Theta_{xX}\\Big(\\int_0^t e^{-c\\Theta s}\\,ds\\Big)
              (Y - f_0(X)), \\qquad c = \\eta / N,

    with :math:`\\int_0^t e^{-c\\Theta s}ds` the top-right block of
    :math:`\\exp\\big(t\\,[[-c\\Theta, I], [0, 0]]\\big)` (Van Loan 1978). ``residual0`` is
    :math:`Y - f_0(X)`, shape (n, k); ``theta_test`` is (m, n); returns (m, k) in float64.
    """
    th = theta.double().cpu().numpy()
    n = th.shape[0]
    block = np.zeros((2 * n, 2 * n))
    block[:n, :n] = -rate * th
    block[:n, n:] = np.eye(n)
    integral = scipy.linalg.expm(t * block)[:n, n:]
    out = theta_test.double().cpu().numpy() @ (rate * integral) @ residual0.double().cpu().numpy()
    return f0_test.double().cpu() + torch.from_numpy(out)


def _rel(a: Tensor, b: Tensor) -> float:
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def _initial_outputs(
    arch: nk.Architecture, x: Tensor, config: FlowEqualsKrrConfig, gen: torch.Generator
) -> Tensor:
    """Outputs (n, members) of ``members`` finite networks at initialization."""
    outs = []
    done = 0
    while done < config.members:
        size = min(config.chunk, config.members - done)
        ens = ensemble(
            arch, size, config.width, in_features=x.shape[1], generator=gen, dtype=torch.float64
        )
        with torch.no_grad():
            outs.append(ens(x)[:, :, 0].T)
        done += size
    return torch.cat(outs, dim=1)


def run(config: FlowEqualsKrrConfig, ctx: RunContext) -> Outcome:
    dtype = torch.float64
    gen = ctx.generator("data")
    n, m = config.n_train, config.n_test
    x = uniform_sphere(n + m, config.dim, generator=gen, dtype=dtype)
    target = torch.sin(2.0 * x[:, 0]) + 2.0 * x[:, 1] * x[:, 2]
    y = (target[:n] + config.noise * torch.randn(n, generator=gen, dtype=dtype))[:, None]
    arch = relu_network(config.depth, config.w_std, config.b_std)
    with torch.no_grad():
        k = arch.kernel(x)
    theta, theta_test = k.ntk[:n, :n], k.ntk[n:, :n]
    evals = torch.linalg.eigvalsh(theta)
    lam_min, lam_max = float(evals[0]), float(evals[-1])
    lr = 1.0  # times count flow time; N / lambda_max is the unit below
    unit = n / lam_max
    f0_all = _initial_outputs(arch, x, config, ctx.generator("init"))  # shape: (n + m, M)
    f0, f0_test = f0_all[:n, :1], f0_all[n:, :1]
    ctx.progress(0.2, "kernels and initial outputs")
    dyn = linearized_dynamics(theta, y, learning_rate=lr)

    # 1. t -> infinity: min-norm interpolant of the residual, solved directly
    interp = f0_test + theta_test @ torch.from_numpy(
        scipy.linalg.solve(theta.numpy(), (y - f0).numpy(), assume_a="pos")
    )
    t_big = 50.0 * n / (lr * lam_min)  # exp(-50) ~ 2e-22 on the slowest mode
    limit_err = _rel(dyn.test(t_big, theta_test, f0, f0_test), interp)
    inf_err = _rel(dyn.test(None, theta_test, f0, f0_test), interp)

    # 2. finite t against the block matrix exponential
    times = [c * unit for c in config.times]
    expm_errs = [
        _rel(
            dyn.test(t, theta_test, f0, f0_test),
            flow_by_expm(theta, theta_test, y - f0, f0_test, lr / n, t),
        )
        for t in times
    ]
    ctx.progress(0.4, "flow vs KRR and matrix exponential")

    # 3. discrete GD at shrinking steps, same flow time
    eta_c = max_learning_rate(theta, y.numel())
    flow_time = config.gd_time * unit
    flow_out = dyn.test(flow_time, theta_test, f0, f0_test)
    etas, gd_errs = [], []
    for frac in config.gd_fractions:
        eta = eta_c * frac
        steps = max(1, round(flow_time / eta))
        eta = flow_time / steps  # exact flow time, step ~ eta_c * frac
        gd = linearized_dynamics(theta, y, learning_rate=eta, schedule="gd")
        out = gd.test(steps, theta_test, f0, f0_test)
        etas.append(eta)
        gd_errs.append(_rel(out, flow_out))
    order = fit_power_law(etas, gd_errs)
    monotone = bool(np.all(np.diff(gd_errs) < 0))
    ctx.progress(0.6, "discrete gradient descent")

    # 4. the gotcha: drop f0 for every member of the ensemble
    members = f0_all.shape[1]
    ys = y.expand(n, members)
    # one column per network; "sum" with step lr / n keeps the loss normalizer N = n
    dyn_many = linearized_dynamics(theta, ys, learning_rate=lr / n, normalization="sum")
    ens = ensemble_dynamics(arch, x[:n], y, learning_rate=lr)
    prior_var = k.nngp[n:, n:].diagonal()
    gotcha_t: list[float | None] = [*times, None]
    ratios, changes, variances, rel_sizes = [], [], [], []
    for t in gotcha_t:
        with_f0 = dyn_many.test(t, theta_test, f0_all[:n], f0_all[n:])
        without = dyn_many.test(t, theta_test, 0.0, 0.0)
        change = (with_f0 - without).square().mean(dim=1)  # shape: (m,)
        gauss = ens.predict(t, x[n:], get="ntk", compute_cov=True)
        assert isinstance(gauss, Gaussian)
        var = gauss.covariance.diagonal()
        ratios.append(float(change.mean() / var.mean()))
        changes.append(change)
        variances.append(var)
        rel_sizes.append(float(change.mean().sqrt() / y.square().mean().sqrt()))
    ctx.progress(0.9, "dropping f0")

    limit_ok = max(limit_err, inf_err) <= LIMIT_TOL
    expm_ok = max(expm_errs) <= EXPM_TOL
    gd_ok = monotone and GD_ORDER[0] <= order.slope <= GD_ORDER[1]
    gotcha_ok = all(GOTCHA_RATIO[0] <= r <= GOTCHA_RATIO[1] for r in ratios)
    labels = [f"t={c:g}N/lmax" for c in config.times] + ["t=inf"]
    metrics = [
        Metric(
            "flow_limit_vs_min_norm",
            limit_err,
            predicted=f"<= {LIMIT_TOL:g}",
            note=f"t = 50 N/(eta lambda_min) = {t_big:.3g}; relative, float64",
        ),
        Metric("flow_t_inf_vs_min_norm", inf_err, predicted=f"<= {LIMIT_TOL:g}"),
        Metric(
            "flow_vs_expm_max",
            max(expm_errs),
            predicted=f"<= {EXPM_TOL:g}",
            note="Van Loan block exponential, scipy.linalg.expm",
        ),
        Metric(
            "gd_to_flow_order",
            order.slope,
            order.ci_low,
            order.ci_high,
            predicted=f"1 (Euler), [{GD_ORDER[0]}, {GD_ORDER[1]}]",
            note=f"log-log slope of the GD-flow gap vs step, steps eta_c x "
            f"{config.gd_fractions[0]:g}..{config.gd_fractions[-1]:g}",
        ),
        Metric("gd_gap_monotone", float(monotone), predicted="1 (true)"),
        Metric("gd_gap_smallest_step", gd_errs[-1], predicted="-> 0"),
        Metric("ntk_condition_number", lam_max / lam_min),
    ]
    for lab, r, rel in zip(labels, ratios, rel_sizes, strict=True):
        metrics.append(
            Metric(
                f"drop_f0_change_over_variance[{lab}]",
                r,
                predicted=f"1, [{GOTCHA_RATIO[0]}, {GOTCHA_RATIO[1]}]",
                note=f"mean over {m} test points and {members} networks of width {config.width}",
            )
        )
        metrics.append(Metric(f"drop_f0_rms_change_over_rms_target[{lab}]", rel))
    metrics.append(Metric("nngp_prior_variance_mean", float(prior_var.mean())))

    fig = Figure(figsize=(14.0, 4.0))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    grid = np.geomspace(0.1, 1000.0, 60) * unit
    curve = dyn.test(grid, theta_test, f0, f0_test)[:, :, 0]
    for j in range(min(4, m)):
        ax1.semilogx(grid / unit, curve[:, j].numpy(), lw=1.2, color=f"C{j}")
        ax1.axhline(float(interp[j, 0]), color=f"C{j}", ls=":", lw=0.8)
        pts = [
            float(flow_by_expm(theta, theta_test, y - f0, f0_test, lr / n, t)[j, 0]) for t in times
        ]
        ax1.plot(np.array(times) / unit, pts, "o", color=f"C{j}", ms=4)
    ax1.set(
        title="flow (lines), expm (dots), min-norm interpolant (dotted)",
        xlabel=r"time $t\,\lambda_{max}/N$",
        ylabel="test output",
    )
    ax2.loglog(etas, gd_errs, "o-", label=f"GD vs flow, slope {order.slope:.2f}")
    ax2.loglog(etas, gd_errs[-1] * np.array(etas) / etas[-1], "k--", lw=0.8, label="slope 1")
    ax2.set(
        title=f"discrete GD at flow time {config.gd_time:g} N/lmax",
        xlabel="step eta",
        ylabel="relative gap",
    )
    ax2.legend(fontsize=8)
    pos = np.arange(m)
    for i, (lab, ch, var) in enumerate(zip(labels, changes, variances, strict=True)):
        ax3.plot(pos, ch.numpy(), "o", color=f"C{i}", ms=4, label=f"{lab}: MC change$^2$")
        ax3.plot(pos, var.numpy(), "-", color=f"C{i}", lw=1, label=rf"{lab}: $\Sigma_t(x,x)$")
    ax3.plot(pos, prior_var.numpy(), "k:", lw=1, label="NNGP prior K(x,x)")
    ax3.set(
        title="dropping $f_0$: squared change vs predicted variance",
        xlabel="test point",
        ylabel="variance",
    )
    ax3.legend(fontsize=6, ncol=2)
    fig.tight_layout()

    summary = (
        f"t->inf vs min-norm interpolant {max(limit_err, inf_err):.1e} (predicted <= 1e-8); "
        f"flow vs expm {max(expm_errs):.1e} (<= 1e-8); GD->flow order {order.slope:.3f} "
        f"(predicted 1 in [0.9, 1.1]), monotone: {'yes' if monotone else 'no'}; dropping f0: "
        f"change^2 / Sigma_t = {min(ratios):.3f}..{max(ratios):.3f} (predicted 1 in "
        f"[0.9, 1.1]), an RMS change of {min(rel_sizes):.2f}..{max(rel_sizes):.2f} x the "
        "RMS target"
    )
    return Outcome(
        metrics=tuple(metrics),
        passed=limit_ok and expm_ok and gd_ok and gotcha_ok,
        summary=summary,
        figures={"flow_equals_krr": fig},
        arrays={
            "times": np.array(times),
            "expm_errors": np.array(expm_errs),
            "gd_steps": np.array(etas),
            "gd_errors": np.array(gd_errs),
            "drop_f0_ratios": np.array(ratios),
            "drop_f0_change": torch.stack(changes).numpy(),
            "sigma_t_diag": torch.stack(variances).numpy(),
            "nngp_prior_variance": prior_var.numpy(),
        },
        notes=(
            f"f0: {members} ReLU networks of width {config.width} in NTK parameterization "
            "(ntklab.nets.ensemble); the analytic NTK drives the dynamics",
            "times are flow times (learning rate 1) in units of N / lambda_max",
        ),
    )


EXPERIMENT = register(
    Experiment(
        name="flow-equals-krr",
        claim_id="C2",
        claim=(
            "Gradient flow on the NTK reaches, as t -> infinity, the minimum-norm kernel "
            "interpolant; finite-t predictions match the exact matrix-exponential solution; "
            "discrete GD converges to the flow as the step shrinks; and dropping the initial "
            "output f_0 changes the prediction by about the NNGP variance (gotcha 1.3)."
        ),
        criterion=(
            "relative difference to the min-norm interpolant <= 1e-8 (float64) at t = inf and "
            "at t = 50 N / lambda_min; finite-t flow vs matrix exponential <= 1e-8; the GD-flow "
            "gap falls monotonically with the step, log-log order in [0.9, 1.1]; mean squared "
            "change from dropping f_0 over the predicted NNGP-driven variance in [0.9, 1.1] at "
            "every time"
        ),
        config_type=FlowEqualsKrrConfig,
        scales={
            "tiny": {"n_train": 12, "n_test": 6, "width": 64, "members": 200, "chunk": 200},
            "quick": {},
            "paper": {"n_train": 256, "n_test": 64, "width": 1024, "members": 4000, "chunk": 50},
        },
        legacy_run=run,
    )
)
