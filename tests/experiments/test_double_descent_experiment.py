"""C1 ``double-descent``: its judge on both sides of every threshold, its config's
constraints, its tiny run's linear risks against the exact finite-n expectations and its
metrics against a recomputation from its arrays.

(Named ``..._experiment`` because ``tests/analysis/test_double_descent.py`` exists and test
basenames must be unique.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ntklab.experiments.double_descent as dd
from experiment_helpers import run_tiny
from ntklab.errors import NtklabValueError
from ntklab.experiments import get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.result import RunResult

NAME = "double-descent"

# --- judge -------------------------------------------------------------------------------------

GOOD = {
    "linear_max_relative_error": 0.05,
    "rf_peak_ratio": 1.0,
    "rf_optimal_ridge_max_rise": 0.0,
    "rf_min_norm_risk_at_P_eq_N": 100.0,
    "rf_optimal_ridge_risk_at_P_eq_N": 1.0,
}
EPS = 1e-3
CASES = [
    # (metric, value, passes, how the summary shows it)
    ("linear_max_relative_error", dd.LINEAR_TOL - EPS, True, "{:.3f}"),
    ("linear_max_relative_error", dd.LINEAR_TOL + EPS, False, "{:.3f}"),
    ("rf_peak_ratio", dd.PEAK_RANGE[0] + EPS, True, "{:g}"),
    ("rf_peak_ratio", dd.PEAK_RANGE[0] - EPS, False, "{:g}"),
    ("rf_peak_ratio", dd.PEAK_RANGE[1] - EPS, True, "{:g}"),
    ("rf_peak_ratio", dd.PEAK_RANGE[1] + EPS, False, "{:g}"),
    ("rf_optimal_ridge_max_rise", dd.MONOTONE_TOL - EPS, True, "{:.1%}"),
    ("rf_optimal_ridge_max_rise", dd.MONOTONE_TOL + EPS, False, "{:.1%}"),
    ("linear_max_relative_error", math.nan, False, "{:.3f}"),
    ("rf_peak_ratio", math.nan, False, "{:g}"),
    ("rf_optimal_ridge_max_rise", math.nan, False, "{:.1f}"),
]


@pytest.mark.parametrize(("name", "value", "passes", "shown"), CASES)
def test_judge_both_sides_of_each_threshold(
    name: str, value: float, passes: bool, shown: str
) -> None:
    config = dd.DoubleDescentConfig()
    judgement = dd.judge(config, metrics_from_values(GOOD | {name: value}))
    assert judgement.passed is passes
    assert shown.format(value) in judgement.summary, judgement.summary


def test_judge_criterion_is_rendered_from_the_grid() -> None:
    config = dd.DoubleDescentConfig(
        n=80,
        gammas=(0.25, 0.95, 2.5),
        repeats=5,
        rf_n=30,
        rf_dim=7,
        rf_ratios=(0.5, 1.0, 4.0),
        rf_ridges=(0.01, 0.1),
        rf_repeats=3,
    )
    judgement = dd.judge(config, metrics_from_values(GOOD))
    assert judgement.passed
    for text in (
        "n = 80",
        "5 draws",
        "g = p/n in 0.25, 2.5 ",  # 0.95 is in the excluded band
        "[0.9, 1.1] excluded",
        "10%",
        "N = 30, d = 7, 3 repetitions",
        "P/N in 0.5, 1, 4",
        "[0.8, 1.25]",
        "2 ridges 0.01..0.1",
        "3%",
    ):
        assert text in judgement.criterion, (text, judgement.criterion)


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"gammas": "0.5,0.3,2"}, "gammas"),
        ({"gammas": "0.95,1.05"}, "gammas"),  # every gamma excluded: nothing to judge
        ({"gammas": "[]"}, "gammas"),
        ({"gammas": "-0.5,2"}, "gammas"),
        ({"n": "4", "gammas": "0.5,1.12"}, "gammas"),  # round(1.12 * 4) = 4 = n
        ({"n": "0"}, "n"),
        ({"repeats": "1"}, "repeats"),  # no standard error
        ({"r2": "0"}, "r2"),
        ({"sigma2": "0"}, "sigma2"),
        ({"rf_dim": "1"}, "rf_dim"),  # the target uses x_1 x_2
        ({"rf_ratios": "1.0"}, "rf_ratios"),  # no consecutive P to compare
        ({"rf_ratios": "2,1,3"}, "rf_ratios"),
        ({"rf_ridges": "0.1,0.01"}, "rf_ridges"),
        ({"rf_ridges": "0"}, "rf_ridges"),
        ({"rf_noise": "-1"}, "rf_noise"),
        ({"rf_n": "0"}, "rf_n"),
        ({"rf_n_test": "0"}, "rf_n_test"),
        ({"rf_repeats": "0"}, "rf_repeats"),
    ],
)
def test_config_errors_name_the_key(overrides: dict[str, str], key: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", overrides)


def test_config_scales_are_valid() -> None:
    for scale in ("tiny", "quick", "paper"):
        resolve_config(get_experiment(NAME), scale)


# --- the tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("double-descent"))


def test_tiny_run_linear_risks_match_the_exact_expectations(tiny: RunResult) -> None:
    cfg = dd.DoubleDescentConfig.model_validate(tiny.config)
    metrics = {m.name: m.value for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    n, s2, r2 = cfg.n, cfg.sigma2, cfg.r2
    p = np.array([max(1, round(v * n)) for v in cfg.gammas], dtype=np.float64)
    g = p / n
    # the theory curve is Hastie et al.'s asymptotic formula at gamma = round(g n) / n
    asymptotic = np.where(g < 1, s2 * g / (1 - g), r2 * (1 - 1 / g) + s2 / (g - 1))
    np.testing.assert_allclose(arrays["linear_theory"], asymptotic, rtol=1e-12)
    # the exact finite-n means for Gaussian designs: sigma^2 p/(n - p - 1) below p = n
    # (the mean of an inverse Wishart), r^2 (1 - n/p) + sigma^2 n/(p - n - 1) above (a
    # uniformly random row space, and the inverse Wishart again); the simulated means are
    # within 4 of their standard errors (8 draws: |t_7| > 4 has probability 0.5%)
    exact = np.where(p < n, s2 * p / (n - p - 1), r2 * (1 - n / p) + s2 * n / (p - n - 1))
    assert np.all(np.abs(arrays["linear_mean"] - exact) <= 4 * arrays["linear_stderr"])
    away = (g < dd.EXCLUDED[0]) | (g > dd.EXCLUDED[1])
    rel = np.abs(arrays["linear_mean"] / asymptotic - 1)
    assert metrics["linear_max_relative_error"] == pytest.approx(rel[away].max(), rel=1e-12)
    rel_err = arrays["linear_stderr"] / asymptotic
    assert metrics["linear_relative_stderr_max"] == pytest.approx(rel_err[away].max(), rel=1e-12)
    ridge_rel = np.abs(arrays["linear_ridge_mean"] / arrays["linear_ridge_theory"] - 1)
    got = metrics["linear_optimal_ridge_max_relative_error"]
    assert got == pytest.approx(ridge_rel.max(), rel=1e-12)
    assert tiny.criterion_met is dd.judge(cfg, {m.name: m for m in tiny.metrics}).passed
    assert "n = 60" in tiny.criterion and "N = 40" in tiny.criterion


def test_tiny_run_random_features_peak_at_the_interpolation_threshold(tiny: RunResult) -> None:
    cfg = dd.DoubleDescentConfig.model_validate(tiny.config)
    metrics = {m.name: m.value for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    ratios = np.array(cfg.rf_ratios)
    risks = arrays["rf_risks"]
    assert risks.shape == (cfg.rf_repeats, len(ratios), 1 + len(cfg.rf_ridges))
    np.testing.assert_array_equal(arrays["rf_ridges"], (0.0, *cfg.rf_ridges))
    # every metric of (b), recomputed from the stored risks with numpy
    median = np.median(risks, axis=0)
    min_norm, best = median[:, 0], median[:, 1:].min(axis=1)
    np.testing.assert_allclose(arrays["rf_min_norm_median"], min_norm, rtol=1e-12)
    np.testing.assert_allclose(arrays["rf_optimal_ridge_median"], best, rtol=1e-12)
    at_one = int(np.argmin(np.abs(ratios - 1)))
    per_rep = ratios[np.argmax(risks[:, :, 0], axis=1)]
    in_range = (per_rep >= dd.PEAK_RANGE[0]) & (per_rep <= dd.PEAK_RANGE[1])
    expected = {
        "rf_peak_ratio": ratios[np.argmax(min_norm)],
        "rf_peak_in_range_fraction": in_range.mean(),
        "rf_optimal_ridge_max_rise": (best[1:] / best[:-1] - 1).max(),
        "rf_min_norm_risk_at_P_eq_N": min_norm[at_one],
        "rf_optimal_ridge_risk_at_P_eq_N": best[at_one],
        "rf_min_norm_risk_at_largest_P": min_norm[-1],
    }
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    # the science: min-norm interpolation blows up at P = N (Belkin et al. 2019): the peak is
    # sharp even on the tiny grid, and the best ridge there is far below it
    assert dd.PEAK_RANGE[0] <= metrics["rf_peak_ratio"] <= dd.PEAK_RANGE[1]
    assert metrics["rf_min_norm_risk_at_P_eq_N"] > 10 * metrics["rf_optimal_ridge_risk_at_P_eq_N"]
    assert [p.name for p in tiny.figure_paths] == ["double_descent.png"]


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "C1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is dd.measure and exp.judge is dd.judge and exp.draw is dd.draw
