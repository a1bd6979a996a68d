"""B2 ``network-rates``: wide networks trained by GD and SGD track early-stopped kernel GD.

Claim (CLAIMS.md B2, seed 001): wide networks with a smooth activation, trained by full-batch
gradient descent or by SGD and stopped by the rule of B1, have the excess risk of kernel
gradient descent with their NTK, hence its rate (the seed's minimax rates for deep networks).

Data, computation, measurement, verdict, figure:

1. networks ``depth x [Dense, tanh] + Dense`` (NTK parameterization) with **zero initial
   output** (antisymmetric pairing of two halves of width ``width/2``, ``zero_output=True``),
   as the theory's kernel GD starts at zero; their analytic NTK on the unit circle, its
   eigenvalues :math:`\\mu_k` (FFT) and fitted capacity :math:`\\gamma`;
2. per seed, a unit-norm target with source condition :math:`\\beta` for that NTK
   (:func:`~ntklab.data.source_condition_target`), ``n`` uniform inputs, noisy labels;
3. the stopping time :math:`\\tau = c\\,n^{1/(2\\beta+\\gamma)}`
   (:func:`~ntklab.dynamics.early_stopping.early_stopping_time`) in flow time; full-batch GD
   with step :math:`\\eta` (half the critical step of the kernel bound :math:`\\lambda_{max}
   \\le n\\kappa(1)`) for :math:`\\tau/\\eta` steps, all seeds at once
   (:func:`~ntklab.nets.train_ensemble`), and SGD (batch ``batch_size``, step
   :math:`\\eta/2`) to the same flow time (:func:`~ntklab.nets.train`); kernel GD with the
   same :math:`\\eta` and steps in closed form
   (:func:`~ntklab.dynamics.early_stopping.kernel_gd_excess_risk_s1`, exact);
4. the networks' excess risk :math:`\\|f_{net} - f\\|^2_{L^2}` by the trapezoid rule on an
   equispaced grid (spectrally exact for these analytic functions); PASS when, for every
   depth and optimizer, the seed-mean risk is within a factor 1.5 of kernel GD's at each
   ``n`` and the log-log slope within 0.15 of kernel GD's.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from .. import kernels as nk
from ..analysis import fit_power_law_bootstrap
from ..data import TrigPolynomial, circle_grid, source_condition_target, uniform_circle
from ..dynamics import critical_learning_rate, early_stopping_time, kernel_gd_excess_risk_s1
from ..kernels.sphere import circle_eigenvalues, profile_from_architecture
from ..nets import ensemble, train, train_ensemble
from . import Experiment, ExperimentConfig, Metric, Outcome, RunContext, register

__all__ = ["NetworkRatesConfig", "network_risks", "smooth_mlp"]

RATIO = 1.5
SLOPE_TOLERANCE = 0.15
Act = Literal["tanh", "softplus", "silu"]


class NetworkRatesConfig(ExperimentConfig):
    """Grid of ``network-rates``."""

    activation: Act = "tanh"
    depths: tuple[int, ...] = (2, 3)
    w_std: float = 1.5
    b_std: float = 0.1
    width: int = 1024
    n_frequencies: int = 64
    beta: float = 1.0
    sizes: tuple[int, ...] = (64, 128, 256, 512)
    n_seeds: int = 5
    noise_sd: float = 0.5
    stop_scale: float = 1.0
    lr_fraction: float = 0.5
    sgd_batch: int = 32
    sgd_lr_factor: float = 0.5
    n_quadrature: int = 512
    net_dtype: Literal["float32", "float64"] = "float32"
    n_boot: int = 1000


def smooth_mlp(depth: int, act: Act, w_std: float, b_std: float) -> nk.Architecture:
    """``depth x [Dense(w_std, b_std), act] + Dense(w_std, b_std)``."""
    layer = {"tanh": nk.Tanh, "softplus": nk.Softplus, "silu": nk.Silu}[act]()
    block = nk.serial(nk.Dense(w_std, b_std), layer)
    return nk.serial(*([block] * depth), nk.Dense(w_std, b_std))


def _l2_risk(values: Tensor, target: Tensor) -> np.ndarray:
    """Mean over the quadrature grid of squared errors, per row: (M, q) -> (M,)."""
    return (values.double() - target).square().mean(dim=-1).cpu().numpy()


def network_risks(
    arch: nk.Architecture,
    mu: Tensor,
    config: NetworkRatesConfig,
    gen: torch.Generator,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Excess risks (n_seeds, n_sizes) of kernel GD, GD-trained and SGD-trained networks.

    Returns the risks by learner (``"kernel"``, ``"gd"``, ``"sgd"``) and the run's
    constants (``gamma``, ``predicted``, ``lr``).
    """
    ndtype = torch.float32 if config.net_dtype == "float32" else torch.float64
    seeds, sizes = config.n_seeds, config.sizes
    targets = [source_condition_target(mu, config.beta, generator=gen) for _ in range(seeds)]
    tables = [
        t.function.fourier_coefficients() for t in targets if isinstance(t.function, TrigPolynomial)
    ]
    gamma = targets[0].gamma
    q_angles, q_points = circle_grid(config.n_quadrature)
    q_target = torch.stack([t(q_angles) for t in targets])  # shape: (M, q)
    kappa_one = float(mu[0] + 2.0 * mu[1:].sum())
    risks = {name: np.empty((seeds, len(sizes))) for name in ("kernel", "gd", "sgd")}
    lr = 0.0
    for j, n in enumerate(sizes):
        angles = torch.stack([uniform_circle(n, generator=gen)[0] for _ in range(seeds)])
        noise = torch.randn(seeds, n, generator=gen, dtype=torch.float64)
        y = torch.stack([t(a) for t, a in zip(targets, angles, strict=True)])
        y = y + config.noise_sd * noise  # shape: (M, n)
        tau = early_stopping_time(n, config.beta, gamma, config.stop_scale)
        lr = config.lr_fraction * critical_learning_rate(kappa_one * n, float(n))
        steps = max(1, round(tau / lr))
        for s in range(seeds):
            risks["kernel"][s, j] = float(
                kernel_gd_excess_risk_s1(
                    angles[s],
                    y[s],
                    mu,
                    tables[s],
                    float(steps),
                    schedule="gd",
                    learning_rate=lr,
                )
            )
        x = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1).to(ndtype)
        yy = y[..., None].to(ndtype)
        nets = ensemble(
            arch,
            seeds,
            config.width,
            in_features=2,
            zero_output=True,
            generator=gen,
            dtype=ndtype,
        )
        trained = train_ensemble(
            nets, x, yy, learning_rate=lr, steps=steps, x_test=q_points.to(ndtype)
        )
        assert trained.test_outputs is not None
        risks["gd"][:, j] = _l2_risk(trained.test_outputs[-1][..., 0], q_target)
        sgd_lr = config.sgd_lr_factor * lr
        for s in range(seeds):
            net = arch.to_torch(
                config.width, in_features=2, zero_output=True, generator=gen, dtype=ndtype
            )
            train(
                net,
                x[s],
                yy[s],
                learning_rate=sgd_lr,
                steps=max(1, round(steps * lr / sgd_lr)),
                batch_size=min(config.sgd_batch, n),
                generator=gen,
            )
            with torch.no_grad():
                out = net(q_points.to(ndtype))[:, 0]
            risks["sgd"][s, j] = float(_l2_risk(out[None], q_target[s : s + 1])[0])
    return risks, {"gamma": gamma, "predicted": targets[0].predicted_rate, "lr": lr}


