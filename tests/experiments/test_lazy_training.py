"""C3 ``lazy-training``: its judge on both sides of every threshold, its config's errors, its
tiny run's metrics recomputed from the stored curves and one cell of the grid reproduced
independently (plain autograd GD and a Jacobian NTK), and its closed-form linearization
against ``train(linearize(net))``."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from experiment_helpers import run_tiny
from ntklab.dynamics import linearize
from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.lazy_training import (
    MUP_RANGE,
    NTK_DRIFT_RANGE,
    RMSE_MAX_SLOPE,
    LazyTrainingConfig,
    judge,
    linearized_test_outputs,
    mlp,
)
from ntklab.experiments.result import RunResult
from ntklab.nets import output_scale, train

NAME = "lazy-training"

# ---------------------------------------------------------------------------------------------
# judge

TINY = LazyTrainingConfig(widths=(32, 64, 128), seeds=2, t=20, n_train=12, n_test=8, depth=2)


def passing_values() -> dict[str, float | tuple[float, float, float]]:
    return {
        "ntk_kernel_change_slope": (-1.0, -1.05, -0.95),
        "linearization_rmse_slope": (-0.5, -0.6, -0.45),
        "mup_kernel_change_slope": (0.0, -0.1, 0.1),
        "mup_kernel_change_min": 2.0,
        "mup_kernel_change_max": 3.0,
        "diverged_runs": 0.0,
    }


EPS = 1e-6
JUDGE_CASES: list[tuple[str, dict[str, float | tuple[float, float, float]], bool]] = [
    ("all inside", {}, True),
    ("ntk low just inside", {"ntk_kernel_change_slope": NTK_DRIFT_RANGE[0] + EPS}, True),
    ("ntk low just outside", {"ntk_kernel_change_slope": NTK_DRIFT_RANGE[0] - EPS}, False),
    ("ntk high just inside", {"ntk_kernel_change_slope": NTK_DRIFT_RANGE[1] - EPS}, True),
    ("ntk high just outside", {"ntk_kernel_change_slope": NTK_DRIFT_RANGE[1] + EPS}, False),
    ("rmse just inside", {"linearization_rmse_slope": RMSE_MAX_SLOPE - EPS}, True),
    ("rmse just outside", {"linearization_rmse_slope": RMSE_MAX_SLOPE + EPS}, False),
    ("mup low just inside", {"mup_kernel_change_slope": MUP_RANGE[0] + EPS}, True),
    ("mup low just outside", {"mup_kernel_change_slope": MUP_RANGE[0] - EPS}, False),
    ("mup high just inside", {"mup_kernel_change_slope": MUP_RANGE[1] - EPS}, True),
    ("mup high just outside", {"mup_kernel_change_slope": MUP_RANGE[1] + EPS}, False),
    ("one run diverged", {"diverged_runs": 1.0}, False),
    ("nan ntk slope", {"ntk_kernel_change_slope": math.nan}, False),
    ("nan rmse slope", {"linearization_rmse_slope": math.nan}, False),
    ("nan mup slope", {"mup_kernel_change_slope": math.nan}, False),
    ("nan diverged", {"diverged_runs": math.nan}, False),
    ("nan mup change (not judged)", {"mup_kernel_change_max": math.nan}, True),
]


@pytest.mark.parametrize(
    ("overrides", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_thresholds(
    overrides: dict[str, float | tuple[float, float, float]], passed: bool
) -> None:
    values = passing_values()
    values.update(overrides)
    metrics = metrics_from_values(values)
    judgement = judge(TINY, metrics)
    assert judgement.passed is passed
    criterion = judgement.criterion
    assert "over widths 32, 64, 128 (2 seeds, depth 2, 20 GD steps at 0.5 eta_c" in criterion
    assert "12 training points on S^7" in criterion
    assert f"[{NTK_DRIFT_RANGE[0]}, {NTK_DRIFT_RANGE[1]}]" in criterion
    assert f"<= {RMSE_MAX_SLOPE}" in criterion and f"[{MUP_RANGE[0]}, {MUP_RANGE[1]}]" in criterion
    if metrics["diverged_runs"].value == 0:
        for name in ("ntk_kernel_change", "linearization_rmse", "mup_kernel_change"):
            assert f"{metrics[name + '_slope'].value:.3f}" in judgement.summary


def test_judge_fails_a_run_that_diverged() -> None:
    metrics = metrics_from_values({"diverged_runs": 2.0})  # what measure records then
    judgement = judge(TINY, metrics)
    assert judgement.passed is False
    assert judgement.summary.startswith("2 runs diverged")


def test_judge_criterion_follows_the_grid() -> None:
    config = LazyTrainingConfig(widths=(16, 48, 96, 200), seeds=5, t=7, lr_fraction=0.25)
    judgement = judge(config, metrics_from_values(passing_values()))
    assert judgement.passed
    assert "over widths 16, 48, 96, 200 (5 seeds, depth 3, 7 GD steps at 0.25 eta_c" in (
        judgement.criterion
    )


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dim", "2"),  # the target reads three coordinates
        ("n_train", "0"),
        ("n_test", "0"),
        ("depth", "0"),
        ("w_std", "0"),
        ("w_std", "inf"),
        ("b_std", "-0.1"),
        ("widths", "64,32,128"),
        ("widths", "32,32,64"),
        ("widths", "32,64"),  # a slope with an interval needs three widths
        ("widths", "0,32,64"),
        ("seeds", "1"),  # the interval resamples seeds
        ("t", "0"),
        ("lr_fraction", "0"),
        ("lr_fraction", "1"),  # the critical rate itself does not converge
        ("lr_fraction", "1.5"),
        ("net_dtype", "float16"),
        ("n_boot", "0"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key) as info:
        resolve_config(get_experiment(NAME), "quick", {key: value})
    assert "expected" in str(info.value) or "should" in str(info.value)


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("lazy_training"))


@pytest.fixture(scope="module")
def arrays(tiny: RunResult) -> dict[str, np.ndarray]:
    with np.load(tiny.run_dir / "arrays.npz") as data:
        return {k: data[k] for k in data.files}


def relu_ntk(x: np.ndarray, depth: int, w_std: float, b_std: float) -> np.ndarray:
    """NTK of ``depth x [Dense, Relu] + Dense`` (no output bias), NTK parameterization, by the
    arc-cosine recursion (Cho & Saul, 2009; Jacot et al., 2018) in numpy."""
    w2, b2 = w_std**2, b_std**2
    sigma = w2 * x @ x.T / x.shape[1] + b2
    theta = sigma.copy()
    for layer in range(depth):
        q = np.sqrt(np.diag(sigma))
        qq = np.outer(q, q)
        cos = np.clip(sigma / qq, -1.0, 1.0)
        angle = np.arccos(cos)
        k1 = qq * (np.sin(angle) + (np.pi - angle) * cos) / (2 * np.pi)
        k0 = (np.pi - angle) / (2 * np.pi)
        sigma = w2 * k1 + (b2 if layer < depth - 1 else 0.0)
        theta = sigma + w2 * k0 * theta
    out: np.ndarray = theta
    return out


def _slope(widths: np.ndarray, curve: np.ndarray) -> float:
    return float(np.polyfit(np.log(widths), np.log(curve), 1)[0])


def test_tiny_learning_rate_is_half_the_critical_rate_of_the_closed_form_ntk(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """eta = 0.5 x 2N / lambda_max of the arc-cosine NTK of the stored inputs (to 1e-9)."""
    theta = relu_ntk(arrays["x_train"], TINY.depth, TINY.w_std, TINY.b_std)
    lam_max = np.linalg.eigvalsh(theta)[-1]
    lr = {m.name: m.value for m in tiny.metrics}["learning_rate"]
    assert lr == pytest.approx(0.5 * 2 * TINY.n_train / lam_max, rel=1e-9)


def test_tiny_slopes_and_intervals_recomputed_from_the_stored_curves(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Each slope is the least-squares slope of log (seed mean) on log width (numpy, to 1e-9).
    With two seeds a bootstrap resample is seed 0 twice, seed 1 twice or one of each (the
    mean), so the 95% percentile interval of 200 resamples is exactly [min, max] of those
    three curves' slopes (each kind is drawn ~50 times or more, never < 6)."""
    metrics = {m.name: m for m in tiny.metrics}
    widths = arrays["widths"]
    np.testing.assert_array_equal(widths, TINY.widths)
    for name, values in (
        ("ntk_kernel_change_slope", arrays["drift_ntk"]),
        ("linearization_rmse_slope", arrays["rmse"]),
        ("mup_kernel_change_slope", arrays["drift_mup"]),
    ):
        assert values.shape == (2, 3)
        candidates = [_slope(widths, values[0]), _slope(widths, values[1])]
        candidates.append(_slope(widths, values.mean(axis=0)))
        m = metrics[name]
        assert m.value == pytest.approx(candidates[-1], rel=1e-9, abs=1e-12), name
        assert m.ci_low == pytest.approx(min(candidates), rel=1e-9, abs=1e-12), name
        assert m.ci_high == pytest.approx(max(candidates), rel=1e-9, abs=1e-12), name
    mup_mean = arrays["drift_mup"].mean(axis=0)
    assert metrics["mup_kernel_change_min"].value == pytest.approx(mup_mean.min(), rel=1e-12)
    assert metrics["mup_kernel_change_max"].value == pytest.approx(mup_mean.max(), rel=1e-12)
    widest = arrays["drift_ntk"][:, -1].mean()
    assert metrics["ntk_kernel_change_widest"].value == pytest.approx(widest, rel=1e-12)
    rmse_widest = arrays["rmse"][:, -1].mean()
    assert metrics["linearization_rmse_widest"].value == pytest.approx(rmse_widest, rel=1e-12)
    eta_c_mup = arrays["eta_c_mup"].min()
    assert metrics["mup_own_critical_rate_min"].value == pytest.approx(eta_c_mup, rel=1e-12)
    assert metrics["final_loss_ntk_max"].value == pytest.approx(arrays["loss_ntk"].max(), rel=1e-12)
    assert metrics["final_loss_mup_max"].value == pytest.approx(arrays["loss_mup"].max(), rel=1e-12)
    assert metrics["diverged_runs"].value == 0.0


