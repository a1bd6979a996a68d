"""C2 ``flow-equals-krr`` end to end on its tiny grid, and its pieces against independent
references (an eigendecomposition in numpy, an explicit GD loop)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.flow_equals_krr  # noqa: F401  (registers the experiment)
from ntklab.dynamics import linearized_dynamics
from ntklab.experiments import get_experiment
from ntklab.experiments.flow_equals_krr import flow_by_expm, relu_network
from ntklab.experiments.testing import run_tiny


def test_tiny_run_passes_with_the_four_parts(tmp_path: Path) -> None:
    result = run_tiny("flow-equals-krr", tmp_path)
    assert result.verdict == "PASS", result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in data["metrics"]}
    assert metrics["flow_limit_vs_min_norm"] < 1e-10
    assert metrics["flow_t_inf_vs_min_norm"] < 1e-10
    assert metrics["flow_vs_expm_max"] < 1e-10
    assert abs(metrics["gd_to_flow_order"] - 1.0) < 0.05
    ratios = [v for k, v in metrics.items() if k.startswith("drop_f0_change_over_variance")]
    assert len(ratios) == 4  # three finite times and t = inf
    arrays = np.load(result.run_dir / "arrays.npz")
    assert arrays["drop_f0_change"].shape == (4, 6)
    assert np.all(np.diff(arrays["gd_errors"]) < 0)
    assert (result.run_dir / "flow_equals_krr.png").exists()


def _data(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    x = torch.randn(14, 3, dtype=torch.float64, generator=gen)
    k = relu_network(2, 1.4, 0.1).kernel(x).ntk
    y = torch.randn(10, 2, dtype=torch.float64, generator=gen)
    f0 = torch.randn(14, 2, dtype=torch.float64, generator=gen)
    return k[:10, :10], k[10:, :10], y, f0[:10], f0[10:]


def test_van_loan_exponential_matches_an_eigendecomposition(gen: torch.Generator) -> None:
    theta, theta_test, y, f0, f0_test = _data(gen)
    rate, t = 0.05, 3.0
    evals, vecs = np.linalg.eigh(theta.numpy())
    phi = vecs @ np.diag((1 - np.exp(-rate * t * evals)) / evals) @ vecs.T
    expected = f0_test.numpy() + theta_test.numpy() @ phi @ (y - f0).numpy()
    got = flow_by_expm(theta, theta_test, y - f0, f0_test, rate, t)
    torch.testing.assert_close(got, torch.from_numpy(expected), rtol=1e-11, atol=1e-12)


def test_gd_schedule_matches_an_explicit_loop(gen: torch.Generator) -> None:
    theta, theta_test, y, f0, f0_test = _data(gen)
    lr, steps, n_out = 0.3, 25, y.numel()
    train_out, test_out = f0.clone(), f0_test.clone()
    for _ in range(steps):
        residual = train_out - y
        train_out = train_out - lr / n_out * theta @ residual
        test_out = test_out - lr / n_out * theta_test @ residual
    dyn = linearized_dynamics(theta, y, learning_rate=lr, schedule="gd")
    torch.testing.assert_close(dyn.test(steps, theta_test, f0, f0_test), test_out)
    torch.testing.assert_close(dyn.train(steps, f0), train_out)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("flow-equals-krr")
    assert exp.claim_id == "C2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
