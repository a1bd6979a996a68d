"""A5 ``sparse-parity``: its judge on both sides of every threshold, its config's constraints,
its tiny run against an independent recomputation, and the NTK side against direct KRR."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ntklab.experiments.sparse_parity as sp
from experiment_helpers import run_tiny
from ntklab.data import hypercube, random_sparse_parity
from ntklab.dynamics import kernel_ridge_regression, select_ridge_loo
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    RunContext,
    RunResult,
    get_experiment,
    metrics_from_values,
    resolve_config,
)
from ntklab.experiments.sparse_parity import SparseParityConfig, ntk_test_mse
from ntklab.experiments.spectrum_s1 import relu_network

# ---------------------------------------------------------------------------------------------
# judge

QUICK = SparseParityConfig()  # n = 1000, min_ratio 1e3, floor 0.9
RATIO = "mse_ratio[n=1000]"
NTK = "ntk_mse_over_var[n=1000]"


@pytest.mark.parametrize(
    ("changed", "passed"),
    [
        ({}, True),
        ({RATIO: sp.MIN_RATIO * 1.01}, True),  # just above the ratio threshold
        ({RATIO: sp.MIN_RATIO * 0.99}, False),  # just below it
        ({RATIO: sp.MIN_RATIO}, True),  # ">= 1e3"
        ({NTK: sp.NTK_FLOOR * 1.01}, True),  # NTK just above 0.9 Var(y)
        ({NTK: sp.NTK_FLOOR * 0.99}, False),  # just below
        ({"diverged_runs": 1.0}, False),
        ({RATIO: math.nan}, False),
        ({NTK: math.nan}, False),
        ({"diverged_runs": math.nan}, False),
        ({RATIO: math.inf}, True),  # a network at exactly zero error is a pass
    ],
)
def test_judge_thresholds(changed: dict[str, float], passed: bool) -> None:
    values = {RATIO: 1e5, NTK: 1.0, "net_mse[n=1000]": 1e-5, "diverged_runs": 0.0, **changed}
    judgement = sp.judge(QUICK, metrics_from_values(values))
    assert judgement.passed is passed, judgement.summary
    assert f"{values[RATIO]:.3g}" in judgement.summary
    assert f"{values[NTK]:.3f} Var(y)" in judgement.summary
    assert "n = 1000" in judgement.criterion and ">= 1000" in judgement.criterion
    assert ">= 0.9 Var(y)" in judgement.criterion and "k = 3 of d = 20" in judgement.criterion


def test_judge_criterion_follows_the_grid_that_ran() -> None:
    config = SparseParityConfig(ns=(250, 500), criterion_n=250, min_ratio=1e4, ntk_floor=0.5)
    values = {
        "mse_ratio[n=250]": 2e4,
        "ntk_mse_over_var[n=250]": 0.6,
        "net_mse[n=250]": 1e-4,
        "diverged_runs": 0.0,
    }
    assert sp.judge(config, metrics_from_values(values)).passed
    values["mse_ratio[n=250]"] = 9e3
    judgement = sp.judge(config, metrics_from_values(values))
    assert not judgement.passed and "9e+03" in judgement.summary
    assert "n = 250" in judgement.criterion and ">= 10000" in judgement.criterion
    assert ">= 0.5 Var(y)" in judgement.criterion


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ns", "1000,500"),  # not increasing
        ("ns", "0"),
        ("criterion_n", "750"),  # not in ns
        ("k", "21"),  # more coordinates than dim = 20
        ("k", "0"),
        ("dim", "0"),
        ("batch_size", "600"),  # above the smallest n = 500
        ("last_evaluations", "100"),  # 6000 steps / 250 give 25 evaluations
        ("eval_every", "0"),
        ("seeds", "0"),
        ("min_ratio", "0"),
        ("ntk_floor", "-0.1"),
        ("weight_decay", "-1"),
        ("ridges", "0"),
        ("learning_rate", "-0.1"),
    ],
)
def test_config_rejects(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment("sparse-parity"), "quick", {key: value})


def test_config_error_names_expected_and_received() -> None:
    with pytest.raises(NtklabValueError, match=r"criterion_n.*\[500, 1000, 2000\].*750"):
        resolve_config(get_experiment("sparse-parity"), "quick", {"criterion_n": "750"})


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny("sparse-parity", tmp_path_factory.mktemp("runs"))


def test_tiny_metrics_from_the_recorded_mses(tiny: RunResult) -> None:
    config = SparseParityConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    ns = list(config.ns)
    ntk, net = arrays["ntk_mse"], arrays["net_mse"]
    assert ntk.shape == net.shape == (config.seeds, len(ns))
    # clipped outputs against +-1 labels: every MSE lies in [0, 4]
    assert np.all((ntk >= 0) & (ntk <= 4)) and np.all((net >= 0) & (net <= 4))
    # the reported network MSE is the mean of the last evaluations, not the best one
    for seed in range(config.seeds):
        for i, n in enumerate(ns):
            curve = arrays[f"net_curve_seed{seed}_n{n}"]
            assert curve[0, 0] == 0 and curve[0, -1] == config.t
            np.testing.assert_allclose(net[seed, i], curve[1, -config.last_evaluations :].mean())
    # every metric is a direct function of the stored per-seed MSEs: rounding only
    ratios = ntk / np.maximum(net, sp.MSE_FLOOR)
    geo = np.exp(np.log(ratios).mean(axis=0))
    j = ns.index(config.criterion_n)
    n_at = config.criterion_n
    np.testing.assert_allclose(metrics[f"mse_ratio[n={n_at}]"].value, geo[j], rtol=1e-12)
    np.testing.assert_allclose(
        metrics[f"ntk_mse_over_var[n={n_at}]"].value, ntk[:, j].mean(), rtol=1e-12
    )
    np.testing.assert_allclose(
        metrics[f"net_mse[n={n_at}]"].value,
        np.exp(np.log(np.maximum(net[:, j], sp.MSE_FLOOR)).mean()),
        rtol=1e-12,
    )
    for i, n in enumerate(ns):
        np.testing.assert_allclose(metrics[f"ratio[n={n}]"].value, geo[i], rtol=1e-12)
    assert metrics["diverged_runs"].value == 0 and not arrays["diverged"].any()
    assert (tiny.run_dir / "sparse_parity.png").is_file()


def test_tiny_ntk_mse_against_a_numpy_loo_recomputation(tiny: RunResult) -> None:
    """NTK regression of seed 0 at every n, recomputed from regenerated data with the ridge
    chosen by the closed-form leave-one-out residuals of dense NumPy solves."""
    config = SparseParityConfig.model_validate(tiny.config)
    gen = RunContext(out_dir=tiny.run_dir, seed=config.seed).generator("data0")
    parity = random_sparse_parity(config.dim, config.k, generator=gen)
    x_all = hypercube(config.ns[-1], config.dim, generator=gen, dtype=torch.float32)
    x_test = hypercube(config.n_test, config.dim, generator=gen, dtype=torch.float32)
    arch = relu_network(1, config.w_std, config.b_std)
    recorded = np.load(tiny.run_dir / "arrays.npz")["ntk_mse"][0]
    y_test = parity(x_test).double().numpy()
    for i, n in enumerate(config.ns):
        x = x_all[:n].double()
        y = parity(x_all[:n]).double().numpy()
        k = arch.kernel(x, x).ntk.detach().numpy()
        kt = arch.kernel(x_test.double(), x).ntk.detach().numpy()
        scale = np.mean(np.diag(k))
        loo = []
        for rel in config.ridges:
            g_inv = np.linalg.inv(k + rel * scale * np.eye(n))
            # leave-one-out residual of KRR: (G^-1 y)_i / (G^-1)_ii
            loo.append(np.mean(((g_inv @ y) / np.diag(g_inv)) ** 2))
        best = config.ridges[int(np.argmin(loo))] * scale
        pred = np.clip(kt @ np.linalg.solve(k + best * np.eye(n), y), -1.0, 1.0)
        # eigendecomposition (library) against inverse and LU (here): rounding only
        np.testing.assert_allclose(recorded[i], np.mean((pred - y_test) ** 2), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# helpers


def test_ntk_side_equals_direct_loo_krr() -> None:
    config = SparseParityConfig(dim=6, k=2, ridges=(1e-3, 1e-1, 1e1))
    gen = torch.Generator().manual_seed(0)
    parity = random_sparse_parity(6, 2, generator=gen)
    x = hypercube(50, 6, generator=gen, dtype=torch.float32)
    xt = hypercube(40, 6, generator=gen, dtype=torch.float32)
    mse, _ = ntk_test_mse(config, x, parity(x), xt, parity(xt))
    arch = relu_network(1, config.w_std, config.b_std)
    k = arch.kernel(x.double(), x.double()).ntk
    scale = float(k.diagonal().mean())
    sel = select_ridge_loo(k, parity(x).double(), [scale * r for r in config.ridges])
    pred = kernel_ridge_regression(
        k, parity(x).double(), arch.kernel(xt.double(), x.double()).ntk, ridge=sel.ridge
    )
    expected = (pred.clamp(-1, 1) - parity(xt).double()).square().mean()
    torch.testing.assert_close(torch.tensor(mse, dtype=torch.float64), expected)


def test_registered_with_three_scales() -> None:
    exp = get_experiment("sparse-parity")
    assert exp.claim_id == "A5"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.scales["paper"]["min_ratio"] == 1e4
    quick = resolve_config(exp, "quick")
    assert isinstance(quick, SparseParityConfig)
    assert quick.min_ratio == sp.MIN_RATIO and quick.ntk_floor == sp.NTK_FLOOR
