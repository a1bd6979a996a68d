"""A2 ``rkhs-vs-architecture``: the NTK's norm is a Sobolev norm; the sawtooth is cheap for a
network and exponentially expensive for the kernel (seed 000).

Claim (CLAIMS.md A2): (a) on :math:`S^1` the squared NTK RKHS norm and the squared
:math:`H^1` norm are equivalent with constants that do not grow with the frequency cut-off;
(b) the tent map :math:`s_L` (Telgarsky, arXiv:1602.04485) has :math:`2^{L-1}` peaks, is
represented exactly by a width-2 depth-``L`` ReLU network with :math:`O(L)` parameters, and
its squared RKHS norm grows by a factor about 4 per level.

Data, computation, measurement, verdict, figure:

1. the ReLU NTK of ``depth x [Dense, Relu] + Dense`` on the circle and its eigenvalues
   :math:`\\mu_k` (:func:`~ntklab.kernels.sphere.circle_eigenvalues`);
2. (a) for a trigonometric polynomial of degree :math:`\\le K`,
   :math:`\\|f\\|_{\\mathcal H}^2 / \\|f\\|_{H^1}^2` lies between :math:`c_{\\min}(K) =
   \\min_{k \\le K} r_k` and :math:`c_{\\max}(K) = \\max_{k \\le K} r_k`, :math:`r_k = 1 /
   (\\mu_k (1 + k^2))`, both attained by single frequencies; the log-log slopes of
   :math:`c_{\\min}, c_{\\max}` against :math:`K` over the cut-offs :math:`K \\ge 16` measure
   their growth (the :math:`L^2` norm in place of :math:`H^1` gives slope 2: the check can
   fail). Random trigonometric polynomials (:func:`~ntklab.data.random_trig_polynomial`) are
   checked to fall inside these bounds;
3. (b) :func:`~ntklab.nets.relu_networks.tent_network` against
   :class:`~ntklab.data.TentMap` on a dyadic grid (max error, peaks counted), its
   :func:`~ntklab.nets.relu_networks.parameter_count` and path norm; the squared RKHS norm
   of :class:`~ntklab.data.TentMapS1` from its exact Fourier coefficients truncated at
   ``k_max``, and the growth factor per level fitted over :math:`L \\ge 4`
   (:func:`~ntklab.analysis.fit_exponential_rate`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from ..analysis import fit_exponential_rate, fit_power_law
from ..data import TentMap, TentMapS1, random_trig_polynomial
from ..kernels.sphere import (
    circle_eigenvalues,
    profile_from_architecture,
    rkhs_norm_squared,
    sobolev_norm_squared,
)
from ..nets import parameter_count, path_norm, tent_network
from . import Experiment, ExperimentConfig, Metric, Outcome, RunContext, register
from .spectrum_s1 import relu_network

__all__ = ["RkhsVsArchitectureConfig", "equivalence_constants", "tent_rkhs_norms"]

SLOPE_TOL = 0.1  # |slope| of c_min(K), c_max(K) vs K: "does not grow"
GROWTH_RANGE = (3.6, 4.4)
NET_TOL = 1e-12


class RkhsVsArchitectureConfig(ExperimentConfig):
    """Grid of ``rkhs-vs-architecture``."""

    depths: tuple[int, ...] = (1, 2, 3, 4)
    w_std: float = math.sqrt(2.0)
    b_std: float = 0.1
    cutoffs: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
    slope_from: int = 16
    random_polynomials: int = 20
    tent_depths: tuple[int, ...] = tuple(range(1, 11))
    growth_from: int = 4
    k_max: int = 65536
    grid: int = 524288
    net_grid: int = 65536


def equivalence_constants(mu: np.ndarray, cutoffs: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """``(r, c_min, c_max)``: :math:`r_k = 1 / (\\mu_k (1 + k^2))` and its running min / max
    over :math:`k \\le K` for each cut-off ``K`` (inf where :math:`\\mu_k = 0`)."""
    k = np.arange(mu.shape[0], dtype=np.float64)
    with np.errstate(divide="ignore"):
        r = np.where(mu > 0, 1.0 / (mu * (1.0 + k**2)), np.inf)
    c_min = np.array([r[: c + 1].min() for c in cutoffs])
    c_max = np.array([r[: c + 1].max() for c in cutoffs])
    return r, c_min, c_max


def tent_rkhs_norms(mu: torch.Tensor, depths: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Squared RKHS and :math:`H^1` norms of :math:`s_L` on :math:`S^1`, for each ``L``,
    from the exact Fourier coefficients truncated at ``len(mu) - 1``."""
    k_max = mu.shape[0] - 1
    rkhs, h1 = [], []
    for depth in depths:
        table = TentMapS1(depth).fourier_coefficients(k_max, dtype=mu.dtype)
        rkhs.append(float(rkhs_norm_squared(table, mu)))
        h1.append(float(sobolev_norm_squared(table, 1.0)))
    return np.array(rkhs), np.array(h1)


