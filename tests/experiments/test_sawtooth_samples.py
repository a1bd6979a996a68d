"""A3 ``sawtooth-samples``: its judge on both sides of its thresholds, its config's errors,
its tiny run's metrics recomputed from the stored arrays and by a dense ridge regression, its
band-reduction ridge selection against explicit solves and eigendecompositions, and its
helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import linalg as sla
from scipy import stats

import ntklab.experiments.sawtooth_samples as sawtooth
from experiment_helpers import relu_kernels_numpy, run_tiny
from ntklab.data import TentMapS1, uniform_circle
from ntklab.dynamics import select_ridge_validation
from ntklab.errors import NtklabValueError, NumericalWarning
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.result import RunResult
from ntklab.experiments.sawtooth_samples import (
    GROWTH_RANGE,
    SawtoothSamplesConfig,
    band_form,
    geometric_grid,
    judge,
    samples_needed,
    select_ridge_banded,
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
    values: dict[str, float | tuple[float, float, float]] = {
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
    # the closed-form ReLU NTK in numpy (not ntklab's kernels): a wrong kernel is caught
    k = relu_kernels_numpy(x, x, 2, math.sqrt(2.0), 0.1)[1]
    k_test = relu_kernels_numpy(x_test, x, 2, math.sqrt(2.0), 0.1)[1]
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


# ---------------------------------------------------------------------------------------------
# the band reduction and the ridge selection through it


def _relu_ntk_on_circle(n: int, seed: int) -> torch.Tensor:
    _, x = uniform_circle(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with torch.no_grad():
        return relu_network(2, math.sqrt(2.0), 0.1).kernel(x, x).ntk


def _dense_band(band: torch.Tensor) -> torch.Tensor:
    """The symmetric matrix of a lower band storage."""
    n = band.shape[1]
    b = torch.zeros(n, n, dtype=band.dtype)
    for i in range(band.shape[0]):
        b += torch.diag(band[i, : n - i], -i)
        if i:
            b += torch.diag(band[i, : n - i], i)
    return b


@pytest.mark.parametrize(("n", "bandwidth"), [(40, 3), (37, 8), (12, 16), (5, 1), (1, 4)])
def test_band_form_reconstructs_the_matrix(n: int, bandwidth: int) -> None:
    """Q B Q^T = K, Q^T Q = I, B zero outside the band (by construction of the storage) and
    with K's eigenvalues (scipy's eigvalsh), for panels that fit, do not fit and partly fit."""
    gen = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=gen, dtype=torch.float64)
    k = a + a.T
    form = band_form(k, bandwidth)
    assert form.band.shape == (min(bandwidth, max(n - 1, 0)) + 1, n)
    eye = torch.eye(n, dtype=torch.float64)
    q = form.apply_q(eye)
    torch.testing.assert_close(form.apply_q(eye, transpose=True), q.T, rtol=0, atol=1e-13)
    torch.testing.assert_close(q.T @ q, eye, rtol=0, atol=1e-13)
    b = _dense_band(form.band)
    torch.testing.assert_close(q @ b @ q.T, k, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(b.numpy()), sla.eigvalsh(k.numpy()), rtol=0, atol=1e-12
    )


def test_select_ridge_banded_against_explicit_solves() -> None:
    """Every candidate's validation MSE, the chosen ridge per column and the dual
    coefficients, against an explicit LU solve per ridge (numpy), on a ReLU NTK on the circle
    (200 fit points, bandwidth 16: 11 panels) with three target columns; and the same choice
    and MSEs as the eigendecomposition of select_ridge_validation."""
    k = _relu_ntk_on_circle(260, 3)
    gen = torch.Generator().manual_seed(4)
    y = torch.randn(260, 3, generator=gen, dtype=torch.float64)
    y[:, 0] += torch.cos(torch.arange(260, dtype=torch.float64))
    fit, val = slice(0, 200), slice(200, 260)
    scale = float(k.diagonal().mean())
    ridges = scale * torch.tensor([1e-6, 1e-4, 1e-2, 1.0, 1e2], dtype=torch.float64)
    sel = select_ridge_banded(k[fit, fit], y[fit], k[val, fit], y[val], ridges, bandwidth=16)
    kf, kv, yf, yv = k[fit, fit].numpy(), k[val, fit].numpy(), y[fit].numpy(), y[val].numpy()
    mse = np.empty((5, 3))
    alphas = []
    for i, rho in enumerate(ridges.tolist()):
        alpha = np.linalg.solve(kf + rho * np.eye(200), yf)
        alphas.append(alpha)
        mse[i] = np.mean((kv @ alpha - yv) ** 2, axis=0)
    np.testing.assert_allclose(sel.validation_mse.numpy(), mse, rtol=1e-8)
    best = np.argmin(mse, axis=0)
    np.testing.assert_array_equal(sel.ridge.numpy(), ridges.numpy()[best])
    for j in range(3):
        np.testing.assert_allclose(sel.alpha[:, j].numpy(), alphas[best[j]][:, j], rtol=1e-7)
    ref = select_ridge_validation(k[fit, fit], y[fit], k[val, fit], y[val], ridges)
    torch.testing.assert_close(sel.ridge, ref.ridge, rtol=0, atol=0)
    torch.testing.assert_close(sel.validation_mse, ref.validation_mse, rtol=1e-8, atol=0)


def test_select_ridge_banded_clamps_an_indefinite_matrix() -> None:
    """A kernel with an eigenvalue -1e-3 (beyond rounding) and a ridge 1e-6: B + rho I is
    indefinite; the fallback warns and solves with that eigenvalue clamped to 0, as
    select_ridge_validation's psd_eigh does (a dense eigendecomposition computed here)."""
    gen = torch.Generator().manual_seed(5)
    q, _ = torch.linalg.qr(torch.randn(24, 24, generator=gen, dtype=torch.float64))
    values = torch.linspace(0.0, 2.0, 24, dtype=torch.float64)
    values[3] = -1e-3
    k = q @ torch.diag(values) @ q.T
    k_val = torch.randn(6, 24, generator=gen, dtype=torch.float64)
    y = torch.randn(30, 1, generator=gen, dtype=torch.float64)
    with pytest.warns(NumericalWarning, match="clamped 1 negative"):
        sel = select_ridge_banded(k, y[:24], k_val, y[24:], [1e-6], bandwidth=4)
    vals, vecs = np.linalg.eigh(k.numpy())
    assert vals[0] == pytest.approx(-1e-3)
    alpha = vecs @ ((vecs.T @ y[:24].numpy()) / (np.maximum(vals, 0.0) + 1e-6)[:, None])
    np.testing.assert_allclose(sel.alpha.numpy(), alpha, rtol=1e-6)