def run(config: NetworkRatesConfig, ctx: RunContext) -> Outcome:
    sizes = np.array(config.sizes, dtype=np.float64)
    metrics: list[Metric] = []
    arrays: dict[str, np.ndarray] = {"sizes": sizes}
    checks: list[bool] = []
    parts: list[str] = []
    fig = Figure(figsize=(5.2 * len(config.depths), 4.2))
    axes = np.atleast_1d(fig.subplots(1, len(config.depths)))
    predicted = math.nan
    for d, depth in enumerate(config.depths):
        arch = smooth_mlp(depth, config.activation, config.w_std, config.b_std)
        with torch.no_grad():
            mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), config.n_frequencies)
        risks, consts = network_risks(arch, mu, config, ctx.generator(f"depth={depth}"))
        predicted = consts["predicted"]
        fits = {
            name: fit_power_law_bootstrap(sizes, r, n_boot=config.n_boot, generator=ctx.seed)
            for name, r in risks.items()
        }
        kernel_mean = risks["kernel"].mean(axis=0)
        ax = axes[d]
        ax.loglog(sizes, kernel_mean, "k-o", ms=4, label=f"kernel GD {fits['kernel'].slope:.3f}")
        metrics.append(
            Metric(
                f"kernel_slope[L={depth}]",
                fits["kernel"].slope,
                fits["kernel"].ci_low,
                fits["kernel"].ci_high,
                predicted=f"{predicted:.3f} (-2 beta/(2 beta + gamma), gamma "
                f"{consts['gamma']:.3f})",
                note="reference; the criterion compares the networks with it",
            )
        )
        for name, marker in (("gd", "s"), ("sgd", "^")):
            fit = fits[name]
            ratio = risks[name].mean(axis=0) / kernel_mean
            worst = float(ratio[np.argmax(np.abs(np.log(ratio)))])
            diff = fit.slope - fits["kernel"].slope
            ok = bool(np.all((ratio <= RATIO) & (ratio >= 1 / RATIO)))
            ok = ok and abs(diff) <= SLOPE_TOLERANCE
            checks.append(ok)
            tag = f"{name},L={depth}"
            metrics += [
                Metric(
                    f"slope[{tag}]",
                    fit.slope,
                    fit.ci_low,
                    fit.ci_high,
                    predicted=f"{fits['kernel'].slope:.3f} +- {SLOPE_TOLERANCE}",
                    note=f"kernel GD's slope; seed mean over {config.n_seeds} seeds",
                ),
                Metric(
                    f"worst_risk_ratio[{tag}]",
                    worst,
                    predicted=f"in [{1 / RATIO:.3f}, {RATIO}] at each n",
                    note="network / kernel GD seed-mean excess risk, "
                    + ", ".join(f"{r:.2f}" for r in ratio),
                ),
            ]
            arrays[f"risk_{name}_depth{depth}"] = risks[name]
            ax.loglog(
                sizes,
                risks[name].mean(axis=0),
                marker + "--",
                ms=4,
                label=f"{name.upper()} net {fit.slope:.3f}",
            )
            parts.append(
                f"{tag}: slope {fit.slope:.3f} vs kernel {fits['kernel'].slope:.3f}, risk "
                f"ratios {ratio.min():.2f}..{ratio.max():.2f} ({'ok' if ok else 'off'})"
            )
        arrays[f"risk_kernel_depth{depth}"] = risks["kernel"]
        ref = kernel_mean[0] * (sizes / sizes[0]) ** predicted
        ax.loglog(sizes, ref, "k:", lw=0.8, label=f"predicted {predicted:.3f}")
        ax.set(
            xlabel="n",
            ylabel="excess risk (mean over seeds)",
            title=f"{config.activation}, depth {depth}, width {config.width}",
        )
        ax.legend(fontsize=7)
        ctx.progress((d + 1) / len(config.depths), f"depth {depth} done")
    fig.tight_layout()
    notes = (
        "initialization: zero initial output by antisymmetric pairing (f = (a - b)/sqrt 2, "
        f"b a copy of a at init; two halves of width {config.width // 2}), NTK "
        "parameterization; kernel GD starts at zero with the analytic NTK",
        f"beta {config.beta:g}, label noise sd {config.noise_sd}; stopping time "
        f"{config.stop_scale:g} n^(1/(2 beta + gamma)) in flow time for every learner; GD "
        f"step {config.lr_fraction:g} x critical, SGD batch {config.sgd_batch} at "
        f"{config.sgd_lr_factor:g} x the GD step",
        "the NTK of a smooth activation has geometrically decaying eigenvalues: the fitted "
        "gamma is a power-law fit over the nonzero ones, near 0",
    )
    return Outcome(
        metrics=tuple(metrics),
        passed=all(checks),
        summary="; ".join(parts),
        figures={"network_rates": fig},
        arrays=arrays,
        notes=notes,
    )


EXPERIMENT = register(
    Experiment(
        name="network-rates",
        claim_id="B2",
        claim=(
            "Wide networks with a smooth activation, depth 2 and 3, trained by full-batch GD "
            "and by SGD with the early-stopping rule of B1, track early-stopped kernel GD "
            "with their NTK, hence the minimax rate."
        ),
        criterion=(
            "excess risk (seed mean) within a factor 1.5 of kernel GD's at each n, and "
            "log-log slope within 0.15 of kernel GD's, for GD and SGD at each depth"
        ),
        config_type=NetworkRatesConfig,
        scales={
            "tiny": {
                "depths": [2],
                "width": 128,
                "sizes": [16, 32, 64],
                "n_seeds": 2,
                "n_frequencies": 32,
                "sgd_batch": 8,
                "n_quadrature": 128,
                "n_boot": 100,
            },
            "quick": {},
            "paper": {
                "width": 4096,
                "sizes": [2**p for p in range(6, 13)],
                "n_seeds": 20,
            },
        },
        legacy_run=run,
    )
)
