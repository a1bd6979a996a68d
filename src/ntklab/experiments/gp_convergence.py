r"""E1 ``gp-convergence``: trained one-hidden-layer networks converge in law to a Gaussian
process as the width grows (Mosig, Agazzi & Trevisan 2025, arXiv:2509.24544).

Claim: for :math:`f(x) = n_1^{-1/2} \phi(x W / \sqrt{n_0})\, v`, all weights
:math:`N(0, 1)`, no bias, trained by gradient descent on the summed squared loss, the law of
:math:`f_t(x)` over initializations approaches the Gaussian :math:`\mathcal{G}_t(x)` of the
analytic NNGP/NTK with :math:`W_2^2(f_t(x), \mathcal{G}_t(x)) = O(\log n_1 / n_1)` (an upper
bound). Measured here:

1. data: ``n_train`` inputs uniform on the sphere of radius :math:`\sqrt{n_0}` (pre-activations
   of unit variance), targets :math:`y = \sin(\tfrac32 \langle x, u\rangle)` for a random
   unit :math:`u`, and one test input on the same sphere;
2. for :math:`\phi \in \{\tanh, \mathrm{erf}, \mathrm{sigmoid}\}` and each width
   :math:`n_1`, :math:`M` networks ``serial(Dense(w_std=1, b_std=None), phi,
   Dense(w_std=1, b_std=None))`` (NTK parameterization) trained together by
   :func:`ntklab.nets.train_ensemble`, full-batch GD with ``normalization="sum"`` and step
   :math:`\eta` up to gradient-flow time :math:`t`;
3. :math:`\mathcal{G}_t(x)` of gradient flow from :func:`ntklab.dynamics.ensemble_dynamics`
   (mean and variance at the test input); the discretization error of the step is the exact
   :math:`W_2^2` between the Gaussian of discrete GD (closed form, ``schedule="gd"``) and that
   of the flow, and must lie below every resolved distance;
4. :math:`W_2^2` of the :math:`M` outputs to :math:`\mathcal{G}_t(x)`, minus the Monte Carlo
   floor of :math:`M` samples (:func:`ntklab.analysis.debiased_w2_to_normal`, bootstrap
   uncertainty); a width is *resolved* when its debiased distance exceeds ``resolve_sigmas``
   standard errors, and the log-log slope is fitted over the resolved widths (below that the
   distance is indistinguishable from the floor, and its log is undefined or noise);
5. verdict (:func:`judge`): for every activation and time, slope :math:`\le`
   :data:`SLOPE_MAX` over at least :data:`MIN_RESOLVED` resolved widths, and the
   discretization error below the smallest resolved distance. The slopes of the variance
   error :math:`|\hat\sigma^2 - \sigma_t^2|` (expected in :data:`VARIANCE_RANGE`), of the mean
   error, and of the distance to the discrete-GD Gaussian are reported.

Paper scale (3 activations, widths 16..2048, :math:`M = 10^5`, 100 steps of 0.1) is bound by
the training: :math:`3.3 \times 10^{11}` member x width x training-point x step updates per
activation, measured at 6.5 (tanh), 5.6 (erf) and 3.0 (sigmoid) ns each on one AMD EPYC core
(float32; ``torch.tanh_`` alone costs 3 ns per element against 0.5 for ``torch.sigmoid_``),
about 82 CPU-minutes, plus 96 debiased distances of :math:`10^5` samples at about 4 s each
(the floor's 200 sorted draws and the 100 bootstrap resamples): about 90 CPU-minutes in all,
at best 45-50 minutes on two dedicated cores (torch's threads split each batch of members),
1.5 hours or more on a shared two-core machine. The members are independent: more cores (or
a GPU) shorten it; ``ntklab reproduce --workers`` runs whole experiments in parallel and does
not split this one. The ensemble and its trained copy hold
:math:`2 \times 5 M n_1` float32 numbers: 8.2 GB at width 2048.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Annotated, Any, Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from pydantic import Field, model_validator
from torch import Tensor

from .. import kernels as nk
from ..analysis import debiased_w2_to_normal, fit_power_law, w2_squared_gaussians
from ..data import uniform_sphere
from ..dynamics import Gaussian, ensemble_dynamics
from ..errors import NtklabValueError
from ..nets import ensemble, train_ensemble
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

__all__ = [
    "MIN_RESOLVED",
    "SLOPE_MAX",
    "VARIANCE_RANGE",
    "GpConvergenceConfig",
    "ResolvedSlope",
    "draw",
    "judge",
    "measure",
    "resolved_slope",
    "shallow_network",
]

#: The log-log slope of the debiased W2^2 in the width must be at most this (the bound
#: log n1 / n1 has a local slope of about -0.9 over the widths used).
SLOPE_MAX = -0.75
#: The slope is fitted over at least this many resolved widths.
MIN_RESOLVED = 2
#: Expected slope of the variance error (reported, not judged).
VARIANCE_RANGE = (-1.25, -0.75)
ActivationName = Literal["tanh", "erf", "sigmoid"]
#: Largest relative distance of ``time / learning_rate`` from an integer step count.
_STEP_RTOL = 1e-6


def _increasing(name: str, values: tuple[Any, ...]) -> None:
    if any(b <= a for a, b in pairwise(values)):
        raise NtklabValueError(
            f"{name}: expected strictly increasing values, received {list(values)}"
        )


class GpConvergenceConfig(ExperimentConfig):
    """Grid of ``gp-convergence``.

    Parameters
    ----------
    activations : tuple of {"tanh", "erf", "sigmoid"}
        Activations :math:`\\phi`, non-empty and distinct.
    widths : tuple of int
        Hidden widths :math:`n_1`, at least two, strictly increasing, each >= 1.
    n_samples : int
        Networks :math:`M` per width (independent initializations), >= 2.
    times : tuple of float
        Gradient-flow times :math:`t > 0`, strictly increasing, each a whole number of steps
        of ``learning_rate``.
    learning_rate : float
        The GD step :math:`\\eta > 0` (``t = learning_rate * steps``).
    n_train : int
        Training inputs, >= 1.
    input_dim : int
        Input dimension :math:`n_0`, >= 2.
    floor_repeats, n_boot : int
        Draws of the Monte Carlo floor and bootstrap resamples of each distance, each >= 2.
    resolve_sigmas : float
        A width is resolved when its debiased distance exceeds this many standard errors
        (>= 0).
    train_dtype : {"float32", "float64"}
        Precision of the ensemble's training (the Gaussians are float64).
    """

    activations: Annotated[tuple[ActivationName, ...], Field(min_length=1)] = (
        "tanh",
        "erf",
        "sigmoid",
    )
    widths: Annotated[tuple[Count, ...], Field(min_length=2)] = (16, 32, 64, 128, 256, 512)
    n_samples: Annotated[int, Field(ge=2)] = 20_000
    times: Annotated[tuple[PositiveFloat, ...], Field(min_length=1)] = (10.0,)
    learning_rate: PositiveFloat = 0.25
    n_train: Count = 8
    input_dim: Annotated[int, Field(ge=2)] = 4
    floor_repeats: Annotated[int, Field(ge=2)] = 200
    n_boot: Annotated[int, Field(ge=2)] = 100
    resolve_sigmas: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 2.0
    train_dtype: Literal["float32", "float64"] = "float32"

    @model_validator(mode="after")
    def _check_grid(self) -> GpConvergenceConfig:
        if len(set(self.activations)) != len(self.activations):
            raise NtklabValueError(
                f"activations: expected distinct values, received {list(self.activations)}"
            )
        _increasing("widths", self.widths)
        _increasing("times", self.times)
        if len({_time_text(t) for t in self.times}) != len(self.times):
            raise NtklabValueError(
                "times: expected values distinct at 6 significant digits (they name the "
                f"metrics), received {list(self.times)}"
            )
        for t in self.times:
            steps = t / self.learning_rate
            if round(steps) < 1 or abs(steps - round(steps)) > _STEP_RTOL * max(1.0, steps):
                raise NtklabValueError(
                    f"times: expected whole multiples (>= 1) of learning_rate = "
                    f"{self.learning_rate:g}, received {t:g} ({steps:.6g} steps)"
                )
        return self


def _time_text(t: float) -> str:
    return f"{t:g}"


def _tag(activation: str, t: float) -> str:
    return f"{activation},t={_time_text(t)}"


def shallow_network(activation: ActivationName) -> nk.Architecture:
    """``serial(Dense(w_std=1, b_std=None), phi, Dense(w_std=1, b_std=None))``: the network of
    Mosig, Agazzi & Trevisan (2025) in NTK parameterization,
    :math:`f = n_1^{-1/2} \\phi(x W / \\sqrt{n_0}) v`."""
    phis: dict[str, nk.Activation] = {"tanh": nk.Tanh(), "erf": nk.Erf(), "sigmoid": nk.Sigmoid()}
    phi = phis[activation]
    return nk.serial(nk.Dense(w_std=1.0, b_std=None), phi, nk.Dense(w_std=1.0, b_std=None))


@dataclass(frozen=True)
class ResolvedSlope:
    """Log-log slope of a positive quantity over the widths where it is resolved.

    Attributes
    ----------
    slope : float
        NaN when fewer than two widths are resolved.
    ci_low, ci_high : float or None
        OLS interval (three or more resolved widths), else None.
    resolved : tuple of int
        The widths used (value > ``sigmas`` standard errors).
    """

    slope: float
    ci_low: float | None
    ci_high: float | None
    resolved: tuple[int, ...]


def resolved_slope(
    widths: np.ndarray, values: np.ndarray, stderrs: np.ndarray, sigmas: float
) -> ResolvedSlope:
    """Slope of ``log values`` on ``log widths`` over the entries with
    ``values > sigmas * stderrs`` (and ``values > 0``)."""
    keep = (values > sigmas * stderrs) & (values > 0)
    w, v = widths[keep], values[keep]
    resolved = tuple(int(x) for x in w)
    if w.shape[0] < 2:
        return ResolvedSlope(math.nan, None, None, resolved)
    if w.shape[0] == 2:
        slope = math.log(v[1] / v[0]) / math.log(w[1] / w[0])
        return ResolvedSlope(slope, None, None, resolved)
    fit = fit_power_law(w, v)
    return ResolvedSlope(fit.slope, fit.ci_low, fit.ci_high, resolved)


def _point(g: Tensor | Gaussian, j: int) -> tuple[float, float]:
    """Mean and standard deviation at time index ``j`` of a one-test-point Gaussian."""
    assert isinstance(g, Gaussian)
    return float(g.mean[j].flatten()[0]), math.sqrt(max(float(g.covariance[j].flatten()[0]), 0.0))


def _data(config: GpConvergenceConfig, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    d = config.input_dim
    points = uniform_sphere(config.n_train + 1, d, generator=gen) * math.sqrt(d)
    direction = uniform_sphere(1, d, generator=gen)[0]
    x, x_test = points[:-1], points[-1:]
    y = torch.sin(1.5 * (x @ direction))[:, None]
    return x, y, x_test


def _gaussian_targets(
    arch: nk.Architecture,
    x: Tensor,
    y: Tensor,
    x_test: Tensor,
    times: Tensor,
    steps: list[int],
    eta: float,
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Mean and standard deviation of :math:`\\mathcal{G}_t(x)` at the test input, for gradient
    flow at ``times`` and for discrete GD of step ``eta`` at ``steps``.

    Parameters
    ----------
    arch : Architecture
        The shallow network.
    x : Tensor, shape (n_train, n_0)
    y : Tensor, shape (n_train, 1)
    x_test : Tensor, shape (1, n_0)
    times : Tensor, shape (T,)
        Gradient-flow times.
    steps : list of int, length T
        GD step counts, ``round(time / eta)``.
    eta : float
        GD step.

    Returns
    -------
    flow, gd : list of (float, float), length T
        ``(mu, sd)`` per time, of the flow Gaussian and of the discrete-GD Gaussian.
    """
    flow = ensemble_dynamics(arch, x, y, learning_rate=1.0, schedule="flow", normalization="sum")
    gd = ensemble_dynamics(arch, x, y, learning_rate=eta, schedule="gd", normalization="sum")
    g_flow = flow.predict(times, x_test, "ntk", compute_cov=True)
    g_gd = gd.predict(torch.tensor(steps, dtype=torch.float64), x_test, "ntk", compute_cov=True)
    return [_point(g_flow, j) for j in range(len(steps))], [
        _point(g_gd, j) for j in range(len(steps))
    ]


