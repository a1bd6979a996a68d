"""A5 ``sparse-parity``: its judge on both sides of every threshold, its config's constraints,
its tiny run against an independent recomputation (the NTK from its closed form in NumPy), the
NTK side against direct KRR, and a verdict that does not move with the weight decay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import ntklab.experiments.sparse_parity as sp
from experiment_helpers import relu_ntk_numpy, run_tiny
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
from ntklab.experiments.base import verdict_of
from ntklab.experiments.sparse_parity import SparseParityConfig, ntk_test_mse
from ntklab.experiments.spectrum_s1 import relu_network

# ---------------------------------------------------------------------------------------------
# judge

QUICK = SparseParityConfig()  # n = 1000, network <= 0.05, NTK >= 0.4, floor 0.9
NET = "net_error[n=1000]"
NTK_ERR = "ntk_error[n=1000]"
NTK = "ntk_mse_over_var[n=1000]"
RATIO = "mse_ratio[n=1000]"


@pytest.mark.parametrize(
    ("changed", "passed"),
    [
        ({}, True),
        ({NET: sp.NET_MAX_ERROR * 0.99}, True),  # network just below its bound
        ({NET: sp.NET_MAX_ERROR * 1.01}, False),  # just above it
        ({NET: sp.NET_MAX_ERROR}, True),  # "<= 0.05"
        ({NTK_ERR: sp.NTK_MIN_ERROR * 1.01}, True),  # NTK just above its bound
        ({NTK_ERR: sp.NTK_MIN_ERROR * 0.99}, False),  # just below it
        ({NTK_ERR: sp.NTK_MIN_ERROR}, True),  # ">= 0.4"
        ({NTK: sp.NTK_FLOOR * 1.01}, True),  # NTK just above 0.9 Var(y)
        ({NTK: sp.NTK_FLOOR * 0.99}, False),  # just below
        ({"diverged_runs": 1.0}, False),
        ({RATIO: 1.0}, True),  # the MSE ratio is reported, not judged
        ({RATIO: math.inf}, True),
        ({"net_mse[n=1000]": 0.5}, True),  # so is the network's MSE floor
        ({NET: math.nan}, False),
        ({NTK_ERR: math.nan}, False),
        ({NTK: math.nan}, False),
        ({"diverged_runs": math.nan}, False),
    ],
)
def test_judge_thresholds(changed: dict[str, float], passed: bool) -> None:
    values = {
        NET: 0.0,
        NTK_ERR: 0.5,
        NTK: 1.0,
        RATIO: 1e5,
        "net_mse[n=1000]": 1e-5,
        "diverged_runs": 0.0,
        **changed,
    }
    judgement = sp.judge(QUICK, metrics_from_values(values))
    assert judgement.passed is passed, judgement.summary
    assert judgement.controls_failed == ()
    assert f"network {values[NET]:.3g}" in judgement.summary
    assert f"NTK {values[NTK_ERR]:.3g}" in judgement.summary
    assert f"{values[NTK]:.3f} Var(y)" in judgement.summary
    assert f"MSE ratio {values[RATIO]:.3g} (reported)" in judgement.summary
    assert "n = 1000" in judgement.criterion and "<= 0.05" in judgement.criterion
    assert ">= 0.4" in judgement.criterion and ">= 0.9 Var(y)" in judgement.criterion
    assert "k = 3 of d = 20" in judgement.criterion and "ratio" not in judgement.criterion


def test_judge_criterion_follows_the_grid_that_ran() -> None:
    config = SparseParityConfig(
        ns=(250, 500), criterion_n=250, net_max_error=0.1, ntk_min_error=0.3, ntk_floor=0.5
    )
    values = {
        "net_error[n=250]": 0.08,
        "ntk_error[n=250]": 0.35,
        "ntk_mse_over_var[n=250]": 0.6,
        "mse_ratio[n=250]": 2.0,
        "net_mse[n=250]": 1e-4,
        "diverged_runs": 0.0,
    }
    assert sp.judge(config, metrics_from_values(values)).passed
    values["net_error[n=250]"] = 0.12
    judgement = sp.judge(config, metrics_from_values(values))
    assert not judgement.passed and "network 0.12" in judgement.summary
    assert "n = 250" in judgement.criterion and "<= 0.1," in judgement.criterion
    assert ">= 0.3," in judgement.criterion and ">= 0.5 Var(y)" in judgement.criterion


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
        ("net_max_error", "1.5"),
        ("ntk_min_error", "-0.1"),
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
    ntk_error, net_error = arrays["ntk_error"], arrays["net_error"]
    assert ntk.shape == net.shape == ntk_error.shape == net_error.shape == (config.seeds, len(ns))
    # clipped outputs against +-1 labels: every MSE lies in [0, 4], every error in [0, 1]
    assert np.all((ntk >= 0) & (ntk <= 4)) and np.all((net >= 0) & (net <= 4))
    assert np.all((ntk_error >= 0) & (ntk_error <= 1)) and np.all(
        (net_error >= 0) & (net_error <= 1)
    )
    # an output whose sign is wrong costs at least 1 in clipped squared error
    assert np.all(ntk_error <= ntk) and np.all(net_error <= net)
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
    np.testing.assert_allclose(metrics[f"net_error[n={n_at}]"].value, net_error[:, j].mean())
    np.testing.assert_allclose(metrics[f"ntk_error[n={n_at}]"].value, ntk_error[:, j].mean())
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
    """NTK regression of seed 0 at every n, recomputed from regenerated data with the ReLU
    NTK's closed form in NumPy (:func:`relu_ntk`, not ntklab's kernels) and the ridge chosen
    by the closed-form leave-one-out residuals of dense NumPy solves."""
    config = SparseParityConfig.model_validate(tiny.config)
    gen = RunContext(out_dir=tiny.run_dir, seed=config.seed).generator("data0")
    parity = random_sparse_parity(config.dim, config.k, generator=gen)
    x_all = hypercube(config.ns[-1], config.dim, generator=gen, dtype=torch.float32)
    x_test = hypercube(config.n_test, config.dim, generator=gen, dtype=torch.float32)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    recorded, recorded_error = arrays["ntk_mse"][0], arrays["ntk_error"][0]
    y_test = parity(x_test).double().numpy()
    for i, n in enumerate(config.ns):
        x = x_all[:n].double().numpy()
        y = parity(x_all[:n]).double().numpy()
        k = relu_ntk_numpy(x, x, 1, config.w_std, config.b_std)
        kt = relu_ntk_numpy(x_test.double().numpy(), x, 1, config.w_std, config.b_std)
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
        assert recorded_error[i] == np.mean(pred * y_test <= 0)


def test_relu_ntk_reference_is_the_analytic_ntk() -> None:
    """The NumPy closed form of this file and ntklab's analytic ReLU NTK agree on the
    hypercube (so a wrong kernel shows as a mismatch in the recomputation above)."""
    gen = torch.Generator().manual_seed(3)
    x = hypercube(6, 8, generator=gen, dtype=torch.float64)
    z = hypercube(4, 8, generator=gen, dtype=torch.float64)
    arch = relu_network(1, 1.0, 0.1)
    expected = relu_ntk_numpy(x.numpy(), z.numpy(), 1, 1.0, 0.1)
    np.testing.assert_allclose(arch.kernel(x, z).ntk.numpy(), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# helpers


def test_ntk_side_equals_direct_loo_krr() -> None:
    config = SparseParityConfig(dim=6, k=2, ridges=(1e-3, 1e-1, 1e1))
    gen = torch.Generator().manual_seed(0)
    parity = random_sparse_parity(6, 2, generator=gen)
    x = hypercube(50, 6, generator=gen, dtype=torch.float32)
    xt = hypercube(40, 6, generator=gen, dtype=torch.float32)
    mse, _, error = ntk_test_mse(config, x, parity(x), xt, parity(xt))
    arch = relu_network(1, config.w_std, config.b_std)
    k = arch.kernel(x.double(), x.double()).ntk
    scale = float(k.diagonal().mean())
    sel = select_ridge_loo(k, parity(x).double(), [scale * r for r in config.ridges])
    pred = kernel_ridge_regression(
        k, parity(x).double(), arch.kernel(xt.double(), x.double()).ntk, ridge=sel.ridge
    )
    expected = (pred.clamp(-1, 1) - parity(xt).double()).square().mean()
    torch.testing.assert_close(torch.tensor(mse, dtype=torch.float64), expected)
    assert error == float((torch.sign(pred) != parity(xt).double()).double().mean())


# A judged (quick-scale) configuration small enough for the default suite: a 3-sparse parity
# of d = 8 at n = 150 (d^k = 512), one seed, a width-64 network trained for 600 steps.
SMALL_JUDGED = {
    "dim": "8",
    "k": "3",
    "ns": "150",
    "criterion_n": "150",
    "seeds": "1",
    "n_test": "256",
    "width": "64",
    "t": "600",
    "eval_every": "200",
    "last_evaluations": "2",
}


def test_verdict_does_not_change_when_the_weight_decay_halves(tmp_path: Path) -> None:
    """The 0-1 criterion does not read the network's MSE floor, which is the equilibrium of
    hinge loss with weight decay: halving the weight decay moves that floor, not the verdict."""
    exp = get_experiment("sparse-parity")
    verdicts, floors = [], []
    for weight_decay in (
        sp.SparseParityConfig().weight_decay,
        sp.SparseParityConfig().weight_decay / 2,
    ):
        config = resolve_config(exp, "quick", {**SMALL_JUDGED, "weight_decay": str(weight_decay)})
        assert isinstance(config, SparseParityConfig) and config.weight_decay == weight_decay
        out = sp.measure(config, RunContext(out_dir=tmp_path, seed=config.seed))
        metrics = {m.name: m for m in out.metrics}
        judgement = sp.judge(config, metrics)
        verdicts.append(verdict_of(judgement.passed, judgement.controls_failed, "quick"))
        floors.append(metrics["net_mse[n=150]"].value)
    assert verdicts == ["PASS", "PASS"]
    assert floors[0] != floors[1]  # the two runs did differ


def test_registered_with_three_scales() -> None:
    exp = get_experiment("sparse-parity")
    assert exp.claim_id == "A5"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    quick = resolve_config(exp, "quick")
    assert isinstance(quick, SparseParityConfig)
    assert quick.ntk_floor == sp.NTK_FLOOR
    assert quick.net_max_error == sp.NET_MAX_ERROR and quick.ntk_min_error == sp.NTK_MIN_ERROR
    paper = resolve_config(exp, "paper")
    assert isinstance(paper, SparseParityConfig)
    assert (paper.net_max_error, paper.ntk_min_error) == (sp.NET_MAX_ERROR, sp.NTK_MIN_ERROR)
