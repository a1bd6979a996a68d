"""A2 ``rkhs-vs-architecture``: its judge on both sides of every threshold, its config's
errors, its tiny run's metrics recomputed from the stored arrays and against closed forms, and
its pieces against closed forms."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.base import arrays_as_numpy
from ntklab.experiments.result import RunResult
from ntklab.experiments.rkhs_vs_architecture import (
    GROWTH_RANGE,
    INSIDE_TOL,
    LINEAR_TOL,
    NET_TOL,
    SLOPE_TOL,
    RkhsVsArchitectureConfig,
    draw,
    equivalence_constants,
    judge,
    measure,
    tent_rkhs_norms,
)
from ntklab.experiments.spectrum_s1 import relu_network
from ntklab.experiments.testing import run_tiny
from ntklab.kernels.sphere import circle_eigenvalues, profile_from_architecture

NAME = "rkhs-vs-architecture"
TINY = RkhsVsArchitectureConfig(
    depths=(2,),
    cutoffs=(4, 16, 32, 64),
    random_polynomials=3,
    tent_depths=(1, 2, 3, 4, 5, 6, 7),
    k_max=8192,
    grid=65536,
    net_grid=4096,
)

# ---------------------------------------------------------------------------------------------
# judge


def passing_values() -> dict[str, float]:
    return {
        "equivalence_slope_max_abs": 0.0,
        "random_ratio_excess": -1e-3,
        "zero_eigenvalue_depths": 0.0,
        "net_max_error": 0.0,
        "net_peak_count_error": 0.0,
        "net_parameters_residual": 0.0,
        "net_parameters_per_level": 6.0,
        "rkhs_growth_min": 4.0,
        "rkhs_growth_max": 4.0,
    }


EPS = 1e-6
JUDGE_CASES = [
    ("all inside", {}, True),
    ("slope just inside", {"equivalence_slope_max_abs": SLOPE_TOL - EPS}, True),
    ("slope just outside", {"equivalence_slope_max_abs": SLOPE_TOL + EPS}, False),
    ("slope infinite (nothing fitted)", {"equivalence_slope_max_abs": math.inf}, False),
    ("ratio excursion just inside", {"random_ratio_excess": 0.9 * INSIDE_TOL}, True),
    ("ratio excursion just outside", {"random_ratio_excess": 1.1 * INSIDE_TOL}, False),
    ("one depth with a zero eigenvalue", {"zero_eigenvalue_depths": 1.0}, False),
    ("network error just inside", {"net_max_error": 0.9 * NET_TOL}, True),
    ("network error just outside", {"net_max_error": 1.1 * NET_TOL}, False),
    ("one peak missed", {"net_peak_count_error": 1.0}, False),
    ("count linear to rounding", {"net_parameters_residual": 0.9 * LINEAR_TOL}, True),
    ("count not linear", {"net_parameters_residual": 1.1 * LINEAR_TOL}, False),
    ("growth min just inside", {"rkhs_growth_min": GROWTH_RANGE[0] + EPS}, True),
    ("growth min just outside", {"rkhs_growth_min": GROWTH_RANGE[0] - EPS}, False),
    ("growth max just inside", {"rkhs_growth_max": GROWTH_RANGE[1] - EPS}, True),
    ("growth max just outside", {"rkhs_growth_max": GROWTH_RANGE[1] + EPS}, False),
    ("nan slope", {"equivalence_slope_max_abs": math.nan}, False),
    ("nan excursion", {"random_ratio_excess": math.nan}, False),
    ("nan zero count", {"zero_eigenvalue_depths": math.nan}, False),
    ("nan network error", {"net_max_error": math.nan}, False),
    ("nan peaks", {"net_peak_count_error": math.nan}, False),
    ("nan residual", {"net_parameters_residual": math.nan}, False),
    ("nan growth", {"rkhs_growth_min": math.nan, "rkhs_growth_max": math.nan}, False),
]


@pytest.mark.parametrize(
    ("overrides", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_thresholds(overrides: dict[str, float], passed: bool) -> None:
    values = passing_values() | overrides
    judgement = judge(TINY, metrics_from_values(values))
    assert judgement.passed is passed
    summary = judgement.summary
    assert f"{values['equivalence_slope_max_abs']:.3f}" in summary
    assert f"{values['rkhs_growth_min']:.3f}..{values['rkhs_growth_max']:.3f}" in summary
    assert f"{values['net_max_error']:.1e}" in summary
    # the criterion renders the grid that ran and the thresholds
    criterion = judgement.criterion
    assert "K = 16, 32, 64" in criterion and "L = 1..7" in criterion
    assert "L = 4..7" in criterion and "k = 8192" in criterion and "4097 dyadic" in criterion
    assert f"+-{SLOPE_TOL}" in criterion and f"[{GROWTH_RANGE[0]}, {GROWTH_RANGE[1]}]" in criterion


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("depths", "2,1"),
        ("depths", "0"),
        ("w_std", "0"),
        ("b_std", "-0.1"),
        ("cutoffs", "4,8"),  # too few cut-offs >= slope_from = 16
        ("cutoffs", "4,16,32,100000"),  # above k_max
        ("cutoffs", "16,8,32,64"),
        ("slope_from", "300"),
        ("slope_from", "0"),
        ("random_polynomials", "0"),
        ("tent_depths", "1,2"),
        ("tent_depths", "3,2,4,5,6"),
        ("growth_from", "9"),
        ("k_max", "-5"),
        ("k_max", "100"),  # below the largest cut-off 256
        ("grid", "1001"),
        ("grid", "1000"),
        ("net_grid", "1000"),  # not a multiple of 2^10
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("rkhs"))


def _fit(u: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """OLS slope of v on u and its 95% t-interval (numpy normal equations, scipy's t)."""
    (slope, _), ssr, *_ = np.polyfit(u, v, 1, full=True)
    resid = float(ssr[0]) if ssr.size else 0.0
    stderr = math.sqrt(resid / (u.size - 2) / float(np.sum((u - u.mean()) ** 2)))
    q = stats.t.ppf(0.975, u.size - 2)
    return float(slope), float(slope - q * stderr), float(slope + q * stderr)


def test_tiny_equivalence_constants_recomputed(tiny: RunResult) -> None:
    """c_min(K), c_max(K) as running extrema of 1 / (mu_k (1 + k^2)) over the stored
    eigenvalues, and their log-log slopes over K >= 16 refitted (to 1e-9
    relative). The slopes are near 0 (|slope| < 0.01: mu_k k^2 is constant to 1% over
    k = 16..64); 1 / mu_k grows as k^2 (slope 2 to 0.05)."""
    m = {x.name: x for x in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    mu = arrays["ntk_eigenvalues_depth2"]
    assert mu.shape == (65,)
    k = np.arange(65.0)
    r = 1.0 / (mu * (1 + k**2))
    cut = np.array([4, 16, 32, 64])
    c_min = np.minimum.accumulate(r)[cut]
    c_max = np.maximum.accumulate(r)[cut]
    np.testing.assert_allclose(arrays["c_min_depth2"], c_min, rtol=1e-14)
    np.testing.assert_allclose(arrays["c_max_depth2"], c_max, rtol=1e-14)
    slopes = []
    for name, c in (("c_min", c_min), ("c_max", c_max)):
        slope, lo, hi = _fit(np.log(cut[1:]), np.log(c[1:]))
        metric = m[f"{name}_slope[depth=2]"]
        assert metric.value == pytest.approx(slope, rel=1e-9, abs=1e-13)
        assert metric.ci_low == pytest.approx(lo, rel=1e-9)
        assert metric.ci_high == pytest.approx(hi, rel=1e-9)
        assert abs(slope) < 0.01
        slopes.append(abs(slope))
    assert m["equivalence_slope_max_abs"].value == pytest.approx(max(slopes), rel=1e-12)
    assert m["c_min[depth=2,K=64]"].value == pytest.approx(c_min[-1], rel=1e-12)
    slope, lo, hi = _fit(np.log(k[16:]), np.log(1.0 / mu[16:]))
    assert m["l2_ratio_slope[depth=2]"].value == pytest.approx(slope, rel=1e-9)
    assert m["l2_ratio_slope[depth=2]"].ci_low == pytest.approx(lo, rel=1e-9)
    assert abs(slope - 2.0) < 0.05
    assert m["zero_eigenvalue_depths"].value == 0.0


def test_tiny_random_polynomials_inside_the_bounds(tiny: RunResult) -> None:
    """The recorded excursion is the stored ratios' largest relative step outside
    [c_min, c_max]; random polynomials are strictly inside (negative excursion)."""
    arrays = np.load(tiny.run_dir / "arrays.npz")
    ratios = arrays["random_ratios_depth2"]
    assert ratios.shape == (4, 3)
    lo, hi = arrays["c_min_depth2"][:, None], arrays["c_max_depth2"][:, None]
    excess = max(float(np.max(1 - ratios / lo)), float(np.max(ratios / hi - 1)))
    metric = {x.name: x for x in tiny.metrics}["random_ratio_excess"]
    assert metric.value == pytest.approx(excess, rel=1e-12)
    assert excess < 0


def test_tiny_tent_norms_and_growth(tiny: RunResult) -> None:
    """The stored squared RKHS norms of s_1..s_7 against an independent computation (the
    triangle wave sampled on 2^17 points, its FFT, sum of E_k / mu_k for k <= 8192), to 5e-4
    relative (aliasing of the sampled wave: 8e-5 at L = 7); the growth factor per level and
    its interval refitted from them (to 1e-9), and near 4 (to 0.3: mu_k k^2 is not
    yet constant at k = 8..64)."""
    m = {x.name: x for x in tiny.metrics}
    stored = np.load(tiny.run_dir / "arrays.npz")["tent_rkhs_norm_sq_depth2"]
    arch = relu_network(2, math.sqrt(2.0), 0.1)
    with torch.no_grad():
        mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), 8192, grid=65536)
    mu_np = mu.numpy()
    n = 2**17
    u = np.arange(n) / n
    expected = []
    for level in range(1, 8):
        wave = 1 - np.abs(2 * ((2 ** (level - 1) * u) % 1.0) - 1)
        c = np.fft.rfft(wave)[:8193] / n
        energy = 2 * np.abs(c) ** 2
        energy[0] = abs(c[0]) ** 2
        expected.append(float(np.sum(energy / mu_np)))
    np.testing.assert_allclose(stored, expected, rtol=5e-4)
    levels = np.arange(4.0, 8.0)
    slope, lo, hi = _fit(levels, np.log(stored[3:]))
    growth = m["rkhs_growth_per_level[depth=2]"]
    assert growth.value == pytest.approx(math.exp(slope), rel=1e-9)
    assert growth.ci_low == pytest.approx(math.exp(lo), rel=1e-9)
    assert growth.ci_high == pytest.approx(math.exp(hi), rel=1e-9)
    assert abs(growth.value - 4.0) < 0.3
    assert m["rkhs_growth_min"].value == m["rkhs_growth_max"].value == growth.value


