"""D1 ``label-alignment``: its judge on both sides of every threshold (both criteria), its
config's errors, its tiny run's metrics recomputed in numpy from the stored spectra and
energies (binning, fit and bootstrap) and against a float64 Jacobian NTK of the same networks,
its measurement on a kernel whose projections are known in closed form, and its Fashion-MNIST
path on small idx files."""

from __future__ import annotations

import copy
import gzip
import math
import struct
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import torch
from torch import nn

from experiment_helpers import run_tiny
from ntklab.data import load_digits
from ntklab.errors import NtklabValueError
from ntklab.experiments import RunContext, get_experiment, metrics_from_values, resolve_config
from ntklab.experiments.base import verdict_of
from ntklab.experiments.label_alignment import (
    CHANCE_LABEL_MIN,
    CHANCE_RESIDUAL,
    CHANCE_SHARE_MIN,
    CONTROL_SLOPES,
    CONTROL_TOL,
    PAPER_LABEL,
    PAPER_RESIDUAL,
    LabelAlignmentConfig,
    control_targets,
    judge,
    load_images,
    measure,
    measure_alignment,
    mlp_architecture,
    network,
)
from ntklab.experiments.result import RunResult
from ntklab.experiments.runner import run_experiment

NAME = "label-alignment"

# ---------------------------------------------------------------------------------------------
# judge

TINY = LabelAlignmentConfig(
    n_train=120, mlp_width=64, cnn_channels=8, bins=8, n_boot=50, n_permutations=4, top_k=20
)
PAPER = TINY.model_copy(update={"criterion": "seed"})
Values = dict[str, float | tuple[float, float, float]]


def passing_values() -> Values:
    values: Values = {}
    for name in ("mlp", "cnn"):
        values |= {
            f"label_slope[{name}]": (1.2, 1.0, 1.4),
            f"permuted_label_slope[{name}]": (0.0, -0.1, 0.1),
            f"top20_label_energy[{name}]": 0.9,
            f"residual_slope[{name}]": (1.0, 0.9, 1.1),
            f"fit_decades[{name}]": 3.0,
            f"permuted_residual_slope[{name}]": (0.4, 0.3, 0.5),
        }
        for control, known in CONTROL_SLOPES.items():
            values[f"control_slope[{name},{control}]"] = (known, known - 0.05, known + 0.05)
    return values


def paper_values() -> Values:
    values = passing_values()
    for name in ("mlp", "cnn"):
        values[f"label_slope[{name}]"] = 2.0
    return values


