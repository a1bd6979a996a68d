"""E1 ``gp-convergence``: its judge on both sides of every threshold, its config's constraints,
its tiny run against Gaussians, a Monte Carlo floor and fits recomputed here, and its slope
over resolved widths."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from experiment_helpers import run_tiny
from ntklab.data import uniform_sphere
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    RunContext,
    RunResult,
    get_experiment,
    metrics_from_values,
    resolve_config,
)
from ntklab.experiments.gp_convergence import (
    MIN_RESOLVED,
    SLOPE_MAX,
    GpConvergenceConfig,
    judge,
    resolved_slope,
    shallow_network,
)
from ntklab.nets import ensemble

NAME = "gp-convergence"


# --- judge ---------------------------------------------------------------------------------


def _passing(config: GpConvergenceConfig) -> dict[str, float]:
    values: dict[str, float] = {"members": float(config.n_samples), "floor_scaled": 3.6}
    for name in config.activations:
        for t in config.times:
            tag = f"{name},t={t:g}"
            values |= {
                f"w2_slope[{tag}]": -1.0,
                f"resolved_widths[{tag}]": 4.0,
                f"discretization_w2[{tag}]": 1e-5,
                f"smallest_resolved_w2[{tag}]": 1e-3,
            }
    return values


JUDGE_CASES = [
    ("all inside", {}, True),
    ("slope at the bound", {"w2_slope[erf,t=10]": SLOPE_MAX}, True),
    ("slope just above the bound", {"w2_slope[erf,t=10]": SLOPE_MAX + 1e-3}, False),
    ("slope positive", {"w2_slope[tanh,t=10]": 0.2}, False),
    ("two resolved widths", {"resolved_widths[sigmoid,t=10]": float(MIN_RESOLVED)}, True),
    ("one resolved width", {"resolved_widths[sigmoid,t=10]": MIN_RESOLVED - 1.0}, False),
    ("discretization just below", {"discretization_w2[tanh,t=10]": 0.999e-3}, True),
    ("discretization equal", {"discretization_w2[tanh,t=10]": 1e-3}, False),
    ("discretization above", {"discretization_w2[tanh,t=10]": 1.001e-3}, False),
    ("NaN slope", {"w2_slope[erf,t=10]": math.nan}, False),
    ("NaN discretization", {"discretization_w2[erf,t=10]": math.nan}, False),
    ("NaN smallest distance", {"smallest_resolved_w2[erf,t=10]": math.nan}, False),
    ("NaN count", {"resolved_widths[erf,t=10]": math.nan}, False),
]


@pytest.mark.parametrize(
    ("changes", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_on_both_sides_of_every_threshold(changes: dict[str, float], passed: bool) -> None:
    config = GpConvergenceConfig()
    judgement = judge(config, metrics_from_values(_passing(config) | changes))
    assert judgement.passed is passed
    for name, value in changes.items():
        if name.startswith("w2_slope"):
            assert f"slope {value:.2f}" in judgement.summary
        if name.startswith("discretization"):
            assert f"discretization {value:.2g}" in judgement.summary


def test_judge_fails_when_a_slope_was_not_fitted() -> None:
    config = GpConvergenceConfig()
    values = _passing(config)
    del values["w2_slope[sigmoid,t=10]"]  # fewer than two resolved widths: no metric
    del values["smallest_resolved_w2[sigmoid,t=10]"]
    values["resolved_widths[sigmoid,t=10]"] = 0.0
    judgement = judge(config, metrics_from_values(values))
    assert not judgement.passed
    assert "sigmoid t=10: slope nan over 0 resolved widths" in judgement.summary


def test_judge_criterion_is_rendered_from_the_grid_that_ran() -> None:
    config = GpConvergenceConfig(
        activations=("erf",), widths=(8, 64), n_samples=500, times=(1.0, 2.5), learning_rate=0.5
    )
    judgement = judge(config, metrics_from_values(_passing(config)))
    assert judgement.passed
    text = judgement.criterion
    assert "phi in {erf}" in text and "t = 1, 2.5" in text and "M = 500" in text
    assert "widths 8, 64" in text and "step 0.5" in text and f"<= {SLOPE_MAX}" in text
    assert "tanh" not in text


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("activations", ""),
        ("activations", "tanh,tanh"),
        ("widths", "16"),
        ("widths", "32,16"),
        ("widths", "0,16"),
        ("n_samples", "1"),
        ("times", ""),
        ("times", "10,1"),
        ("times", "0.3"),  # not a whole number of steps of 0.25
        ("times", "-1"),
        ("learning_rate", "0"),
        ("n_train", "0"),
        ("input_dim", "1"),
        ("floor_repeats", "1"),
        ("n_boot", "1"),
        ("resolve_sigmas", "-1"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_error_states_expected_and_received() -> None:
    with pytest.raises(NtklabValueError, match=r"times.*multiples.*0\.25.*received 0\.3"):
        resolve_config(get_experiment(NAME), "quick", {"times": "0.3"})


# --- tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("gp-convergence"))


def _tanh_gaussians(
    config: GpConvergenceConfig, t: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Mean and std at the test input of G_t for gradient flow and for discrete GD, from the
    tanh NNGP/NTK by 2-D Gauss-Hermite quadrature (Lee et al. 2019, eq. 16)."""
    d = config.input_dim
    gen = RunContext(out_dir=Path("."), seed=config.seed).generator("data")
    points = uniform_sphere(config.n_train + 1, d, generator=gen).double().numpy() * math.sqrt(d)
    direction = uniform_sphere(1, d, generator=gen)[0].double().numpy()
    y = np.sin(1.5 * points[:-1] @ direction)
    s = points @ points.T / d  # first-layer covariance, (n + 1, n + 1)
    z, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / math.sqrt(2 * math.pi)
    q = np.diag(s)
    sa, c = np.sqrt(q)[:, None, None, None], s[:, :, None, None]
    u = sa * z[:, None]
    v = c / sa * z[:, None] + np.sqrt(np.maximum(q[None, :, None, None] - c**2 / sa**2, 0)) * z
    ww = w[:, None] * w[None, :]
    k = (np.tanh(u) * np.tanh(v) * ww).sum(axis=(2, 3))
    kdot = ((1 - np.tanh(u) ** 2) * (1 - np.tanh(v) ** 2) * ww).sum(axis=(2, 3))
    theta = k + s * kdot
    n = config.n_train
    lam, vecs = np.linalg.eigh(theta[:n, :n])
    steps = round(t / config.learning_rate)
    out = []
    for gain in (-np.expm1(-lam * t), 1 - (1 - config.learning_rate * lam) ** steps):
        a = vecs @ np.diag(gain / lam) @ vecs.T  # Theta^-1 (I - decay)
        row = theta[n, :n] @ a
        mean = row @ y
        var = k[n, n] + row @ k[:n, :n] @ row - 2 * row @ k[:n, n]
        out.append((float(mean), math.sqrt(var)))
    return out[0], out[1]