def run(config: RkhsVsArchitectureConfig, ctx: RunContext) -> Outcome:
    dtype = torch.float64
    metrics: list[Metric] = []
    notes: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    gen = ctx.generator("polynomials")
    fig = Figure(figsize=(15.0, 4.2))
    ax_spec, ax_ratio, ax_norm = fig.subplots(1, 3)
    cut = np.array(config.cutoffs, dtype=np.float64)
    fit_mask = cut >= config.slope_from
    slopes_ok: list[bool] = []
    inside_ok: list[bool] = []
    growth: list[float] = []
    k_small = max(config.cutoffs)
    jobs = len(config.depths) + 1
    for i, depth in enumerate(config.depths):
        arch = relu_network(depth, config.w_std, config.b_std)
        profile = profile_from_architecture(arch, 2, "ntk")
        with torch.no_grad():
            mu = circle_eigenvalues(profile, config.k_max, grid=config.grid, dtype=dtype)
        mu_np = mu.numpy()
        arrays[f"ntk_eigenvalues_depth{depth}"] = mu_np[: k_small + 1]
        # (a) H^1 equivalence constants, and the L^2 ones for contrast
        _, c_min, c_max = equivalence_constants(mu_np[: k_small + 1], config.cutoffs)
        arrays[f"c_min_depth{depth}"], arrays[f"c_max_depth{depth}"] = c_min, c_max
        tag = f"depth={depth}"
        if not np.all(np.isfinite(c_max)):
            notes.append(f"{tag}: a zero eigenvalue below the cut-off, H^1 not in the RKHS")
            slopes_ok.append(False)
            continue
        s_min = fit_power_law(cut[fit_mask], c_min[fit_mask])
        s_max = fit_power_law(cut[fit_mask], c_max[fit_mask])
        k = np.arange(k_small + 1, dtype=np.float64)
        l2_ratio = 1.0 / mu_np[1 : k_small + 1]
        s_l2 = fit_power_law(k[config.slope_from :], l2_ratio[config.slope_from - 1 :])
        ok = abs(s_min.slope) <= SLOPE_TOL and abs(s_max.slope) <= SLOPE_TOL
        slopes_ok.append(ok)
        pred = f"[-{SLOPE_TOL}, {SLOPE_TOL}]"
        metrics += [
            Metric(f"c_min_slope[{tag}]", s_min.slope, s_min.ci_low, s_min.ci_high, pred),
            Metric(f"c_max_slope[{tag}]", s_max.slope, s_max.ci_low, s_max.ci_high, pred),
            Metric(
                f"c_min[{tag},K={config.cutoffs[-1]}]",
                c_min[-1],
                note=f"max {c_max[-1]:.4g}: ||f||_H^2 / ||f||_H1^2 in [c_min, c_max]",
            ),
            Metric(
                f"l2_ratio_slope[{tag}]",
                s_l2.slope,
                s_l2.ci_low,
                s_l2.ci_high,
                predicted="2 (contrast: RKHS vs L^2 grows as k^2)",
            ),
        ]
        # random polynomials of each cut-off fall inside [c_min, c_max]
        ratios = np.empty((len(config.cutoffs), config.random_polynomials))
        for j, c in enumerate(config.cutoffs):
            for m in range(config.random_polynomials):
                f = random_trig_polynomial(c, generator=gen)
                table = f.fourier_coefficients()
                ratios[j, m] = float(rkhs_norm_squared(table, mu[: c + 1])) / float(
                    sobolev_norm_squared(table, 1.0)
                )
        arrays[f"random_ratios_depth{depth}"] = ratios
        inside = bool(
            np.all(ratios >= c_min[:, None] * (1 - 1e-9))
            and np.all(ratios <= c_max[:, None] * (1 + 1e-9))
        )
        inside_ok.append(inside)
        ax_spec.loglog(k[1:], mu_np[1 : k_small + 1], lw=1.0, label=f"L={depth}")
        ax_ratio.semilogx(cut, c_min, "o-", color=f"C{i}", ms=3, label=f"L={depth}")
        ax_ratio.semilogx(cut, c_max, "s--", color=f"C{i}", ms=3)
        ax_ratio.semilogx(cut, np.median(ratios, axis=1), "x", color=f"C{i}")
        # (b) RKHS norm of the tent map
        rkhs, h1 = tent_rkhs_norms(mu, config.tent_depths)
        arrays[f"tent_rkhs_norm_sq_depth{depth}"] = rkhs
        levels = np.array(config.tent_depths, dtype=np.float64)
        sel = levels >= config.growth_from
        fit = fit_exponential_rate(levels[sel], rkhs[sel])
        factor = math.exp(-fit.rate)
        growth.append(factor)
        steps = rkhs[sel][1:] / rkhs[sel][:-1]
        metrics.append(
            Metric(
                f"rkhs_growth_per_level[{tag}]",
                factor,
                math.exp(-fit.ci_high),
                math.exp(-fit.ci_low),
                predicted=f"[{GROWTH_RANGE[0]}, {GROWTH_RANGE[1]}] (4 in the seed)",
                note=f"fit over L={int(levels[sel][0])}..{int(levels[sel][-1])}; per level "
                f"{steps.min():.3f}..{steps.max():.3f}; ||s_L||_H^2 / ||s_L||_H1^2 = "
                f"{(rkhs / h1).min():.3g}..{(rkhs / h1).max():.3g}",
            )
        )
        ax_norm.semilogy(levels, rkhs, "o-", color=f"C{i}", ms=3, label=f"NTK L={depth}")
        ctx.progress((i + 1) / jobs, f"NTK depth {depth}: growth per level {factor:.3f}")

    # the network side
    net_err, peaks, counts, paths = [], [], [], []
    x = torch.linspace(0.0, 1.0, config.net_grid + 1, dtype=dtype)
    for depth in config.tent_depths:
        net = tent_network(depth, dtype=dtype)
        with torch.no_grad():
            out = net(x[:, None])[:, 0]
        target = TentMap(depth)(x)
        net_err.append(float((out - target).abs().max()))
        inner = out[1:-1]
        is_peak = (inner > out[:-2]) & (inner >= out[2:])
        peaks.append(int(is_peak.sum()))
        counts.append(parameter_count(net))
        paths.append(path_norm(net))
    levels = np.array(config.tent_depths, dtype=np.float64)
    count_fit = np.polyfit(levels, np.array(counts, dtype=np.float64), 1)
    linear = bool(np.allclose(np.polyval(count_fit, levels), counts, atol=1e-9))
    peaks_ok = all(p == 2 ** (d - 1) for p, d in zip(peaks, config.tent_depths, strict=True))
    net_ok = max(net_err) <= NET_TOL
    arrays.update(
        {
            "tent_depths": levels,
            "net_max_error": np.array(net_err),
            "net_peaks": np.array(peaks),
            "net_parameter_count": np.array(counts),
            "net_path_norm": np.array(paths),
        }
    )
    metrics += [
        Metric("net_max_error", max(net_err), predicted=f"<= {NET_TOL:g}", note="vs TentMap"),
        Metric("net_peaks_match", float(peaks_ok), predicted="1 (2^(L-1) peaks)"),
        Metric(
            "net_parameters_per_level",
            float(count_fit[0]),
            predicted="constant (linear in L)",
            note=f"parameter count {counts[0]}..{counts[-1]} = {count_fit[0]:.0f} L + "
            f"{count_fit[1]:.0f}; l1 path norm {paths[0]:.3g}..{paths[-1]:.3g}",
        ),
    ]
    twin = ax_norm.twinx()
    twin.plot(levels, counts, "C3^:", ms=4, label="network parameters")
    twin.set_ylabel("parameters of the width-2 network")
    ax_norm.set(
        title=r"$\|s_L\|^2_{\mathcal{H}}$ vs L (log) and network size",
        xlabel="L",
        ylabel="squared NTK RKHS norm",
    )
    ax_norm.legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="lower right")
    ax_spec.set(title="ReLU NTK eigenvalues on $S^1$", xlabel="k", ylabel=r"$\mu_k$")
    kk = np.arange(1, k_small + 1, dtype=np.float64)
    ax_spec.loglog(kk, kk**-2.0, "k--", lw=0.8, label="$k^{-2}$")
    ax_spec.legend(fontsize=7)
    ax_ratio.set(
        title=r"$\|f\|^2_{\mathcal{H}} / \|f\|^2_{H^1}$: $c_{min}$ (o), $c_{max}$ (s), random (x)",
        xlabel="frequency cut-off K",
        ylabel="ratio",
    )
    ax_ratio.set_yscale("log")
    ax_ratio.legend(fontsize=7)
    fig.tight_layout()
    ctx.progress(1.0, "tent networks")

    part_a = bool(slopes_ok) and all(slopes_ok) and all(inside_ok)
    growth_ok = bool(growth) and all(GROWTH_RANGE[0] <= g <= GROWTH_RANGE[1] for g in growth)
    part_b = net_ok and peaks_ok and linear and growth_ok
    slope_vals = [m.value for m in metrics if m.name.startswith(("c_min_slope", "c_max_slope"))]
    metrics[:0] = [
        Metric(
            "equivalence_slope_max_abs",
            max((abs(v) for v in slope_vals), default=math.inf),
            predicted=f"<= {SLOPE_TOL}",
        ),
        Metric("rkhs_growth_min", min(growth, default=math.nan), predicted=f">= {GROWTH_RANGE[0]}"),
        Metric("rkhs_growth_max", max(growth, default=math.nan), predicted=f"<= {GROWTH_RANGE[1]}"),
    ]
    summary = (
        f"(a) RKHS/H^1 constants: |slope vs cut-off| <= "
        f"{max((abs(v) for v in slope_vals), default=math.inf):.3f} (predicted <= {SLOPE_TOL}), "
        f"random polynomials inside: {'yes' if all(inside_ok) else 'no'}; (b) width-2 network "
        f"= s_L to {max(net_err):.1e} (predicted <= 1e-12), {counts[0]}..{counts[-1]} "
        f"parameters ({count_fit[0]:.0f} per level), peaks 2^(L-1): "
        f"{'yes' if peaks_ok else 'no'}; RKHS-norm growth per level "
        f"{min(growth, default=math.nan):.3f}..{max(growth, default=math.nan):.3f} "
        f"(predicted [3.6, 4.4], seed: 4)"
    )
    return Outcome(
        metrics=tuple(metrics),
        passed=part_a and part_b,
        summary=summary,
        figures={"rkhs_vs_architecture": fig},
        arrays=arrays,
        notes=tuple(notes),
    )


