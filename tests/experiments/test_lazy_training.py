"""C3 ``lazy-training`` end to end on its tiny grid; its closed-form linearization against
``train(linearize(net))``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.lazy_training  # noqa: F401  (registers the experiment)
from ntklab.dynamics import linearize
from ntklab.experiments import get_experiment
from ntklab.experiments.lazy_training import linearized_test_outputs, mlp
from ntklab.experiments.testing import run_tiny
from ntklab.nets import train


def test_tiny_run_records_drift_and_rmse(tmp_path: Path) -> None:
    result = run_tiny("lazy-training", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    assert arrays["drift_ntk"].shape == (2, 3)
    assert np.all(arrays["drift_ntk"] > 0) and np.all(arrays["rmse"] > 0)
    # NTK parameterization: the kernel moves less at width 128 than at 32, in every seed
    assert np.all(arrays["drift_ntk"][:, -1] < arrays["drift_ntk"][:, 0])
    # muP moves its kernel by O(1) at every width
    assert np.all(arrays["drift_mup"] > 0.5)
    for name in ("ntk_kernel_change_slope", "linearization_rmse_slope", "mup_kernel_change_slope"):
        m = metrics[name]
        assert m["ci_low"] <= m["value"] <= m["ci_high"] or m["ci_low"] == m["ci_high"]
    ok = (
        -1.1 <= metrics["ntk_kernel_change_slope"]["value"] <= -0.65
        and metrics["linearization_rmse_slope"]["value"] <= -0.4
        and -0.15 <= metrics["mup_kernel_change_slope"]["value"] <= 0.15
    )
    assert result.verdict == ("PASS" if ok else "FAIL")
    assert (result.run_dir / "lazy_training.png").exists()


def test_closed_form_linearization_equals_training_the_linearized_module() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(10, 4, dtype=torch.float64, generator=gen)
    y = torch.randn(6, 1, dtype=torch.float64, generator=gen)
    net = mlp(2, 1.4, 0.1).to_torch(48, in_features=4, generator=gen, dtype=torch.float64)
    lr, steps = 0.5, 30
    expected_model = linearize(net)
    train(expected_model, x[:6], y, learning_rate=lr, steps=steps)
    with torch.no_grad():
        expected = expected_model(x[6:])
    got = linearized_test_outputs(net, x[:6], y, x[6:], lr, steps)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("lazy-training")
    assert exp.claim_id == "C3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
