"""A2 ``rkhs-vs-architecture``: its judge on both sides of every threshold, its config's
errors, its tiny run's metrics recomputed from the stored arrays and against closed forms, and
its pieces against closed forms."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from experiment_helpers import run_tiny
from ntklab.data import TentMapS1
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
    TAIL_MARGIN,
    RkhsVsArchitectureConfig,
    draw,
    equivalence_constants,
    judge,
    measure,
    resolve_spectrum,
    tent_rkhs_norms,
)
from ntklab.experiments.spectrum_s1 import relu_network
from ntklab.kernels.sphere import (
    circle_eigenvalues,
    profile_from_architecture,
    rkhs_norm_squared,
)

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


def test_tiny_every_frequency_resolved(tiny: RunResult) -> None:
    """At the tiny grid (N = 65536, k <= 8192) every mu_k lies far above the worst-case FFT
    round-off eps log2 N kappa(1) (kappa(1) = sum of the whole spectrum, 3.06 for two hidden
    layers): the largest resolved frequency is k_max and no tent-map term comes from the
    tail model."""
    m = {x.name: x for x in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    arch = relu_network(2, math.sqrt(2.0), 0.1)
    with torch.no_grad():
        mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), 32767, grid=65536)
    mu_np = mu.numpy()
    kappa_one = mu_np[0] + 2 * mu_np[1:].sum()  # N/2 term omitted: below 1e-9
    assert kappa_one == pytest.approx(3.06, rel=1e-6)
    bound = np.finfo(np.float64).eps * 16 * kappa_one
    assert mu_np[:8193].min() > 1e3 * bound
    assert m["resolved_k[depth=2]"].value == 8192.0
    assert f"eps log2 N max|kappa| {bound:.2g}" in m["resolved_k[depth=2]"].note
    assert m["tail_share_max[depth=2]"].value == 0.0
    np.testing.assert_array_equal(arrays["tent_tail_share_depth2"], np.zeros(7))


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
    (note,) = measurement.notes
    assert note.startswith("depth=1: a zero eigenvalue below the cut-off (first at k = 3, ")
    assert note.endswith("H^1 not in the RKHS")
    assert judge(config, metrics).passed is False
    figures = draw(config, metrics, arrays_as_numpy(measurement.arrays))
    assert set(figures) == {"rkhs_vs_architecture"}


# ---------------------------------------------------------------------------------------------
# eigenvalues below the FFT's round-off

A2 = importlib.import_module("ntklab.experiments.rkhs_vs_architecture")
Transform = Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], torch.Tensor]


def _patch_profile(monkeypatch: pytest.MonkeyPatch, transform: Transform) -> None:
    """Make ``measure`` see ``transform(profile, t)`` in place of each NTK's profile."""

    def patched(arch: Any, dim: int, which: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        base = profile_from_architecture(arch, dim, which)
        return lambda t: transform(base, t)

    monkeypatch.setattr(A2, "profile_from_architecture", patched)


SMALL = RkhsVsArchitectureConfig(
    depths=(1,),
    cutoffs=(4, 16, 32, 64),
    random_polynomials=2,
    tent_depths=tuple(range(1, 8)),
    k_max=1024,
    grid=8192,
    net_grid=1024,
)
SHIFT = 3.5e8


def test_tail_below_round_off_is_modelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper-scale failure, cheaply: adding 3.5e8 to the depth-1 NTK's profile changes
    mu_0 only, but lifts the FFT's round-off (eps log2 N kappa(1) = 1e-6 at N = 8192) above
    mu_k ~ 0.1 k^-2 for k > ~320. A zero threshold relative to max mu (rkhs_norm_squared's
    default) makes the tent maps' norms infinite, which the growth fit refused. Now: the
    floor bounds the actual round-off (the difference from the unshifted spectrum), the
    resolved range ends where mu_k fades into it, the rest is C k^-2, and the norms agree
    with the unshifted kernel's (its k = 0 term exchanged) to 1% (tail share up to 8%)."""
    arch = relu_network(1, math.sqrt(2.0), 0.1)
    profile = profile_from_architecture(arch, 2, "ntk")
    with torch.no_grad():
        bare = circle_eigenvalues(profile, 1024, grid=8192)
        shifted = circle_eigenvalues(lambda t: profile(t) + SHIFT, 1024, grid=8192)
    table = TentMapS1(5).fourier_coefficients(1024)
    assert math.isinf(float(rkhs_norm_squared(table, shifted)))  # the failure

    spectrum = resolve_spectrum(shifted.numpy(), grid=8192, profile_max=2.03 + SHIFT)
    round_off = float((shifted[1:] - bare[1:]).abs().max())
    assert 1e-12 < round_off < spectrum.floor  # measured error below the floor
    assert 64 < spectrum.k_resolved < 1024 and not spectrum.vanishing.any()
    mu_bare = bare.numpy()
    assert mu_bare[spectrum.k_resolved] > spectrum.floor  # the floor is crossed there
    assert mu_bare[spectrum.k_resolved + 1 :].max() < TAIL_MARGIN * spectrum.floor

    _patch_profile(monkeypatch, lambda base, t: base(t) + SHIFT)
    measurement = measure(SMALL, RunContext(out_dir=tmp_path))
    m = measurement.by_name
    assert measurement.notes == ()
    assert m["zero_eigenvalue_depths"].value == 0.0
    assert m["resolved_k[depth=1]"].value == spectrum.k_resolved
    share = np.asarray(measurement.arrays["tent_tail_share_depth1"])
    assert m["tail_share_max[depth=1]"].value == share.max()
    assert 0.01 < share.max() < 0.1
    stored = np.asarray(measurement.arrays["tent_rkhs_norm_sq_depth1"])
    a0 = 0.25  # a_0^2 of s_L
    expected = [
        float(rkhs_norm_squared(TentMapS1(lv).fourier_coefficients(1024), bare))
        - a0 / float(bare[0])
        + a0 / float(shifted[0])
        for lv in range(1, 8)
    ]
    np.testing.assert_allclose(stored, expected, rtol=1e-2)
    slope, lo, hi = _fit(np.arange(4.0, 8.0), np.log(stored[3:]))
    growth = m["rkhs_growth_per_level[depth=1]"]
    assert growth.value == pytest.approx(math.exp(slope), rel=1e-9)
    assert growth.ci_low == pytest.approx(math.exp(lo), rel=1e-9)
    assert growth.ci_high == pytest.approx(math.exp(hi), rel=1e-9)
    ref_slope, *_ = _fit(np.arange(4.0, 8.0), np.log(expected[3:]))
    assert growth.value == pytest.approx(math.exp(ref_slope), abs=0.02)


def test_vanishing_eigenvalues_make_norms_infinite() -> None:
    """Depth 1 without bias: mu_k = 0 for odd k >= 3 (up to rounding) while C k^-2 is far
    above the floor: those are vanishing, not round-off; s_1 (odd frequencies) is not in the
    RKHS, s_L for L >= 2 (even frequencies) is, with the norm of the plain sum."""
    arch = relu_network(1, math.sqrt(2.0), 0.0)
    profile = profile_from_architecture(arch, 2, "ntk")
    with torch.no_grad():
        mu = circle_eigenvalues(profile, 256, grid=2048)
        top = float(profile(torch.ones(1, dtype=torch.float64))[0])
    spectrum = resolve_spectrum(mu.numpy(), grid=2048, profile_max=top)
    k = np.arange(257)
    np.testing.assert_array_equal(spectrum.vanishing, (k % 2 == 1) & (k >= 3))
    assert spectrum.k_resolved == 256
    rkhs, _, share = tent_rkhs_norms(spectrum, (1, 2, 3, 4, 5))
    assert math.isinf(rkhs[0]) and math.isnan(share[0])
    expected = [
        float(rkhs_norm_squared(TentMapS1(lv).fourier_coefficients(256), mu)) for lv in (2, 3, 4, 5)
    ]
    np.testing.assert_allclose(rkhs[1:], expected, rtol=1e-12)
    np.testing.assert_array_equal(share[1:], np.zeros(4))


def test_vanishing_eigenvalue_in_a_tent_series_leaves_the_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel whose mu_96 is removed (its profile minus 2 mu_96 cos(96 a)): every
    eigenvalue up to the cut-off 64 is positive, but s_6 (frequencies 32 x odd) has energy at
    k = 96 and is not in the RKHS. The depth is counted among the zero-eigenvalue depths and
    left out of the growth fit (nothing infinite reaches it), and the run fails."""
    config = RkhsVsArchitectureConfig(
        depths=(1,),
        cutoffs=(4, 16, 32, 64),
        random_polynomials=1,
        tent_depths=tuple(range(1, 8)),
        k_max=128,
        grid=1024,
        net_grid=128,
    )
    arch = relu_network(1, math.sqrt(2.0), 0.1)
    with torch.no_grad():
        mu_96 = float(
            circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), 128, grid=1024)[96]
        )
    _patch_profile(
        monkeypatch, lambda base, t: base(t) - 2 * mu_96 * torch.cos(96 * torch.arccos(t))
    )
    measurement = measure(config, RunContext(out_dir=tmp_path))
    m = measurement.by_name
    rkhs = np.asarray(measurement.arrays["tent_rkhs_norm_sq_depth1"])
    np.testing.assert_array_equal(np.isinf(rkhs), np.arange(1, 8) == 6)
    assert m["resolved_k[depth=1]"].value == 128.0
    assert math.isnan(m["tail_share_max[depth=1]"].value)
    assert m["zero_eigenvalue_depths"].value == 1.0
    assert "rkhs_growth_per_level[depth=1]" not in m
    assert math.isnan(m["rkhs_growth_min"].value)
    assert measurement.notes == (
        "depth=1: s_L for L = 6 not in the RKHS (mu_k vanishes, first at k = 96); counted as "
        "a zero-eigenvalue depth and left out of the growth fit",
    )
    assert m["equivalence_slope_max_abs"].value <= SLOPE_TOL  # part (a) itself holds
    assert judge(config, m).passed is False
    figures = draw(config, m, arrays_as_numpy(measurement.arrays))
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
    mu_k = 1 / (1 + k^2) (kappa(1) = pi coth pi) the RKHS norm is the H^1 norm, every
    frequency resolved."""
    k = np.arange(2**15 + 1, dtype=np.float64)
    mu = 1.0 / (1.0 + k**2)
    spectrum = resolve_spectrum(mu, grid=2**16, profile_max=math.pi / math.tanh(math.pi))
    assert spectrum.k_resolved == 2**15 and not spectrum.vanishing.any()
    assert spectrum.constant == pytest.approx(1.0, rel=1e-8)
    rkhs, h1, share = tent_rkhs_norms(spectrum, (1, 2, 3, 4))
    np.testing.assert_allclose(rkhs, h1, rtol=1e-12)
    np.testing.assert_array_equal(share, np.zeros(4))
    exact = 1.0 / 3.0 + 4.0 ** np.arange(1, 5) / (4 * math.pi**2)
    # truncation at K: tail of sum 8 / (pi^4 m^2) over odd m > K / M, relative ~ 1e-3
    np.testing.assert_allclose(h1, exact, rtol=2e-3)


def test_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "A2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