def _trained_outputs(
    config: GpConvergenceConfig,
    arch: nk.Architecture,
    width: int,
    data: tuple[Tensor, Tensor, Tensor],
    steps: list[int],
    gen: torch.Generator,
) -> list[Tensor]:
    """Train ``config.n_samples`` networks of width ``width`` and return their test outputs.

    Parameters
    ----------
    data : (Tensor, Tensor, Tensor)
        ``x`` (n_train, n_0), ``y`` (n_train, 1), ``x_test`` (1, n_0).
    steps : list of int, length T
        GD step counts at which the outputs are read.
    gen : torch.Generator
        Draws the networks, on its device, where they are trained.

    Returns
    -------
    list of Tensor, length T, each shape (M,), float64 on the CPU
        :math:`f_{s}(x_{test})` of the M members after ``steps[j]`` steps.
    """
    x, y, x_test = data
    tdtype = torch.float32 if config.train_dtype == "float32" else torch.float64
    device = gen.device  # the networks are drawn and trained where the generator lives
    ens = ensemble(
        arch,
        config.n_samples,
        width,
        in_features=config.input_dim,
        generator=gen,
        dtype=tdtype,
        device=device,
    )
    trained = train_ensemble(
        ens,
        x.to(device, tdtype),
        y.to(device, tdtype),
        learning_rate=config.learning_rate,
        t=max(steps),
        normalization="sum",
        x_test=x_test.to(device, tdtype),
        record_t=sorted(set(steps)),
    )
    assert trained.test_outputs is not None
    recorded = trained.steps.tolist()
    outs = trained.test_outputs.to("cpu", torch.float64)
    return [outs[recorded.index(s), :, 0, 0] for s in steps]