def test_tiny_curves_show_lazy_ntk_and_moving_mup(arrays: dict[str, np.ndarray]) -> None:
    """NTK parameterization: the kernel moves less at width 128 than at 32 in every seed, and
    the network ends closer to its linearization; muP moves its kernel by O(1) at every width
    (Yang & Hu, 2021)."""
    assert np.all(arrays["drift_ntk"] > 0) and np.all(arrays["rmse"] > 0)
    assert np.all(arrays["drift_ntk"][:, -1] < arrays["drift_ntk"][:, 0])
    assert np.all(arrays["rmse"][:, -1] < arrays["rmse"][:, 0])
    assert np.all(arrays["drift_mup"] > 0.5)


def _jacobian_ntk(net: nn.Module, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """J(x1) J(x2)^T from torch.func.jacrev over every parameter (one output)."""
    params = {k: v.detach() for k, v in net.named_parameters()}

    def f(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.func.functional_call(net, p, (x,))
        return out[:, 0]

    def flat(x: torch.Tensor) -> torch.Tensor:
        jac = torch.func.jacrev(f)(params, x)
        return torch.cat([j.reshape(x.shape[0], -1) for j in jac.values()], dim=1)

    return flat(x1) @ flat(x2).T


def _gd(net: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int) -> float:
    """Plain full-batch GD on (1/2N) sum (f - y)^2 / alpha^2 by autograd; the final loss."""
    params = [p for p in net.parameters() if p.requires_grad]
    alpha = output_scale(net)
    for _ in range(steps):
        loss = 0.5 * (net(x) - y).square().mean() / alpha**2
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(lr * g)
    with torch.no_grad():
        return float(0.5 * (net(x) - y).square().mean())


def test_tiny_first_cell_reproduced_by_autograd_gd_and_a_jacobian_ntk(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Seed 0, width 32, both parameterizations, rebuilt from the run's generator and trained
    here by a plain autograd loop at 0.5 x the closed-form critical rate; kernel change from
    Jacobian NTKs (torch.func), the linearization by an explicit float64 GD loop on its
    Jacobian NTK. float32 networks and 20 steps: the figures agree to 1e-3 relative
    (rounding is ~1e-6), so a 1.5x error fails."""
    x_train = torch.from_numpy(arrays["x_train"])
    x_test = torch.from_numpy(arrays["x_test"])
    y = torch.from_numpy(arrays["y_train"])[:, None]
    n = x_train.shape[0]
    theta = relu_ntk(arrays["x_train"], TINY.depth, TINY.w_std, TINY.b_std)
    lr = 0.5 * 2 * n / float(np.linalg.eigvalsh(theta)[-1])
    ctx = RunContext(out_dir=Path("."), seed=int(tiny.config["seed"]))
    init = ctx.generator("init-0")
    arch = mlp(TINY.depth, TINY.w_std, TINY.b_std)
    net = arch.to_torch(32, in_features=TINY.dim, generator=init, dtype=torch.float32)
    mup = arch.to_torch(
        32, in_features=TINY.dim, parameterization="mup", generator=init, dtype=torch.float32
    )
    xt, yt, xs = x_train.float(), y.float(), x_test.float()

    # linearization at initialization, float64: f <- f - lr/N Theta (f - y), k steps
    lin_net = copy.deepcopy(net).double()
    x_all = torch.cat([x_train, x_test])
    theta_all = _jacobian_ntk(lin_net, x_all, x_train)
    with torch.no_grad():
        f_all = lin_net(x_all)
    f = f_all.clone()
    for _ in range(TINY.t):
        f = f - lr / n * theta_all @ (f[:n] - y)
    lin_test = f[n:]

    k0 = _jacobian_ntk(net, xt, xt)
    loss = _gd(net, xt, yt, lr, TINY.t)
    k1 = _jacobian_ntk(net, xt, xt)
    drift = float(torch.linalg.norm(k1 - k0) / torch.linalg.norm(k0))
    with torch.no_grad():
        rmse = float((net(xs).double() - lin_test).square().mean().sqrt())
    assert arrays["drift_ntk"][0, 0] == pytest.approx(drift, rel=1e-3)
    assert arrays["loss_ntk"][0, 0] == pytest.approx(loss, rel=1e-3)
    assert arrays["rmse"][0, 0] == pytest.approx(rmse, rel=1e-3)

    m0 = _jacobian_ntk(mup, xt, xt)
    eta_c_mup = 2 * n / float(torch.linalg.eigvalsh(m0.double())[-1])
    _gd(mup, xt, yt, lr, TINY.t)
    m1 = _jacobian_ntk(mup, xt, xt)
    assert arrays["eta_c_mup"][0, 0] == pytest.approx(eta_c_mup, rel=1e-4)
    drift_mup = float(torch.linalg.norm(m1 - m0) / torch.linalg.norm(m0))
    assert arrays["drift_mup"][0, 0] == pytest.approx(drift_mup, rel=1e-3)


# ---------------------------------------------------------------------------------------------
# pieces


def test_closed_form_linearization_equals_training_the_linearized_module() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(10, 4, dtype=torch.float64, generator=gen)
    y = torch.randn(6, 1, dtype=torch.float64, generator=gen)
    net = mlp(2, 1.4, 0.1).to_torch(48, in_features=4, generator=gen, dtype=torch.float64)
    lr, steps = 0.5, 30
    expected_model = linearize(net)
    train(expected_model, x[:6], y, learning_rate=lr, t=steps)
    with torch.no_grad():
        expected = expected_model(x[6:])
    got = linearized_test_outputs(net, x[:6], y, x[6:], lr, steps)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "C3"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}


def test_docstring_paper_scale_counts_the_paper_grid() -> None:
    """The module's paper-scale cost states the paper grid's example-steps, flops and the
    width-8192 network's size, counted here from the paper config."""
    import ntklab.experiments.lazy_training as lt

    exp = get_experiment(NAME)
    config = resolve_config(exp, "paper", {})
    assert isinstance(config, LazyTrainingConfig)
    doc = " ".join((lt.__doc__ or "").split())
    assert (
        f"Paper scale (widths {config.widths[0]} to {config.widths[-1]}, {config.seeds} seeds, "
        f"{config.t} steps on {config.n_train} points)" in doc
    )
    runs = config.seeds * len(config.widths) * 2  # both parameterizations
    assert f":math:`{config.seeds} \\times {len(config.widths)} \\times 2`" in doc
    example_steps = runs * config.t * config.n_train
    assert f"{example_steps / 1e6:.1f} million example-steps" in doc
    # depth 3: two m x m hidden layers, 2 flops per multiply-add, forward + twice that back
    assert config.depth == 3
    per_width = [12 * w**2 * config.seeds * 2 * config.t * config.n_train for w in config.widths]
    flops = sum(per_width)
    assert f"about :math:`{flops / 1e14:.1f} \\times 10^{{14}}` flops" in doc
    assert round(4 * per_width[-1] / flops) == 3  # "three quarters of them at width 8192"
    widest = config.widths[-1]
    params = (config.dim + 1) * widest + 2 * (widest + 1) * widest + widest
    assert f":math:`{params / 1e8:.1f} \\times 10^8` parameters" in doc
    assert f"{4 * params / 1e9:.1f} GB in float32, {8 * params / 1e9:.1f} GB" in doc
    assert "5.5e14 flops" in exp.paper_scale_cost
    assert f"{flops / 1e14:.1f}e14" in exp.paper_scale_cost
