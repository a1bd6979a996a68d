"""A4 ``bandlimited`` end to end on its tiny grid, and the NTK side against a direct KRR."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import ntklab.experiments.bandlimited  # noqa: F401  (registers the experiment)
from ntklab.dynamics import kernel_ridge_regression
from ntklab.experiments import get_experiment
from ntklab.experiments.bandlimited import BandlimitedConfig, ntk_test_mse
from ntklab.experiments.spectrum_s1 import relu_network
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_ratios(tmp_path: Path) -> None:
    result = run_tiny("bandlimited", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m for m in data["metrics"]}
    for target in ("circle", "sphere"):
        for label in ("noisy", "noiseless"):
            m = metrics[f"ratio[{target},{label},n=32]"]
            assert np.isfinite(m["value"]) and m["value"] > 0
    arrays = np.load(result.run_dir / "arrays.npz")
    ntk = arrays["ntk_mse_circle_noisy_n32"]
    net = arrays["net_mse_circle_noisy_n32"]
    assert ntk.shape == net.shape == (2,)
    ratio = metrics["ratio[circle,noisy,n=32]"]["value"]
    np.testing.assert_allclose(ratio, np.exp(np.mean(np.log(ntk / net))), rtol=1e-12)
    # a unit-norm target: both methods beat the trivial predictor 0 (MSE about 1)
    assert np.all(ntk < 1.0) and np.all(net < 1.5)


def test_ntk_side_equals_direct_kernel_ridge_regression() -> None:
    config = BandlimitedConfig(ntk_depths=(1,), ridges=(1e-2,))
    gen = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(40, 3, generator=gen, dtype=torch.float64))
    xt = torch.nn.functional.normalize(torch.randn(30, 3, generator=gen, dtype=torch.float64))
    f = lambda z: z[:, 0] * z[:, 1] + z[:, 2]  # noqa: E731
    y = f(x)
    mse, depth, ridge = ntk_test_mse(config, x, y, xt, f(xt), 30)
    arch = relu_network(1, config.w_std, config.b_std)
    k = arch.kernel(x[:30], x[:30]).ntk
    kt = arch.kernel(xt, x[:30]).ntk
    pred = kernel_ridge_regression(
        k, y[:30], kt, ridge=1e-2 * float(arch.kernel(x, x).ntk.diagonal().mean())
    )
    expected = (pred - f(xt)).square().mean()
    torch.testing.assert_close(torch.tensor(mse, dtype=torch.float64), expected)
    assert depth == 1 and ridge == 1e-2


def test_registered_with_three_scales() -> None:
    exp = get_experiment("bandlimited")
    assert exp.claim_id == "A4"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
