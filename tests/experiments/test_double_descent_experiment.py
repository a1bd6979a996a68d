"""C1 ``double-descent`` end to end on its tiny grid; its linear curve against the closed form.

(Named ``..._experiment`` because ``tests/analysis/test_double_descent.py`` exists and test
basenames must be unique.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import ntklab.experiments.double_descent  # noqa: F401  (registers the experiment)
from ntklab.experiments import get_experiment
from ntklab.experiments.double_descent import PEAK_RANGE, DoubleDescentConfig
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_both_curves(tmp_path: Path) -> None:
    result = run_tiny("double-descent", tmp_path)
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    cfg = DoubleDescentConfig(**get_experiment("double-descent").scales["tiny"])
    # the theory curve is Hastie et al.'s formula at gamma = round(g n) / n
    g = np.array([round(v * cfg.n) / cfg.n for v in cfg.gammas])
    s2, r2 = cfg.sigma2, cfg.r2
    expected = np.where(g < 1, s2 * g / (1 - g), r2 * (1 - 1 / g) + s2 / (g - 1))
    np.testing.assert_allclose(arrays["linear_theory"], expected, rtol=1e-12)
    rel = np.abs(arrays["linear_mean"] / expected - 1)
    assert metrics["linear_max_relative_error"] == rel.max()
    assert rel.max() < 0.3  # 8 draws at n = 60: loose, but not a different curve
    # random features: the interpolation peak is sharp even on the tiny grid
    risks = arrays["rf_risks"]
    assert risks.shape == (cfg.rf_repeats, len(cfg.rf_ratios), 1 + len(cfg.rf_ridges))
    median = np.median(risks, axis=0)
    np.testing.assert_allclose(arrays["rf_min_norm_median"], median[:, 0])
    assert PEAK_RANGE[0] <= metrics["rf_peak_ratio"] <= PEAK_RANGE[1]
    assert metrics["rf_min_norm_risk_at_P_eq_N"] > 10 * metrics["rf_optimal_ridge_risk_at_P_eq_N"]
    verdict_ok = (
        metrics["linear_max_relative_error"] <= 0.1
        and PEAK_RANGE[0] <= metrics["rf_peak_ratio"] <= PEAK_RANGE[1]
        and metrics["rf_optimal_ridge_max_rise"] <= 0.03
    )
    assert result.verdict == ("PASS" if verdict_ok else "FAIL")
    assert (result.run_dir / "double_descent.png").exists()


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("double-descent")
    assert exp.claim_id == "C1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