def _slope_metrics(
    tag: str, fits: tuple[ResolvedSlope, ...], standard_errors: tuple[float, float], n_widths: int
) -> tuple[list[Metric], list[str]]:
    """Metrics of the four slopes (W2^2, variance error, mean error, W2^2 to the GD Gaussian)
    at one activation and time; a slope not fitted gives a note instead.

    Parameters
    ----------
    tag : str
        ``"{activation},t={time}"``.
    fits : tuple of 4 ResolvedSlope
        In the order above.
    standard_errors : (float, float)
        Standard errors of the sample mean and of the sample variance.
    n_widths : int
        Number of widths measured.

    Returns
    -------
    metrics : list of Metric
    notes : list of str
    """
    fit, fit_var, fit_mean, fit_gd = fits
    mean_se, var_se = standard_errors
    metrics: list[Metric] = []
    notes: list[str] = []
    for label, f, predicted, note in (
        ("w2_slope", fit, f"<= {SLOPE_MAX} (bound: log n1 / n1)", ""),
        (
            "variance_error_slope",
            fit_var,
            f"[{VARIANCE_RANGE[0]}, {VARIANCE_RANGE[1]}]",
            f"|sample variance - sigma_t^2|, standard error {var_se:.2g}; ",
        ),
        (
            "mean_error_slope",
            fit_mean,
            None,
            f"|sample mean - mu_t|, standard error {mean_se:.2g}; ",
        ),
        (
            "w2_slope_vs_gd_gaussian",
            fit_gd,
            None,
            "distance to the Gaussian of the same discrete GD (no step bias); ",
        ),
    ):
        widths_text = ", ".join(map(str, f.resolved)) or "none"
        if math.isfinite(f.slope):
            metrics.append(
                Metric(
                    f"{label}[{tag}]",
                    f.slope,
                    f.ci_low,
                    f.ci_high,
                    predicted=predicted,
                    note=f"{note}resolved widths {widths_text} of {n_widths}",
                )
            )
        else:
            notes.append(f"{label}[{tag}]: not fitted, resolved widths: {widths_text}")
    return metrics, notes


