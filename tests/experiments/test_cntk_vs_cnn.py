"""``cntk-vs-cnn``: its judge on both sides of its threshold, its config's constraints, its tiny
run against kernels computed here from their closed forms with NumPy, its kernel
regression against a direct solve, and its Fashion-MNIST path on small idx files."""

from __future__ import annotations

import gzip
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from experiment_helpers import run_tiny
from ntklab.data import load_digits
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    RunContext,
    RunResult,
    get_experiment,
    metrics_from_values,
    resolve_config,
)
from ntklab.experiments.cntk_vs_cnn import (
    MODELS,
    CntkVsCnnConfig,
    cnn_architecture,
    judge,
    kernel_cost_note,
    kernel_regression_accuracy,
    measure,
)

NAME = "cntk-vs-cnn"

# --- judge ---------------------------------------------------------------------------------

OTHERS = {
    "cntk_flatten_accuracy": 0.61,
    "cnn_gap_finite_accuracy": 0.42,
    "cntk_gap_same_time_accuracy": 0.44,
    "cnn_final_train_loss": 0.01,
}
JUDGE_CASES = [
    ("CNTK-GAP above", 0.9, 0.8, True),
    ("equal accuracies", 0.8, 0.8, True),
    ("CNTK-GAP one test image below", 0.8 - 1 / 256, 0.8, False),
    ("CNTK-GAP far below", 0.2, 0.8, False),
    ("NaN CNTK-GAP", math.nan, 0.8, False),
    ("NaN MLP", 0.8, math.nan, False),
]