EPS = 1e-6
TOL = TINY.permuted_tolerance
CHANCE_CASES: list[tuple[str, Values, bool]] = [
    ("all inside", {}, True),
    ("label just inside", {"label_slope[mlp]": CHANCE_LABEL_MIN + EPS}, True),
    ("label just outside", {"label_slope[mlp]": CHANCE_LABEL_MIN - EPS}, False),
    ("label just outside, cnn", {"label_slope[cnn]": CHANCE_LABEL_MIN - EPS}, False),
    ("permuted high just inside", {"permuted_label_slope[cnn]": TOL - EPS}, True),
    ("permuted high just outside", {"permuted_label_slope[cnn]": TOL + EPS}, False),
    ("permuted low just inside", {"permuted_label_slope[mlp]": -TOL + EPS}, True),
    ("permuted low just outside", {"permuted_label_slope[mlp]": -TOL - EPS}, False),
    ("share just inside", {"top20_label_energy[mlp]": CHANCE_SHARE_MIN + EPS}, True),
    ("share just outside", {"top20_label_energy[cnn]": CHANCE_SHARE_MIN - EPS}, False),
    ("residual low just inside", {"residual_slope[mlp]": CHANCE_RESIDUAL[0] + EPS}, True),
    ("residual low just outside", {"residual_slope[mlp]": CHANCE_RESIDUAL[0] - EPS}, False),
    ("residual high just inside", {"residual_slope[cnn]": CHANCE_RESIDUAL[1] - EPS}, True),
    ("residual high just outside", {"residual_slope[cnn]": CHANCE_RESIDUAL[1] + EPS}, False),
    ("nan label", {"label_slope[cnn]": math.nan}, False),
    ("nan permuted", {"permuted_label_slope[mlp]": math.nan}, False),
    ("nan share", {"top20_label_energy[mlp]": math.nan}, False),
    ("nan residual", {"residual_slope[cnn]": math.nan}, False),
    ("nan decades (not judged)", {"fit_decades[mlp]": math.nan}, True),
    (
        "residual as its permuted-label control",
        {"permuted_residual_slope[cnn]": (1.0, 0.9, 1.1)},
        False,
    ),
    (
        "residual intervals just apart",
        {"permuted_residual_slope[mlp]": (0.85, 0.8, 0.9 - EPS)},
        True,
    ),
    (
        "residual intervals just touch",
        {"permuted_residual_slope[mlp]": (0.85, 0.8, 0.9 + EPS)},
        False,
    ),
]
PAPER_CASES: list[tuple[str, Values, bool]] = [
    ("all inside", {}, True),
    ("label low just inside", {"label_slope[mlp]": PAPER_LABEL[0] + EPS}, True),
    ("label low just outside", {"label_slope[mlp]": PAPER_LABEL[0] - EPS}, False),
    ("label high just inside", {"label_slope[cnn]": PAPER_LABEL[1] - EPS}, True),
    ("label high just outside", {"label_slope[cnn]": PAPER_LABEL[1] + EPS}, False),
    ("residual low just inside", {"residual_slope[cnn]": PAPER_RESIDUAL[0] + EPS}, True),
    ("residual low just outside", {"residual_slope[cnn]": PAPER_RESIDUAL[0] - EPS}, False),
    ("residual high just inside", {"residual_slope[mlp]": PAPER_RESIDUAL[1] - EPS}, True),
    ("residual high just outside", {"residual_slope[mlp]": PAPER_RESIDUAL[1] + EPS}, False),
    ("permuted and share not judged", {"permuted_label_slope[mlp]": 5.0}, True),
    ("share not judged", {"top20_label_energy[mlp]": 0.1}, True),
    ("nan label", {"label_slope[mlp]": math.nan}, False),
    ("nan residual", {"residual_slope[mlp]": math.nan}, False),
    (
        "residual as its permuted-label control",
        {"permuted_residual_slope[mlp]": (1.05, 0.95, 1.15)},
        False,
    ),
]


def _check_texts(config: LabelAlignmentConfig, values: Values, summary: str) -> None:
    metrics = metrics_from_values(values)
    for name in ("mlp", "cnn"):
        for key in ("label_slope", "permuted_label_slope", "residual_slope"):
            assert f"{metrics[f'{key}[{name}]'].value:.2f}" in summary
        assert f"share {metrics[f'top20_label_energy[{name}]'].value:.2f}" in summary


@pytest.mark.parametrize(
    ("overrides", "passed"), [c[1:] for c in CHANCE_CASES], ids=[c[0] for c in CHANCE_CASES]
)
def test_judge_chance_thresholds(overrides: Values, passed: bool) -> None:
    values = passing_values() | overrides
    judgement = judge(TINY, metrics_from_values(values))
    assert judgement.passed is passed
    _check_texts(TINY, values, judgement.summary)
    criterion = judgement.criterion
    assert "120 digits images, an MLP of width 64 and a CNN of 8 channels (depth 2)" in criterion
    assert "[1e-05, 1] x lambda_1 (8 bins)" in criterion
    assert f"label slope >= {CHANCE_LABEL_MIN}" in criterion
    assert "|permuted-label slope| <= 0.25 (4 shuffles)" in criterion
    assert f"top 20 eigenvectors >= {CHANCE_SHARE_MIN}" in criterion
    assert f"[{CHANCE_RESIDUAL[0]}, {CHANCE_RESIDUAL[1]}]" in criterion


@pytest.mark.parametrize(
    ("overrides", "passed"), [c[1:] for c in PAPER_CASES], ids=[c[0] for c in PAPER_CASES]
)
def test_judge_paper_thresholds(overrides: Values, passed: bool) -> None:
    values = paper_values() | overrides
    judgement = judge(PAPER, metrics_from_values(values))
    assert judgement.passed is passed
    _check_texts(PAPER, values, judgement.summary)
    assert f"label slope in [{PAPER_LABEL[0]}, {PAPER_LABEL[1]}]" in judgement.criterion
    assert f"residual slope in [{PAPER_RESIDUAL[0]}, {PAPER_RESIDUAL[1]}]" in judgement.criterion
    assert "|permuted-label slope|" not in judgement.criterion
    assert "apart from its permuted-label control" in judgement.criterion