def _w2_floor(m: int, repeats: int, seed: int) -> tuple[float, float]:
    """M E[W2^2(empirical of M N(0,1) draws, N(0,1))], exact per draw by the normal's partial
    moments on each quantile interval; returns the mean and its standard error."""
    rng = np.random.default_rng(seed)
    zq = stats.norm.ppf(np.arange(m + 1) / m)
    phi = stats.norm.pdf(zq)
    finite = np.where(np.isfinite(zq), zq, 0.0)  # phi(+-inf) = 0
    inner = stats.norm.cdf(zq) - finite * phi  # int_{-inf}^{z} u^2 phi(u) du
    first, second = phi[:-1] - phi[1:], inner[1:] - inner[:-1]
    x = np.sort(rng.standard_normal((repeats, m)), axis=1)
    w2 = (x**2 / m - 2 * x * first + second).sum(axis=1)
    return float(m * w2.mean()), float(m * w2.std(ddof=1) / math.sqrt(repeats))


def _fit(widths: np.ndarray, values: np.ndarray, keep: np.ndarray) -> tuple[float, float, float]:
    """OLS slope of log values on log widths with its 95% t-interval (NaN when not defined)."""
    lx, ly = np.log(widths[keep]), np.log(values[keep])
    if lx.size == 2:
        return float((ly[1] - ly[0]) / (lx[1] - lx[0])), math.nan, math.nan
    fit = stats.linregress(lx, ly)
    half = stats.t.ppf(0.975, lx.size - 2) * fit.stderr
    return float(fit.slope), float(fit.slope - half), float(fit.slope + half)


def test_tiny_run_gaussians_and_discretization_match_quadrature(tiny: RunResult) -> None:
    config = GpConvergenceConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    assert config.activations == ("tanh",)
    for j, t in enumerate(config.times):
        tag = f"tanh,t={t:g}"
        (mu, sd), (mu_gd, sd_gd) = _tanh_gaussians(config, t)
        # the library's tanh kernel is a quadrature too: both agree far below 1e-6
        np.testing.assert_allclose(
            arrays[f"gaussians_tanh_t{j}"], [mu, sd, mu_gd, sd_gd], rtol=1e-6
        )
        assert metrics[f"gaussian_std[{tag}]"].value == pytest.approx(sd, rel=1e-6)
        # W2^2 of two 1-D Gaussians; a difference of close numbers: 1e-4 relative
        disc = (mu - mu_gd) ** 2 + (sd - sd_gd) ** 2
        assert metrics[f"discretization_w2[{tag}]"].value == pytest.approx(disc, rel=1e-4)
        se = [sd / math.sqrt(config.n_samples), sd**2 * math.sqrt(2 / (config.n_samples - 1))]
        np.testing.assert_allclose(arrays[f"standard_errors_tanh_t{j}"], se, rtol=1e-6)


