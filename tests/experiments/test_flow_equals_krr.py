"""C2 ``flow-equals-krr``: its judge on both sides of every threshold, its config's errors, its
tiny run's metrics against closed forms recomputed in numpy from the stored kernels, its
trained networks against a plain torch GD loop and the flow they are compared with against a
numpy ReLU NTK (arc-cosine kernels, Cho & Saul 2009), and its pieces against independent
references (an eigendecomposition, an explicit GD loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from experiment_helpers import relu_ntk_numpy, run_tiny
from ntklab.dynamics import linearized_dynamics
from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.flow_equals_krr import (
    EXPM_TOL,
    FLOOR_RATIO,
    GD_ORDER,
    GOTCHA_RATIO,
    LIMIT_TOL,
    NET_SLOPE,
    FlowEqualsKrrConfig,
    flow_by_expm,
    judge,
    net_step_counts,
    relu_network,
    time_labels,
)
from ntklab.experiments.result import RunResult
from ntklab.nets import ensemble

NAME = "flow-equals-krr"

# ---------------------------------------------------------------------------------------------
# judge

TINY = FlowEqualsKrrConfig(
    n_train=12,
    n_test=6,
    width=64,
    n_samples=200,
    chunk=200,
    net_widths=(16, 32, 64),
    net_members=2,
    net_dtype="float64",
)
LABELS = time_labels(TINY.times)  # t=1N/lmax, t=10N/lmax, t=100N/lmax, t=inf


def passing_values() -> dict[str, float | tuple[float, float, float]]:
    values: dict[str, float | tuple[float, float, float]] = {
        "flow_limit_vs_min_norm": 1e-15,
        "flow_t_inf_vs_min_norm": 2e-15,
        "flow_vs_expm_max": 3e-14,
        "gd_to_flow_order": (1.0, 0.99, 1.01),
        "gd_gap_monotone": 1.0,
        "gd_gap_smallest_step": 1e-4,
        "ntk_condition_number": 50.0,
        "nngp_prior_variance_mean": 0.43,
        "net_vs_flow[w=16]": 0.2,
        "net_vs_flow[w=32]": 0.14,
        "net_vs_flow[w=64]": 0.1,
        "net_vs_flow_width_slope": (-0.5, -0.6, -0.4),
        "gd_floor_over_net_distance": 0.05,
    }
    for lab in LABELS:
        values[f"drop_f0_change_over_variance[{lab}]"] = 1.0
        values[f"drop_f0_rms_change_over_rms_target[{lab}]"] = 0.4
    return values


def ratio(lab: str) -> str:
    return f"drop_f0_change_over_variance[{lab}]"


REL = 1e-6  # relative step across a threshold
JUDGE_CASES: list[tuple[str, dict[str, float | tuple[float, float, float]], bool]] = [
    ("all inside", {}, True),
    ("limit just inside", {"flow_limit_vs_min_norm": LIMIT_TOL * (1 - REL)}, True),
    ("limit just outside", {"flow_limit_vs_min_norm": LIMIT_TOL * (1 + REL)}, False),
    ("t=inf just inside", {"flow_t_inf_vs_min_norm": LIMIT_TOL * (1 - REL)}, True),
    ("t=inf just outside", {"flow_t_inf_vs_min_norm": LIMIT_TOL * (1 + REL)}, False),
    ("expm just inside", {"flow_vs_expm_max": EXPM_TOL * (1 - REL)}, True),
    ("expm just outside", {"flow_vs_expm_max": EXPM_TOL * (1 + REL)}, False),
    ("order low just inside", {"gd_to_flow_order": GD_ORDER[0] + REL}, True),
    ("order low just outside", {"gd_to_flow_order": GD_ORDER[0] - REL}, False),
    ("order high just inside", {"gd_to_flow_order": GD_ORDER[1] - REL}, True),
    ("order high just outside", {"gd_to_flow_order": GD_ORDER[1] + REL}, False),
    ("gap not monotone", {"gd_gap_monotone": 0.0}, False),
    ("ratio low just inside, first time", {ratio(LABELS[0]): GOTCHA_RATIO[0] + REL}, True),
    ("ratio low just outside, first time", {ratio(LABELS[0]): GOTCHA_RATIO[0] - REL}, False),
    ("ratio high just inside, t=inf", {ratio("t=inf"): GOTCHA_RATIO[1] - REL}, True),
    ("ratio high just outside, t=inf", {ratio("t=inf"): GOTCHA_RATIO[1] + REL}, False),
    ("ratio high just outside, middle", {ratio(LABELS[1]): GOTCHA_RATIO[1] + REL}, False),
    ("ratio low just outside, last time", {ratio(LABELS[2]): GOTCHA_RATIO[0] - REL}, False),
    ("nan limit", {"flow_limit_vs_min_norm": math.nan}, False),
    ("nan t=inf", {"flow_t_inf_vs_min_norm": math.nan}, False),
    ("nan expm", {"flow_vs_expm_max": math.nan}, False),
    ("nan order", {"gd_to_flow_order": (math.nan, math.nan, math.nan)}, False),
    ("nan monotone", {"gd_gap_monotone": math.nan}, False),
    ("nan ratio", {ratio("t=inf"): math.nan}, False),
    ("nan size", {"drop_f0_rms_change_over_rms_target[t=inf]": math.nan}, True),
    ("net slope low just inside", {"net_vs_flow_width_slope": NET_SLOPE[0] + REL}, True),
    ("net slope low just outside", {"net_vs_flow_width_slope": NET_SLOPE[0] - REL}, False),
    ("net slope high just inside", {"net_vs_flow_width_slope": NET_SLOPE[1] - REL}, True),
    ("net slope high just outside", {"net_vs_flow_width_slope": NET_SLOPE[1] + REL}, False),
    ("net slope flat (a wrong kernel's gap)", {"net_vs_flow_width_slope": 0.0}, False),
    ("nan net slope", {"net_vs_flow_width_slope": math.nan}, False),
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
    # the summary shows the figures the verdict reads
    summary = judgement.summary
    assert f"{metrics['flow_limit_vs_min_norm'].value:.1e}" in summary
    assert f"{metrics['flow_t_inf_vs_min_norm'].value:.1e}" in summary
    assert f"{metrics['flow_vs_expm_max'].value:.1e}" in summary
    assert f"order {metrics['gd_to_flow_order'].value:.3f}" in summary
    ratios = [metrics[ratio(lab)].value for lab in LABELS]
    if all(math.isfinite(r) for r in ratios):
        assert f"{min(ratios):.3f}..{max(ratios):.3f}" in summary
    else:
        assert "nan" in summary
    # the criterion shows the grid that ran and the thresholds
    criterion = judgement.criterion
    assert "12 training and 6 test points of S^4" in criterion
    assert "t = 1, 10, 100 N/lambda_max" in criterion
    assert "eta_c x 1/4, 1/8, 1/16, 1/32, 1/64, 1/128" in criterion
    assert "200 networks of width 64" in criterion
    assert f"<= {LIMIT_TOL:g}" in criterion and f"<= {EXPM_TOL:g}" in criterion
    assert f"[{GD_ORDER[0]}, {GD_ORDER[1]}]" in criterion
    assert f"[{GOTCHA_RATIO[0]}, {GOTCHA_RATIO[1]}]" in criterion
    assert f"[{NET_SLOPE[0]}, {NET_SLOPE[1]}]" in criterion
    assert "2 networks per width 16, 32, 64" in criterion and "eta_c x 0.015625" in criterion
    assert f"slope {metrics['net_vs_flow_width_slope'].value:.3f}" in summary
    # the floor is a control: it never decides passed, only ERROR
    assert judgement.controls_failed == ()


@pytest.mark.parametrize(
    ("floor", "failed"),
    [
        (FLOOR_RATIO * (1 - REL), False),
        (FLOOR_RATIO * (1 + REL), True),
        (math.nan, True),
    ],
)
def test_judge_floor_is_a_control(floor: float, failed: bool) -> None:
    values = passing_values()
    values["gd_floor_over_net_distance"] = floor
    judgement = judge(TINY, metrics_from_values(values))
    assert judgement.passed  # the criterion itself is met
    assert bool(judgement.controls_failed) is failed
    if failed:
        assert "discretization floor" in judgement.controls_failed[0]
        assert f"<= {FLOOR_RATIO:g}" in judgement.controls_failed[0]


def test_judge_criterion_follows_the_grid() -> None:
    config = FlowEqualsKrrConfig(
        dim=3, n_train=20, times=(2.0, 30.0), gd_fractions=(0.3, 0.1, 0.05), gd_time=5.0
    )
    values: dict[str, float | tuple[float, float, float]] = {
        "flow_limit_vs_min_norm": 1e-15,
        "flow_t_inf_vs_min_norm": 1e-15,
        "flow_vs_expm_max": 1e-15,
        "gd_to_flow_order": 1.0,
        "gd_gap_monotone": 1.0,
        "net_vs_flow_width_slope": -0.5,
        "gd_floor_over_net_distance": 0.1,
    }
    for w in config.net_widths:
        values[f"net_vs_flow[w={w}]"] = 0.1
    for lab in ("t=2N/lmax", "t=30N/lmax", "t=inf"):
        values[ratio(lab)] = 1.0
        values[f"drop_f0_rms_change_over_rms_target[{lab}]"] = 0.5
    judgement = judge(config, metrics_from_values(values))
    assert judgement.passed
    assert "20 training and 16 test points of S^2" in judgement.criterion
    assert "t = 2, 30 N/lambda_max" in judgement.criterion
    assert "eta_c x 0.3, 1/10, 1/20" in judgement.criterion
    assert "flow time 5 N/lambda_max" in judgement.criterion


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
        ("w_std", "nan"),
        ("b_std", "-0.1"),
        ("noise", "-1"),
        ("width", "0"),
        ("n_samples", "0"),
        ("chunk", "0"),
        ("times", "[]"),
        ("times", "10,1"),
        ("times", "1,1"),
        ("times", "0,1"),
        ("times", "1,1.0000001"),  # equal at 6 digits: they name metrics
        ("gd_fractions", "0.5,0.25"),  # a slope needs three steps
        ("gd_fractions", "1,0.5,0.25"),  # the critical step itself does not converge
        ("gd_fractions", "0.25,0.5,0.125"),
        ("gd_fractions", "0,0.5,0.25"),
        ("gd_time", "0"),
        ("gd_time", "0.2"),  # every step reaches it in one step
        ("net_widths", "64,32,128"),
        ("net_widths", "64,128"),  # a slope needs three widths
        ("net_widths", "0,64,128"),
        ("net_members", "0"),
        ("net_n_train", "33"),  # more than n_train = 32
        ("net_step", "1"),
        ("net_dtype", "float16"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key) as info:
        resolve_config(get_experiment(NAME), "quick", {key: value})
    assert "expected" in str(info.value) or "should" in str(info.value)


def test_config_net_step_message_states_the_step_counts() -> None:
    """At eta_c x 0.45, flow times 1 and 1.1 N/lambda_max both take round(1.1) = 1 step."""
    with pytest.raises(NtklabValueError) as info:
        resolve_config(get_experiment(NAME), "quick", {"times": "1,1.1", "net_step": "0.45"})
    message = str(info.value)
    assert "net_step: expected" in message and "received 0.45" in message
    assert "[1, 1]" in message
    assert net_step_counts((1.0, 10.0, 100.0), 1 / 64) == [32, 320, 3200]


def test_config_gd_time_message_states_the_step_counts() -> None:
    with pytest.raises(NtklabValueError) as info:
        resolve_config(get_experiment(NAME), "quick", {"gd_time": "0.2"})
    message = str(info.value)
    assert "gd_time: expected" in message and "received 0.2" in message
    assert "[1, 1, 2, 3, 6, 13]" in message


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("flow_equals_krr"))


@pytest.fixture(scope="module")
def arrays(tiny: RunResult) -> dict[str, np.ndarray]:
    with np.load(tiny.run_dir / "arrays.npz") as data:
        return {k: data[k] for k in data.files}


def _metrics(tiny: RunResult) -> dict[str, float]:
    return {m.name: m.value for m in tiny.metrics}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _phi(theta: np.ndarray, t: float | None, n: int) -> np.ndarray:
    """Theta^-1 (I - exp(-Theta t / n)) by eigendecomposition (t = None: Theta^-1)."""
    lam, v = np.linalg.eigh(theta)
    decay = np.zeros_like(lam) if t is None else np.exp(-lam * t / n)
    phi: np.ndarray = (v * ((1.0 - decay) / lam)) @ v.T
    return phi


def test_tiny_kernels_match_the_relu_closed_form_on_the_diagonal(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """On the unit sphere of R^5, w_std^2 = 2, b_std = 0.1: q_1 = 2/5 + 0.01, and each ReLU +
    Dense adds b^2 (q_{l+1} = 2 q_l / 2 + b^2), so the NNGP diagonal is q_3 = 0.43 and the NTK
    diagonal q_1 + q_2 + q_3 = 1.26 (float64: to 1e-12)."""
    np.testing.assert_allclose(arrays["nngp_prior_variance"], 0.43, rtol=1e-12)
    np.testing.assert_allclose(np.diag(arrays["ntk_train"]), 1.26, rtol=1e-12)
    assert _metrics(tiny)["nngp_prior_variance_mean"] == pytest.approx(0.43, rel=1e-12)
    lam = np.linalg.eigvalsh(arrays["ntk_train"])
    assert _metrics(tiny)["ntk_condition_number"] == pytest.approx(lam[-1] / lam[0], rel=1e-9)


def test_tiny_flow_and_limit_match_numpy_references(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """The stored flow outputs equal an eigendecomposition of the stored NTK (numpy) and the
    interpolant a direct solve, to 1e-9 (float64 with a condition number of ~1e2); the metrics
    are the relative differences of the stored outputs (recomputed to 1e-6: they are
    differences of nearly equal numbers, ~1e-15, whose norms may differ by an ulp), and stay
    at float64 rounding (< 1e-11), far inside the criterion's 1e-8."""
    theta, theta_x = arrays["ntk_train"], arrays["ntk_test_train"]
    y, f0, f0_x = arrays["y_train"], arrays["f0_train"], arrays["f0_test"]
    n = theta.shape[0]
    interp = f0_x + theta_x @ np.linalg.solve(theta, y - f0)
    np.testing.assert_allclose(arrays["min_norm_interpolant"], interp, rtol=1e-9, atol=1e-12)
    for i, t in enumerate(arrays["times"]):
        expected = f0_x + theta_x @ _phi(theta, float(t), n) @ (y - f0)
        np.testing.assert_allclose(arrays["flow_outputs"][i], expected, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(arrays["expm_outputs"][i], expected, rtol=1e-9, atol=1e-12)
    lam = np.linalg.eigvalsh(theta)
    np.testing.assert_allclose(arrays["times"], np.array(TINY.times) * n / lam[-1], rtol=1e-12)

    metrics = _metrics(tiny)
    limit = _rel(arrays["flow_limit"], arrays["min_norm_interpolant"])
    at_inf = _rel(arrays["flow_t_inf"], arrays["min_norm_interpolant"])
    expm = max(
        _rel(a, b) for a, b in zip(arrays["flow_outputs"], arrays["expm_outputs"], strict=True)
    )
    assert metrics["flow_limit_vs_min_norm"] == pytest.approx(limit, rel=1e-6)
    assert metrics["flow_t_inf_vs_min_norm"] == pytest.approx(at_inf, rel=1e-6)
    assert metrics["flow_vs_expm_max"] == pytest.approx(expm, rel=1e-6)
    assert max(limit, at_inf, expm) < 1e-11


def test_tiny_gd_gaps_match_an_explicit_loop_and_have_order_one(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Each gap is recomputed by an explicit GD loop on the stored kernels against the
    eigendecomposed flow (to 1e-7: the gaps are ~1e-2..1e-4, rounding ~1e-13); the order and
    its 95% interval are scipy's OLS fit of log gap on log step (to 1e-9); and Euler's order
    is 1: at steps eta_c/4..eta_c/128 the second-order term moves it by < 0.02, so 1.5 fails."""
    theta, theta_x = arrays["ntk_train"], arrays["ntk_test_train"]
    y, f0, f0_x = arrays["y_train"], arrays["f0_train"], arrays["f0_test"]
    n = theta.shape[0]
    flow_time = TINY.gd_time * n / np.linalg.eigvalsh(theta)[-1]
    flow = f0_x + theta_x @ _phi(theta, flow_time, n) @ (y - f0)
    gaps = []
    for eta in arrays["gd_steps"]:
        steps = round(flow_time / eta)
        assert steps * eta == pytest.approx(flow_time, rel=1e-12)
        out, out_x = f0.copy(), f0_x.copy()
        for _ in range(steps):
            residual = out - y
            out, out_x = out - eta / n * theta @ residual, out_x - eta / n * theta_x @ residual
        gaps.append(_rel(out_x, flow))
    np.testing.assert_allclose(arrays["gd_errors"], gaps, rtol=1e-7)

    by_name = {m.name: m for m in tiny.metrics}
    reg = stats.linregress(np.log(arrays["gd_steps"]), np.log(gaps))
    q = stats.t.ppf(0.975, len(gaps) - 2)
    order = by_name["gd_to_flow_order"]
    assert order.value == pytest.approx(reg.slope, abs=1e-9)
    assert order.ci_low == pytest.approx(reg.slope - q * reg.stderr, abs=1e-9)
    assert order.ci_high == pytest.approx(reg.slope + q * reg.stderr, abs=1e-9)
    assert abs(order.value - 1.0) < 0.02
    assert by_name["gd_gap_monotone"].value == 1.0 and bool(np.all(np.diff(gaps) < 0))
    assert by_name["gd_gap_smallest_step"].value == pytest.approx(gaps[-1], rel=1e-7)


def test_tiny_drop_f0_change_matches_the_ensemble_variance(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Dropping f_0 changes the test output by f_0(x) - Theta_xX Phi_t f_0(X), whose variance
    over f_0 ~ GP(0, K) is K_xx - 2 Theta_xX Phi_t K_Xx + Theta_xX Phi_t K_XX Phi_t Theta_Xx
    (Lee et al., 2019), recomputed here in numpy and compared with the stored Sigma_t(x, x)
    (to 1e-8). The ratios are recomputed from the stored changes (to 1e-10) and are 1 within
    Monte Carlo error: 200 networks give a relative sd of sqrt(2/200) = 0.1 per test point,
    less on the mean over 6 points, plus an O(1/64) width bias; 0.3 is three sd, so a 1.5x
    ratio fails."""
    theta, theta_x = arrays["ntk_train"], arrays["ntk_test_train"]
    k, k_x, k_xx = arrays["nngp_train"], arrays["nngp_test_train"], arrays["nngp_prior_variance"]
    n = theta.shape[0]
    metrics = _metrics(tiny)
    rms_y = float(np.sqrt(np.mean(arrays["y_train"] ** 2)))
    for i, lab in enumerate(LABELS):
        t = None if lab == "t=inf" else float(arrays["times"][i])
        a = theta_x @ _phi(theta, t, n)  # shape: (m, n)
        sigma = k_xx - 2 * np.einsum("ij,ij->i", a, k_x) + np.einsum("ij,jk,ik->i", a, k, a)
        np.testing.assert_allclose(arrays["sigma_t_diag"][i], sigma, rtol=1e-8)
        change = arrays["drop_f0_change"][i]
        expected = float(change.mean() / sigma.mean())
        assert metrics[ratio(lab)] == pytest.approx(expected, rel=1e-8)
        assert abs(metrics[ratio(lab)] - 1.0) < 0.3, (lab, metrics[ratio(lab)])
        size = float(np.sqrt(change.mean())) / rms_y
        assert metrics[f"drop_f0_rms_change_over_rms_target[{lab}]"] == pytest.approx(
            size, rel=1e-8
        )
    np.testing.assert_allclose(arrays["drop_f0_ratios"], [metrics[ratio(lab)] for lab in LABELS])


# ---------------------------------------------------------------------------------------------
# the tiny run, part 6: trained networks against the analytic flow


def _net_reference(
    arrays: dict[str, np.ndarray], config: FlowEqualsKrrConfig
) -> dict[str, np.ndarray]:
    """The flow and linearized GD of every stored network, in numpy from the closed-form NTK:
    eigendecomposition for exp(-eta s Theta / N), the GD factor (1 - eta lambda / N)^s."""
    x, y = arrays["net_inputs"], arrays["net_targets"]
    n = config.net_train_count
    k = relu_ntk_numpy(x, x, config.depth, config.w_std, config.b_std)
    lam, v = np.linalg.eigh(k[:n, :n])
    eta = config.net_step * 2 * n / lam[-1]
    steps = np.array(net_step_counts(config.times, config.net_step))
    f0 = arrays["net_outputs"][:, 0]  # shape: (W, M, p)
    residual = np.einsum("ij,wmj->wmi", v.T, y[None, None] - f0[..., :n])
    out = {"eta": np.array(eta), "steps": steps}
    for name, decay in (
        ("flow", np.exp(-np.outer(steps, lam) * eta / n)),
        ("gd", (1.0 - eta * lam / n)[None] ** steps[:, None]),
    ):
        phi = (1.0 - decay) / lam  # shape: (T, n)
        change = np.einsum("pj,tj,wmj->wtmp", k[:, :n] @ v, phi, residual)
        out[name] = f0[:, None] + change  # shape: (W, T, M, p)
    return out


def _distance(a: np.ndarray, b: np.ndarray, f0: np.ndarray) -> np.ndarray:
    """RMS over the last axis of a - b over that of b - f0 (f0 broadcast over times)."""
    gap = np.sqrt(np.mean((a - b) ** 2, axis=-1))
    change = np.sqrt(np.mean((b - f0) ** 2, axis=-1))
    result: np.ndarray = gap / change
    return result


def test_tiny_networks_follow_a_plain_torch_gd_loop(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Member 0 of the narrowest width, redrawn from the run's stream and trained by a plain
    autograd loop on 1/(2N) sum (f - y)^2 at the run's step (float64), gives the stored outputs
    at every recorded step (to 1e-8: 3200 steps of rounding ~1e-16): the stored outputs are
    those of a network trained by gradient descent, f_0 included."""
    config = FlowEqualsKrrConfig.model_validate(tiny.config)
    width = config.net_widths[0]
    ctx = RunContext(out_dir=tiny.run_dir, seed=config.seed)
    arch = relu_network(config.depth, config.w_std, config.b_std)
    x = torch.from_numpy(arrays["net_inputs"])
    n = config.net_train_count
    ens = ensemble(
        arch,
        config.net_members,
        width,
        in_features=x.shape[1],
        generator=ctx.generator(f"networks-w{width}"),
        dtype=torch.float64,
    )
    net = ens.member(0)
    y = torch.from_numpy(arrays["net_targets"])[:, None]
    eta = float(arrays["net_learning_rate"])
    record = [0, *arrays["net_steps"].tolist()]
    got = []
    params = list(net.parameters())
    for step in range(record[-1] + 1):
        if step in record:
            with torch.no_grad():
                got.append(net(x)[:, 0].clone())
        if step == record[-1]:
            break
        loss = 0.5 * (net(x[:n]) - y).square().mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(eta * g)
    stored = torch.from_numpy(arrays["net_outputs"][0, :, 0])  # shape: (T + 1, p)
    torch.testing.assert_close(torch.stack(got), stored, rtol=1e-8, atol=1e-10)
    # the networks did train: the training outputs moved most of the way to the targets
    start = float((stored[0, :n] - y[:, 0]).norm())
    assert float((stored[-1, :n] - y[:, 0]).norm()) < 0.5 * start


def test_tiny_network_metrics_match_a_numpy_flow_from_the_closed_form_ntk(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """The stored flow and linearized GD of each network equal those recomputed in numpy from
    the closed-form ReLU NTK of the stored inputs, with the step eta_c x net_step from its
    largest eigenvalue (to 1e-7: the two closed forms round differently, and arccos near 1
    amplifies rounding to ~1e-10); every distance, the width slope (scipy's OLS on the log-log
    means), the train/test splits and the floor's ratio are recomputed from them and the
    stored network outputs (to 1e-6). A wrong kernel (a change of order 1) or a scaled
    metric (1.5x) fails here."""
    config = FlowEqualsKrrConfig.model_validate(tiny.config)
    ref = _net_reference(arrays, config)
    assert float(arrays["net_learning_rate"]) == pytest.approx(float(ref["eta"]), rel=1e-7)
    np.testing.assert_array_equal(arrays["net_steps"], ref["steps"])
    # float64 closed forms against ntklab's kernel, through the flow's eigendecomposition:
    # rounding (1e-16 in the kernel) grows to about 1e-7 in the smallest outputs
    np.testing.assert_allclose(arrays["net_flow"], ref["flow"], rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(arrays["net_linear_gd"], ref["gd"], rtol=1e-6, atol=1e-10)

    outputs = arrays["net_outputs"]  # shape: (W, T + 1, M, p)
    net, f0 = outputs[:, 1:], outputs[:, :1]
    n = config.net_train_count
    dist = _distance(net, ref["flow"], f0)  # shape: (W, T, M)
    floor = _distance(ref["gd"], ref["flow"], f0)
    to_gd = _distance(net, ref["gd"], f0)
    np.testing.assert_allclose(arrays["net_vs_flow"], dist, rtol=1e-6)
    np.testing.assert_allclose(arrays["gd_floor"], floor, rtol=1e-6)
    np.testing.assert_allclose(arrays["net_vs_linear_gd"], to_gd, rtol=1e-6)
    train = _distance(net[..., :n], ref["flow"][..., :n], f0[..., :n])
    test = _distance(net[..., n:], ref["flow"][..., n:], f0[..., n:])
    np.testing.assert_allclose(arrays["net_vs_flow_train"], train, rtol=1e-6)
    np.testing.assert_allclose(arrays["net_vs_flow_test"], test, rtol=1e-6)

    by_name = {m.name: m for m in tiny.metrics}
    widths = np.array(config.net_widths, dtype=float)
    means = dist.mean(axis=(1, 2))
    for w, d in zip(config.net_widths, means, strict=True):
        assert by_name[f"net_vs_flow[w={w}]"].value == pytest.approx(float(d), rel=1e-6)
    reg = stats.linregress(np.log(widths), np.log(means))
    q = stats.t.ppf(0.975, len(widths) - 2)
    slope = by_name["net_vs_flow_width_slope"]
    assert slope.value == pytest.approx(reg.slope, abs=1e-6)
    assert slope.ci_low == pytest.approx(reg.slope - q * reg.stderr, abs=1e-6)
    assert slope.ci_high == pytest.approx(reg.slope + q * reg.stderr, abs=1e-6)
    reg_gd = stats.linregress(np.log(widths), np.log(to_gd.mean(axis=(1, 2))))
    assert by_name["net_vs_linear_gd_width_slope"].value == pytest.approx(reg_gd.slope, abs=1e-6)
    assert by_name["net_vs_flow_train_widest"].value == pytest.approx(train[-1].mean(), rel=1e-6)
    assert by_name["net_vs_flow_test_widest"].value == pytest.approx(test[-1].mean(), rel=1e-6)
    ratio_ = floor[-1].mean() / means[-1]
    assert by_name["gd_floor_over_net_distance"].value == pytest.approx(ratio_, rel=1e-6)
    # finite width: the networks are off the flow, by far more than the GD floor
    assert 0.01 < means[-1] < 1.0 and ratio_ < FLOOR_RATIO


# ---------------------------------------------------------------------------------------------
# pieces


def _data(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    x = torch.randn(14, 3, dtype=torch.float64, generator=gen)
    k = relu_network(2, 1.4, 0.1).kernel(x).ntk
    y = torch.randn(10, 2, dtype=torch.float64, generator=gen)
    f0 = torch.randn(14, 2, dtype=torch.float64, generator=gen)
    return k[:10, :10], k[10:, :10], y, f0[:10], f0[10:]


def test_van_loan_exponential_matches_an_eigendecomposition(gen: torch.Generator) -> None:
    theta, theta_test, y, f0, f0_test = _data(gen)
    rate, t = 0.05, 3.0
    evals, vecs = np.linalg.eigh(theta.numpy())
    phi = vecs @ np.diag((1 - np.exp(-rate * t * evals)) / evals) @ vecs.T
    expected = f0_test.numpy() + theta_test.numpy() @ phi @ (y - f0).numpy()
    got = flow_by_expm(theta, theta_test, y - f0, f0_test, rate, t)
    torch.testing.assert_close(got, torch.from_numpy(expected), rtol=1e-11, atol=1e-12)


def test_gd_schedule_matches_an_explicit_loop(gen: torch.Generator) -> None:
    theta, theta_test, y, f0, f0_test = _data(gen)
    lr, steps, n_out = 0.3, 25, y.numel()
    train_out, test_out = f0.clone(), f0_test.clone()
    for _ in range(steps):
        residual = train_out - y
        train_out = train_out - lr / n_out * theta @ residual
        test_out = test_out - lr / n_out * theta_test @ residual
    dyn = linearized_dynamics(theta, y, learning_rate=lr, schedule="gd")
    torch.testing.assert_close(dyn.test(steps, theta_test, f0, f0_test), test_out)
    torch.testing.assert_close(dyn.train(steps, f0), train_out)


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "C2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
