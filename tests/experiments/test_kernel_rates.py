"""B1 ``kernel-rates``: its judge on both sides of every threshold, its config's constraints,
its tiny run against independent recomputations (dense kernel gradient flow, a NumPy
bootstrap), and its spectrum against theory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ntklab.experiments.kernel_rates as kr
from experiment_helpers import relu_kernels_numpy, run_tiny
from ntklab.data import (
    SourceConditionTarget,
    estimate_capacity,
    source_condition_target,
    uniform_circle,
)
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    RunContext,
    RunResult,
    get_experiment,
    metrics_from_values,
    resolve_config,
)

# ---------------------------------------------------------------------------------------------
# judge

QUICK = kr.KernelRatesConfig()  # betas 0.5, 1; n = 128..8192
GAMMA = 0.5
P05 = kr.predicted_slope(0.5, GAMMA)  # -2/3
P1 = kr.predicted_slope(1.0, GAMMA)  # -0.8
TOL = kr.TOLERANCE


def test_predicted_slope_closed_form() -> None:
    assert pytest.approx(-2.0 / 3.0) == P05 and pytest.approx(-0.8) == P1


@pytest.mark.parametrize(
    ("s05", "s1", "gamma", "passed"),
    [
        (P05, P1, GAMMA, True),
        (P05 + 0.99 * TOL, P1, GAMMA, True),  # just inside, above the prediction
        (P05 + 1.01 * TOL, P1, GAMMA, False),  # just outside
        (P05 - 0.99 * TOL, P1, GAMMA, True),  # just inside, below
        (P05 - 1.01 * TOL, P1, GAMMA, False),  # just outside
        (P05, P1 + 0.99 * TOL, GAMMA, True),
        (P05, P1 + 1.01 * TOL, GAMMA, False),
        (P05, P1 - 0.99 * TOL, GAMMA, True),
        (P05, P1 - 1.01 * TOL, GAMMA, False),
        # the prediction follows the fitted gamma: at gamma = 1, beta = 1 predicts -2/3
        (kr.predicted_slope(0.5, 1.0), kr.predicted_slope(1.0, 1.0), 1.0, True),
        (P05, P1, 1.0, False),  # -0.8 is 0.133 off -2/3
        (math.nan, P1, GAMMA, False),
        (P05, math.nan, GAMMA, False),
        (P05, P1, math.nan, False),
    ],
)
def test_judge_thresholds(s05: float, s1: float, gamma: float, passed: bool) -> None:
    values: dict[str, float | tuple[float, float, float]] = {
        "gamma": gamma,
        "slope[beta=0.5]": (s05, s05 - 0.05, s05 + 0.05),
        "slope[beta=1]": (s1, s1 - 0.05, s1 + 0.05),
    }
    judgement = kr.judge(QUICK, metrics_from_values(values))
    assert judgement.passed is passed, judgement.summary
    assert f"slope {s05:.3f}" in judgement.summary and f"slope {s1:.3f}" in judgement.summary
    assert f"[{s05 - 0.05:.3f}, {s05 + 0.05:.3f}]" in judgement.summary
    assert f"gamma {gamma:.3f}" in judgement.summary
    assert "beta in {0.5, 1}" in judgement.criterion and "n = 128..8192" in judgement.criterion
    assert f"within {TOL}" in judgement.criterion and "20 seeds" in judgement.criterion


def test_judge_criterion_follows_the_grid_that_ran() -> None:
    config = kr.KernelRatesConfig(betas=(2.0,), sizes=(64, 128, 256), n_seeds=3)
    predicted = kr.predicted_slope(2.0, GAMMA)
    ok = kr.judge(config, metrics_from_values({"gamma": GAMMA, "slope[beta=2]": predicted}))
    assert ok.passed
    assert "beta in {2}" in ok.criterion and "n = 64..256 (3 sizes, 3 seeds)" in ok.criterion
    off = kr.judge(config, metrics_from_values({"gamma": GAMMA, "slope[beta=2]": -0.5}))
    assert not off.passed and "slope -0.500" in off.summary and "(off)" in off.summary


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sizes", "512,256,1024"),  # not increasing
        ("sizes", "128,256"),  # fewer than 3 points for a slope with an interval
        ("sizes", "0,1,2"),
        ("n_seeds", "1"),  # no bootstrap over one seed
        ("betas", "0"),
        ("betas", "0.5,0.5"),
        ("n_frequencies", "4"),
        ("depth", "0"),
        ("noise_sd", "-0.1"),
        ("stop_scale", "0"),
        ("oracle_times", "0"),
        ("n_boot", "0"),
        ("w_std", "0"),
    ],
)
def test_config_rejects(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment("kernel-rates"), "quick", {key: value})


def test_config_error_names_the_received_value() -> None:
    with pytest.raises(NtklabValueError, match=r"sizes.*\[512, 256, 1024\]"):
        resolve_config(get_experiment("kernel-rates"), "quick", {"sizes": "512,256,1024"})


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny("kernel-rates", tmp_path_factory.mktemp("runs"))


def _numpy_bootstrap(
    sizes: np.ndarray, risks: np.ndarray, n_boot: int, seed: int
) -> tuple[float, float]:
    """95% percentile interval of the slope of the seed-mean curve, resampling seeds with
    the same indices as the library (torch.randint from a generator seeded with ``seed``)."""
    n_seeds = risks.shape[0]
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n_seeds, (n_boot, n_seeds), generator=gen).numpy()
    slopes = [np.polyfit(np.log(sizes), np.log(risks[i].mean(axis=0)), 1)[0] for i in idx]
    low, high = np.quantile(slopes, [0.025, 0.975])
    return float(low), float(high)


def test_tiny_slopes_and_intervals_from_the_recorded_risks(tiny: RunResult) -> None:
    config = kr.KernelRatesConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    sizes = arrays["sizes"]
    assert list(sizes) == list(config.sizes)
    for b, beta in enumerate(config.betas):
        risk = arrays[f"risk_beta{b}"]
        oracle = arrays[f"oracle_risk_beta{b}"]
        assert risk.shape == oracle.shape == (config.n_seeds, len(sizes))
        # excess risks of a unit-norm target: in (0, 1); the oracle is the best of a grid
        # of stopping times that contains tau's neighbourhood, never worse than tau itself
        assert np.all(risk > 0) and np.all(risk < 1.0)
        assert np.all(oracle <= risk * (1 + 1e-12))
        for name, curves in (
            (f"slope[beta={beta:g}]", risk),
            (f"oracle_slope[beta={beta:g}]", oracle),
        ):
            metric = metrics[name]
            # OLS in log-log on the seed mean, recomputed with numpy: rounding only
            fitted = np.polyfit(np.log(sizes), np.log(curves.mean(axis=0)), 1)[0]
            np.testing.assert_allclose(metric.value, fitted, rtol=1e-9, atol=1e-12)
            low, high = _numpy_bootstrap(sizes, curves, config.n_boot, config.seed)
            assert metric.ci_low is not None and metric.ci_high is not None
            np.testing.assert_allclose([metric.ci_low, metric.ci_high], [low, high], rtol=1e-9)
        per_seed = [np.polyfit(np.log(sizes), np.log(r), 1)[0] for r in risk]
        np.testing.assert_allclose(
            metrics[f"per_seed_slope_sd[beta={beta:g}]"].value,
            np.std(per_seed, ddof=1),
            rtol=1e-9,
        )
    assert (tiny.run_dir / "kernel_rates.png").is_file()


def test_tiny_gamma_is_the_relu_ntk_capacity(tiny: RunResult) -> None:
    config = kr.KernelRatesConfig.model_validate(tiny.config)
    gamma = next(m for m in tiny.metrics if m.name == "gamma").value
    mu = torch.as_tensor(np.load(tiny.run_dir / "arrays.npz")["eigenvalues"])
    torch.testing.assert_close(mu, kr.kernel_spectrum(config), rtol=1e-12, atol=0.0)
    np.testing.assert_allclose(gamma, estimate_capacity(mu).gamma, rtol=1e-12)
    # eigenvalues ~ k^-2 on S^1 give gamma = 1/2 (Bietti & Mairal 2019); fitted on the
    # upper half of K = 64 frequencies the estimate is biased low by a few hundredths
    assert abs(gamma - 0.5) < 0.05


def _dense_flow_risks(
    mu: np.ndarray, a: np.ndarray, y: np.ndarray, f: SourceConditionTarget, times: np.ndarray
) -> np.ndarray:
    """Excess risks of kernel gradient flow at ``times`` from the dense n x n kernel matrix
    of :math:`\\mu_0 + 2\\sum_k \\mu_k \\cos k(a - b)`, by its eigendecomposition, the
    L2 error by quadrature on a uniform grid (exact up to degree 2K)."""
    freqs = np.arange(1, mu.shape[0])

    def kernel(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.asarray(
            mu[0] + 2.0 * np.cos((u[:, None] - v[None, :])[..., None] * freqs) @ mu[1:]
        )

    grid = 2.0 * np.pi * np.arange(4 * mu.shape[0]) / (4 * mu.shape[0])
    f_grid = f(torch.as_tensor(grid)).numpy()
    lam, vec = np.linalg.eigh(kernel(a, a))
    lam = np.clip(lam, 0.0, None)
    big = lam > 1e-12 * lam.max()
    k_grid_vec = kernel(grid, a) @ vec
    proj = vec.T @ y
    n = a.shape[0]
    out = np.empty(len(times))
    for i, t in enumerate(times):
        # f_t = K_xX K^-1 (I - exp(-t K / n)) y; the filter tends to t / n as lambda -> 0
        h = np.where(big, -np.expm1(-t * lam / n) / np.where(big, lam, 1.0), t / n)
        out[i] = np.mean((k_grid_vec @ (h * proj) - f_grid) ** 2)
    return out


def test_tiny_risk_against_dense_kernel_gradient_flow(tiny: RunResult) -> None:
    """Seed 0, the smallest n, every beta: the excess risk at tau and the oracle's,
    recomputed by dense kernel gradient flow from regenerated data."""
    config = kr.KernelRatesConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    mu = arrays["eigenvalues"]
    n = config.sizes[0]
    factors = np.logspace(-config.oracle_span, config.oracle_span, config.oracle_times)
    for b, beta in enumerate(config.betas):
        gen = RunContext(out_dir=tiny.run_dir, seed=config.seed).generator(f"beta={beta:g}")
        target = source_condition_target(torch.as_tensor(mu), beta, generator=gen)
        angles, _ = uniform_circle(n, generator=gen)
        noise = torch.randn(n, generator=gen, dtype=torch.float64)
        y = (target(angles) + config.noise_sd * noise).numpy()
        tau = config.stop_scale * n ** (1.0 / (2.0 * beta + target.gamma))
        risks = _dense_flow_risks(mu, angles.numpy(), y, target, tau * np.r_[1.0, factors])
        # dense eigh (here) against the 2K+1 Mercer features (library): rounding only
        np.testing.assert_allclose(arrays[f"risk_beta{b}"][0, 0], risks[0], rtol=1e-6)
        np.testing.assert_allclose(arrays[f"oracle_risk_beta{b}"][0, 0], risks[1:].min(), rtol=1e-6)


def test_tiny_spectrum_is_the_closed_form_relu_ntk(tiny: RunResult) -> None:
    """The stored eigenvalues are the Fourier coefficients of the ReLU NTK's profile on the
    circle computed from the arc-cosine closed form in numpy (not ntklab's kernels):
    mu_k = (1 / M) sum_j kappa(t_j) cos(k t_j) on M equispaced angles."""
    config = kr.KernelRatesConfig.model_validate(tiny.config)
    mu = np.load(tiny.run_dir / "arrays.npz")["eigenvalues"]
    m = 4096
    t = 2.0 * np.pi * np.arange(m) / m
    points = np.stack([np.cos(t), np.sin(t)], axis=1)
    kappa = relu_kernels_numpy(points[:1], points, config.depth, config.w_std, config.b_std)[1][0]
    expected = np.fft.rfft(kappa).real[: mu.shape[0]] / m
    # ntklab's profile is evaluated on its own grid: agreement to 1e-7 of mu_0, not rounding
    np.testing.assert_allclose(mu, expected, rtol=0.0, atol=1e-6 * expected[0])
    np.testing.assert_allclose(mu[:8], expected[:8], rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# spectrum and registration


def test_relu_ntk_capacity_is_one_half() -> None:
    config = kr.KernelRatesConfig(n_frequencies=512)
    mu = kr.kernel_spectrum(config)
    assert abs(estimate_capacity(mu).gamma - 0.5) < 0.02


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment("kernel-rates")
    assert exp.claim_id == "B1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}


def test_docstring_paper_scale_counts_the_paper_grid() -> None:
    """The module's paper-scale cost states the paper grid's pairs, eigendecompositions,
    Gram size, feature rows and multiply-adds."""
    config = resolve_config(get_experiment("kernel-rates"), "paper", {})
    assert isinstance(config, kr.KernelRatesConfig)
    doc = " ".join((kr.__doc__ or "").split())
    pairs = len(config.betas) * config.n_seeds
    p = 2 * config.n_frequencies + 1  # Mercer features 1, cos ka, sin ka for k = 1..K
    points = sum(config.sizes)  # one fresh sample per size
    assert (
        f"Paper scale (``K = {config.n_frequencies}``, four :math:`\\beta`, "
        f"{config.n_seeds} seeds, ``n`` from :math:`2^7` to :math:`2^{{16}}`)" in doc
    )
    assert len(config.betas) == 4 and config.sizes == tuple(2**e for e in range(7, 17))
    assert f"Each of the {pairs} (beta, seed) pairs" in doc
    assert f"at the {len(config.sizes)} sizes" in doc
    assert f"{pairs * len(config.sizes)} eigendecompositions of the {p} x {p} Gram" in doc
    assert f"{pairs * points / 1e6:.1f} million feature rows of {p} entries" in doc
    assert f"({points:,} points per pair)" in doc
    assert f":math:`{pairs * points * p * p / 1e14:.1f} \\times 10^{{14}}` multiply-adds" in doc
    assert f"the Gram matrix is {p * p * 8 / 1e6:.0f} MB" in doc
    exp = get_experiment("kernel-rates")
    assert f"{pairs * len(config.sizes)} eigendecompositions of a {p} x {p} Gram" in (
        exp.paper_scale_cost
    )
