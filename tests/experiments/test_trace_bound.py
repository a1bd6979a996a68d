"""D2 ``trace-bound`` end to end on its tiny grid, and its GD loop against the spectral
formula of a linear model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ntklab.analysis import gd_loss_curve, kernel_eigh
from ntklab.experiments import get_experiment
from ntklab.experiments.testing import run_tiny
from ntklab.experiments.trace_bound import linear_model_check, train_until_drop


def test_tiny_run_checks_the_linear_model_and_the_networks(tmp_path: Path) -> None:
    result = run_tiny("trace-bound", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in data["metrics"]}
    assert metrics["linear_model_relative_error"] <= 1e-10
    arrays = np.load(result.run_dir / "arrays.npz")
    for key in ("mlp_zero", "mlp_random", "cnn_zero", "cnn_random"):
        loss, trace = arrays[f"loss_{key}"], arrays[f"trace_{key}"]
        assert loss.shape == trace.shape and loss.shape[0] >= 2
        np.testing.assert_allclose(trace[0], loss[0], rtol=1e-12)  # c fixed at t = 0
        assert loss[-1] < loss[0]  # GD at step 1/lambda_max decreases the loss
        assert np.all(np.diff(arrays[f"lambda_min_{key}"]) <= 0)
    # f_0 = 0: the loss at t = 0 is ||Y||^2 / 2 of centered one-hot labels (0.45 per image)
    np.testing.assert_allclose(arrays["loss_mlp_zero"][0], 0.45 * 60, rtol=1e-5)
    assert (result.run_dir / "trace_bound.png").exists()


def test_train_until_drop_stops_where_the_spectral_formula_says() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 30, dtype=torch.float64, generator=gen)
    y = torch.randn(12, 2, dtype=torch.float64, generator=gen)
    net = torch.nn.Linear(30, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        net.weight.zero_()
    lam, vecs = kernel_eigh(x @ x.T)
    eta = 1.0 / float(lam[0])
    curve, t_star = train_until_drop(net, x, y, eta=eta, drop=10.0, max_steps=500, chunk=7)
    formula = gd_loss_curve(lam, vecs, -y, torch.arange(501), eta=eta, normalization="sum")
    expected = int((formula <= formula[0] / 10).nonzero()[0])
    assert t_star == expected
    torch.testing.assert_close(curve, formula[: curve.shape[0]], rtol=1e-10, atol=0.0)


def test_linear_model_matches_formula() -> None:
    gen = torch.Generator().manual_seed(1)
    error, actual, formula = linear_model_check(
        torch.randn(40, 1, 4, 4, generator=gen), torch.randn(40, 3, generator=gen), 50
    )
    assert error <= 1e-10
    assert actual.shape == formula.shape == (51,)
    assert float(actual[-1]) < float(actual[0])


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("trace-bound")
    assert exp.claim_id == "D2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
