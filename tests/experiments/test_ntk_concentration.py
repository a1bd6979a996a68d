"""B3 ``ntk-concentration``: its judge on both sides of every threshold, its config's
constraints, its tiny run's slopes against an independent recomputation and the known
exponents, and its function distance."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

import ntklab.experiments.ntk_concentration as nc
from experiment_helpers import run_tiny
from ntklab.errors import NtklabValueError
from ntklab.experiments import get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.result import RunResult

NAME = "ntk-concentration"

# --- judge -------------------------------------------------------------------------------------

NTK_MID = sum(nc.NTK_RANGE) / 2
FN_MID = sum(nc.FUNCTION_RANGE) / 2
ACTS: tuple[nc.Act, ...] = ("erf", "tanh")
DEPTHS = (2, 3)


def _values(**changes: float) -> dict[str, float]:
    """Every slope in the middle of its range, then ``changes`` (metric name -> value)."""
    values = {f"ntk_sup_slope[{a},L={d}]": NTK_MID for a in ACTS for d in DEPTHS}
    values |= {f"function_sq_distance_slope[erf,L={d}]": FN_MID for d in DEPTHS}
    values |= changes
    return values


EPS = 1e-3
NTK_NAME = "ntk_sup_slope[tanh,L=3]"
FN_NAME = "function_sq_distance_slope[erf,L=3]"
CASES = [
    (NTK_NAME, nc.NTK_RANGE[0] + EPS, True),
    (NTK_NAME, nc.NTK_RANGE[0] - EPS, False),
    (NTK_NAME, nc.NTK_RANGE[1] - EPS, True),
    (NTK_NAME, nc.NTK_RANGE[1] + EPS, False),
    (FN_NAME, nc.FUNCTION_RANGE[0] + EPS, True),
    (FN_NAME, nc.FUNCTION_RANGE[0] - EPS, False),
    (FN_NAME, nc.FUNCTION_RANGE[1] - EPS, True),
    (FN_NAME, nc.FUNCTION_RANGE[1] + EPS, False),
    (NTK_NAME, math.nan, False),
    (FN_NAME, math.nan, False),
]


@pytest.mark.parametrize(("name", "value", "passes"), CASES)
def test_judge_both_sides_of_each_threshold(name: str, value: float, passes: bool) -> None:
    config = nc.NtkConcentrationConfig(activations=ACTS, depths=DEPTHS)
    judgement = nc.judge(config, metrics_from_values(_values(**{name: value})))
    assert judgement.passed is passes
    # the summary shows the extreme slopes, so the changed one (the only one off the middle)
    assert f"{value:.3f}" in judgement.summary, judgement.summary


def test_judge_criterion_is_rendered_from_the_grid() -> None:
    config = nc.NtkConcentrationConfig(
        activations=("tanh",), depths=(2, 4), widths=(32, 64, 128), n_seeds=3, n_grid=5
    )
    values = {f"ntk_sup_slope[tanh,L={d}]": NTK_MID for d in (2, 4)}
    values |= {f"function_sq_distance_slope[erf,L={d}]": FN_MID for d in (2, 4)}
    judgement = nc.judge(config, metrics_from_values(values))
    assert judgement.passed
    for text in ("32, 64, 128", "3 seeds", "tanh networks of depths 2, 4", "5^2", "[-0.6, -0.4]"):
        assert text in judgement.criterion, (text, judgement.criterion)
    assert "[-1.2, -0.8]" in judgement.criterion and "flow time 5" in judgement.criterion


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("widths", "128,64,256"),
        ("widths", "64,128"),  # too few for a log-log fit
        ("widths", "63,128,256"),  # odd: no antisymmetric halves
        ("widths", "0,64,128"),
        ("n_seeds", "1"),
        ("activations", "erf,erf"),
        ("activations", "[]"),
        ("activations", "relu"),
        ("depths", "3,2"),
        ("depths", "0"),
        ("lr_fraction", "1"),
        ("train_time", "0"),
        ("target_degree", "-1"),
        ("n_grid", "0"),
        ("n_train", "0"),
        ("w_std", "0"),
        ("b_std", "-1"),
        ("n_boot", "0"),
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
    return run_tiny(NAME, tmp_path_factory.mktemp("ntk-concentration"))


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _exact_bootstrap_quantile(x: np.ndarray, per_seed: np.ndarray, p: float) -> float:
    """Quantile ``p`` of the exact distribution of the seed-median slope under resampling of
    the seeds: every distinct resample (a multiset of rows) with its multinomial weight."""
    seeds = per_seed.shape[0]
    slopes, probs = [], []
    for combo in itertools.combinations_with_replacement(range(seeds), seeds):
        counts = Counter(combo)
        weight = math.factorial(seeds) / math.prod(math.factorial(c) for c in counts.values())
        probs.append(weight / seeds**seeds)
        slopes.append(_slope(x, np.median(per_seed[list(combo)], axis=0)))
    order = np.argsort(slopes)
    cdf = np.cumsum(np.array(probs)[order])
    return float(np.array(slopes)[order][np.searchsorted(cdf, p - 1e-12)])


def test_tiny_run_slopes_match_a_recomputation_from_its_arrays(tiny: RunResult) -> None:
    config = nc.NtkConcentrationConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    widths = arrays["widths"]
    np.testing.assert_array_equal(widths, config.widths)
    shape = (config.n_seeds, len(config.widths))
    curves = {
        f"ntk_sup_slope[{a},L={d}]": arrays[f"ntk_sup_{a}_depth{d}"]
        for a in config.activations
        for d in config.depths
    }
    ntk_names = list(curves)
    for d in config.depths:
        curves[f"function_sq_distance_slope[{config.function_activation},L={d}]"] = arrays[
            f"function_sq_distance_depth{d}"
        ]
    for name, per_seed in curves.items():
        assert per_seed.shape == shape and np.all(per_seed > 0)
        metric = metrics[name]
        # an OLS fit of the logged seed median: numpy gives it to rounding
        assert metric.value == pytest.approx(_slope(widths, np.median(per_seed, axis=0)), abs=1e-9)
        # the 2.5% / 97.5% quantiles of n_boot = 100 resamples lie between the exact bootstrap
        # distribution's 0.1% and 15% (85% and 99.9%) quantiles, except with probability
        # < 1e-3 (binomial tails)
        assert metric.ci_low is not None and metric.ci_high is not None
        q = {p: _exact_bootstrap_quantile(widths, per_seed, p) for p in (1e-3, 0.15, 0.85, 0.999)}
        assert q[1e-3] - 1e-9 <= metric.ci_low <= q[0.15] + 1e-9, (metric, q)
        assert q[0.85] - 1e-9 <= metric.ci_high <= q[0.999] + 1e-9, (metric, q)
    ntk = [metrics[n].value for n in ntk_names]
    fn = [metrics[n].value for n in curves if n not in ntk_names]
    assert metrics["ntk_slope_min"].value == min(ntk)
    assert metrics["ntk_slope_max"].value == max(ntk)
    assert metrics["function_slope_min"].value == min(fn)
    assert metrics["function_slope_max"].value == max(fn)
    assert tiny.criterion_met is nc.judge(config, metrics).passed
    assert "32, 64, 128, 256" in tiny.criterion
    assert [p.name for p in tiny.figure_paths] == ["ntk_concentration.png"]


def test_tiny_run_slopes_bracket_the_known_exponents(tiny: RunResult) -> None:
    """The known exponents (m^-1/2 for the NTK, m^-1 for the squared function distance) lie
    inside the recorded 95% seed-bootstrap intervals: the tolerance is the run's own seed
    noise (about +-0.15 for 4 seeds over widths 32..256)."""
    metrics = {m.name: m for m in tiny.metrics}
    for name, known in (
        ("ntk_sup_slope[erf,L=2]", -0.5),
        ("function_sq_distance_slope[erf,L=2]", -1.0),
    ):
        metric = metrics[name]
        assert metric.ci_low is not None and metric.ci_high is not None
        assert metric.ci_low <= known <= metric.ci_high, metric
        assert metric.ci_high - metric.ci_low < abs(known), metric  # an informative interval


# --- the library pieces ------------------------------------------------------------------------


def test_wide_networks_track_kernel_gd() -> None:
    """The trained zero-output networks approach kernel GD: a 64x wider net is much closer."""
    # two widths: function_distances needs no log-log fit (the 3-width rule is the
    # experiment's), so the config is built without validation
    config = nc.NtkConcentrationConfig.model_construct(
        widths=(32, 2048), n_seeds=4, n_train=8, n_test=16
    )
    arch = nc.smooth_network(2, "erf", config.w_std, config.b_std)
    dist2, steps, lr = nc.function_distances(arch, config, torch.Generator().manual_seed(0))
    assert dist2.shape == (4, 2)
    assert abs(steps * lr - config.train_time) <= lr
    med = np.median(dist2, axis=0)
    assert med[1] < med[0] / 16  # O(1/m) predicts 1/64
    assert med[1] < 1e-3


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "B3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is nc.measure and exp.judge is nc.judge and exp.draw is nc.draw


def test_docstring_paper_scale_counts_the_paper_grid() -> None:
    """The module's paper-scale cost states the paper grid and the float64 weights of the
    width-8192 seed ensembles, counted here from the paper config."""
    exp = get_experiment("ntk-concentration")
    config = resolve_config(exp, "paper", {})
    assert isinstance(config, nc.NtkConcentrationConfig)
    doc = " ".join((nc.__doc__ or "").split())
    acts = " and ".join(config.activations)
    assert (
        f"Paper scale (widths {config.widths[0]} to {config.widths[-1]}, {config.n_seeds} "
        f"seeds, {acts}, depths {config.depths[0]} to {config.depths[-1]})" in doc
    )
    assert config.dtype == "float64"
    assert f"one sup distance over the {config.n_grid}^2 pairs at width 8192" in doc
    networks = len(config.activations) * len(config.depths) * config.n_seeds
    assert f"over the grid's {networks} networks per width" in doc
    assert f"on {config.n_train} points" in doc
    widest = config.widths[-1]
    gb = {
        depth: config.n_seeds * 2 * (depth - 1) * (widest // 2) ** 2 * 8 / 1e9
        for depth in config.depths
    }
    assert (
        f"{gb[2]:.1f} GB (depth 2), {gb[3]:.1f} GB (depth 3) and {gb[4]:.1f} GB (depth 4) at "
        f"width {widest}" in doc
    )
    # measured peak: twice the weights
    assert f"about {round(2 * gb[4])} GB at depth 4" in doc
    assert f"{round(2 * gb[4])} GB of memory ({gb[4]:.1f} GB of float64 weights" in (
        exp.paper_scale_cost
    )
    assert f"the {config.n_seeds} width-{widest} networks" in exp.paper_scale_cost