def _time_summary(
    config: GpConvergenceConfig,
    name: str,
    j: int,
    widths: np.ndarray,
    errors: dict[str, np.ndarray],
    gaussians: tuple[tuple[float, float], tuple[float, float]],
    steps: list[int],
) -> tuple[list[Metric], list[str], dict[str, np.ndarray[Any, Any]]]:
    """Slopes, resolved widths, discretization error and arrays of one activation at time
    index ``j``.

    Parameters
    ----------
    name : str
        Activation.
    widths : ndarray, shape (W,)
    errors : dict of str to ndarray, each shape (T, W)
        ``w2``, ``w2_err``, ``w2_gd``, ``w2_gd_err`` (debiased W2^2 to the flow and GD
        Gaussians with bootstrap standard errors), ``mean_err``, ``var_err``.
    gaussians : ((float, float), (float, float))
        ``(mu, sd)`` of the flow Gaussian and of the GD Gaussian at time ``j``.
    steps : list of int, length T

    Returns
    -------
    metrics : list of Metric
    notes : list of str
    arrays : dict of str to ndarray
        Keyed ``{quantity}_{name}_t{j}``.
    """
    t = config.times[j]
    tag = _tag(name, t)
    (mu, sd), (mu_gd, sd_gd) = gaussians
    w2, w2_err = errors["w2"][j], errors["w2_err"][j]
    var_se = sd**2 * math.sqrt(2.0 / (config.n_samples - 1))
    mean_se = sd / math.sqrt(config.n_samples)
    sigmas = config.resolve_sigmas
    fit = resolved_slope(widths, w2, w2_err, sigmas)
    fit_gd = resolved_slope(widths, errors["w2_gd"][j], errors["w2_gd_err"][j], sigmas)
    fit_var = resolved_slope(widths, errors["var_err"][j], np.full(len(widths), var_se), sigmas)
    fit_mean = resolved_slope(widths, errors["mean_err"][j], np.full(len(widths), mean_se), sigmas)
    disc = float(
        w2_squared_gaussians(
            torch.tensor([mu_gd]),
            torch.tensor([[sd_gd**2]]),
            torch.tensor([mu]),
            torch.tensor([[sd**2]]),
        )
    )
    resolved = np.isin(widths, np.array(fit.resolved, dtype=np.float64))
    metrics, notes = _slope_metrics(
        tag, (fit, fit_var, fit_mean, fit_gd), (mean_se, var_se), len(widths)
    )
    metrics += [
        Metric(
            f"resolved_widths[{tag}]",
            len(fit.resolved),
            predicted=f">= {MIN_RESOLVED}",
            note=f"widths with W2^2 - floor > {config.resolve_sigmas:g} standard errors: "
            + (", ".join(map(str, fit.resolved)) or "none"),
        ),
        Metric(
            f"discretization_w2[{tag}]",
            disc,
            predicted="< smallest_resolved_w2",
            note=f"W2^2(GD Gaussian, flow Gaussian), step {config.learning_rate:g}, "
            f"{steps[j]} steps",
        ),
    ]
    if fit.resolved:
        metrics.append(
            Metric(
                f"smallest_resolved_w2[{tag}]",
                float(w2[resolved].min()),
                note="smallest W2^2 - floor over the resolved widths",
            )
        )
    metrics.append(Metric(f"gaussian_std[{tag}]", sd, note=f"G_t(x) mean {mu:.4f}"))
    key = f"{name}_t{j}"
    arrays: dict[str, np.ndarray[Any, Any]] = {
        f"w2_{key}": w2,
        f"w2_stderr_{key}": w2_err,
        f"w2_gd_{key}": errors["w2_gd"][j],
        f"w2_gd_stderr_{key}": errors["w2_gd_err"][j],
        f"resolved_{key}": resolved,
        f"mean_error_{key}": errors["mean_err"][j],
        f"variance_error_{key}": errors["var_err"][j],
        f"standard_errors_{key}": np.array([mean_se, var_se]),
        f"gaussians_{key}": np.array([mu, sd, mu_gd, sd_gd]),
    }
    return metrics, notes, arrays


