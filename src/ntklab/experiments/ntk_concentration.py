"""B3 ``ntk-concentration``: the empirical NTK and the trained network converge to their
infinite-width limits at rate :math:`m^{-1/2}`.

Claim (CLAIMS.md B3, seed 001): for smooth activations, the sup over a fixed grid of input
pairs of :math:`|\\hat\\Theta_m - \\Theta|` falls as :math:`m^{-1/2}` (Jacot et al.
arXiv:1806.07572; Arora et al. arXiv:1904.11955), and a network trained by gradient descent
stays within :math:`O(m^{-1/2})` of kernel gradient descent with the analytic NTK, so the
squared function distance falls as :math:`m^{-1}` (Lee et al. arXiv:1902.06720).

Data, computation, measurement, verdict, figure:

1. inputs: ``n_grid`` equispaced points on the unit circle (the grid of pairs is all
   ``n_grid^2`` pairs); networks ``depth x [Dense, act] + Dense`` (NTK parameterization),
   ``act`` in erf / tanh;
2. for each width :math:`m` and seed, :math:`\\max_{ij} |\\hat\\Theta_m(x_i, x_j) -
   \\Theta(x_i, x_j)|` (:func:`~ntklab.analysis.ntk_sup_distance`);
3. networks with zero initial output (antisymmetric pairing, ``zero_output=True``) trained by
   full-batch GD on ``n_train`` uniform points (labels: a random trigonometric polynomial)
   to a fixed flow time, all seeds at once (:func:`~ntklab.nets.train_ensemble`); kernel GD
   from zero with the analytic NTK and the same discrete steps
   (:func:`~ntklab.dynamics.linearized_dynamics`, ``schedule="gd"``); the squared distance
   is the mean over a test grid of :math:`(f_{net} - f_{kernel})^2`;
4. slopes of the seed medians in log-log against :math:`m` with a seed bootstrap
   (:func:`~ntklab.analysis.fit_power_law_bootstrap`, ``aggregate="median"``); PASS when
   every NTK slope lies in [-0.6, -0.4] and every squared function-distance slope in
   [-1.2, -0.8].
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from matplotlib.figure import Figure

from .. import kernels as nk
from ..analysis import BootstrapPowerLawFit, fit_power_law_bootstrap, ntk_sup_distance
from ..data import circle_grid, random_trig_polynomial, uniform_circle
from ..dynamics import critical_learning_rate, linearized_dynamics
from ..nets import ensemble, train_ensemble
from . import Experiment, ExperimentConfig, Metric, Outcome, RunContext, register

__all__ = ["NtkConcentrationConfig", "function_distances", "smooth_network"]

NTK_RANGE = (-0.6, -0.4)
FUNCTION_RANGE = (-1.2, -0.8)
Act = Literal["erf", "tanh"]


class NtkConcentrationConfig(ExperimentConfig):
    """Grid of ``ntk-concentration``."""

    activations: tuple[Act, ...] = ("erf", "tanh")
    depths: tuple[int, ...] = (2, 3, 4)
    widths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    n_seeds: int = 10
    w_std: float = 1.5
    b_std: float = 0.1
    n_grid: int = 8
    n_train: int = 16
    n_test: int = 64
    target_degree: int = 4
    train_time: float = 5.0
    lr_fraction: float = 0.5
    function_activation: Act = "erf"
    n_boot: int = 1000


def smooth_network(depth: int, act: Act, w_std: float, b_std: float) -> nk.Architecture:
    """``depth x [Dense(w_std, b_std), act] + Dense(w_std, b_std)``."""
    layer = nk.Erf() if act == "erf" else nk.Tanh()
    block = nk.serial(nk.Dense(w_std, b_std), layer)
    return nk.serial(*([block] * depth), nk.Dense(w_std, b_std))


def function_distances(
    arch: nk.Architecture, config: NtkConcentrationConfig, gen: torch.Generator
) -> tuple[np.ndarray, int, float]:
    """Squared distances (n_seeds, n_widths) between GD-trained zero-output networks and
    kernel GD with the analytic NTK, with the number of steps and the learning rate."""
    dtype = config.torch_dtype
    angles, x = uniform_circle(config.n_train, generator=gen, dtype=dtype)
    target = random_trig_polynomial(config.target_degree, generator=gen, dtype=dtype)
    y = target(angles)[:, None]
    _, x_test = circle_grid(config.n_test, dtype=dtype)
    with torch.no_grad():
        k_train = arch.kernel(x).ntk
        k_test = arch.kernel(x_test, x).ntk
    top = float(torch.linalg.eigvalsh(k_train)[-1])
    lr = config.lr_fraction * critical_learning_rate(top, float(config.n_train))
    steps = max(1, round(config.train_time / lr))
    dyn = linearized_dynamics(k_train, y, learning_rate=lr, schedule="gd")
    reference = dyn.test(float(steps), k_test)  # shape: (n_test, 1)
    out = np.empty((config.n_seeds, len(config.widths)))
    for j, width in enumerate(config.widths):
        nets = ensemble(
            arch,
            config.n_seeds,
            width,
            in_features=2,
            zero_output=True,
            generator=gen,
            dtype=dtype,
        )
        run = train_ensemble(nets, x, y, learning_rate=lr, steps=steps, x_test=x_test)
        assert run.test_outputs is not None
        final = run.test_outputs[-1]  # shape: (n_seeds, n_test, 1)
        out[:, j] = (final - reference).square().mean(dim=(1, 2)).numpy()
    return out, steps, lr


def _slope_metric(
    name: str, fit: BootstrapPowerLawFit, bounds: tuple[float, float], note: str
) -> Metric:
    return Metric(
        name,
        fit.slope,
        fit.ci_low,
        fit.ci_high,
        predicted=f"[{bounds[0]}, {bounds[1]}]",
        note=note,
    )


def run(config: NtkConcentrationConfig, ctx: RunContext) -> Outcome:
    dtype = config.torch_dtype
    widths = np.array(config.widths, dtype=np.float64)
    _, grid = circle_grid(config.n_grid, dtype=dtype)
    metrics: list[Metric] = []
    arrays: dict[str, np.ndarray] = {"widths": widths}
    ntk_slopes: list[float] = []
    fn_slopes: list[float] = []
    notes: list[str] = []
    fig = Figure(figsize=(10.0, 4.2))
    ax_ntk, ax_fn = fig.subplots(1, 2)
    jobs = len(config.depths) * (len(config.activations) + 1)
    done = 0
    for act in config.activations:
        for depth in config.depths:
            arch = smooth_network(depth, act, config.w_std, config.b_std)
            dist = ntk_sup_distance(
                arch,
                grid,
                widths=config.widths,
                n_seeds=config.n_seeds,
                generator=ctx.generator(f"ntk-{act}-{depth}"),
                dtype=dtype,
            )  # shape: (n_widths, n_seeds)
            per_seed = dist.T.cpu().numpy()
            fit = fit_power_law_bootstrap(
                widths, per_seed, aggregate="median", n_boot=config.n_boot, generator=ctx.seed
            )
            ntk_slopes.append(fit.slope)
            tag = f"{act},L={depth}"
            metrics.append(
                _slope_metric(
                    f"ntk_sup_slope[{tag}]",
                    fit,
                    NTK_RANGE,
                    f"median of {config.n_seeds} seeds over {config.n_grid}^2 pairs",
                )
            )
            arrays[f"ntk_sup_{act}_depth{depth}"] = per_seed
            ax_ntk.loglog(widths, np.median(per_seed, axis=0), "o-", ms=3, label=tag)
            done += 1
            ctx.progress(done / jobs, f"NTK sup distance, {tag}: slope {fit.slope:.3f}")

    act = config.function_activation
    for depth in config.depths:
        arch = smooth_network(depth, act, config.w_std, config.b_std)
        dist2, steps, lr = function_distances(arch, config, ctx.generator(f"fn-{depth}"))
        fit = fit_power_law_bootstrap(
            widths, dist2, aggregate="median", n_boot=config.n_boot, generator=ctx.seed
        )
        fn_slopes.append(fit.slope)
        tag = f"{act},L={depth}"
        metrics.append(
            _slope_metric(
                f"function_sq_distance_slope[{tag}]",
                fit,
                FUNCTION_RANGE,
                f"{steps} GD steps of {lr:.3g} (flow time {steps * lr:.3g}), zero initial "
                "output (antisymmetric pairing)",
            )
        )
        arrays[f"function_sq_distance_depth{depth}"] = dist2
        ax_fn.loglog(widths, np.median(dist2, axis=0), "s-", ms=3, label=tag)
        done += 1
        ctx.progress(done / jobs, f"function distance, {tag}: slope {fit.slope:.3f}")

    for ax, exponent, title, ylabel in (
        (ax_ntk, -0.5, "sup |empirical NTK - NTK| (median)", "sup distance"),
        (ax_fn, -1.0, "network vs kernel GD (median)", "squared L2 distance"),
    ):
        lines = ax.get_lines()
        start = float(np.max([ln.get_ydata()[0] for ln in lines]))
        ax.loglog(
            widths,
            start * (widths / widths[0]) ** exponent,
            "k--",
            lw=0.8,
            label=f"$m^{{{exponent:g}}}$",
        )
        ax.set(xlabel="width m", ylabel=ylabel, title=title)
        ax.legend(fontsize=7)
    fig.tight_layout()

    ntk_ok = all(NTK_RANGE[0] <= s <= NTK_RANGE[1] for s in ntk_slopes)
    fn_ok = all(FUNCTION_RANGE[0] <= s <= FUNCTION_RANGE[1] for s in fn_slopes)
    metrics[:0] = [
        Metric("ntk_slope_min", min(ntk_slopes), predicted=f">= {NTK_RANGE[0]}"),
        Metric("ntk_slope_max", max(ntk_slopes), predicted=f"<= {NTK_RANGE[1]}"),
        Metric("function_slope_min", min(fn_slopes), predicted=f">= {FUNCTION_RANGE[0]}"),
        Metric("function_slope_max", max(fn_slopes), predicted=f"<= {FUNCTION_RANGE[1]}"),
    ]
    notes.append(
        f"widths {config.widths[0]}..{config.widths[-1]}, {config.n_seeds} seeds, "
        f"w_std {config.w_std}, b_std {config.b_std}, inputs on the unit circle"
    )
    notes.append(
        "function distance: networks with zero initial output (antisymmetric pairing of two "
        "halves of width m/2), compared with kernel GD from zero with the same discrete steps"
    )
    summary = (
        f"NTK sup-distance slopes {min(ntk_slopes):.3f}..{max(ntk_slopes):.3f} (predicted "
        f"[-0.6, -0.4]); squared function-distance slopes {min(fn_slopes):.3f}.."
        f"{max(fn_slopes):.3f} (predicted [-1.2, -0.8])"
    )
    return Outcome(
        metrics=tuple(metrics),
        passed=ntk_ok and fn_ok,
        summary=summary,
        figures={"ntk_concentration": fig},
        arrays=arrays,
        notes=tuple(notes),
    )


EXPERIMENT = register(
    Experiment(
        name="ntk-concentration",
        claim_id="B3",
        claim=(
            "For smooth activations, the empirical NTK of a width-m network is within "
            "O(m^-1/2) of the analytic NTK uniformly over a fixed grid of input pairs, and a "
            "network trained by gradient descent stays within O(m^-1/2) of kernel gradient "
            "descent with the analytic NTK."
        ),
        criterion=(
            "for erf/tanh networks of depth 2..4, the log-log slope of the seed-median sup "
            "distance against the width lies in [-0.6, -0.4]; the slope of the seed-median "
            "squared network-vs-kernel-GD distance at a fixed training time lies in "
            "[-1.2, -0.8]"
        ),
        config_type=NtkConcentrationConfig,
        scales={
            "tiny": {
                "activations": ["erf"],
                "depths": [2],
                "widths": [32, 64, 128, 256],
                "n_seeds": 4,
                "n_grid": 4,
                "n_train": 8,
                "n_test": 16,
                "n_boot": 100,
            },
            "quick": {},
            "paper": {
                "widths": [2**p for p in range(6, 14)],
                "n_seeds": 30,
                "activations": ["erf", "tanh"],
            },
        },
        legacy_run=run,
    )
)
