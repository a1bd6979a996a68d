"""A3 ``sawtooth-samples`` end to end on its tiny grid, and its helpers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import ntklab.experiments.sawtooth_samples  # noqa: F401  (registers the experiment)
from ntklab.experiments import get_experiment
from ntklab.experiments.sawtooth_samples import geometric_grid, samples_needed
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_samples_needed(tmp_path: Path) -> None:
    result = run_tiny("sawtooth-samples", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    names = {m["name"] for m in data["metrics"]}
    assert {"samples_growth_per_level", "n_star[L=1]", "n_star[L=3]"} <= names
    arrays = np.load(result.run_dir / "arrays.npz")
    n_star = arrays["n_star"]
    assert n_star.shape == (3,)
    # s_1 is learnt within the grid; s_3 (4 peaks) needs more samples, or is not reached
    assert math.isfinite(n_star[0])
    assert not n_star[2] <= n_star[0]
    assert arrays["test_mse"].shape == (1, len(arrays["n_grid"]), 3)
    # the test MSE includes the noise variance 0.01 and falls with n for s_1
    mse = arrays["test_mse"][0, :, 0]
    assert np.all(mse >= 0.01) and mse[-1] < mse[0]
    np.testing.assert_array_equal(arrays["parameter_count"], [7, 13, 19])


def test_geometric_grid() -> None:
    assert geometric_grid(8, 64, 2.0) == [8, 16, 32, 64]
    assert geometric_grid(8, 40, 2.0) == [8, 16, 32, 40]
    grid = geometric_grid(8, 2048, math.sqrt(2.0))
    assert grid[:4] == [8, 11, 16, 23] and grid[-1] == 2048
    ratios = np.diff(np.log(grid))
    np.testing.assert_allclose(ratios, math.log(2) / 2, atol=0.1)


def test_samples_needed() -> None:
    ns = np.array([8.0, 16.0, 32.0, 64.0])
    assert samples_needed(ns, np.array([0.5, 0.2, 0.05, 0.01]), 0.1) == 32.0
    assert samples_needed(ns, np.array([0.5, 0.2, 0.15, 0.11]), 0.1) != samples_needed(
        ns, np.array([0.5, 0.2, 0.15, 0.1]), 0.1
    )
    assert math.isnan(samples_needed(ns, np.array([0.5, 0.4, 0.3, 0.2]), 0.1))


def test_registered_with_three_scales() -> None:
    exp = get_experiment("sawtooth-samples")
    assert exp.claim_id == "A3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
