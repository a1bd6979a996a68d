"""B1 ``kernel-rates`` end to end on its tiny grid, and its spectrum against theory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import ntklab.experiments.kernel_rates as kr
from ntklab.data import estimate_capacity
from ntklab.experiments import get_experiment
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_slopes_and_risks(tmp_path: Path) -> None:
    result = run_tiny("kernel-rates", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    sizes = arrays["sizes"]
    assert list(sizes) == [64, 128, 256]
    for b, beta in enumerate((0.5, 1.0)):
        risk = arrays[f"risk_beta{b}"]
        oracle = arrays[f"oracle_risk_beta{b}"]
        assert risk.shape == (3, 3)
        # risks are excess risks of a unit-norm target: in (0, 1], falling with n
        assert np.all(risk > 0) and np.all(risk < 1.0)
        assert np.all(oracle <= risk * (1 + 1e-12))
        slope = metrics[f"slope[beta={beta:g}]"]
        fitted = np.polyfit(np.log(sizes), np.log(risk.mean(axis=0)), 1)[0]
        assert abs(slope["value"] - fitted) < 1e-9
        assert slope["value"] < -0.2
        predicted = -2 * beta / (2 * beta + metrics["gamma"]["value"])
        ok = abs(slope["value"] - predicted) <= kr.TOLERANCE
        assert f"({'ok' if ok else 'off'})" in result.summary
    assert (result.run_dir / "kernel_rates.png").exists()


def test_relu_ntk_capacity_is_one_half() -> None:
    config = kr.KernelRatesConfig(n_frequencies=512)
    mu = kr.kernel_spectrum(config)
    assert abs(estimate_capacity(mu).gamma - 0.5) < 0.02


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("kernel-rates")
    assert exp.claim_id == "B1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
