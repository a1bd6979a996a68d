"""B3 ``ntk-concentration`` end to end on its tiny grid, and its function distance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.ntk_concentration as nc
from ntklab.experiments import get_experiment
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_both_slopes(tmp_path: Path) -> None:
    result = run_tiny("ntk-concentration", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    widths = arrays["widths"]
    sup = arrays["ntk_sup_erf_depth2"]
    fn = arrays["function_sq_distance_depth2"]
    assert sup.shape == (4, 4) and fn.shape == (4, 4)
    assert np.all(sup > 0) and np.all(fn > 0)
    for name, values in (
        ("ntk_sup_slope[erf,L=2]", sup),
        ("function_sq_distance_slope[erf,L=2]", fn),
    ):
        slope = np.polyfit(np.log(widths), np.log(np.median(values, axis=0)), 1)[0]
        assert abs(metrics[name]["value"] - slope) < 1e-9
        assert metrics[name]["value"] < 0  # the distances fall with the width
    ok = (
        nc.NTK_RANGE[0] <= metrics["ntk_slope_min"]["value"]
        and metrics["ntk_slope_max"]["value"] <= nc.NTK_RANGE[1]
        and nc.FUNCTION_RANGE[0] <= metrics["function_slope_min"]["value"]
        and metrics["function_slope_max"]["value"] <= nc.FUNCTION_RANGE[1]
    )
    assert (result.verdict == "PASS") == ok
    assert (result.run_dir / "ntk_concentration.png").exists()


def test_wide_networks_track_kernel_gd() -> None:
    """The trained zero-output networks approach kernel GD: a 64x wider net is much closer."""
    config = nc.NtkConcentrationConfig(widths=(32, 2048), n_seeds=4, n_train=8, n_test=16)
    arch = nc.smooth_network(2, "erf", config.w_std, config.b_std)
    dist2, steps, lr = nc.function_distances(arch, config, torch.Generator().manual_seed(0))
    assert dist2.shape == (4, 2) and steps * lr == np.float64(steps * lr)
    assert abs(steps * lr - config.train_time) <= lr
    med = np.median(dist2, axis=0)
    assert med[1] < med[0] / 16  # O(1/m) predicts 1/64
    assert med[1] < 1e-3


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("ntk-concentration")
    assert exp.claim_id == "B3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