@pytest.mark.parametrize(
    ("key", "kwargs"),
    [
        ("y_val", {"y_val": torch.zeros(5, 2, dtype=torch.float64)}),
        ("ridges", {"ridges": [1.0, 0.0]}),
        ("k_fit_fit", {"k_fit_fit": torch.zeros(6, 6, dtype=torch.float64)}),
        ("y_fit", {"y_fit": torch.zeros(8, dtype=torch.float64)}),
        ("bandwidth", {"bandwidth": 0}),
    ],
)
def test_select_ridge_banded_errors_name_the_argument(key: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {
        "k_fit_fit": torch.eye(8, dtype=torch.float64),
        "y_fit": torch.zeros(8, 1, dtype=torch.float64),
        "k_val_fit": torch.zeros(5, 8, dtype=torch.float64),
        "y_val": torch.zeros(5, 1, dtype=torch.float64),
        "ridges": [1.0],
    }
    with pytest.raises(NtklabValueError, match=key):
        select_ridge_banded(**(args | kwargs))  # type: ignore[arg-type]


def test_kernel_rows_in_blocks_equal_the_whole_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NTK computed by blocks of rows (blocks of 3 rows here) and its diagonal, against
    one call on all pairs."""
    monkeypatch.setattr(sawtooth, "_KERNEL_BLOCK", 64)
    _, x = uniform_circle(50, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    arch = relu_network(2, math.sqrt(2.0), 0.1)
    with torch.no_grad():
        full = arch.kernel(x, x).ntk
    torch.testing.assert_close(sawtooth._ntk_rows(arch, x, x[:20]), full[:, :20])
    torch.testing.assert_close(sawtooth._ntk_diagonal(arch, x), full.diagonal())
