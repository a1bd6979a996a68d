"""E1 ``gp-convergence`` end to end on its tiny grid, and its slope over resolved widths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from ntklab.experiments import get_experiment
from ntklab.experiments.gp_convergence import resolved_slope, shallow_network
from ntklab.experiments.testing import run_tiny
from ntklab.nets import ensemble


def test_tiny_run_records_distances_floor_and_discretization(tmp_path: Path) -> None:
    result = run_tiny("gp-convergence", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    assert metrics["members"]["value"] == 2000
    # the Monte Carlo floor of M normal draws is about 3.4 sigma^2 / M at M = 2000
    assert 3.0 < metrics["floor_scaled"]["value"] < 3.8
    disc = metrics["discretization_w2[tanh,t=1]"]["value"]
    assert 0 < disc < 1e-3
    arrays = np.load(result.run_dir / "arrays.npz")
    w2 = arrays["w2_tanh_t0"]
    assert w2.shape == (3,) and np.isfinite(w2).all()
    assert (arrays["w2_stderr_tanh_t0"] > 0).all()
    # the narrowest network is far from its Gaussian: resolved, and above the floor noise
    assert w2[0] > 2 * arrays["w2_stderr_tanh_t0"][0]
    slope = metrics.get("w2_slope[tanh,t=1]")
    if slope is not None:
        assert (result.verdict == "PASS") == (slope["value"] <= -0.75 and disc < w2[w2 > 0].min())
    assert (result.run_dir / "gp_convergence.png").exists()


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


def test_shallow_network_is_the_seed_parameterization() -> None:
    """f = n1^(-1/2) phi(x W / sqrt(n0)) v with unit Gaussian weights, computed by hand."""
    gen = torch.Generator().manual_seed(3)
    ens = ensemble(shallow_network("erf"), 3, 16, in_features=5, generator=gen, dtype=torch.float64)
    x = torch.randn(4, 5, dtype=torch.float64, generator=gen)
    w, v = (layer.weight for layer in ens.dense)  # shapes (3, 5, 16), (3, 16, 1)
    expected = torch.erf(x @ w / math.sqrt(5)) @ v / math.sqrt(16)
    torch.testing.assert_close(ens(x), expected)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("gp-convergence")
    assert exp.claim_id == "E1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