def test_judge_criterion_follows_the_grid() -> None:
    config = LabelAlignmentConfig(
        networks=("cnn",), n_train=300, cnn_channels=16, relative_range=(1e-3, 0.5), top_k=50
    )
    values: Values = {
        "label_slope[cnn]": 1.0,
        "permuted_label_slope[cnn]": 0.0,
        "top50_label_energy[cnn]": 0.8,
        "residual_slope[cnn]": 1.0,
        "fit_decades[cnn]": 2.0,
        "permuted_residual_slope[cnn]": 0.2,
    }
    values |= {f"control_slope[cnn,{c}]": k for c, k in CONTROL_SLOPES.items()}
    judgement = judge(config, metrics_from_values(values))
    assert judgement.passed
    assert "300 digits images, a CNN of 16 channels" in judgement.criterion
    assert "[0.001, 0.5] x lambda_1 (20 bins)" in judgement.criterion
    assert "top 50 eigenvectors" in judgement.criterion and "MLP" not in judgement.criterion


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dataset", "svhn"),
        ("criterion", "strict"),
        ("networks", "[]"),
        ("networks", "mlp,mlp"),
        ("networks", "rnn"),
        ("n_train", "2"),
        ("n_train", "2000"),  # digits has 1797 images
        ("depth", "0"),
        ("mlp_width", "0"),
        ("cnn_channels", "0"),
        ("w_std", "0"),
        ("b_std", "-1"),
        ("net_dtype", "float16"),
        ("relative_range", "0.5,0.1"),
        ("relative_range", "0,1"),
        ("relative_range", "0.1,1.5"),
        ("relative_range", "0.1"),
        ("bins", "2"),  # a slope with an interval needs three bins
        ("n_boot", "-1"),
        ("n_permutations", "0"),
        ("permuted_tolerance", "0"),
        ("top_k", "0"),
        ("top_k", "1001"),  # more than the 1000 eigenvectors
        ("max_memory_mb", "0"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key) as info:
        resolve_config(get_experiment(NAME), "quick", {key: value})
    assert "expected" in str(info.value) or "should" in str(info.value)


def test_config_n_train_message_states_the_data_set_size() -> None:
    with pytest.raises(NtklabValueError) as info:
        resolve_config(get_experiment(NAME), "quick", {"n_train": "2000"})
    message = str(info.value)
    assert "n_train: expected at most 1797 (the digits training images)" in message
    assert "received 2000" in message
    with pytest.raises(
        NtklabValueError, match=r"at most 60000 \(the fashion-mnist training images\)"
    ):
        resolve_config(get_experiment(NAME), "paper", {"n_train": "60001"})


def test_paper_scale_is_fashion_mnist_with_the_paper_grid() -> None:
    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, LabelAlignmentConfig)
    assert config.dataset == "fashion-mnist" and config.data_root is None
    assert config.criterion == "seed" and config.n_train == 10_000 and config.depth == 3
    assert (config.mlp_width, config.cnn_channels) == (1024, 64)


# ---------------------------------------------------------------------------------------------
# the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("label_alignment"))


@pytest.fixture(scope="module")
def arrays(tiny: RunResult) -> dict[str, np.ndarray]:
    with np.load(tiny.run_dir / "arrays.npz") as data:
        return {k: data[k] for k in data.files}


def _in_range(lam: np.ndarray) -> np.ndarray:
    low, high = TINY.relative_range
    top = lam.max()
    used: np.ndarray = (lam >= low * top) & (lam <= high * top)
    return used


def _bin_index(lam: np.ndarray) -> np.ndarray:
    """Geometric bins between the smallest and largest eigenvalue used, the last one closed."""
    edges = np.geomspace(lam.min(), lam.max(), TINY.bins + 1)
    index: np.ndarray = np.clip(np.searchsorted(edges, lam, side="right") - 1, 0, TINY.bins - 1)
    return index


def _binned_slope(log_lam: np.ndarray, energy: np.ndarray, index: np.ndarray) -> float:
    """OLS slope of log(mean energy) on mean log(lambda) over the bins with positive energy
    (NaN with fewer than 2)."""
    u, v = [], []
    for b in range(TINY.bins):
        inside = index == b
        if inside.any() and energy[inside].sum() > 0:
            u.append(log_lam[inside].mean())
            v.append(np.log(energy[inside].mean()))
    return float(np.polyfit(u, v, 1)[0]) if len(u) >= 2 else math.nan


