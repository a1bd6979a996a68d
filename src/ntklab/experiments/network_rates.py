"""B2 ``network-rates``: wide networks trained by GD and SGD track early-stopped kernel GD.

Claim (Zhou, Wang, Lei, Kloft & Ying 2026, "Generalization in deep neural networks: minimax
rates for gradient methods"): wide networks with a smooth activation, trained by full-batch
gradient descent or by SGD and stopped at the early-stopping time of kernel gradient descent,
have the excess risk of kernel gradient descent with their NTK (Jacot, Gabriel & Hongler 2018),
hence its minimax rate :math:`n^{-2\\beta/(2\\beta+\\gamma)}` (Yao, Rosasco & Caponnetto
2007; Lin & Rosasco 2017).

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
   depth and optimizer, the seed-mean risk is within a factor :data:`RATIO` of kernel GD's
   at each ``n`` and the log-log slope within :data:`SLOPE_TOLERANCE` of kernel GD's
   (:func:`judge`); one panel per depth (:func:`draw`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Annotated, Any, Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from pydantic import Field, model_validator
from torch import Tensor

from ntklab.errors import NtklabValueError

from .. import kernels as nk
from ..analysis import fit_power_law_bootstrap
from ..data import TrigPolynomial, circle_grid, source_condition_target, uniform_circle
from ..dynamics import critical_learning_rate, early_stopping_time, kernel_gd_excess_risk_s1
from ..kernels.sphere import circle_eigenvalues, profile_from_architecture
from ..nets import ensemble, train, train_ensemble
from . import (
    Count,
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    PositiveFloat,
    RunContext,
    register,
)

__all__ = ["NetworkRatesConfig", "draw", "judge", "measure", "network_risks", "smooth_mlp"]

#: A network's seed-mean excess risk must be within this factor of kernel GD's at every n.
RATIO = 1.5
#: A network's log-log risk slope must be within this of kernel GD's.
SLOPE_TOLERANCE = 0.15
#: The optimizers compared with kernel GD, in the order of the metrics.
LEARNERS = ("gd", "sgd")

Act = Literal["tanh", "softplus", "silu"]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _strictly_increasing(name: str, values: tuple[int, ...]) -> None:
    if any(b <= a for a, b in pairwise(values)):
        raise NtklabValueError(
            f"{name}: expected strictly increasing values, received {list(values)}"
        )


class NetworkRatesConfig(ExperimentConfig):
    """Grid of ``network-rates``.

    Parameters
    ----------
    activation : {"tanh", "softplus", "silu"}
        The smooth activation of every hidden layer.
    depths : tuple of int
        Hidden layers of the networks, strictly increasing, each >= 1.
    w_std, b_std : float
        Weight (> 0) and bias (>= 0) standard deviations of every Dense layer.
    width : int
        Hidden width, even (two antisymmetric halves), >= 2.
    n_frequencies : int
        Eigenvalues :math:`\\mu_0..\\mu_K` of the NTK on the circle (``K >= 3``: the capacity
        fit needs three nonzero ones) and the target's highest frequency.
    beta : float
        Source exponent of the targets (> 0).
    sizes : tuple of int
        Sample sizes ``n``, strictly increasing, at least 3 of them (a log-log fit).
    n_seeds : int
        Seeds (targets, data, networks) per size, >= 2 (a seed bootstrap).
    noise_sd : float
        Label noise standard deviation (>= 0).
    stop_scale : float
        The constant :math:`c > 0` of the stopping time.
    lr_fraction : float
        GD step as a fraction of the critical step, in (0, 1).
    sgd_batch : int
        SGD batch size (>= 1; at most ``n``).
    sgd_lr_factor : float
        SGD step as a multiple of the GD step (> 0); the SGD step stays below the critical
        step: ``lr_fraction * sgd_lr_factor < 1``.
    n_quadrature : int
        Points of the risk's trapezoid rule, more than ``2 * n_frequencies`` (exact for the
        square of a target of degree ``n_frequencies``).
    net_dtype : {"float32", "float64"}
        Precision of the networks.
    n_boot : int
        Bootstrap resamples of the slopes' intervals (>= 1).
    """

    activation: Act = "tanh"
    depths: Annotated[tuple[Count, ...], Field(min_length=1)] = (2, 3)
    w_std: PositiveFloat = 1.5
    b_std: NonNegativeFloat = 0.1
    width: Annotated[int, Field(ge=2)] = 1024
    n_frequencies: Annotated[int, Field(ge=3)] = 64
    beta: PositiveFloat = 1.0
    sizes: Annotated[tuple[Count, ...], Field(min_length=3)] = (64, 128, 256, 512)
    n_seeds: Annotated[int, Field(ge=2)] = 5
    noise_sd: NonNegativeFloat = 0.5
    stop_scale: PositiveFloat = 1.0
    lr_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.5
    sgd_batch: Count = 32
    sgd_lr_factor: PositiveFloat = 0.5
    n_quadrature: Count = 512
    net_dtype: Literal["float32", "float64"] = "float32"
    n_boot: Count = 1000

    @model_validator(mode="after")
    def _check_grid(self) -> NetworkRatesConfig:
        _strictly_increasing("depths", self.depths)
        _strictly_increasing("sizes", self.sizes)
        if self.width % 2:
            raise NtklabValueError(
                "width: expected an even width (two antisymmetric halves of width / 2), "
                f"received {self.width}"
            )
        if self.lr_fraction * self.sgd_lr_factor >= 1:
            raise NtklabValueError(
                "sgd_lr_factor: expected lr_fraction * sgd_lr_factor < 1 (an SGD step below "
                f"the critical step), received {self.sgd_lr_factor} with lr_fraction "
                f"{self.lr_fraction}"
            )
        if self.n_quadrature <= 2 * self.n_frequencies:
            raise NtklabValueError(
                f"n_quadrature: expected more than 2 * n_frequencies = "
                f"{2 * self.n_frequencies} points (exact risk of a degree-{self.n_frequencies}"
                f" target), received {self.n_quadrature}"
            )
        return self


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
    risks = {name: np.empty((seeds, len(sizes))) for name in ("kernel", *LEARNERS)}
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


def measure(config: NetworkRatesConfig, ctx: RunContext) -> Measurement:
    """Risks of kernel GD and of the GD- and SGD-trained networks at every depth and size,
    their log-log slopes (seed bootstrap) and the networks' worst risk ratios.

    Arrays: ``sizes``; ``risk_{kernel,gd,sgd}_depth{L}`` of shape (n_seeds, n_sizes);
    ``predicted_rate`` and ``gamma``, one per depth.
    """
    sizes = np.array(config.sizes, dtype=np.float64)
    metrics: list[Metric] = []
    arrays: dict[str, np.ndarray] = {"sizes": sizes}
    predicted_rates, gammas = [], []
    for d, depth in enumerate(config.depths):
        arch = smooth_mlp(depth, config.activation, config.w_std, config.b_std)
        with torch.no_grad():
            mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), config.n_frequencies)
        risks, consts = network_risks(arch, mu, config, ctx.generator(f"depth={depth}"))
        predicted = consts["predicted"]
        predicted_rates.append(predicted)
        gammas.append(consts["gamma"])
        fits = {
            name: fit_power_law_bootstrap(sizes, r, n_boot=config.n_boot, generator=ctx.seed)
            for name, r in risks.items()
        }
        kernel_mean = risks["kernel"].mean(axis=0)
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
        for name in LEARNERS:
            fit = fits[name]
            ratio = risks[name].mean(axis=0) / kernel_mean
            worst = float(ratio[np.argmax(np.abs(np.log(ratio)))])
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
        arrays[f"risk_kernel_depth{depth}"] = risks["kernel"]
        ctx.progress((d + 1) / len(config.depths), f"depth {depth} done")
    arrays["predicted_rate"] = np.array(predicted_rates)
    arrays["gamma"] = np.array(gammas)
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
    return Measurement(metrics=tuple(metrics), arrays=arrays, notes=notes)


def judge(config: NetworkRatesConfig, metrics: Metrics) -> Judgement:
    """PASS when, at every depth, GD and SGD networks have their worst seed-mean risk ratio
    to kernel GD in ``[1/RATIO, RATIO]`` and a log-log slope within ``SLOPE_TOLERANCE`` of
    kernel GD's."""
    checks: list[bool] = []
    parts: list[str] = []
    for depth in config.depths:
        kernel = metrics[f"kernel_slope[L={depth}]"].value
        for name in LEARNERS:
            tag = f"{name},L={depth}"
            slope = metrics[f"slope[{tag}]"].value
            worst = metrics[f"worst_risk_ratio[{tag}]"].value
            ok = 1 / RATIO <= worst <= RATIO and abs(slope - kernel) <= SLOPE_TOLERANCE
            checks.append(ok)
            parts.append(
                f"{tag}: slope {slope:.3f} vs kernel {kernel:.3f}, worst risk ratio "
                f"{worst:.2f} ({'ok' if ok else 'off'})"
            )
    depths = ", ".join(str(d) for d in config.depths)
    sizes = ", ".join(str(n) for n in config.sizes)
    criterion = (
        f"for {config.activation} networks of width {config.width} at depths {depths}, "
        f"trained by GD and by SGD: the seed-mean excess risk ({config.n_seeds} seeds) "
        f"within a factor {RATIO:g} of kernel GD's (ratio in [{1 / RATIO:.3f}, {RATIO:g}]) "
        f"at each n in {sizes}, and the log-log slope over those n within "
        f"{SLOPE_TOLERANCE:g} of kernel GD's"
    )
    return Judgement(passed=all(checks), summary="; ".join(parts), criterion=criterion)


