"""D1 ``label-alignment`` end to end on its tiny grid, and its measurement on a kernel whose
projections are known in closed form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ntklab.experiments import get_experiment
from ntklab.experiments.label_alignment import load_images, measure_alignment
from ntklab.experiments.testing import run_tiny


def test_tiny_run_records_slopes_for_both_networks(tmp_path: Path) -> None:
    result = run_tiny("label-alignment", tmp_path)
    assert result.verdict in ("PASS", "FAIL"), result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in data["metrics"]}
    arrays = np.load(result.run_dir / "arrays.npz")
    y = load_images("digits", None, 120, torch.Generator().manual_seed(0)).targets
    for name in ("mlp", "cnn"):
        # labels align beyond chance even on 120 digits; shuffled labels do not
        assert metrics[f"label_slope[{name}]"] > metrics[f"permuted_label_slope[{name}]"] + 0.3
        assert abs(metrics[f"permuted_label_slope[{name}]"]) < 0.5
        assert 0.0 < metrics[f"top20_label_energy[{name}]"] <= 1.0
        assert metrics[f"f0_std[{name}]"] > 0.5  # a random, nonzero initial output
        lam = arrays[f"eigenvalues_{name}"]
        assert lam.shape == (120,) and np.all(np.diff(lam) <= 0)
        # energies on a full orthonormal basis add up to ||Y||_F^2 (Parseval)
        np.testing.assert_allclose(
            arrays[f"label_energy_{name}"].sum(), float(y.square().sum()), rtol=1e-10
        )
    assert (result.run_dir / "label_alignment.png").exists()


def test_measurement_recovers_constructed_alignment() -> None:
    """K = V diag(lambda) V^T with (v_i^T y)^2 = lambda_i^2 and (v_i^T r_0)^2 = lambda_i."""
    gen = torch.Generator().manual_seed(0)
    n = 200
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    lam = torch.logspace(0, -4, n, dtype=torch.float64)
    kernel = q @ torch.diag(lam) @ q.T
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    y = q @ (sign * lam)
    residual = q @ (sign * lam.sqrt())
    m = measure_alignment(
        kernel,
        y[:, None],
        (residual + y)[:, None],
        relative_range=(1e-4, 1.0),
        bins=10,
        n_boot=0,
        n_permutations=50,
        top_k=20,
        generator=torch.Generator().manual_seed(1),
    )
    # binned means of lambda^s against geometric bin centres: exact up to the bin width
    torch.testing.assert_close(m.label.slope, 2.0, rtol=0.0, atol=2e-3)
    torch.testing.assert_close(m.residual.slope, 1.0, rtol=0.0, atol=2e-3)
    torch.testing.assert_close(m.top_share, float(lam[:20].square().sum() / lam.square().sum()))
    assert abs(m.permuted.slope) < 0.3  # shuffling destroys the alignment


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("label-alignment")
    assert exp.claim_id == "D1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