def measure(config: GpConvergenceConfig, ctx: RunContext) -> Measurement:
    """Train the ensembles of every activation and width, and measure their distance to
    :math:`\\mathcal{G}_t(x)` at every time (arrays per ``{activation}_t{time index}``)."""
    data = _data(config, ctx.generator("data"))
    x, y, x_test = data
    widths = np.array(config.widths, dtype=np.float64)
    eta = config.learning_rate
    steps = [round(t / eta) for t in config.times]
    times = torch.tensor(config.times, dtype=torch.float64)
    metrics: list[Metric] = []
    notes: list[str] = []
    arrays: dict[str, np.ndarray[Any, Any]] = {"widths": widths}
    jobs = len(config.activations) * len(config.widths)
    done = 0
    floor_scaled: list[float] = []
    for name in config.activations:
        arch = shallow_network(name)
        targets, gd_targets = _gaussian_targets(arch, x, y, x_test, times, steps, eta)
        shape = (len(steps), len(config.widths))
        errors = {
            k: np.empty(shape)
            for k in ("w2", "w2_err", "w2_gd", "w2_gd_err", "mean_err", "var_err")
        }
        for i, width in enumerate(config.widths):
            outs = _trained_outputs(
                config,
                arch,
                width,
                data,
                steps,
                ctx.generator(f"init-{name}-{width}", device=ctx.device),
            )
            for j, out in enumerate(outs):
                mu, sd = targets[j]
                fgen = ctx.generator(f"floor-{name}-{width}-{j}")
                for (m, s), key in ((targets[j], "w2"), (gd_targets[j], "w2_gd")):
                    d = debiased_w2_to_normal(
                        out,
                        m,
                        s,
                        repeats=config.floor_repeats,
                        n_boot=config.n_boot,
                        generator=fgen,
                    )
                    errors[key][j, i], errors[f"{key}_err"][j, i] = d.value, d.stderr
                    if key == "w2":
                        floor_scaled.append(d.floor.scaled_mean)
                errors["mean_err"][j, i] = abs(float(out.mean()) - mu)
                errors["var_err"][j, i] = abs(float(out.var()) - sd**2)
            done += 1
            ctx.progress(done / jobs, f"{name}, width {width}")
        for j in range(len(config.times)):
            m_j, n_j, a_j = _time_summary(
                config, name, j, widths, errors, (targets[j], gd_targets[j]), steps
            )
            metrics += m_j
            notes += n_j
            arrays.update(a_j)

    floor_mean = float(np.mean(floor_scaled))
    metrics[:0] = [
        Metric("members", config.n_samples, note="M independent initializations per width"),
        Metric(
            "floor_scaled",
            floor_mean,
            predicted="about 3.6",
            unit="sigma^2/M",
            note="Monte Carlo floor M E[W2^2]/sigma^2 of M normal draws, subtracted",
        ),
    ]
    notes.append(
        f"step {eta:g} ({', '.join(map(str, steps))} steps); floor {floor_mean:.2f} sigma^2/M "
        f"with M = {config.n_samples}; a width is resolved when the debiased distance exceeds "
        f"{config.resolve_sigmas:g} bootstrap standard errors"
    )
    return Measurement(metrics=tuple(metrics), arrays=arrays, notes=tuple(notes))


