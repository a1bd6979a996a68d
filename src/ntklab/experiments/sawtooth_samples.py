"""A3 ``sawtooth-samples``: samples the NTK needs to learn the tent map :math:`s_L` on
:math:`S^1` grow exponentially in ``L`` while the network that computes it grows linearly.

Claim (CLAIMS.md A3, seed 000): NTK kernel ridge regression on ``n`` uniform points of
:math:`S^1` with labels :math:`s_L + \\varepsilon` (:math:`\\varepsilon \\sim N(0, 0.1^2)`)
needs :math:`n^\\star(L)` samples, exponential in ``L``; the width-2 network of
:func:`~ntklab.nets.relu_networks.tent_network` has :math:`6L + 1` parameters.

Data, computation, measurement, verdict, figure:

1. per seed, ``max(n_grid)`` uniform points of the circle (nested: the first ``n`` are the
   sample of size ``n``), noise of sd ``noise_sd``, and ``n_test`` test points; labels
   :class:`~ntklab.data.TentMapS1` for every ``L`` at once;
2. the ReLU NTK of ``depth x [Dense, Relu] + Dense`` on those points, computed once;
3. for each ``n``: the first ``(1 - validation_fraction) n`` points fit, the others choose the
   ridge (:func:`~ntklab.dynamics.model_selection.select_ridge_validation`, per ``L``, one
   eigendecomposition for all ``L`` and ridges); test MSE
   :math:`= E(\\hat f - s_L)^2 + \\sigma^2`, the expected squared error on a fresh noisy label;
4. the test MSE is averaged over seeds; :math:`n^\\star(L)` is the smallest grid ``n`` whose
   mean test MSE is :math:`\\le \\sigma^2 + 0.1\\,\\mathrm{Var}(s_L)`; the growth factor per
   level is :math:`e^{b}` of the least-squares fit :math:`\\log n^\\star = a + bL` over
   ``fit_levels``, reported next to 2 (one sample per oscillation) and 4 (the seed's
   :math:`\\Omega(4^L)`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from ..analysis import fit_exponential_rate
from ..data import TentMapS1, uniform_circle
from ..dynamics import select_ridge_validation
from ..nets import parameter_count, tent_network
from . import Experiment, ExperimentConfig, Metric, Outcome, RunContext, register
from .spectrum_s1 import relu_network

__all__ = ["SawtoothSamplesConfig", "geometric_grid", "samples_needed"]

GROWTH_RANGE = (1.6, 2.6)


class SawtoothSamplesConfig(ExperimentConfig):
    """Grid of ``sawtooth-samples``."""

    levels: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    fit_levels: tuple[int, ...] = (3, 4, 5, 6)
    n_min: int = 8
    n_max: int = 2048
    grid_ratio: float = math.sqrt(2.0)
    seeds: int = 5
    n_test: int = 2000
    noise_sd: float = 0.1
    validation_fraction: float = 0.25
    depth: int = 2
    w_std: float = math.sqrt(2.0)
    b_std: float = 0.1
    ridges: tuple[float, ...] = tuple(10.0 ** (e / 2) for e in range(-16, 5))


def geometric_grid(n_min: int, n_max: int, ratio: float) -> list[int]:
    """Distinct integers ``round(n_min ratio^i)`` up to ``n_max`` (``n_max`` included)."""
    out: list[int] = []
    i = 0
    while True:
        n = round(n_min * ratio**i)
        if n > n_max:
            break
        if not out or n > out[-1]:
            out.append(n)
        i += 1
    if out[-1] != n_max:
        out.append(n_max)
    return out


def samples_needed(ns: np.ndarray, mse: np.ndarray, threshold: float) -> float:
    """The smallest ``ns[i]`` with ``mse[i] <= threshold`` (nan if none)."""
    hit = np.nonzero(mse <= threshold)[0]
    return float(ns[hit[0]]) if hit.size else math.nan


def run(config: SawtoothSamplesConfig, ctx: RunContext) -> Outcome:
    dtype = torch.float64
    ns = geometric_grid(config.n_min, config.n_max, config.grid_ratio)
    levels = config.levels
    arch = relu_network(config.depth, config.w_std, config.b_std)
    targets = [TentMapS1(level) for level in levels]
    sigma2 = config.noise_sd**2
    thresholds = np.array([sigma2 + 0.1 * f.variance for f in targets])
    mse = np.zeros((config.seeds, len(ns), len(levels)))
    ridges_chosen = np.zeros_like(mse)
    for seed in range(config.seeds):
        gen = ctx.generator(f"seed{seed}")
        angles, x = uniform_circle(config.n_max, generator=gen, dtype=dtype)
        test_angles, x_test = uniform_circle(config.n_test, generator=gen, dtype=dtype)
        noise = config.noise_sd * torch.randn(config.n_max, generator=gen, dtype=dtype)
        y = torch.stack([f(angles) for f in targets], dim=1) + noise[:, None]
        y_test = torch.stack([f(test_angles) for f in targets], dim=1)
        with torch.no_grad():
            k_all = arch.kernel(x, x).ntk
            k_test = arch.kernel(x_test, x).ntk
        scale = float(k_all.diagonal().mean())
        ridges = scale * torch.tensor(config.ridges, dtype=dtype)
        for i, n in enumerate(ns):
            n_fit = n - max(1, round(config.validation_fraction * n))
            sel = select_ridge_validation(
                k_all[:n_fit, :n_fit], y[:n_fit], k_all[n_fit:n, :n_fit], y[n_fit:n], ridges
            )
            pred = sel.predict(k_test[:, :n_fit])
            mse[seed, i] = ((pred - y_test).square().mean(dim=0) + sigma2).numpy()
            ridges_chosen[seed, i] = (sel.ridge / scale).numpy()
        ctx.progress((seed + 1) / config.seeds, f"seed {seed}: n up to {ns[-1]}")

    mean_mse = mse.mean(axis=0)  # shape: (n, L)
    n_grid = np.array(ns, dtype=np.float64)
    n_star = np.array(
        [samples_needed(n_grid, mean_mse[:, j], thresholds[j]) for j in range(len(levels))]
    )
    counts = np.array([parameter_count(tent_network(level)) for level in levels])
    level_arr = np.array(levels, dtype=np.float64)
    fit_sel = np.isin(level_arr, np.array(config.fit_levels, dtype=np.float64))
    metrics: list[Metric] = []
    notes: list[str] = []
    reached = bool(np.all(np.isfinite(n_star[fit_sel])))
    if reached and int(fit_sel.sum()) >= 3:
        fit = fit_exponential_rate(level_arr[fit_sel], n_star[fit_sel])
        factor, lo, hi = math.exp(-fit.rate), math.exp(-fit.ci_high), math.exp(-fit.ci_low)
    else:
        factor = lo = hi = math.nan
        notes.append(
            f"n* not reached within n <= {ns[-1]} for L = "
            f"{[lv for lv, s in zip(levels, n_star, strict=True) if not math.isfinite(s)]}"
        )
    passed = reached and GROWTH_RANGE[0] <= factor <= GROWTH_RANGE[1]
    supports = "2" if abs(math.log(factor / 2.0)) < abs(math.log(factor / 4.0)) else "4"
    metrics.append(
        Metric(
            "samples_growth_per_level",
            factor,
            lo,
            hi,
            predicted=f"[{GROWTH_RANGE[0]}, {GROWTH_RANGE[1]}]; 2 (one sample per oscillation)"
            " vs 4 (seed's 4^L)",
            note=f"fit of log n* over L = {list(config.fit_levels)}; closer to {supports}",
        )
    )
    for j, level in enumerate(levels):
        metrics.append(
            Metric(
                f"n_star[L={level}]",
                n_star[j],
                predicted="exponential in L",
                note=f"threshold {thresholds[j]:.4f}; {counts[j]} network parameters; "
                f"{2**level} linear pieces",
            )
        )
    metrics.append(
        Metric(
            "net_parameters_per_level",
            float(np.polyfit(level_arr, counts.astype(np.float64), 1)[0]),
            predicted="constant (linear in L)",
        )
    )

    fig = Figure(figsize=(11.0, 4.2))
    ax_n, ax_mse = fig.subplots(1, 2)
    ok = np.isfinite(n_star)
    ax_n.semilogy(level_arr[ok], n_star[ok], "o-", label=r"NTK $n^\star(L)$")
    if math.isfinite(factor):
        ref = n_star[fit_sel][0]
        l0 = level_arr[fit_sel][0]
        for base, style in ((2.0, "k--"), (4.0, "k:")):
            ax_n.semilogy(
                level_arr, ref * base ** (level_arr - l0), style, lw=0.8, label=f"{base:g}^L"
            )
    ax_n.semilogy(level_arr, 2.0**level_arr, "C2-.", lw=0.8, label="linear pieces $2^L$")
    twin = ax_n.twinx()
    twin.plot(level_arr, counts, "C3^:", ms=4, label="network parameters")
    twin.set_ylabel("parameters of the width-2 network")
    ax_n.set(
        title=f"samples needed, growth {factor:.2f} per level",
        xlabel="L",
        ylabel=r"$n^\star$ (test MSE $\leq \sigma^2 + 0.1\,$Var)",
    )
    ax_n.legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="lower right")
    for j, level in enumerate(levels):
        ax_mse.loglog(n_grid, mean_mse[:, j] - sigma2, "o-", ms=3, label=f"L={level}")
        ax_mse.axhline(thresholds[j] - sigma2, color=f"C{j}", lw=0.5, ls=":")
    ax_mse.set(
        title="NTK KRR excess test MSE (mean over seeds)",
        xlabel="n",
        ylabel=r"$E(\hat f - s_L)^2$",
    )
    ax_mse.legend(fontsize=7)
    fig.tight_layout()

    summary = (
        f"samples needed grow by {factor:.2f} per level over L = {list(config.fit_levels)} "
        f"(predicted [1.6, 2.6]; closer to {supports} than to "
        f"{'4' if supports == '2' else '2'}); n* = "
        + ", ".join(f"{int(s) if math.isfinite(s) else 'nan'}" for s in n_star)
        + f" for L = {list(levels)}; network parameters {counts[0]}..{counts[-1]} (6L + 1)"
    )
    return Outcome(
        metrics=tuple(metrics),
        passed=passed,
        summary=summary,
        figures={"sawtooth_samples": fig},
        arrays={
            "n_grid": n_grid,
            "levels": level_arr,
            "test_mse": mse,
            "ridges": ridges_chosen,
            "n_star": n_star,
            "parameter_count": counts,
        },
        notes=tuple(notes),
    )


EXPERIMENT = register(
    Experiment(
        name="sawtooth-samples",
        claim_id="A3",
        claim=(
            "NTK kernel ridge regression needs a number of samples exponential in L to learn "
            "the tent map s_L on S^1 (labels with noise sd 0.1), while the network that "
            "computes s_L has 6L + 1 parameters."
        ),
        criterion=(
            "the smallest n on a geometric grid whose seed-averaged test MSE is <= 0.01 + "
            "0.1 Var(s_L) (ridge chosen on a validation split) grows by a fitted factor in "
            "[1.6, 2.6] per level over L = 3..6; reported next to 2 and 4"
        ),
        config_type=SawtoothSamplesConfig,
        scales={
            "tiny": {
                "levels": [1, 2, 3],
                "fit_levels": [1, 2, 3],
                "n_max": 256,
                "grid_ratio": 2.0,
                "seeds": 1,
                "n_test": 200,
            },
            "quick": {},
            "paper": {
                "levels": [1, 2, 3, 4, 5, 6, 7, 8],
                "fit_levels": [3, 4, 5, 6, 7, 8],
                "n_max": 16384,
                "seeds": 20,
                "n_test": 8192,
            },
        },
        legacy_run=run,
    )
)
