"""A2 ``rkhs-vs-architecture`` end to end on its tiny grid, and its pieces against closed
forms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.rkhs_vs_architecture  # noqa: F401  (registers the experiment)
from ntklab.experiments import get_experiment
from ntklab.experiments.rkhs_vs_architecture import equivalence_constants, tent_rkhs_norms
from ntklab.experiments.testing import run_tiny


def test_tiny_run_passes_with_growth_near_four(tmp_path: Path) -> None:
    result = run_tiny("rkhs-vs-architecture", tmp_path)
    assert result.verdict == "PASS", result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    assert 3.6 <= metrics["rkhs_growth_per_level[depth=2]"]["value"] <= 4.4
    assert metrics["net_max_error"]["value"] <= 1e-12
    assert metrics["net_parameters_per_level"]["value"] == 6.0
    # the contrast: the RKHS / L^2 ratio grows as k^2, so the slope check can fail
    assert abs(metrics["l2_ratio_slope[depth=2]"]["value"] - 2.0) < 0.05
    arrays = np.load(result.run_dir / "arrays.npz")
    np.testing.assert_array_equal(arrays["net_peaks"], 2 ** (arrays["tent_depths"] - 1))
    np.testing.assert_array_equal(arrays["net_parameter_count"], 6 * arrays["tent_depths"] + 1)


def test_equivalence_constants_by_hand() -> None:
    mu = np.array([1.0, 0.5, 0.05, 0.0])
    r, c_min, c_max = equivalence_constants(mu, (1, 2, 3))
    np.testing.assert_allclose(r[:3], [1.0, 1.0, 1.0 / (0.05 * 5)])
    assert math.isinf(r[3])
    np.testing.assert_allclose(c_min, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(c_max[:2], [1.0, 4.0])
    assert math.isinf(c_max[2])


def test_tent_norms_against_closed_forms() -> None:
    """H^1: ||s_L||^2 = 1/3 + 4^L / (4 pi^2) (slope 2^L / 2 pi); for the kernel with
    mu_k = 1 / (1 + k^2) the RKHS norm is the H^1 norm."""
    k = torch.arange(2**15 + 1, dtype=torch.float64)
    mu = 1.0 / (1.0 + k**2)
    rkhs, h1 = tent_rkhs_norms(mu, (1, 2, 3, 4))
    np.testing.assert_allclose(rkhs, h1, rtol=1e-12)
    exact = 1.0 / 3.0 + 4.0 ** np.arange(1, 5) / (4 * math.pi**2)
    # truncation at K: tail of sum 8 / (pi^4 m^2) over odd m > K / M, relative ~ 1e-3
    np.testing.assert_allclose(h1, exact, rtol=2e-3)


def test_registered_with_three_scales() -> None:
    exp = get_experiment("rkhs-vs-architecture")
    assert exp.claim_id == "A2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