def _value(metrics: Metrics, name: str) -> float:
    """The metric's value, NaN when it is missing."""
    metric = metrics.get(name)
    return math.nan if metric is None else metric.value


def judge(config: GpConvergenceConfig, metrics: Metrics) -> Judgement:
    """For every activation and time: at least :data:`MIN_RESOLVED` resolved widths, the
    slope of the debiased :math:`W_2^2` at most :data:`SLOPE_MAX`, and the discretization
    error below the smallest resolved distance."""
    checks: list[bool] = []
    parts: list[str] = []
    for name in config.activations:
        for t in config.times:
            tag = _tag(name, t)
            resolved = _value(metrics, f"resolved_widths[{tag}]")
            slope = _value(metrics, f"w2_slope[{tag}]")
            disc = _value(metrics, f"discretization_w2[{tag}]")
            smallest = _value(metrics, f"smallest_resolved_w2[{tag}]")
            checks.append(resolved >= MIN_RESOLVED and slope <= SLOPE_MAX and disc < smallest)
            parts.append(
                f"{name} t={_time_text(t)}: slope {slope:.2f} over {resolved:.0f} resolved "
                f"widths, discretization {disc:.2g} vs smallest resolved distance {smallest:.2g}"
            )
    summary = "; ".join(parts) + f" (predicted <= {SLOPE_MAX}; bound log n1/n1, about -0.9)"
    criterion = (
        f"for phi in {{{', '.join(config.activations)}}} at t = "
        f"{', '.join(map(_time_text, config.times))}: the log-log slope in the width of "
        f"W2^2(f_t(x), G_t(x)) minus the Monte Carlo floor of M = {config.n_samples} samples is "
        f"<= {SLOPE_MAX}, fitted over at least {MIN_RESOLVED} of the widths "
        f"{', '.join(map(str, config.widths))} resolved above {config.resolve_sigmas:g} "
        f"bootstrap standard errors; and the discretization error W2^2(GD Gaussian, flow "
        f"Gaussian) at step {config.learning_rate:g} is below the smallest resolved distance"
    )
    return Judgement(passed=all(checks), summary=summary, criterion=criterion)