def test_tiny_run_floor_matches_a_monte_carlo_reference(tiny: RunResult) -> None:
    config = GpConvergenceConfig.model_validate(tiny.config)
    metrics = {m.name: m.value for m in tiny.metrics}
    assert metrics["members"] == config.n_samples
    repeats = 400
    reference, reference_se = _w2_floor(config.n_samples, repeats, seed=7)
    # the run averages floor_repeats draws per width of the same M W2^2, whose spread is
    # reference_se * sqrt(repeats) (about half its mean); 4 combined standard errors (about
    # 0.6 at M = 2000, 150 draws) are well below the 1.7 of a 1.5x error
    draws = config.floor_repeats * len(config.widths)
    spread = reference_se * math.sqrt(repeats)
    tolerance = 4 * math.hypot(reference_se, spread / math.sqrt(draws))
    assert tolerance < 0.25 * reference
    assert abs(metrics["floor_scaled"] - reference) <= tolerance


def test_tiny_run_slopes_match_fits_recomputed_from_the_arrays(tiny: RunResult) -> None:
    config = GpConvergenceConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    widths = arrays["widths"]
    np.testing.assert_array_equal(widths, config.widths)
    sigmas = config.resolve_sigmas
    for j, t in enumerate(config.times):
        tag, key = f"tanh,t={t:g}", f"tanh_t{j}"
        w2, err = arrays[f"w2_{key}"], arrays[f"w2_stderr_{key}"]
        keep = (w2 > sigmas * err) & (w2 > 0)
        np.testing.assert_array_equal(arrays[f"resolved_{key}"], keep)
        assert metrics[f"resolved_widths[{tag}]"].value == keep.sum()
        # the tiny grid resolves at least its two narrowest widths (4 and 8)
        assert keep.sum() >= 2
        assert metrics[f"smallest_resolved_w2[{tag}]"].value == pytest.approx(w2[keep].min())
        mean_se, var_se = arrays[f"standard_errors_{key}"]
        for label, values, stderr in (
            ("w2_slope", w2, err),
            ("w2_slope_vs_gd_gaussian", arrays[f"w2_gd_{key}"], arrays[f"w2_gd_stderr_{key}"]),
            ("variance_error_slope", arrays[f"variance_error_{key}"], var_se),
            ("mean_error_slope", arrays[f"mean_error_{key}"], mean_se),
        ):
            mask = (values > sigmas * stderr) & (values > 0)
            metric = metrics.get(f"{label}[{tag}]")
            if mask.sum() < 2:
                assert metric is None
                continue
            assert metric is not None
            slope, low, high = _fit(widths, values, mask)
            # the same least squares in float64: rounding only
            assert metric.value == pytest.approx(slope, rel=1e-9)
            if math.isnan(low):
                assert metric.ci_low is None and metric.ci_high is None
            else:
                assert metric.ci_low == pytest.approx(low, rel=1e-9)
                assert metric.ci_high == pytest.approx(high, rel=1e-9)


def test_tiny_run_distances_fall_with_width(tiny: RunResult) -> None:
    """The narrowest networks are far from their Gaussian, resolved above the floor noise,
    and the distance falls from width 4 to width 8."""
    arrays = np.load(tiny.run_dir / "arrays.npz")
    w2, err = arrays["w2_tanh_t0"], arrays["w2_stderr_tanh_t0"]
    assert w2.shape == (3,) and np.isfinite(w2).all() and (err > 0).all()
    assert w2[0] > 2 * err[0] and w2[1] < w2[0]
    assert (tiny.run_dir / "gp_convergence.png").exists()


# --- helpers -------------------------------------------------------------------------------


def test_resolved_slope_uses_only_resolved_widths() -> None:
    widths = np.array([16.0, 32.0, 64.0, 128.0, 256.0])
    values = 3.0 * widths**-1.5
    values[3:] = [1e-9, -2e-6]  # below two standard errors: excluded
    stderr = np.full(5, 1e-6)
    fit = resolved_slope(widths, values, stderr, 2.0)
    assert fit.resolved == (16, 32, 64)
    torch.testing.assert_close(fit.slope, -1.5)
    assert fit.ci_low is not None and fit.ci_high is not None
    two = resolved_slope(widths[:2], values[:2], stderr[:2], 2.0)
    torch.testing.assert_close(two.slope, math.log(values[1] / values[0]) / math.log(2.0))
    none = resolved_slope(widths, np.full(5, 1e-7), stderr, 2.0)
    assert math.isnan(none.slope) and none.resolved == ()


def test_shallow_network_is_the_paper_parameterization() -> None:
    """f = n1^(-1/2) phi(x W / sqrt(n0)) v with unit Gaussian weights, computed by hand."""
    gen = torch.Generator().manual_seed(3)
    ens = ensemble(shallow_network("erf"), 3, 16, in_features=5, generator=gen, dtype=torch.float64)
    x = torch.randn(4, 5, dtype=torch.float64, generator=gen)
    w, v = (layer.weight for layer in ens.dense)  # shapes (3, 5, 16), (3, 16, 1)
    expected = torch.erf(x @ w / math.sqrt(5)) @ v / math.sqrt(16)
    torch.testing.assert_close(ens(x), expected)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "E1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is not None