def draw(
    config: NetworkRatesConfig, metrics: Metrics, arrays: Mapping[str, Any]
) -> dict[str, Figure]:
    """One log-log panel per depth: seed-mean risks of kernel GD and the networks against
    ``n``, with the predicted rate through kernel GD's first point."""
    sizes = np.asarray(arrays["sizes"])
    fig = Figure(figsize=(5.2 * len(config.depths), 4.2))
    axes = np.atleast_1d(fig.subplots(1, len(config.depths)))
    for d, depth in enumerate(config.depths):
        ax = axes[d]
        kernel_mean = np.asarray(arrays[f"risk_kernel_depth{depth}"]).mean(axis=0)
        kslope = metrics[f"kernel_slope[L={depth}]"].value
        ax.loglog(sizes, kernel_mean, "k-o", ms=4, label=f"kernel GD {kslope:.3f}")
        for name, marker in zip(LEARNERS, ("s", "^"), strict=True):
            slope = metrics[f"slope[{name},L={depth}]"].value
            ax.loglog(
                sizes,
                np.asarray(arrays[f"risk_{name}_depth{depth}"]).mean(axis=0),
                marker + "--",
                ms=4,
                label=f"{name.upper()} net {slope:.3f}",
            )
        predicted = float(np.asarray(arrays["predicted_rate"])[d])
        if math.isfinite(predicted):
            ref = kernel_mean[0] * (sizes / sizes[0]) ** predicted
            ax.loglog(sizes, ref, "k:", lw=0.8, label=f"predicted {predicted:.3f}")
        ax.set(
            xlabel="n",
            ylabel="excess risk (mean over seeds)",
            title=f"{config.activation}, depth {depth}, width {config.width}",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return {"network_rates": fig}


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
            f"excess risk (seed mean) within a factor {RATIO:g} of kernel GD's at each n, and "
            f"log-log slope within {SLOPE_TOLERANCE:g} of kernel GD's, for GD and SGD at each "
            "depth"
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
        measure=measure,
        judge=judge,
        draw=draw,
    )
)