def draw(
    config: GpConvergenceConfig, metrics: Metrics, arrays: Mapping[str, np.ndarray[Any, Any]]
) -> dict[str, Figure]:
    """One log-log panel of debiased distances per time, one of variance errors."""
    widths = arrays["widths"]
    fig = Figure(figsize=(5.0 * len(config.times) + 4.5, 4.2))
    axes = fig.subplots(1, len(config.times) + 1)
    for a_index, name in enumerate(config.activations):
        color = f"C{a_index}"
        for j, t in enumerate(config.times):
            tag, key = _tag(name, t), f"{name}_t{j}"
            w2, w2_err = arrays[f"w2_{key}"], arrays[f"w2_stderr_{key}"]
            resolved = arrays[f"resolved_{key}"].astype(bool)
            slope = _value(metrics, f"w2_slope[{tag}]")
            ax = axes[j]
            upper = np.maximum(w2 + config.resolve_sigmas * w2_err, 1e-12)
            ax.errorbar(
                widths,
                np.maximum(w2, 1e-12),
                yerr=w2_err,
                fmt="o",
                color=color,
                ms=4,
                capsize=2,
                label=f"{name}: slope {slope:.2f}",
            )
            ax.plot(widths[~resolved], upper[~resolved], "v", color=color, ms=5, alpha=0.6)
            if resolved.sum() >= 2 and math.isfinite(slope):
                wr, v0 = widths[resolved], float(w2[resolved][0])
                ax.loglog(wr, v0 * (wr / wr[0]) ** slope, "-", color=color, lw=1)
                ax.loglog(wr, v0 * np.log(wr) / np.log(wr[0]) * wr[0] / wr, ":", color=color, lw=1)
            ax.axhline(_value(metrics, f"discretization_w2[{tag}]"), color=color, ls="--", lw=0.7)
            var_slope = _value(metrics, f"variance_error_slope[{tag}]")
            axes[-1].loglog(
                widths,
                np.maximum(arrays[f"variance_error_{key}"], 1e-12),
                "o-",
                color=color,
                ms=3,
                label=f"{name} t={_time_text(t)}: {var_slope:.2f}",
            )
            var_se = float(arrays[f"standard_errors_{key}"][1])
            axes[-1].axhline(config.resolve_sigmas * var_se, color=color, ls=":", lw=0.7)
    for j, t in enumerate(config.times):
        axes[j].set(
            xscale="log",
            yscale="log",
            xlabel="width $n_1$",
            ylabel=r"$W_2^2(f_t(x), G_t(x))$ - floor",
            title=f"t = {t:g}, M = {config.n_samples} (dotted: log n1/n1; v: unresolved, 2 se)",
        )
        axes[j].legend(fontsize=7)
    axes[-1].set(
        xlabel="width $n_1$",
        ylabel=r"$|\hat\sigma^2 - \sigma_t^2|$",
        title="variance error (dotted: 2 se)",
    )
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return {"gp_convergence": fig}


