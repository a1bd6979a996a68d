"""B2 ``network-rates`` end to end on its tiny grid, and its network risks against a
direct evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.network_rates as nr
from ntklab.experiments import get_experiment
from ntklab.experiments.testing import run_tiny
from ntklab.kernels.sphere import circle_eigenvalues, profile_from_architecture


def test_tiny_run_records_risks_and_verdict(tmp_path: Path) -> None:
    result = run_tiny("network-rates", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    sizes = arrays["sizes"]
    kernel = arrays["risk_kernel_depth2"]
    assert kernel.shape == (2, 3) and np.all(kernel > 0) and np.all(kernel < 1)
    verdicts = []
    for name in ("gd", "sgd"):
        risk = arrays[f"risk_{name}_depth2"]
        assert risk.shape == (2, 3) and np.all(risk > 0)
        ratio = risk.mean(axis=0) / kernel.mean(axis=0)
        worst = ratio[np.argmax(np.abs(np.log(ratio)))]
        assert abs(metrics[f"worst_risk_ratio[{name},L=2]"]["value"] - worst) < 1e-9
        slope = np.polyfit(np.log(sizes), np.log(risk.mean(axis=0)), 1)[0]
        assert abs(metrics[f"slope[{name},L=2]"]["value"] - slope) < 1e-9
        kslope = metrics["kernel_slope[L=2]"]["value"]
        verdicts.append(
            bool(np.all(np.abs(np.log(ratio)) <= np.log(nr.RATIO)))
            and abs(slope - kslope) <= nr.SLOPE_TOLERANCE
        )
    assert (result.verdict == "PASS") == all(verdicts)
    assert "antisymmetric" in " ".join(data["notes"])
    assert (result.run_dir / "network_rates.png").exists()


def test_wide_gd_network_risk_matches_kernel_gd() -> None:
    """At width 2048 the GD-trained zero-output network's risk is kernel GD's within 10%,
    on the same data and targets."""
    config = nr.NetworkRatesConfig(
        depths=(2,), width=2048, sizes=(32,), n_seeds=2, n_frequencies=32, sgd_batch=16
    )
    arch = nr.smooth_mlp(2, "tanh", config.w_std, config.b_std)
    mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), config.n_frequencies)
    risks, consts = nr.network_risks(arch, mu, config, torch.Generator().manual_seed(0))
    assert consts["lr"] > 0 and 0 < consts["gamma"] < 0.5
    ratio = risks["gd"].mean() / risks["kernel"].mean()
    assert abs(ratio - 1) < 0.1, ratio
    assert risks["sgd"].shape == (2, 1) and np.all(risks["sgd"] > 0)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("network-rates")
    assert exp.claim_id == "B2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}


def test_quadrature_risk_is_exact_for_trigonometric_predictors() -> None:
    """The networks' risk (trapezoid rule on the grid) equals Parseval on a trig polynomial."""
    from ntklab.data import TrigPolynomial, circle_grid, excess_risk_s1

    g = torch.Generator().manual_seed(4)
    f = torch.randn(20, 2, generator=g, dtype=torch.float64)
    h = torch.randn(30, 2, generator=g, dtype=torch.float64)
    f[0, 1] = h[0, 1] = 0.0
    angles, _ = circle_grid(128)
    got = nr._l2_risk(TrigPolynomial(h)(angles)[None], TrigPolynomial(f)(angles)[None])
    np.testing.assert_allclose(got[0], float(excess_risk_s1(h, f)), rtol=1e-12)
