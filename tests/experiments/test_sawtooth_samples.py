"""A3 ``sawtooth-samples``: its judge on both sides of its thresholds, its config's errors,
its tiny run's metrics recomputed from the stored arrays and by a dense ridge regression, and
its helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from experiment_helpers import run_tiny
from ntklab.data import TentMapS1, uniform_circle
from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.result import RunResult
from ntklab.experiments.sawtooth_samples import (
    GROWTH_RANGE,
    SawtoothSamplesConfig,
    geometric_grid,
    judge,
    samples_needed,
)
from ntklab.experiments.spectrum_s1 import relu_network

NAME = "sawtooth-samples"
TINY = SawtoothSamplesConfig(
    levels=(1, 2, 3), fit_levels=(1, 2, 3), n_max=256, grid_ratio=2.0, seeds=1, n_test=200
)

# ---------------------------------------------------------------------------------------------
# judge

EPS = 1e-6
JUDGE_CASES = [
    ("growth 2", 2.0, True),
    ("growth just above the lower end", GROWTH_RANGE[0] + EPS, True),
    ("growth just below the lower end", GROWTH_RANGE[0] - EPS, False),
    ("growth just below the upper end", GROWTH_RANGE[1] - EPS, True),
    ("growth just above the upper end", GROWTH_RANGE[1] + EPS, False),
    ("growth 4", 4.0, False),
    ("n* not reached", math.nan, False),
    ("negative growth", -1.0, False),
    ("infinite growth", math.inf, False),
]


@pytest.mark.parametrize(
    ("growth", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_thresholds(growth: float, passed: bool) -> None:
    values = {
        "samples_growth_per_level": (growth, growth * 0.9, growth * 1.1),
        "n_star[L=1]": 16.0,
        "n_star[L=2]": 32.0,
        "n_star[L=3]": math.nan,
        "net_parameters_per_level": 6.0,
    }
    judgement = judge(TINY, metrics_from_values(values))
    assert judgement.passed is passed
    assert f"grow by {growth:.2f} per level" in judgement.summary
    assert "n* = 16, 32, nan for L = [1, 2, 3]" in judgement.summary
    # the criterion renders the grid that ran and the range
    criterion = judgement.criterion
    assert "grid 8..256" in criterion and "1 seeds" in criterion and "L = [1, 2, 3]" in criterion
    assert f"[{GROWTH_RANGE[0]}, {GROWTH_RANGE[1]}]" in criterion


def test_judge_says_which_of_two_and_four_is_closer() -> None:
    def summary(growth: float) -> str:
        values = {"samples_growth_per_level": growth, "net_parameters_per_level": 6.0}
        values |= {f"n_star[L={level}]": 8.0 for level in (1, 2, 3)}
        return judge(TINY, metrics_from_values(values)).summary

    assert "closer to 2 than to 4" in summary(2.8)
    assert "closer to 4 than to 2" in summary(2.9)  # sqrt 8 = 2.83 is the midpoint
    assert "closer to neither" in summary(math.nan)


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("levels", "1,2"),
        ("levels", "2,1,3"),
        ("levels", "0,1,2"),
        ("fit_levels", "4,5,7"),  # 7 is not a level
        ("fit_levels", "4,5"),
        ("n_min", "4096"),  # above n_max
        ("n_min", "1"),  # no fit point beside the validation point
        ("n_min", "0"),
        ("n_max", "-5"),
        ("grid_ratio", "1"),  # the grid would never grow
        ("seeds", "0"),
        ("n_test", "0"),
        ("noise_sd", "-0.1"),
        ("validation_fraction", "0"),
        ("validation_fraction", "1"),
        ("depth", "0"),
        ("w_std", "0"),
        ("b_std", "-1"),
        ("ridges", "[]"),
        ("ridges", "1,0.1"),
        ("ridges", "0,1"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_accepts_the_smallest_workable_grid() -> None:
    config = resolve_config(get_experiment(NAME), "tiny", {"n_min": "2"})
    assert isinstance(config, SawtoothSamplesConfig) and config.n_min == 2


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("sawtooth"))


def test_tiny_n_star_and_growth_recomputed_from_the_stored_mse(tiny: RunResult) -> None:
    """n*(L): the first grid size whose stored test MSE is <= 0.01 + 0.1 / 12 (noise variance
    plus a tenth of Var(s_L) = 1/12, a closed form); the growth factor and its interval: the
    exponential of the OLS slope of log n* on L and its 95% t-interval (to 1e-9)."""
    m = {x.name: x for x in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    ns = arrays["n_grid"]
    np.testing.assert_array_equal(ns, [8, 16, 32, 64, 128, 256])
    threshold = 0.1**2 + 0.1 / 12
    np.testing.assert_allclose(arrays["thresholds"], threshold, rtol=1e-15)
    mse = arrays["test_mse"].mean(axis=0)
    n_star = []
    for j, level in enumerate((1, 2, 3)):
        below = np.nonzero(mse[:, j] <= threshold)[0]
        n_star.append(float(ns[below[0]]))
        assert m[f"n_star[L={level}]"].value == n_star[-1]
    reg = stats.linregress([1.0, 2.0, 3.0], np.log(n_star))
    q = stats.t.ppf(0.975, 1)
    growth = m["samples_growth_per_level"]
    assert growth.value == pytest.approx(math.exp(reg.slope), rel=1e-9)
    assert growth.ci_low == pytest.approx(math.exp(reg.slope - q * reg.stderr), rel=1e-9)
    assert growth.ci_high == pytest.approx(math.exp(reg.slope + q * reg.stderr), rel=1e-9)
    # the network side: 6L + 1 parameters, a closed form
    assert m["net_parameters_per_level"].value == pytest.approx(6.0, abs=1e-9)
    np.testing.assert_array_equal(arrays["parameter_count"], [7, 13, 19])


def test_tiny_test_mse_by_dense_ridge_regression(tiny: RunResult) -> None:
    """The largest sample (n = 256: 192 fit, 64 validation points) of seed 0, regenerated from
    the run's seed: the stored ridge minimizes the validation MSE of a dense solve among the
    candidates, and the stored test MSE of every L is the dense solve's (to 1e-8 relative:
    eigendecomposition against LU in float64 on kernels of condition number < 1e8)."""
    config = SawtoothSamplesConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    gen = RunContext(out_dir=tiny.run_dir, seed=config.seed).generator("seed0")
    angles, x = uniform_circle(256, generator=gen, dtype=torch.float64)
    test_angles, x_test = uniform_circle(200, generator=gen, dtype=torch.float64)
    noise = 0.1 * torch.randn(256, generator=gen, dtype=torch.float64)
    arch = relu_network(2, math.sqrt(2.0), 0.1)
    with torch.no_grad():
        k = arch.kernel(x, x).ntk.numpy()
        k_test = arch.kernel(x_test, x).ntk.numpy()
    scale = float(np.mean(np.diag(k)))
    fit, val = slice(0, 192), slice(192, 256)
    for j, level in enumerate((1, 2, 3)):
        f = TentMapS1(level)
        y = (f(angles) + noise).numpy()
        y_test = f(test_angles).numpy()
        val_mse = []
        for ridge in config.ridges:
            alpha = np.linalg.solve(k[fit, fit] + ridge * scale * np.eye(192), y[fit])
            val_mse.append(float(np.mean((k[val, fit] @ alpha - y[val]) ** 2)))
        best = config.ridges[int(np.argmin(val_mse))]
        assert arrays["ridges"][0, -1, j] == pytest.approx(best, rel=1e-12)
        alpha = np.linalg.solve(k[fit, fit] + best * scale * np.eye(192), y[fit])
        test_mse = float(np.mean((k_test[:, fit] @ alpha - y_test) ** 2)) + 0.01
        assert arrays["test_mse"][0, -1, j] == pytest.approx(test_mse, rel=1e-8)


def test_tiny_run_science(tiny: RunResult) -> None:
    """s_1 is learnt within the grid and the MSE of s_1 falls with n; every test MSE includes
    the noise variance 0.01; s_3 (4 peaks) needs more samples than s_1."""
    arrays = np.load(tiny.run_dir / "arrays.npz")
    mse = arrays["test_mse"]
    assert mse.shape == (1, 6, 3) and np.all(mse >= 0.01)
    assert mse[0, -1, 0] < mse[0, 0, 0]
    n_star = arrays["n_star"]
    assert math.isfinite(n_star[0]) and n_star[2] > n_star[0]
    assert tiny.verdict == "SMOKE" and "grid 8..256" in tiny.criterion
    assert (tiny.run_dir / "sawtooth_samples.png").is_file()


# ---------------------------------------------------------------------------------------------
# helpers


def test_geometric_grid() -> None:
    assert geometric_grid(8, 64, 2.0) == [8, 16, 32, 64]
    assert geometric_grid(8, 40, 2.0) == [8, 16, 32, 40]
    grid = geometric_grid(8, 2048, math.sqrt(2.0))
    assert grid[:4] == [8, 11, 16, 23] and grid[-1] == 2048
    ratios = np.diff(np.log(grid))
    np.testing.assert_allclose(ratios, math.log(2) / 2, atol=0.1)


def test_samples_needed() -> None:
    ns = np.array([8.0, 16.0, 32.0, 64.0])
    assert samples_needed(ns, np.array([0.5, 0.2, 0.05, 0.01]), 0.1) == 32.0
    assert samples_needed(ns, np.array([0.5, 0.2, 0.15, 0.11]), 0.1) != samples_needed(
        ns, np.array([0.5, 0.2, 0.15, 0.1]), 0.1
    )
    assert math.isnan(samples_needed(ns, np.array([0.5, 0.4, 0.3, 0.2]), 0.1))


def test_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "A3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