def test_tiny_slopes_and_bootstrap_intervals_recomputed_in_numpy(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Each slope is refitted here from the stored eigenvalues and energies (own binning and
    numpy's polyfit, to 1e-9), and each bootstrap interval is recomputed on the same resampling
    indices (the run's "analysis-<net>" stream: its label shuffles first, then one draw of
    indices per fit), binned and fitted in numpy, 2.5% and 97.5% quantiles (to 1e-9)."""
    metrics = {m.name: m for m in tiny.metrics}
    ctx = RunContext(out_dir=Path("."), seed=int(tiny.config["seed"]))
    for name in ("mlp", "cnn"):
        lam_all = arrays[f"eigenvalues_{name}"]
        used = _in_range(lam_all)
        lam = lam_all[used]
        log_lam = np.log(lam)
        index = _bin_index(lam)
        gen = ctx.generator(f"analysis-{name}")
        for _ in range(TINY.n_permutations):
            torch.randperm(lam_all.shape[0], generator=gen)
        for kind, metric in (
            ("label", f"label_slope[{name}]"),
            ("permuted", f"permuted_label_slope[{name}]"),
            ("residual", f"residual_slope[{name}]"),
        ):
            energy = arrays[f"{kind}_energy_{name}"][used]
            slope = _binned_slope(log_lam, energy, index)
            m = metrics[metric]
            assert m.value == pytest.approx(slope, rel=1e-9, abs=1e-12), metric
            np.testing.assert_allclose(arrays[f"{kind}_fit_{name}"][0], slope, rtol=1e-9)
            draws = torch.randint(0, lam.size, (TINY.n_boot, lam.size), generator=gen).numpy()
            boot = np.array([_binned_slope(log_lam[r], energy[r], index[r]) for r in draws])
            low, high = np.quantile(boot[np.isfinite(boot)], [0.025, 0.975])
            assert m.ci_low == pytest.approx(low, rel=1e-9, abs=1e-12), metric
            assert m.ci_high == pytest.approx(high, rel=1e-9, abs=1e-12), metric
        assert metrics[f"fit_decades[{name}]"].value == pytest.approx(
            math.log10(lam.max() / lam.min()), rel=1e-12
        )


def test_tiny_shares_energies_and_outputs_recomputed_from_the_stored_arrays(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """Energies on a full orthonormal basis add up to ||Y||_F^2 and ||f_0 - Y||_F^2
    (Parseval, to 1e-10); the top-20 share, f_0's std and the extreme eigenvalues are read
    back from the stored arrays (to 1e-12). Labels align beyond chance even on 120 digits;
    shuffled labels do not."""
    metrics = {m.name: m.value for m in tiny.metrics}
    y = arrays["targets"]
    expected_y = load_images("digits", None, 120, torch.Generator().manual_seed(0)).targets
    assert y.shape == (120, 10)
    for name in ("mlp", "cnn"):
        f0 = arrays[f"f0_{name}"]
        lam = arrays[f"eigenvalues_{name}"]
        assert lam.shape == (120,) and np.all(np.diff(lam) <= 0)
        label = arrays[f"label_energy_{name}"]
        np.testing.assert_allclose(label.sum(), np.square(y).sum(), rtol=1e-10)
        np.testing.assert_allclose(float(expected_y.square().sum()), np.square(y).sum())
        residual = arrays[f"residual_energy_{name}"]
        np.testing.assert_allclose(residual.sum(), np.square(f0 - y).sum(), rtol=1e-10)
        share = label[:20].sum() / label.sum()
        assert metrics[f"top20_label_energy[{name}]"] == pytest.approx(share, rel=1e-12)
        assert metrics[f"f0_std[{name}]"] == pytest.approx(f0.std(ddof=1), rel=1e-12)
        assert metrics[f"eigenvalue_max[{name}]"] == pytest.approx(lam[0], rel=1e-12)
        assert metrics[f"eigenvalue_min[{name}]"] == pytest.approx(lam[-1], rel=1e-12)
        assert metrics[f"label_slope[{name}]"] > metrics[f"permuted_label_slope[{name}]"] + 0.3
        assert abs(metrics[f"permuted_label_slope[{name}]"]) < 0.5
        assert metrics[f"f0_std[{name}]"] > 0.5  # a random, nonzero initial output


def test_tiny_run_names_its_data_and_stores_the_positions(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """The stored positions are the digits the targets belong to."""
    assert (
        tiny.dataset == "scikit-learn digits (8x8), 120 of the 1797 images drawn uniformly, seed 0"
    )
    labels = load_digits().labels.numpy()[arrays["indices"]]
    # the targets are built in the networks' float32, then widened
    np.testing.assert_allclose(arrays["targets"], np.eye(10)[labels] - 0.1, rtol=1e-7, atol=1e-7)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def test_fashion_mnist_subset_is_class_balanced_and_recorded(tmp_path: Path) -> None:
    """On small idx files (6 x 6 images, 6 per class): 23 training images, 3 of classes 0-2 and
    2 of the others, their positions and the data set's name stored with the measurement."""
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.arange(60) % 10)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (60, 6, 6)))
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    config = LabelAlignmentConfig(
        dataset="fashion-mnist",
        data_root=str(tmp_path),
        networks=("cnn",),
        n_train=23,
        cnn_channels=4,
        bins=3,
        n_boot=0,
        n_permutations=1,
        top_k=5,
    )
    m = measure(config, RunContext(out_dir=tmp_path, seed=2))
    assert m.dataset == "Fashion-MNIST train, 23 images (class-balanced), seed 2"
    indices = np.asarray(m.arrays["indices"])
    assert len(set(indices.tolist())) == 23
    assert np.bincount(labels[indices], minlength=10).tolist() == [3] * 3 + [2] * 7
    expected = np.eye(10)[labels[indices]] - 0.1
    np.testing.assert_allclose(m.arrays["targets"], expected, rtol=1e-7, atol=1e-7)
    data = load_images(
        "fashion-mnist", str(tmp_path), 23, RunContext(out_dir=tmp_path, seed=2).generator("data")
    )
    np.testing.assert_array_equal(data.indices.numpy(), indices)
    assert data.name == "fashion-mnist-train"


