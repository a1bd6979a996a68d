"""Rate fits: exact recovery, scipy parity, interval coverage, bootstrap, model comparison."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch
from scipy import stats

from ntklab.analysis import (
    compare_decay_models,
    fit_exponential_rate,
    fit_power_law,
    fit_power_law_bootstrap,
    rates,
)
from ntklab.errors import NtklabTypeError, NtklabValueError


def test_docstring_examples() -> None:
    result = doctest.testmod(rates, extraglobs={"np": np})
    assert result.attempted >= 4
    assert result.failed == 0


@pytest.mark.parametrize("to", [np.asarray, torch.tensor, list])
def test_exact_power_law_is_recovered(to) -> None:  # type: ignore[no-untyped-def]
    x = np.geomspace(16, 512, 6)
    fit = fit_power_law(to(x), to(3.5 * x**-2.0))
    assert fit.slope == pytest.approx(-2.0, abs=1e-13)
    assert fit.prefactor == pytest.approx(3.5, rel=1e-12)
    assert fit.intercept == pytest.approx(math.log(3.5), abs=1e-12)
    assert fit.ci_low == pytest.approx(-2.0, abs=1e-12)
    assert fit.ci_high == pytest.approx(-2.0, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-14)
    assert fit.n_points == 6
    assert isinstance(fit.slope, float)
    np.testing.assert_allclose(fit.predict(np.array([2.0, 4.0])), 3.5 * np.array([0.25, 0.0625]))
    np.testing.assert_allclose(fit.predict(torch.tensor([2.0])), [3.5 / 4])


def test_power_law_matches_scipy_linregress() -> None:
    gen = np.random.default_rng(0)
    x = np.geomspace(1, 1000, 12)
    y = 2.0 * x**-0.7 * np.exp(gen.normal(scale=0.2, size=12))
    fit = fit_power_law(x, y, confidence=0.9)
    ref = stats.linregress(np.log(x), np.log(y))
    assert fit.slope == pytest.approx(ref.slope, rel=1e-12)
    assert fit.intercept == pytest.approx(ref.intercept, rel=1e-12)
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-10)
    assert fit.r2 == pytest.approx(ref.rvalue**2, rel=1e-12)
    q = stats.t.ppf(0.95, 10)
    assert fit.ci_low == pytest.approx(ref.slope - q * ref.stderr, rel=1e-10)
    assert fit.ci_high == pytest.approx(ref.slope + q * ref.stderr, rel=1e-10)


def test_power_law_interval_coverage_is_nominal() -> None:
    """400 synthetic noisy power laws: the 95% interval covers the true slope 95% +- 3%."""
    gen = np.random.default_rng(12345)
    x = np.geomspace(8, 1024, 8)
    covered = 0
    reps = 400
    for _ in range(reps):
        y = 0.3 * x**-1.5 * np.exp(gen.normal(scale=0.3, size=x.shape))
        fit = fit_power_law(x, y)
        covered += fit.ci_low <= -1.5 <= fit.ci_high
    assert abs(covered / reps - 0.95) <= 0.03
    # and a narrower nominal level is not over-covered
    covered_50 = sum(
        (
            f := fit_power_law(
                x, 0.3 * x**-1.5 * np.exp(gen.normal(scale=0.3, size=8)), confidence=0.5
            )
        ).ci_low
        <= -1.5
        <= f.ci_high
        for _ in range(reps)
    )
    assert abs(covered_50 / reps - 0.5) <= 0.075


def _noisy_seeds(gen: np.random.Generator, n_seeds: int, x: np.ndarray) -> np.ndarray:
    """True curve x^-0.8 times mean-one lognormal noise per seed (scale) and per point, so the
    expected mean curve is exactly proportional to x^-0.8 while single seeds scatter."""
    per_seed = np.exp(0.3 * gen.standard_normal((n_seeds, 1)) - 0.045)
    per_point = np.exp(0.2 * gen.standard_normal((n_seeds, x.size)) - 0.02)
    return x**-0.8 * per_seed * per_point


def test_bootstrap_interval_contains_truth_and_shrinks_with_more_seeds() -> None:
    gen = np.random.default_rng(7)
    x = 2.0 ** np.arange(7, 14)
    few = fit_power_law_bootstrap(x, _noisy_seeds(gen, 5, x), generator=0)
    many = fit_power_law_bootstrap(x, _noisy_seeds(gen, 80, x), generator=0)
    for fit in (few, many):
        assert fit.ci_low < -0.8 < fit.ci_high
        assert fit.ci_low <= fit.slope <= fit.ci_high
    width_few = few.ci_high - few.ci_low
    width_many = many.ci_high - many.ci_low
    # the width scales like 1 / sqrt(n_seeds): sqrt(80 / 5) = 4
    assert width_many < width_few / 2
    assert len(many.per_seed_slopes) == 80
    # per-seed slopes scatter by 0.2 sqrt(1 / S_xx) with S_xx = sum (log x - mean)^2
    log_x = np.log(x)
    expected_spread = 0.2 / math.sqrt(float(((log_x - log_x.mean()) ** 2).sum()))
    assert np.std(many.per_seed_slopes) == pytest.approx(expected_spread, rel=0.3)
    # the point estimate is the slope of the mean curve
    assert few.slope == pytest.approx(few.fit.slope)
    assert many.fit.n_points == 7 and many.n_seeds == 80 and many.n_boot == 2000


def test_bootstrap_is_deterministic_and_agrees_with_seed_spread() -> None:
    gen = np.random.default_rng(8)
    x = np.geomspace(10, 1000, 6)
    y = torch.tensor(_noisy_seeds(gen, 20, x))
    a = fit_power_law_bootstrap(x, y, generator=3)
    b = fit_power_law_bootstrap(x, y, generator=torch.Generator().manual_seed(3))
    c = fit_power_law_bootstrap(x, y, generator=4)
    assert a == b
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert fit_power_law_bootstrap(x, y) == fit_power_law_bootstrap(x, y)  # default: seed 0
    # the bootstrap standard error of a mean over 20 seeds ~ per-seed spread / sqrt(20)
    spread = float(np.std(a.per_seed_slopes, ddof=1))
    assert a.bootstrap_stderr == pytest.approx(spread / math.sqrt(20), rel=0.3)
    median = fit_power_law_bootstrap(x, y, aggregate="median", n_boot=500)
    assert median.aggregate == "median"
    assert median.slope == pytest.approx(fit_power_law(x, np.median(y.numpy(), axis=0)).slope)
    assert median.ci_low < median.slope < median.ci_high


def test_bootstrap_blocks_do_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = np.random.default_rng(9)
    x = np.geomspace(1, 100, 5)
    y = _noisy_seeds(gen, 6, x)
    whole = fit_power_law_bootstrap(x, y, n_boot=300, generator=1)
    monkeypatch.setattr(rates, "_BOOTSTRAP_BLOCK_ELEMENTS", 7 * 6 * 5)
    blocked = fit_power_law_bootstrap(x, y, n_boot=300, generator=1)
    assert blocked == whole


def test_exponential_rate_exact_and_against_linregress() -> None:
    k = np.arange(1.0, 30.0)
    fit = fit_exponential_rate(k, 5.0 * np.exp(-0.37 * k))
    assert fit.rate == pytest.approx(0.37, abs=1e-13)
    assert fit.prefactor == pytest.approx(5.0, rel=1e-12)
    assert fit.ci_low == pytest.approx(0.37, abs=1e-12) and fit.r2 == pytest.approx(1.0)
    np.testing.assert_allclose(fit.predict([0.0, 1.0]), [5.0, 5.0 * math.exp(-0.37)])

    gen = np.random.default_rng(1)
    y = np.exp(-0.2 * k + gen.normal(scale=0.5, size=k.size))
    noisy = fit_exponential_rate(torch.tensor(k), y, confidence=0.99)
    ref = stats.linregress(k, np.log(y))
    q = stats.t.ppf(0.995, k.size - 2)
    assert noisy.rate == pytest.approx(-ref.slope, rel=1e-12)
    assert noisy.ci_low == pytest.approx(-ref.slope - q * ref.stderr, rel=1e-10)
    assert noisy.ci_high == pytest.approx(-ref.slope + q * ref.stderr, rel=1e-10)
    assert noisy.ci_low < 0.2 < noisy.ci_high


def test_compare_decay_models_discriminates() -> None:
    k = np.arange(16.0, 513.0, 8.0)
    power = compare_decay_models(k, 0.4 * k**-2.0)
    assert power.preferred == "power_law"
    assert power.power_law.r2 > 0.999999 and power.exponential.r2 < 0.95
    # a smooth activation's spectrum: geometric decay times a power
    expo = compare_decay_models(k, k**-1.0 * np.exp(-0.05 * k))
    assert expo.preferred == "exponential"
    assert 0.05 < expo.exponential.rate < 0.06  # the k^-1 factor steepens it a little
    # with noise, the right model still wins
    gen = np.random.default_rng(2)
    noise = np.exp(gen.normal(scale=0.2, size=k.size))
    assert compare_decay_models(k, k**-2.0 * noise).preferred == "power_law"
    assert compare_decay_models(k, np.exp(-0.03 * k) * noise).preferred == "exponential"


def test_zeros_and_bad_values_are_rejected_with_their_positions() -> None:
    x = np.arange(1.0, 11.0)
    y = x**-2.0
    y[[3, 7]] = [0.0, np.nan]
    with pytest.raises(
        NtklabValueError,
        match=r"y: .*got 2 of 10 that are not: index 3 \(0.0\), index 7 \(nan\)\. Exclude",
    ):
        fit_power_law(x, y)
    with pytest.raises(
        NtklabValueError, match=r"x: expected positive finite values .*index 0 \(-1.0\)"
    ):
        fit_power_law(np.array([-1.0, 2.0, 3.0]), np.ones(3))
    ys = np.ones((3, 4))
    ys[1, 2] = -1.0
    with pytest.raises(NtklabValueError, match=r"y_per_seed: .*1 of 12 .*\[seed 1, x 2\] \(-1.0\)"):
        fit_power_law_bootstrap(np.arange(1.0, 5.0), ys)
    with pytest.raises(
        NtklabValueError, match=r"y: expected positive finite values for a fit of log y"
    ):
        fit_exponential_rate(x, np.zeros(10))
    with pytest.raises(NtklabValueError, match=r"x: expected finite values, got 1 of 3"):
        fit_exponential_rate([0.0, np.inf, 1.0], [1.0, 2.0, 3.0])


def test_bad_shapes_and_options_are_rejected() -> None:
    with pytest.raises(
        NtklabValueError,
        match=r"y: expected 4 values along its last axis to match x, got shape \(3,\)",
    ):
        fit_power_law([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    with pytest.raises(NtklabValueError, match=r"x: expected at least 3 points"):
        fit_power_law([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(NtklabValueError, match=r"x: expected at least two distinct values"):
        fit_power_law([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(
        NtklabValueError, match=r"y: expected a 1-D array of shape \(n,\), got shape \(2, 3\)"
    ):
        fit_power_law([1.0, 2.0, 3.0], np.ones((2, 3)))
    with pytest.raises(NtklabValueError, match=r"confidence: expected a float in \(0, 1\), got 95"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], confidence=95)
    with pytest.raises(NtklabValueError, match=r"y_per_seed: expected at least 2 seeds"):
        fit_power_law_bootstrap([1.0, 2.0, 3.0], np.ones((1, 3)))
    with pytest.raises(NtklabValueError, match=r"y_per_seed: expected a 2-D array"):
        fit_power_law_bootstrap([1.0, 2.0, 3.0], np.ones(3))
    with pytest.raises(
        NtklabValueError, match=r"aggregate: expected 'mean' or 'median', got 'max'"
    ):
        fit_power_law_bootstrap([1.0, 2.0, 3.0], np.ones((2, 3)), aggregate="max")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match=r"n_boot: expected an int >= 1, got 0"):
        fit_power_law_bootstrap([1.0, 2.0, 3.0], np.ones((2, 3)), n_boot=0)
    with pytest.raises(NtklabTypeError, match=r"generator: expected a torch.Generator"):
        fit_power_law_bootstrap([1.0, 2.0, 3.0], np.ones((2, 3)), generator="0")  # type: ignore[arg-type]
    with pytest.raises(
        NtklabTypeError, match=r"x: expected a torch tensor, numpy array or sequence"
    ):
        fit_power_law("abc", [1.0, 2.0, 3.0])  # type: ignore[arg-type]
