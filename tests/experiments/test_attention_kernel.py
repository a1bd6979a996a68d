"""``attention-kernel``: its judge on both sides of each threshold, its config's constraints,
its tiny run's figures against independent recomputations (a dense per-parameter Jacobian of
the first network drawn, the target by an explicit loop, the regression by NumPy solves), and
its registration."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import ntklab.experiments.attention_kernel as ak
from experiment_helpers import run_tiny
from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.result import RunResult

NAME = "attention-kernel"

# --- judge -------------------------------------------------------------------------------------

EPS = 1e-3
LOW, HIGH = ak.SLOPE_RANGE


def _values(slope: float) -> dict[str, float]:
    return {"ntk_sup_slope": slope, "transformer_test_rel_mse": 0.1, "mlp_test_rel_mse": 0.4}


@pytest.mark.parametrize(
    ("slope", "passes"),
    [
        (LOW + EPS, True),
        (LOW - EPS, False),
        (HIGH - EPS, True),
        (HIGH + EPS, False),
        (-0.5, True),
        (math.nan, False),
    ],
)
def test_judge_both_sides_of_each_threshold(slope: float, passes: bool) -> None:
    judgement = ak.judge(ak.AttentionKernelConfig(), metrics_from_values(_values(slope)))
    assert judgement.passed is passes
    assert f"{slope:.3f}" in judgement.summary, judgement.summary


def test_the_regression_errors_are_reported_not_judged() -> None:
    config = ak.AttentionKernelConfig()
    for t, m in ((0.1, 0.9), (0.9, 0.1), (math.nan, math.nan)):
        values = {"ntk_sup_slope": -0.5, "transformer_test_rel_mse": t, "mlp_test_rel_mse": m}
        assert ak.judge(config, metrics_from_values(values)).passed


def test_judge_criterion_is_rendered_from_the_grid() -> None:
    config = ak.AttentionKernelConfig(widths=(16, 48, 96), n_seeds=3, n_grid=5)
    criterion = ak.judge(config, metrics_from_values(_values(-0.5))).criterion
    for text in ("16, 48, 96", "3 seeds", "5^2", "[-0.65, -0.35]"):
        assert text in criterion, (text, criterion)


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("widths", "128,64,256"),
        ("widths", "64,128"),
        ("widths", "0,64,128"),
        ("n_seeds", "1"),
        ("seq_len", "1"),
        ("n_trains", "20,10"),
        ("n_test", "0"),
        ("ridge", "0"),
        ("n_boot", "0"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_scales_are_valid() -> None:
    for scale in ("tiny", "quick", "paper"):
        resolve_config(get_experiment(NAME), scale)


# --- the target --------------------------------------------------------------------------------


def test_pair_similarity_is_the_mean_over_distinct_pairs() -> None:
    x = torch.randn(3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = ak.pair_similarity(x)
    for i in range(3):
        pairs = [float(x[i, :, g] @ x[i, :, h]) / 4 for g in range(5) for h in range(5) if g != h]
        assert float(got[i]) == pytest.approx(sum(pairs) / len(pairs), rel=1e-12)
    # order-invariant: permuting the tokens leaves it unchanged
    torch.testing.assert_close(ak.pair_similarity(x[:, :, [3, 1, 4, 0, 2]]), got)


# --- the tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("attention-kernel"))


def _dense_ntk(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The NTK from the full Jacobian, one backward pass per input (no ntklab code)."""
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        out = model(x[i : i + 1]).sum()
        grads = torch.autograd.grad(out, params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    jac = torch.stack(rows)
    return jac @ jac.T


def test_tiny_run_first_distance_matches_a_dense_jacobian(tiny: RunResult) -> None:
    """The first network drawn from the run's ``init`` stream, its NTK from a dense Jacobian,
    against the analytic NTK: the recorded ``ntk_sup[0, 0]``."""
    config = ak.AttentionKernelConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    ctx = RunContext(out_dir=Path("."), seed=config.seed)
    grid = torch.randn(
        config.n_grid,
        config.channels,
        config.seq_len,
        generator=ctx.generator("data"),
        dtype=torch.float64,
    )
    np.testing.assert_array_equal(arrays["grid"], grid.numpy())
    arch = ak.transformer(config.n_heads)
    model = arch.to_torch(config.widths[0], generator=ctx.generator("init"), dtype=torch.float64)
    with torch.no_grad():
        model(grid[:1])
    theta = arch.kernel(grid).ntk
    dist = float((_dense_ntk(model, grid) - theta).abs().max() / theta.abs().max())
    assert arrays["ntk_sup"][0, 0] == pytest.approx(dist, rel=1e-8)


def test_tiny_run_slope_is_the_fit_of_the_medians(tiny: RunResult) -> None:
    config = ak.AttentionKernelConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    metrics = {m.name: m for m in tiny.metrics}
    per_seed = arrays["ntk_sup"]
    assert per_seed.shape == (config.n_seeds, len(config.widths)) and np.all(per_seed > 0)
    median = np.median(per_seed, axis=0)
    slope = float(np.polyfit(np.log(arrays["widths"]), np.log(median), 1)[0])
    assert metrics["ntk_sup_slope"].value == pytest.approx(slope, abs=1e-9)
    ci_low, ci_high = metrics["ntk_sup_slope"].ci_low, metrics["ntk_sup_slope"].ci_high
    assert ci_low is not None and ci_high is not None and ci_low <= slope <= ci_high
    # the distance falls: 8x the width, m^-1/2 predicts a factor 2.8
    assert median[-1] < median[0] / 2, median
    assert tiny.criterion_met is ak.judge(config, metrics).passed
    assert [p.name for p in tiny.figure_paths] == ["attention_kernel.png"]


def test_tiny_run_regression_matches_numpy(tiny: RunResult) -> None:
    """Targets from the stored inputs by a loop-free NumPy formula, the predictions by
    NumPy solves with the analytic kernels, the errors from the predictions."""
    config = ak.AttentionKernelConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    metrics = {m.name: m for m in tiny.metrics}
    x = arrays["inputs"]
    n_max, length, c = config.n_trains[-1], config.seq_len, config.channels
    assert x.shape == (n_max + config.n_test, c, length)
    total = x.sum(axis=2)
    raw = ((total**2).sum(axis=1) - (x**2).sum(axis=(1, 2))) / c / (length * (length - 1))
    y = (raw - raw.mean()) / raw.std(ddof=1)
    np.testing.assert_allclose(arrays["targets"], y, rtol=1e-10, atol=1e-12)
    xt = torch.from_numpy(x)
    kernels = {
        "transformer": ak.transformer(config.n_heads).kernel(xt).ntk.numpy(),
        "mlp": ak.mlp(config.mlp_depth).kernel(xt.flatten(1)).ntk.numpy(),
    }
    y_test = y[n_max:]
    for name, k in kernels.items():
        for i, n in enumerate(config.n_trains):
            k_train = k[:n, :n]
            ridge = config.ridge * np.trace(k_train) / n
            pred = k[n_max:, :n] @ np.linalg.solve(k_train + ridge * np.eye(n), y[:n])
            np.testing.assert_allclose(arrays[f"{name}_predictions"][i], pred, rtol=1e-6, atol=1e-8)
            rel = np.mean((pred - y_test) ** 2) / np.var(y_test)
            assert arrays[f"{name}_rel_mse"][i] == pytest.approx(rel, rel=1e-6)
        assert metrics[f"{name}_test_rel_mse"].value == arrays[f"{name}_rel_mse"][-1]


# --- registration ------------------------------------------------------------------------------


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "ATTN"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is ak.measure and exp.judge is ak.judge and exp.draw is ak.draw
    assert exp.headline[0] == "ntk_sup_slope" and exp.paper_scale_cost


def test_docstring_paper_scale_states_the_paper_grid() -> None:
    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, ak.AttentionKernelConfig)
    doc = " ".join((ak.__doc__ or "").split())
    assert (
        f"Paper scale (widths {config.widths[0]} to {config.widths[-1]}, {config.n_seeds} "
        f"seeds, {config.n_grid} sequences of {config.seq_len} tokens of {config.channels} "
        f"channels, training sets up to {config.n_trains[-1]} sequences)" in doc
    )