def _jacobian_ntk(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Mean over the outputs of J_c J_c^T, by torch.func.jacrev over every parameter."""
    params = {k: v.detach() for k, v in net.named_parameters()}

    def f(p: dict[str, torch.Tensor], one: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.func.functional_call(net, p, (one[None],))
        return out[0]

    # per-example Jacobians: name -> (n, C, *shape)
    jac = torch.func.vmap(torch.func.jacrev(f), in_dims=(None, 0))(params, x)
    flat = torch.cat([j.reshape(x.shape[0], j.shape[1], -1) for j in jac.values()], dim=2)
    kernel: torch.Tensor = torch.einsum("ncp,mcp->nm", flat, flat) / flat.shape[1]
    return kernel


def test_tiny_spectra_match_a_float64_jacobian_ntk_of_the_same_networks(
    arrays: dict[str, np.ndarray], tiny: RunResult
) -> None:
    """The networks are rebuilt from the run's "init-<net>" streams, copied to float64, and
    their NTK computed by torch.func.jacrev. The run's kernel is float32: its entries carry
    rounding of ~1e-6 relative, so by Weyl's inequality each eigenvalue moves by at most
    ||E||_2 <= ||E||_F ~ 120 x 1e-6 lambda_1; 2e-4 lambda_1 bounds that, while a 1.5x error
    in lambda_1 is 0.5 lambda_1. The initial outputs agree to float32 rounding (1e-5)."""
    metrics = {m.name: m.value for m in tiny.metrics}
    ctx = RunContext(out_dir=Path("."), seed=int(tiny.config["seed"]))
    data = load_images("digits", None, TINY.n_train, ctx.generator("data"), torch.float32)
    np.testing.assert_allclose(arrays["targets"], data.targets.numpy())
    nets: tuple[tuple[Literal["mlp", "cnn"], int], ...] = (
        ("mlp", TINY.mlp_width),
        ("cnn", TINY.cnn_channels),
    )
    for name, width in nets:
        net = network(
            name,
            data,
            depth=TINY.depth,
            width=width,
            w_std=TINY.w_std,
            b_std=TINY.b_std,
            generator=ctx.generator(f"init-{name}"),
            dtype=torch.float32,
        )
        net64 = copy.deepcopy(net).double()
        x64 = data.x.double()
        with torch.no_grad():
            f0 = net64(x64).numpy()
        np.testing.assert_allclose(arrays[f"f0_{name}"], f0, rtol=1e-4, atol=1e-5)
        lam = np.linalg.eigvalsh(_jacobian_ntk(net64, x64).numpy())[::-1]
        stored = arrays[f"eigenvalues_{name}"]
        assert np.max(np.abs(stored - lam)) <= 2e-4 * lam[0], name
        assert metrics[f"eigenvalue_max[{name}]"] == pytest.approx(lam[0], rel=2e-4)
        assert metrics[f"f0_std[{name}]"] == pytest.approx(f0.std(ddof=1), rel=1e-4)


# ---------------------------------------------------------------------------------------------
# pieces


def test_measurement_recovers_constructed_alignment() -> None:
    """K = V diag(lambda) V^T with (v_i^T y)^2 = lambda_i^2 and (v_i^T r_0)^2 = lambda_i."""
    gen = torch.Generator().manual_seed(0)
    n = 200
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    lam = torch.logspace(0, -4, n, dtype=torch.float64)
    kernel = q @ torch.diag(lam) @ q.T
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    y = q @ (sign * lam)
    residual = q @ (sign * lam.sqrt())
    m = measure_alignment(
        kernel,
        y[:, None],
        (residual + y)[:, None],
        relative_range=(1e-4, 1.0),
        bins=10,
        n_boot=0,
        n_permutations=50,
        top_k=20,
        generator=torch.Generator().manual_seed(1),
    )
    # binned means of lambda^s against geometric bin centres: exact up to the bin width
    torch.testing.assert_close(m.label.slope, 2.0, rtol=0.0, atol=2e-3)
    torch.testing.assert_close(m.residual.slope, 1.0, rtol=0.0, atol=2e-3)
    torch.testing.assert_close(m.top_share, float(lam[:20].square().sum() / lam.square().sum()))
    assert abs(m.permuted.slope) < 0.3  # shuffling destroys the alignment


@pytest.mark.parametrize(("control", "known"), list(CONTROL_SLOPES.items()))
@pytest.mark.parametrize("side", [-1.0, 1.0])
def test_a_control_off_its_known_slope_makes_the_verdict_an_error(
    control: str, known: float, side: float
) -> None:
    values = passing_values()
    just_in = known + side * (CONTROL_TOL - EPS)
    values[f"control_slope[cnn,{control}]"] = just_in
    assert judge(TINY, metrics_from_values(values)).controls_failed == ()
    values[f"control_slope[cnn,{control}]"] = known + side * (CONTROL_TOL + EPS)
    judgement = judge(TINY, metrics_from_values(values))
    assert judgement.passed  # the figures themselves pass ...
    assert len(judgement.controls_failed) == 1  # ... but the estimator failed a control
    assert control in judgement.controls_failed[0] and "cnn" in judgement.controls_failed[0]
    assert verdict_of(judgement.passed, judgement.controls_failed, "quick") == "ERROR"


def test_controls_recover_their_known_slopes_on_an_analytic_spectrum() -> None:
    """On the spectrum of the analytic ReLU NTK of 1000 digits (the quick scale's fit range,
    bins and bootstrap), the controls' slopes are within CONTROL_TOL of 2, 1 and 0; the
    controls' targets are what they claim to be."""
    quick = resolve_config(get_experiment(NAME), "quick")
    assert isinstance(quick, LabelAlignmentConfig)
    digits = load_digits(images=False, dtype=torch.float64)
    x = digits.x[: quick.n_train]
    kernel = mlp_architecture(quick.depth, quick.w_std, quick.b_std).kernel(x).ntk
    targets = digits.targets("centered_onehot")[: quick.n_train].to(torch.float64)
    gen = torch.Generator().manual_seed(5)
    m = measure_alignment(
        kernel,
        targets,
        torch.zeros_like(targets),
        relative_range=quick.relative_range,
        bins=quick.bins,
        n_boot=quick.n_boot,
        n_permutations=2,
        top_k=quick.top_k,
        generator=gen,
    )
    for control, known in CONTROL_SLOPES.items():
        assert abs(m.controls[control].slope - known) <= CONTROL_TOL, control
    # the targets are what they claim: K A has energies lambda^2 ||v^T A||^2 (numpy)
    lam, vecs = np.linalg.eigh(kernel.numpy())
    lam, vecs = lam[::-1].clip(min=0.0), vecs[:, ::-1]
    made = control_targets(torch.from_numpy(lam.copy()), torch.from_numpy(vecs.copy()), 10, gen)
    a = np.linalg.lstsq(kernel.numpy(), made["kernel"].numpy(), rcond=None)[0]
    np.testing.assert_allclose(kernel.numpy() @ a, made["kernel"].numpy(), atol=1e-8 * lam[0])
    cov = np.cov(made["gaussian"].numpy())  # 10 draws of N(0, K): its covariance is low-rank K
    assert np.linalg.matrix_rank(cov) <= 10


def test_residual_of_f0_alone_is_reported_and_the_permuted_residual_is_its_control() -> None:
    """f_0 with energies lambda_i (slope 1) and labels with lambda_i^2: the residual f_0 - Y
    and the permuted-label residual f_0 - Y_pi are fitted; f0_slope is f_0's own slope."""
    gen = torch.Generator().manual_seed(2)
    n = 300
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    lam = torch.logspace(0, -4, n, dtype=torch.float64)
    kernel = q @ torch.diag(lam) @ q.T
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    y = (q @ (sign * lam))[:, None]
    f0 = 30.0 * (q @ (sign * lam.sqrt()))[:, None]  # f_0 carries most of the energy
    m = measure_alignment(
        kernel,
        y,
        f0,
        relative_range=(1e-4, 1.0),
        bins=10,
        n_boot=0,
        n_permutations=20,
        top_k=20,
        generator=gen,
    )
    torch.testing.assert_close(m.f0.slope, 1.0, rtol=0.0, atol=2e-3)
    assert abs(m.residual.slope - 1.0) < 0.05  # the residual is f_0's
    ratio = float((f0**2).sum() / (y**2).sum())
    torch.testing.assert_close(m.f0_label_energy_ratio, ratio)
    # permuting labels whose energy is 1/900 of f_0's leaves the residual's slope where it was
    assert abs(m.permuted_residual.slope - m.residual.slope) < 0.05


def test_quick_run_controls_come_out_at_2_1_0_within_their_intervals(tmp_path: Path) -> None:
    """The quick scale itself (1000 digits, the MLP's and the CNN's empirical NTKs): every
    control's interval holds its known slope, so the verdict is not an ERROR."""
    result = run_experiment(NAME, scale="quick", out_root=tmp_path, force=True)
    metrics = {m.name: m for m in result.metrics}
    for name in ("mlp", "cnn"):
        for control, known in CONTROL_SLOPES.items():
            m = metrics[f"control_slope[{name},{control}]"]
            assert m.ci_low is not None and m.ci_high is not None
            assert m.ci_low <= known <= m.ci_high, (name, control, m.value, m.ci_low, m.ci_high)
    assert result.verdict in ("PASS", "FAIL"), result.summary


def test_a_permuted_label_run_fails(tmp_path: Path) -> None:
    """The whole experiment on shuffled labels (a judged run): no alignment, so FAIL."""
    result = run_experiment(
        NAME,
        scale="quick",
        overrides={
            "labels": "permuted",
            "networks": "mlp",
            "n_train": "400",
            "mlp_width": "64",
            "n_boot": "100",
            "n_permutations": "4",
        },
        out_root=tmp_path,
        force=True,
    )
    assert result.verdict == "FAIL", result.summary
    assert "labels permuted" in result.dataset
    label = next(m for m in result.metrics if m.name == "label_slope[mlp]")
    assert abs(label.value) < CHANCE_LABEL_MIN


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "D1"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}


def test_estimator_variants_recover_a_power_law() -> None:
    """Unbinned and grouped slopes of e = 3 lambda^s are s exactly (eigenvalues constant
    within each group for the grouped one); the range is applied relative to lambda_1; fewer
    than three groups give NaN."""
    from ntklab.experiments.label_alignment import _grouped_slope, _unbinned_slope

    lam = torch.logspace(0, -6, 500, dtype=torch.float64)
    for s in (2.0, 1.0, 0.0):
        assert _unbinned_slope(lam, 3 * lam**s, (1e-4, 1.0)) == pytest.approx(s, abs=1e-9)
    steps = torch.repeat_interleave(torch.logspace(0, -3, 5, dtype=torch.float64), 100)
    assert _grouped_slope(steps, 3 * steps**2, (1e-5, 1.0), 100) == pytest.approx(2.0, abs=1e-9)
    assert math.isnan(_grouped_slope(steps, steps**2, (0.5, 1.0), 100))  # one group in range