EXPERIMENT = register(
    Experiment(
        name="gp-convergence",
        claim_id="E1",
        claim=(
            "Trained one-hidden-layer networks f = n1^(-1/2) phi(x W / sqrt(n0)) v converge in "
            "law to the Gaussian process G_t of the analytic NNGP/NTK, with "
            "W2^2(f_t(x), G_t(x)) = O(log n1 / n1) at every training time (an upper bound)."
        ),
        criterion=(
            "at a fixed test input, the squared 1-D Wasserstein distance between the outputs "
            "of M independent networks and G_t(x), minus the Monte Carlo floor of M samples, "
            "has a log-log slope <= -0.75 in the width (fitted over the widths where it is "
            "resolved above the floor), for phi in {tanh, erf, sigmoid}; the step's "
            "discretization error is below the distances measured"
        ),
        reported="W2^2(f_t, G_t) = O(log n1 / n1): slope about -0.9 or steeper",
        headline=("w2_slope[tanh,t=10]", "w2_slope[erf,t=10]", "w2_slope[sigmoid,t=10]"),
        dataset="synthetic: fixed inputs, M networks per width",
        paper_scale_cost=(
            "about 90 CPU-minutes (training 1e12 member-updates; 45-50 min on 2 idle cores, "
            "over an hour on a shared 2-core machine)"
        ),
        config_type=GpConvergenceConfig,
        dtype_field="train_dtype",
        uses_device=True,
        scales={
            "tiny": {
                "activations": ("tanh",),
                "widths": (4, 8, 16),
                "n_samples": 2000,
                "learning_rate": 0.1,
                "times": (1.0,),
                "floor_repeats": 50,
                "n_boot": 30,
            },
            "quick": {},
            "paper": {
                "widths": (16, 32, 64, 128, 256, 512, 1024, 2048),
                "n_samples": 100_000,
                "times": (1.0, 10.0),
                "learning_rate": 0.1,
            },
        },
        measure=measure,
        judge=judge,
        draw=draw,
    )
)
