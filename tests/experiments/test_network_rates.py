"""B2 ``network-rates``: its judge on both sides of every threshold, its config's constraints,
its tiny run's metrics against an independent recomputation, and its network risks against
kernel GD."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

import ntklab.experiments.network_rates as nr
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    get_experiment,
    metrics_from_values,
    resolve_config,
)
from ntklab.experiments.result import RunResult
from ntklab.experiments.testing import run_tiny
from ntklab.kernels.sphere import circle_eigenvalues, profile_from_architecture

NAME = "network-rates"


# --- judge -------------------------------------------------------------------------------------

KERNEL_SLOPE = -1.0
GOOD = {"slope": KERNEL_SLOPE, "worst": 1.0}


def _metrics(depths: tuple[int, ...], **changes: float) -> dict[str, float]:
    """Metrics of a run at ``depths``, every learner on target, then ``changes`` applied
    (keys ``"{gd|sgd}_{slope|worst}_{depth}"``)."""
    values: dict[str, float] = {}
    for depth in depths:
        values[f"kernel_slope[L={depth}]"] = KERNEL_SLOPE
        for name in nr.LEARNERS:
            values[f"slope[{name},L={depth}]"] = GOOD["slope"]
            values[f"worst_risk_ratio[{name},L={depth}]"] = GOOD["worst"]
    for key, value in changes.items():
        learner, what, at = key.split("_")
        metric = "slope" if what == "slope" else "worst_risk_ratio"
        values[f"{metric}[{learner},L={at}]"] = value
    return values


EPS = 1e-3
CASES = [
    # (what changes, value, passes)
    ("worst", nr.RATIO - EPS, True),
    ("worst", nr.RATIO + EPS, False),
    ("worst", 1 / nr.RATIO + EPS, True),
    ("worst", 1 / nr.RATIO - EPS, False),
    ("slope", KERNEL_SLOPE + nr.SLOPE_TOLERANCE - EPS, True),
    ("slope", KERNEL_SLOPE + nr.SLOPE_TOLERANCE + EPS, False),
    ("slope", KERNEL_SLOPE - nr.SLOPE_TOLERANCE + EPS, True),
    ("slope", KERNEL_SLOPE - nr.SLOPE_TOLERANCE - EPS, False),
    ("worst", math.nan, False),
    ("slope", math.nan, False),
]


@pytest.mark.parametrize("learner", nr.LEARNERS)
@pytest.mark.parametrize(("what", "value", "passes"), CASES)
def test_judge_both_sides_of_each_threshold(
    learner: str, what: str, value: float, passes: bool
) -> None:
    config = nr.NetworkRatesConfig(depths=(2, 3), sizes=(16, 32, 64))
    # the changed figure at depth 3 only: every depth is judged
    values = _metrics((2, 3), **{f"{learner}_{what}_3": value})
    judgement = nr.judge(config, metrics_from_values(values))
    assert judgement.passed is passes
    assert f"{learner},L=3" in judgement.summary
    shown = f"{value:.3f}" if what == "slope" else f"{value:.2f}"
    assert shown in judgement.summary
    assert ("off" in judgement.summary) is not passes


def test_judge_all_on_target_passes_and_criterion_names_the_grid() -> None:
    config = nr.NetworkRatesConfig(depths=(2, 3), sizes=(16, 32, 64), width=256, n_seeds=3)
    judgement = nr.judge(config, metrics_from_values(_metrics((2, 3))))
    assert judgement.passed
    for text in ("depths 2, 3", "16, 32, 64", "width 256", "3 seeds", "1.5", "0.15", "tanh"):
        assert text in judgement.criterion, (text, judgement.criterion)


def test_judge_kernel_slope_moves_the_window() -> None:
    """The slope window is centred on kernel GD's measured slope, not on a constant."""
    config = nr.NetworkRatesConfig(depths=(2,), sizes=(16, 32, 64))
    values = _metrics((2,))
    values["kernel_slope[L=2]"] = KERNEL_SLOPE - 2 * nr.SLOPE_TOLERANCE
    assert not nr.judge(config, metrics_from_values(values)).passed
    values["kernel_slope[L=2]"] = math.nan
    assert not nr.judge(config, metrics_from_values(values)).passed


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sizes", "64,32,128"),  # not increasing
        ("sizes", "32,64"),  # too few for a log-log fit with an interval
        ("sizes", "0,32,64"),
        ("depths", "[]"),
        ("depths", "3,2"),
        ("width", "-5"),
        ("width", "129"),  # odd: no antisymmetric halves
        ("n_seeds", "1"),  # no seed bootstrap
        ("lr_fraction", "1.2"),
        ("lr_fraction", "0"),
        ("sgd_lr_factor", "3"),  # 0.5 * 3 >= 1: SGD above the critical step
        ("n_quadrature", "100"),  # <= 2 * n_frequencies = 128
        ("n_frequencies", "2"),
        ("w_std", "-1"),
        ("b_std", "-0.1"),
        ("beta", "0"),
        ("noise_sd", "nan"),
        ("n_boot", "0"),
        ("sgd_batch", "0"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_scales_are_valid() -> None:
    for scale in ("tiny", "quick", "paper"):
        resolve_config(get_experiment(NAME), scale)


# --- the tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("network-rates"))


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _exact_bootstrap(x: np.ndarray, per_seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct seed resample (a multiset of rows) with its probability, and the slope
    of its seed-mean curve: the exact distribution the bootstrap samples from."""
    seeds = per_seed.shape[0]
    slopes, probs = [], []
    for combo in itertools.combinations_with_replacement(range(seeds), seeds):
        counts = Counter(combo)
        prob = math.factorial(seeds) / math.prod(math.factorial(c) for c in counts.values())
        probs.append(prob / seeds**seeds)
        slopes.append(_slope(x, per_seed[list(combo)].mean(axis=0)))
    return np.array(slopes), np.array(probs)


def _quantile(slopes: np.ndarray, probs: np.ndarray, p: float) -> float:
    order = np.argsort(slopes)
    cdf = np.cumsum(probs[order])
    return float(slopes[order][np.searchsorted(cdf, p - 1e-12)])


def test_tiny_run_metrics_match_a_recomputation_from_its_arrays(tiny: RunResult) -> None:
    config = nr.NetworkRatesConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    sizes = arrays["sizes"]
    np.testing.assert_array_equal(sizes, config.sizes)
    for depth in config.depths:
        kernel = arrays[f"risk_kernel_depth{depth}"]
        assert kernel.shape == (config.n_seeds, len(config.sizes))
        # unit-norm targets with noise: the early-stopped risk is below the null risk 1
        assert np.all(kernel > 0) and np.all(kernel < 1)
        for name, per_seed in (
            ("kernel", kernel),
            ("gd", arrays[f"risk_gd_depth{depth}"]),
            ("sgd", arrays[f"risk_sgd_depth{depth}"]),
        ):
            metric = metrics[
                f"kernel_slope[L={depth}]" if name == "kernel" else f"slope[{name},L={depth}]"
            ]
            # the slope is an OLS fit of the logged seed mean: numpy gives it to rounding
            assert metric.value == pytest.approx(_slope(sizes, per_seed.mean(axis=0)), abs=1e-9)
            # the interval: the 2.5% and 97.5% quantiles of n_boot = 100 resamples lie
            # between the exact bootstrap distribution's 0.1% and 15% (85% and 99.9%)
            # quantiles, except with probability < 1e-3 (binomial tails)
            slopes, probs = _exact_bootstrap(sizes, per_seed)
            assert metric.ci_low is not None and metric.ci_high is not None
            lo = (_quantile(slopes, probs, 0.001), _quantile(slopes, probs, 0.15))
            hi = (_quantile(slopes, probs, 0.85), _quantile(slopes, probs, 0.999))
            assert lo[0] - 1e-9 <= metric.ci_low <= lo[1] + 1e-9, (metric, lo)
            assert hi[0] - 1e-9 <= metric.ci_high <= hi[1] + 1e-9, (metric, hi)
            if name == "kernel":
                continue
            ratio = per_seed.mean(axis=0) / kernel.mean(axis=0)
            worst = ratio[np.argmax(np.abs(np.log(ratio)))]
            got = metrics[f"worst_risk_ratio[{name},L={depth}]"].value
            assert got == pytest.approx(worst, rel=1e-12)
    judgement = nr.judge(config, {m.name: m for m in tiny.metrics})
    assert tiny.criterion_met is judgement.passed
    assert "depths 2" in tiny.criterion and "16, 32, 64" in tiny.criterion
    assert "antisymmetric" in " ".join(tiny.notes)
    assert [p.name for p in tiny.figure_paths] == ["network_rates.png"]


def test_tiny_run_predicted_rate_is_the_minimax_exponent(tiny: RunResult) -> None:
    """The stored predicted rate is -2 beta / (2 beta + gamma) with the stored capacity, and
    the capacity of a smooth activation's NTK on the circle is near 0 (eigenvalues decaying
    geometrically)."""
    config = nr.NetworkRatesConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    gamma, rate = arrays["gamma"], arrays["predicted_rate"]
    np.testing.assert_allclose(rate, -2 * config.beta / (2 * config.beta + gamma), rtol=1e-12)
    assert np.all((gamma >= 0) & (gamma < 0.5))


# --- the library pieces ------------------------------------------------------------------------


def test_wide_gd_network_risk_matches_kernel_gd() -> None:
    """At width 2048 the GD-trained zero-output network's risk is kernel GD's within 10%,
    on the same data and targets."""
    # one size only: network_risks needs no log-log fit (the config's 3-size rule is the
    # experiment's), so the config is built without validation
    config = nr.NetworkRatesConfig.model_construct(
        depths=(2,), width=2048, sizes=(32,), n_seeds=2, n_frequencies=32, sgd_batch=16
    )
    arch = nr.smooth_mlp(2, "tanh", config.w_std, config.b_std)
    mu = circle_eigenvalues(profile_from_architecture(arch, 2, "ntk"), config.n_frequencies)
    risks, consts = nr.network_risks(arch, mu, config, torch.Generator().manual_seed(0))
    assert consts["lr"] > 0 and 0 < consts["gamma"] < 0.5
    ratio = risks["gd"].mean() / risks["kernel"].mean()
    assert abs(ratio - 1) < 0.1, ratio
    assert risks["sgd"].shape == (2, 1) and np.all(risks["sgd"] > 0)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "B2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is nr.measure and exp.judge is nr.judge and exp.draw is nr.draw


def test_quadrature_risk_is_exact_for_trigonometric_predictors() -> None:
    """The networks' risk (trapezoid rule on the grid) equals Parseval on a trig polynomial."""
    from ntklab.data import TrigPolynomial, circle_grid, excess_risk_s1

    g = torch.Generator().manual_seed(4)
    f = torch.randn(20, 2, generator=g, dtype=torch.float64)
    h = torch.randn(30, 2, generator=g, dtype=torch.float64)
    f[0, 1] = h[0, 1] = 0.0
    angles, _ = circle_grid(128)
    got = nr._l2_risk(TrigPolynomial(h)(angles)[None], TrigPolynomial(f)(angles)[None])
    np.testing.assert_allclose(got[0], float(excess_risk_s1(h, f)), rtol=1e-12)