def test_tiny_networks_against_closed_forms(tiny: RunResult) -> None:
    """Width-2 tent networks: exact on the dyadic grid, 2^(L-1) peaks, 6L + 1 parameters."""
    m = {x.name: x for x in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    levels = arrays["tent_depths"]
    np.testing.assert_array_equal(arrays["net_peaks"], 2 ** (levels - 1))
    np.testing.assert_array_equal(arrays["net_parameter_count"], 6 * levels + 1)
    assert m["net_max_error"].value <= 1e-15  # dyadic arithmetic is exact in float64
    assert m["net_peak_count_error"].value == 0.0
    assert m["net_parameters_per_level"].value == pytest.approx(6.0, abs=1e-9)
    assert 0.0 <= m["net_parameters_residual"].value < 1e-9


def test_tiny_run_records_its_grid(tiny: RunResult) -> None:
    assert tiny.verdict == "SMOKE" and tiny.criterion_met is True
    assert "K = 16, 32, 64" in tiny.criterion
    assert (tiny.run_dir / "rkhs_vs_architecture.png").is_file()


def test_zero_eigenvalue_depth_fails_without_crashing(tmp_path: Path) -> None:
    """Depth 1 without bias: odd eigenvalues k >= 3 vanish, H^1 is not in the RKHS."""
    config = RkhsVsArchitectureConfig(
        depths=(1,),
        b_std=0.0,
        cutoffs=(4, 8, 16),
        slope_from=4,
        random_polynomials=1,
        tent_depths=(1, 2, 3),
        growth_from=1,
        k_max=64,
        grid=1024,
        net_grid=64,
    )
    measurement = measure(config, RunContext(out_dir=tmp_path))
    metrics = measurement.by_name
    assert metrics["zero_eigenvalue_depths"].value == 1.0
    assert math.isnan(metrics["rkhs_growth_min"].value)
    assert measurement.notes == (
        "depth=1: a zero eigenvalue below the cut-off, H^1 not in the RKHS",
    )
    assert judge(config, metrics).passed is False
    figures = draw(config, metrics, arrays_as_numpy(measurement.arrays))
    assert set(figures) == {"rkhs_vs_architecture"}


# ---------------------------------------------------------------------------------------------
# pieces


def test_equivalence_constants_by_hand() -> None:
    mu = np.array([1.0, 0.5, 0.05, 0.0])
    r, c_min, c_max = equivalence_constants(mu, (1, 2, 3))
    np.testing.assert_allclose(r[:3], [1.0, 1.0, 1.0 / (0.05 * 5)])
    assert math.isinf(r[3])
    np.testing.assert_allclose(c_min, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(c_max[:2], [1.0, 4.0])
    assert math.isinf(c_max[2])


def test_tent_norms_against_closed_forms() -> None:
    """H^1: ||s_L||^2 = 1/3 + 4^L / (4 pi^2) (slope 2^L / 2 pi); for the kernel with
    mu_k = 1 / (1 + k^2) the RKHS norm is the H^1 norm."""
    k = torch.arange(2**15 + 1, dtype=torch.float64)
    mu = 1.0 / (1.0 + k**2)
    rkhs, h1 = tent_rkhs_norms(mu, (1, 2, 3, 4))
    np.testing.assert_allclose(rkhs, h1, rtol=1e-12)
    exact = 1.0 / 3.0 + 4.0 ** np.arange(1, 5) / (4 * math.pi**2)
    # truncation at K: tail of sum 8 / (pi^4 m^2) over odd m > K / M, relative ~ 1e-3
    np.testing.assert_allclose(h1, exact, rtol=2e-3)


def test_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "A2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
