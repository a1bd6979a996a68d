"""``cntk-vs-cnn`` end to end on its tiny grid, and its kernel regression against a direct
solve."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ntklab.experiments import get_experiment
from ntklab.experiments.cntk_vs_cnn import cnn_architecture, kernel_regression_accuracy
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_the_four_accuracies(tmp_path: Path) -> None:
    result = run_tiny("cntk-vs-cnn", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in data["metrics"]}
    for name in ("cntk_gap", "cntk_flatten", "mlp_ntk", "cnn_gap_finite"):
        assert 0.0 <= metrics[f"{name}_accuracy"] <= 1.0
    # chance is 0.1 on 10 classes: the kernels must do better even on 40 images
    assert metrics["cntk_gap_accuracy"] > 0.3
    assert (result.verdict == "PASS") == (
        metrics["cntk_gap_accuracy"] >= metrics["mlp_ntk_accuracy"]
    )
    arrays = np.load(result.run_dir / "arrays.npz")
    assert arrays["cnn_losses"].shape == (6,)  # logged at steps 0..5
    assert (result.run_dir / "cntk_vs_cnn.png").exists()


def test_kernel_regression_matches_a_direct_solve() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(30, 1, 5, 5, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 3, (30,), generator=gen)
    k = cnn_architecture(2, 1.4, 0.1, pool=True).kernel(x).ntk
    acc = kernel_regression_accuracy(k[:20, :20], k[20:, :20], y[:20], y[20:], 1e-2)
    targets = torch.nn.functional.one_hot(y[:20], 3).double() - 1 / 3
    reg = 1e-2 * k[:20, :20].diagonal().mean()
    alpha = torch.linalg.solve(k[:20, :20] + reg * torch.eye(20, dtype=torch.float64), targets)
    expected = float(((k[20:, :20] @ alpha).argmax(1) == y[20:]).double().mean())
    assert acc == expected


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("cntk-vs-cnn")
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
