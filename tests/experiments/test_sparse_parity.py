"""A5 ``sparse-parity`` end to end on its tiny grid, and the NTK side against direct KRR."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.sparse_parity  # noqa: F401  (registers the experiment)
from ntklab.data import hypercube, random_sparse_parity
from ntklab.dynamics import kernel_ridge_regression, select_ridge_loo
from ntklab.experiments import get_experiment
from ntklab.experiments.sparse_parity import SparseParityConfig, ntk_test_mse
from ntklab.experiments.spectrum_s1 import relu_network
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_both_methods(tmp_path: Path) -> None:
    result = run_tiny("sparse-parity", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    names = {m["name"] for m in data["metrics"]}
    assert {"mse_ratio[n=128]", "ntk_mse_over_var[n=128]", "ratio[n=64]"} <= names
    arrays = np.load(result.run_dir / "arrays.npz")
    assert arrays["ntk_mse"].shape == arrays["net_mse"].shape == (1, 2)
    # clipped outputs against +-1 labels: every MSE lies in [0, 4]
    for key in ("ntk_mse", "net_mse"):
        assert np.all((arrays[key] >= 0) & (arrays[key] <= 4))
    curve = arrays["net_curve_seed0_n128"]
    assert curve.shape[0] == 2 and curve[0, 0] == 0 and curve[0, -1] == 200
    # the reported network MSE is the mean of the last evaluations, not the best one
    np.testing.assert_allclose(arrays["net_mse"][0, 1], curve[1, -2:].mean())


def test_ntk_side_equals_direct_loo_krr() -> None:
    config = SparseParityConfig(dim=6, k=2, ridges=(1e-3, 1e-1, 1e1))
    gen = torch.Generator().manual_seed(0)
    parity = random_sparse_parity(6, 2, generator=gen)
    x = hypercube(50, 6, generator=gen, dtype=torch.float32)
    xt = hypercube(40, 6, generator=gen, dtype=torch.float32)
    mse, _ = ntk_test_mse(config, x, parity(x), xt, parity(xt))
    arch = relu_network(1, config.w_std, config.b_std)
    k = arch.kernel(x.double(), x.double()).ntk
    scale = float(k.diagonal().mean())
    sel = select_ridge_loo(k, parity(x).double(), [scale * r for r in config.ridges])
    pred = kernel_ridge_regression(
        k, parity(x).double(), arch.kernel(xt.double(), x.double()).ntk, ridge=sel.ridge
    )
    expected = (pred.clamp(-1, 1) - parity(xt).double()).square().mean()
    torch.testing.assert_close(torch.tensor(mse, dtype=torch.float64), expected)


def test_registered_with_three_scales() -> None:
    exp = get_experiment("sparse-parity")
    assert exp.claim_id == "A5"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.scales["paper"]["min_ratio"] == 1e4