EXPERIMENT = register(
    Experiment(
        name="rkhs-vs-architecture",
        claim_id="A2",
        claim=(
            "On S^1 the NTK RKHS norm is equivalent to the H^1 norm with constants that do not "
            "grow with the frequency; the tent map s_L has 2^(L-1) peaks, is represented "
            "exactly by a width-2 depth-L ReLU network with O(L) parameters, and its squared "
            "RKHS norm grows about 4x per level."
        ),
        criterion=(
            "(a) for trigonometric polynomials up to frequency 256 the ratio ||f||_H^2 / "
            "||f||_H1^2 stays within [c_min(K), c_max(K)] whose log-log slopes vs the cut-off K "
            "(K >= 16) are within +-0.1; (b) the explicit network equals s_L to 1e-12 with "
            "2^(L-1) peaks and a parameter count linear in L; the fitted growth factor of the "
            "squared RKHS norm per level over L >= 4 lies in [3.6, 4.4] at every NTK depth"
        ),
        config_type=RkhsVsArchitectureConfig,
        scales={
            "tiny": {
                "depths": [2],
                "cutoffs": [4, 16, 32, 64],
                "random_polynomials": 3,
                "tent_depths": [1, 2, 3, 4, 5, 6, 7],
                "k_max": 8192,
                "grid": 65536,
                "net_grid": 4096,
            },
            "quick": {},
            "paper": {
                "depths": [1, 2, 3, 4, 6, 8],
                "cutoffs": [4, 8, 16, 32, 64, 128, 256, 512, 1024],
                "random_polynomials": 100,
                "tent_depths": list(range(1, 14)),
                "k_max": 1048576,
                "grid": 8388608,
                "net_grid": 1048576,
            },
        },
        legacy_run=run,
    )
)