@pytest.mark.parametrize(
    ("gap", "mlp", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_on_both_sides_of_the_threshold(gap: float, mlp: float, passed: bool) -> None:
    values = OTHERS | {"cntk_gap_accuracy": gap, "mlp_ntk_accuracy": mlp}
    judgement = judge(CntkVsCnnConfig(), metrics_from_values(values))
    assert judgement.passed is passed
    assert f"CNTK-GAP {gap:.3f}" in judgement.summary
    assert f"MLP NTK {mlp:.3f}" in judgement.summary
    assert ("CNTK-GAP >= MLP NTK" in judgement.summary) is passed


def test_judge_criterion_is_rendered_from_the_grid_that_ran() -> None:
    config = CntkVsCnnConfig(n_train=100, n_test=50, depth=4, ridge=0.01, b_std=0.1)
    values = OTHERS | {"cntk_gap_accuracy": 0.5, "mlp_ntk_accuracy": 0.4}
    text = judge(config, metrics_from_values(values)).criterion
    assert "depth 4" in text and "ridge 0.01" in text and "b_std 0.1" in text
    assert "50 digits test images with 100 training images" in text


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n_train", "0"),
        ("n_test", "-5"),
        ("depth", "0"),
        ("w_std", "0"),
        ("b_std", "-1"),
        ("ridge", "0"),
        ("cnn_width", "0"),
        ("cnn_t", "0"),
        ("cnn_lr_fraction", "0"),
        ("cnn_lr_fraction", "1"),
        ("max_memory_mb", "0"),
        ("n_train", "1600"),  # with n_test = 256: more than the 1797 digits
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_error_states_expected_and_received() -> None:
    with pytest.raises(NtklabValueError, match=r"n_train \+ n_test.*at most 1797.*1856"):
        resolve_config(get_experiment(NAME), "quick", {"n_train": "1600"})
    # CIFAR-10: the pool is 5 n_train training and 5 n_test test images, capped by the splits
    cifar = {"dataset": "cifar10", "n_test": "10000"}
    config = resolve_config(get_experiment(NAME), "paper", cifar)
    assert isinstance(config, CntkVsCnnConfig) and config.n_test == 10000
    with pytest.raises(NtklabValueError, match=r"n_train \+ n_test.*at most 60000"):
        resolve_config(get_experiment(NAME), "paper", cifar | {"n_train": "50001"})
    # Fashion-MNIST: each split on its own
    config = resolve_config(get_experiment(NAME), "paper", {"n_train": "60000", "n_test": "10000"})
    assert isinstance(config, CntkVsCnnConfig) and config.dataset == "fashion-mnist"
    with pytest.raises(
        NtklabValueError,
        match=r"n_train: expected at most 60000 \(the Fashion-MNIST training images\), "
        "received 60001",
    ):
        resolve_config(get_experiment(NAME), "paper", {"n_train": "60001"})
    with pytest.raises(NtklabValueError, match=r"n_test: expected at most 10000 .*10001"):
        resolve_config(get_experiment(NAME), "paper", {"n_test": "10001"})


def test_paper_scale_is_fashion_mnist_with_the_paper_grid() -> None:
    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, CntkVsCnnConfig)
    assert config.dataset == "fashion-mnist" and config.data_root is None
    assert (config.n_train, config.n_test, config.depth) == (256, 256, 5)
    assert (config.cnn_width, config.cnn_t) == (32, 500)


# --- tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("cntk-vs-cnn"))


def _relu(k: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arc-cosine duals of ReLU: E[relu(u) relu(v)] and E[relu'(u) relu'(v)]."""
    norm = np.sqrt(q1 * q2)
    cos = np.clip(np.divide(k, norm, out=np.zeros_like(k), where=norm > 0), -1.0, 1.0)
    theta = np.arccos(cos)
    return norm * (np.sin(theta) + (math.pi - theta) * cos) / (2 * math.pi), (math.pi - theta) / (
        2 * math.pi
    )


def _mlp_ntk(x1: np.ndarray, x2: np.ndarray, depth: int, w: float, b: float) -> np.ndarray:
    """NTK of depth x [Dense, Relu] + Dense (NTK parameterization), Jacot et al. 2018."""
    d = x1.shape[1]
    k = w**2 * x1 @ x2.T / d + b**2
    q1 = w**2 * (x1**2).sum(1) / d + b**2
    q2 = w**2 * (x2**2).sum(1) / d + b**2
    ntk = k
    for _ in range(depth):
        k, kdot = _relu(k, q1[:, None], q2[None, :])
        ntk = ntk * kdot
        k = w**2 * k + b**2
        ntk = w**2 * ntk + k
        q1, q2 = w**2 * q1 / 2 + b**2, w**2 * q2 / 2 + b**2
    return np.asarray(ntk)


def _window_mean(a: np.ndarray, pair: bool) -> np.ndarray:
    """Mean over 3x3 shifts, zero padded (SAME): a[..., p + o, p' + o] for pairs (n, h, w, h,
    w), a[..., p + o] for diagonals (n, h, w)."""
    h, w = a.shape[1], a.shape[2]
    pad = np.pad(a, [(0, 0)] + [(1, 1)] * (a.ndim - 1))
    out = np.zeros_like(a)
    for i in range(3):
        for j in range(3):
            if pair:
                out += pad[:, i : i + h, j : j + w, i : i + h, j : j + w]
            else:
                out += pad[:, i : i + h, j : j + w]
    return out / 9


def _cntk_gap(x1: np.ndarray, x2: np.ndarray, depth: int, w: float, b: float) -> np.ndarray:
    """CNTK of depth x [Conv 3x3 SAME, Relu] + GlobalAvgPool + Dense on one-channel images
    (n, h, w), naively over the full spatial covariance of every pair (Arora et al. 2019)."""
    out = np.empty((x1.shape[0], x2.shape[0]))
    q2_all = _window_mean(x2**2, pair=False)
    for i, image in enumerate(x1):
        cov = image[None, :, :, None, None] * x2[:, None, None, :, :]  # (n2, h, w, h, w)
        k = w**2 * _window_mean(cov, pair=True) + b**2
        q1 = w**2 * _window_mean(image[None] ** 2, pair=False)[0] + b**2  # (h, w)
        q2 = w**2 * q2_all + b**2  # (n2, h, w)
        ntk = k
        for layer in range(depth):
            k, kdot = _relu(k, q1[None, :, :, None, None], q2[:, None, None, :, :])
            ntk = ntk * kdot
            if layer < depth - 1:
                k = w**2 * _window_mean(k, pair=True) + b**2
                ntk = w**2 * _window_mean(ntk, pair=True) + k
                q1 = w**2 * _window_mean(q1[None] / 2, pair=False)[0] + b**2
                q2 = w**2 * _window_mean(q2 / 2, pair=False) + b**2
        k_pool, ntk_pool = k.mean(axis=(1, 2, 3, 4)), ntk.mean(axis=(1, 2, 3, 4))
        out[i] = w**2 * ntk_pool + (w**2 * k_pool + b**2)
    return out


def _ridge_predictions(
    k_train: np.ndarray, k_test: np.ndarray, y_train: np.ndarray, classes: int, ridge: float
) -> np.ndarray:
    targets = np.eye(classes)[y_train] - 1.0 / classes
    reg = ridge * np.mean(np.diag(k_train))
    alpha = np.linalg.solve(k_train + reg * np.eye(len(k_train)), targets)
    return np.asarray((k_test @ alpha).argmax(axis=1))


def test_tiny_run_accuracies_match_numpy_kernels(tiny: RunResult) -> None:
    config = CntkVsCnnConfig.model_validate(tiny.config)
    metrics = {m.name: m.value for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    digits = load_digits(images=True, dtype=torch.float64)
    x = digits.x.numpy().reshape(len(digits), 8, 8)[arrays["indices"]]  # one channel
    labels = digits.labels.numpy()[arrays["indices"]]
    n = config.n_train
    x_train, x_test, y_train, y_test = x[:n], x[n:], labels[:n], labels[n:]
    np.testing.assert_array_equal(arrays["y_test"], y_test)
    classes = int(labels.max()) + 1
    flat_train, flat_test = x_train.reshape(n, -1), x_test.reshape(len(x_test), -1)
    args = (config.depth, config.w_std, config.b_std)
    references = {
        "mlp_ntk": (
            _mlp_ntk(flat_train, flat_train, *args),
            _mlp_ntk(flat_test, flat_train, *args),
        ),
        "cntk_gap": (_cntk_gap(x_train, x_train, *args), _cntk_gap(x_test, x_train, *args)),
    }
    predictions = arrays["predictions"]
    for name, (k_train, k_test) in references.items():
        expected = _ridge_predictions(k_train, k_test, y_train, classes, config.ridge)
        got = predictions[MODELS.index(name)]
        # float32 kernels in the run, float64 here: a near-tie may flip, at most 2 of 40
        assert (got != expected).sum() <= 2, name
        accuracy = float((expected == y_test).mean())
        assert abs(metrics[f"{name}_accuracy"] - accuracy) <= 2 / len(y_test), name
    # every recorded accuracy is the fraction of its recorded predictions that are right
    for i, name in enumerate(MODELS):
        right = float((predictions[i] == y_test).mean())
        assert metrics[f"{name}_accuracy"] == pytest.approx(right, abs=1e-12)
        assert arrays["accuracies"][i] == pytest.approx(right, abs=1e-12)
    # chance is 0.1 on 10 classes: the kernels do far better even on 40 images
    assert metrics["cntk_gap_accuracy"] > 0.3 and metrics["mlp_ntk_accuracy"] > 0.3


def test_tiny_run_names_its_data_and_stores_the_positions(tiny: RunResult) -> None:
    arrays = np.load(tiny.run_dir / "arrays.npz")
    assert tiny.dataset == (
        "scikit-learn digits (8x8), 80 of the 1797 images drawn uniformly: the first 40 for "
        "training, the other 40 for testing; seed 0"
    )
    np.testing.assert_array_equal(arrays["train_indices"], arrays["indices"][:40])
    np.testing.assert_array_equal(arrays["test_indices"], arrays["indices"][40:])


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def _write_fashion(folder: Path, sizes: dict[str, int]) -> dict[str, tuple[np.ndarray, ...]]:
    """Small Fashion-MNIST-format files: 6 x 6 images, labels cycling through 0..9."""
    rng = np.random.default_rng(0)
    arrays: dict[str, tuple[np.ndarray, ...]] = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = rng.integers(0, 256, (sizes[split], 6, 6))
        labels = rng.permutation(np.arange(sizes[split]) % 10)
        _write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)
        arrays[split] = (images, labels)
    return arrays


def test_fashion_mnist_subsets_are_class_balanced_and_recorded(tmp_path: Path) -> None:
    """On small idx files: 20 training images (2 per class) from the training split and 10
    test images (1 per class) from the test split, their positions and the data set's name
    stored with the measurement."""
    files = _write_fashion(tmp_path, {"train": 60, "test": 30})
    config = CntkVsCnnConfig(
        dataset="fashion-mnist",
        data_root=str(tmp_path),
        n_train=20,
        n_test=10,
        depth=1,
        cnn_width=4,
        cnn_t=2,
    )
    m = measure(config, RunContext(out_dir=tmp_path, seed=3))
    assert m.dataset == (
        "Fashion-MNIST train, 20 images (class-balanced); Fashion-MNIST test, 10 images "
        "(class-balanced); seed 3"
    )
    train_idx, test_idx = (
        np.asarray(m.arrays["train_indices"]),
        np.asarray(m.arrays["test_indices"]),
    )
    assert "indices" not in m.arrays
    assert len(set(train_idx.tolist())) == 20 and len(set(test_idx.tolist())) == 10
    assert np.bincount(files["train"][1][train_idx], minlength=10).tolist() == [2] * 10
    assert np.bincount(files["test"][1][test_idx], minlength=10).tolist() == [1] * 10
    np.testing.assert_array_equal(m.arrays["y_test"], files["test"][1][test_idx])
    again = measure(config, RunContext(out_dir=tmp_path, seed=3))
    np.testing.assert_array_equal(again.arrays["train_indices"], train_idx)
    np.testing.assert_array_equal(again.arrays["test_indices"], test_idx)


def test_tiny_run_records_the_cnn_training(tiny: RunResult) -> None:
    config = CntkVsCnnConfig.model_validate(tiny.config)
    metrics = {m.name: m.value for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    np.testing.assert_array_equal(arrays["cnn_loss_steps"], np.arange(config.cnn_t + 1))
    losses = arrays["cnn_losses"]
    assert losses.shape == (config.cnn_t + 1,) and losses[-1] < losses[0]
    assert metrics["cnn_final_train_loss"] == pytest.approx(float(losses[-1]), rel=1e-12)
    assert (tiny.run_dir / "cntk_vs_cnn.png").exists()


def test_tiny_run_notes_each_kernels_entries_and_rate(tiny: RunResult) -> None:
    """The cost note counts n_train^2 + n_test n_train entries per kernel (the training and
    test kernels) and its rate is entries / seconds."""
    config = CntkVsCnnConfig.model_validate(tiny.config)
    (note,) = [n for n in tiny.notes if n.startswith("kernel cost")]
    entries = config.n_train**2 + config.n_test * config.n_train
    found = re.findall(r"(\w+) (\d+) entries \(input pairs\) in (\S+) s \((\S+) per s\)", note)
    assert [name for name, *_ in found] == ["cntk_gap", "cntk_flatten", "mlp_ntk"]
    for _, count, seconds, rate in found:
        assert int(count) == entries
        assert float(rate) == pytest.approx(entries / float(seconds), rel=0.01)


def test_kernel_cost_note_states_the_rate() -> None:
    note = kernel_cost_note({"cntk_gap": (6_000_000, 1.2e6), "mlp_ntk": (10, 0.0)})
    assert "cntk_gap 6000000 entries (input pairs) in 1.2e+06 s (5.0 per s)" in note
    assert "mlp_ntk 10 entries (input pairs) in 0 s (inf per s)" in note


def _cnn_flops(width: int, depth: int, n: int, steps: int) -> tuple[float, float]:
    """Flops of the finite CNN per image and step, and in all: 3 x 3 convolutions on 28 x 28
    (1 -> C, then C -> C), forward and backward."""
    per_image = 6 * 28 * 28 * 9 * (width + (depth - 1) * width**2)
    return per_image, per_image * n * steps


def _pairs(n_train: int, n_test: int) -> int:
    """CNTK entries computed: the training kernel is symmetric (pairs i <= j), the test kernel
    is not."""
    return n_train * (n_train + 1) // 2 + n_test * n_train


def test_docstring_paper_scale_counts_the_paper_grid() -> None:
    """The module's paper-scale cost counts the paper config's CNTK entries and CNN flops, and
    those of the grid of Arora et al.'s scale that it names for a GPU."""
    import ntklab.experiments.cntk_vs_cnn as module

    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, CntkVsCnnConfig)
    doc = " ".join((module.__doc__ or "").split())
    assert (
        f"depth {config.depth}, {config.n_train} training and {config.n_test} test images of "
        f"28 x 28 (class-balanced), a width-{config.cnn_width} CNN trained for {config.cnn_t}"
    ) in doc
    pairs = _pairs(config.n_train, config.n_test)
    assert f":math:`{pairs / 1e4:.1f} \\times 10^4` pairs" in doc
    per_image, total = _cnn_flops(config.cnn_width, config.depth, config.n_train, config.cnn_t)
    assert f":math:`{per_image / 1e8:.1f} \\times 10^8` flops per image and step" in doc
    assert f":math:`{total / 1e13:.1f} \\times 10^{{13}}` flops for {config.cnn_t} steps" in doc
    # the stated minutes follow from the stated rates
    assert "about 88 CNTK-GAP pairs per second" in doc
    assert f"about {round(pairs / 88 / 60)} minutes" in doc
    core_minutes = config.n_train * config.cnn_t * 30e-3 / 60
    assert "30 ms of one core per image-step" in doc
    assert f"{round(core_minutes)} core-minutes, about {round(core_minutes / 2)} minutes" in doc
    assert f"About {round(pairs / 88 / 60 + core_minutes / 2)} minutes in all" in doc
    # the grid of Arora et al.'s scale, named for a GPU
    big = resolve_config(
        get_experiment(NAME),
        "paper",
        {"n_train": "2000", "n_test": "1000", "cnn_width": "128", "cnn_t": "2000"},
    )
    assert isinstance(big, CntkVsCnnConfig)
    assert "--set n_train=2000 n_test=1000 cnn_width=128 cnn_t=2000" in doc
    assert round(_pairs(big.n_train, big.n_test) / 1e6) == 4
    assert f"about {round(_pairs(big.n_train, big.n_test) / 88 / 3600)} hours" in doc
    _, big_total = _cnn_flops(big.cnn_width, big.depth, big.n_train, big.cnn_t)
    assert f":math:`{big_total / 1e16:.1f} \\times 10^{{16}}` flops of CNN training" in doc


def test_numpy_cntk_matches_the_library_kernel() -> None:
    """The reference of the tiny-run test against ``cnn_architecture(...).kernel``."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(5, 1, 6, 6, dtype=torch.float64, generator=gen)
    x[:, :, 0, :] = 0.0  # a constant pixel row, as the digits' border
    for b_std in (0.0, 0.3):
        expected = cnn_architecture(2, 1.4, b_std, pool=True).kernel(x).ntk.numpy()
        got = _cntk_gap(x[:, 0].numpy(), x[:, 0].numpy(), 2, 1.4, b_std)
        # arccos near 1 turns rounding into sqrt(eps) on the diagonal: 1e-8, not 1e-15
        np.testing.assert_allclose(got, expected, rtol=1e-8)


# --- helpers -------------------------------------------------------------------------------


def test_kernel_regression_matches_a_direct_solve() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(30, 1, 5, 5, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 3, (30,), generator=gen)
    k = cnn_architecture(2, 1.4, 0.1, pool=True).kernel(x).ntk
    acc = kernel_regression_accuracy(k[:20, :20], k[20:, :20], y[:20], y[20:], 1e-2)
    targets = torch.nn.functional.one_hot(y[:20], 3).double() - 1 / 3
    reg = 1e-2 * k[:20, :20].diagonal().mean()
    alpha = torch.linalg.solve(k[:20, :20] + reg * torch.eye(20, dtype=torch.float64), targets)
    expected = float(((k[20:, :20] @ alpha).argmax(1) == y[20:]).double().mean())
    assert acc == expected


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is not None
