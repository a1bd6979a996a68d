"""A1 ``spectrum-s1`` end to end on its tiny grid, and its pieces against closed forms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from ntklab.experiments import get_experiment
from ntklab.experiments.spectrum_s1 import relu_network, spectrum
from ntklab.experiments.testing import run_tiny


def test_tiny_run_passes_and_records_slopes(tmp_path: Path) -> None:
    result = run_tiny("spectrum-s1", tmp_path)
    assert result.verdict == "PASS", result.summary
    data = json.loads((result.run_dir / "result.json").read_text())
    slopes = {m["name"]: m for m in data["metrics"] if "_slope[" in m["name"]}
    assert len(slopes) == 2 * 2 * 2  # 2 depths x 2 biases x (ntk, nngp)
    for name, m in slopes.items():
        target = -2.0 if name.startswith("ntk") else -4.0
        assert abs(m["value"] - target) < 0.05, (name, m)
        assert m["ci_low"] <= m["value"] <= m["ci_high"]
    assert (result.run_dir / "spectrum_s1.png").exists()
    arrays = np.load(result.run_dir / "arrays.npz")
    assert arrays["ntk_depth1_bias0"].shape == (129,)


def test_one_hidden_layer_spectrum_matches_arc_cosine_closed_form() -> None:
    """Depth 1, no bias, w_std = sqrt 2 on the unit circle: the first Dense sees cos(a)/2, so
    NTK = k1(t) + t k0(t) with t = cos(a) and the arc-cosine kernels k0, k1 (Cho & Saul),
    whose Fourier series is computed here directly with numpy."""
    arch = relu_network(1, math.sqrt(2.0), 0.0)
    mu = spectrum(arch, "ntk", 64, 4096, torch.float64)
    a = 2 * np.pi * np.arange(4096) / 4096
    t = np.cos(a)
    k0 = (np.pi - np.arccos(t)) / np.pi
    k1 = (np.sqrt(1 - t**2) + (np.pi - np.arccos(t)) * t) / np.pi
    # first Dense: K = 2 t / 2 = t, var 1; relu: nngp = k1 / 2, dot = k0 / 2; last Dense x2
    theta = 2 * (k1 / 2) + 2 * t * (k0 / 2)
    expected = np.real(np.fft.rfft(theta))[:65] / 4096
    np.testing.assert_allclose(mu, expected, atol=1e-13)
    assert np.all(np.abs(mu[3::2]) < 1e-14)  # odd k >= 3 vanish: excluded from fits


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("spectrum-s1")
    assert exp.claim_id == "A1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
