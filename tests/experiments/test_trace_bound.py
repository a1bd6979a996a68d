"""D2 ``trace-bound``: its judge on both sides of every threshold, its config's constraints,
its tiny run against closed forms recomputed here, its GD loop against the spectral
formula of a linear model, and its Fashion-MNIST path on small idx files."""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from experiment_helpers import run_tiny
from ntklab.analysis import gd_loss_curve, kernel_eigh
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    RunContext,
    RunResult,
    get_experiment,
    metrics_from_values,
    resolve_config,
)
from ntklab.experiments.label_alignment import ImageData, NetName, load_images, network
from ntklab.experiments.trace_bound import (
    FACTOR,
    LAMBDA_MIN_FRACTION,
    LINEAR_TOL,
    TraceBoundConfig,
    judge,
    linear_model_check,
    measure,
    train_until_drop,
)

NAME = "trace-bound"
TAGS = [(n, i) for n in ("mlp", "cnn") for i in ("zero", "random")]


# --- judge ---------------------------------------------------------------------------------


def _passing() -> dict[str, float]:
    values = {"linear_model_relative_error": 1e-14}
    for name, init in TAGS:
        tag = f"{name},{init}"
        values |= {
            f"steps_to_drop[{tag}]": 12.0,
            f"trace_over_actual[{tag}]": 1.0,
            f"lambda_min_bound_fraction[{tag}]": 0.9,
        }
    return values


_Z, _R = FACTOR["zero"], FACTOR["random"]
JUDGE_CASES = [
    ("all inside", {}, True),
    ("linear error at the tolerance", {"linear_model_relative_error": LINEAR_TOL}, True),
    ("linear error above", {"linear_model_relative_error": 1.01 * LINEAR_TOL}, False),
    ("zero init ratio below 3", {"trace_over_actual[mlp,zero]": 0.99 * _Z}, True),
    ("zero init ratio above 3", {"trace_over_actual[mlp,zero]": 1.01 * _Z}, False),
    ("zero init ratio above 1/3", {"trace_over_actual[cnn,zero]": 1.01 / _Z}, True),
    ("zero init ratio below 1/3", {"trace_over_actual[cnn,zero]": 0.99 / _Z}, False),
    ("random init ratio below 5", {"trace_over_actual[mlp,random]": 0.99 * _R}, True),
    ("random init ratio above 5", {"trace_over_actual[mlp,random]": 1.01 * _R}, False),
    ("random init ratio above 1/5", {"trace_over_actual[cnn,random]": 1.01 / _R}, True),
    ("random init ratio below 1/5", {"trace_over_actual[cnn,random]": 0.99 / _R}, False),
    # a factor 4 is inside for the random init but outside for f_0 = 0
    ("ratio 4 from zero init", {"trace_over_actual[mlp,zero]": 4.0}, False),
    ("ratio 4 from random init", {"trace_over_actual[mlp,random]": 4.0}, True),
    (
        "lambda_min bound at 0.5",
        {"lambda_min_bound_fraction[cnn,zero]": LAMBDA_MIN_FRACTION},
        True,
    ),
    (
        "lambda_min bound below 0.5",
        {"lambda_min_bound_fraction[cnn,zero]": 0.99 * LAMBDA_MIN_FRACTION},
        False,
    ),
    ("NaN ratio", {"trace_over_actual[mlp,random]": math.nan}, False),
    ("NaN lambda_min bound", {"lambda_min_bound_fraction[mlp,zero]": math.nan}, False),
    ("NaN linear error", {"linear_model_relative_error": math.nan}, False),
]


@pytest.mark.parametrize(
    ("changes", "passed"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_on_both_sides_of_every_threshold(changes: dict[str, float], passed: bool) -> None:
    values = _passing() | changes
    judgement = judge(TraceBoundConfig(), metrics_from_values(values))
    assert judgement.passed is passed
    for name, value in changes.items():
        if "ratio" in name or "bound" in name:
            assert f"{value:.3g}" in judgement.summary
    assert f"{values['linear_model_relative_error']:.1e}" in judgement.summary


def test_judge_fails_without_the_drop_and_says_so() -> None:
    values = _passing()
    for key in ("steps_to_drop", "trace_over_actual", "lambda_min_bound_fraction"):
        del values[f"{key}[cnn,random]"]
    values["steps_run[cnn,random]"] = 4000.0
    judgement = judge(TraceBoundConfig(), metrics_from_values(values))
    assert not judgement.passed
    assert "cnn,random: no 100-fold drop in 4000 steps" in judgement.summary


def test_judge_criterion_is_rendered_from_the_grid_that_ran() -> None:
    config = TraceBoundConfig(networks=("cnn",), inits=("zero",), drop=20.0, max_t=700)
    values = {
        "linear_model_relative_error": 0.0,
        "steps_to_drop[cnn,zero]": 3.0,
        "trace_over_actual[cnn,zero]": 1.0,
        "lambda_min_bound_fraction[cnn,zero]": 0.9,
    }
    judgement = judge(config, metrics_from_values(values))
    assert judgement.passed
    text = judgement.criterion
    assert "20-fold" in text and "700 steps" in text and "[0.333, 3] from the zero init" in text
    assert "random" not in text and "MLP" not in text and "CNN 32 channels" in text
    assert "256 digits images" in text and f"{LINEAR_TOL:g}" in text


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n_train", "0"),
        ("n_test", "0"),
        ("depth", "0"),
        ("mlp_width", "0"),
        ("w_std", "0"),
        ("b_std", "-0.1"),
        ("drop", "1"),
        ("max_t", "-5"),
        ("chunk_t", "0"),
        ("linear_t", "0"),
        ("max_memory_mb", "0"),
        ("networks", ""),
        ("networks", "mlp,mlp"),
        ("inits", "zero,zero"),
        ("n_train", "1700"),  # with n_test = 256: more than the 1797 digits
    ],
)
def test_config_errors_name_the_key(key: str, value: str) -> None:
    with pytest.raises(NtklabValueError, match=key):
        resolve_config(get_experiment(NAME), "quick", {key: value})


def test_config_error_states_expected_and_received() -> None:
    with pytest.raises(NtklabValueError, match=r"n_train \+ n_test.*at most 1797.*1956"):
        resolve_config(get_experiment(NAME), "quick", {"n_train": "1700"})
    # Fashion-MNIST: training images from its training split, test images from its test split
    config = resolve_config(get_experiment(NAME), "paper", {"n_train": "60000", "n_test": "10000"})
    assert isinstance(config, TraceBoundConfig) and config.dataset == "fashion-mnist"
    with pytest.raises(NtklabValueError, match=r"n_train: expected at most 60000 .*60001"):
        resolve_config(get_experiment(NAME), "paper", {"n_train": "60001"})
    with pytest.raises(
        NtklabValueError,
        match=r"n_test: expected at most 10000 \(the Fashion-MNIST test images\), received "
        "10001",
    ):
        resolve_config(get_experiment(NAME), "paper", {"n_test": "10001"})


def test_paper_scale_is_fashion_mnist_with_the_paper_grid() -> None:
    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, TraceBoundConfig)
    assert config.dataset == "fashion-mnist" and config.data_root is None
    assert (config.n_train, config.n_test, config.max_t) == (1000, 1000, 20000)
    assert (config.mlp_width, config.cnn_channels) == (2048, 128)


# --- tiny run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    return run_tiny(NAME, tmp_path_factory.mktemp("trace-bound"))


def test_tiny_run_linear_model_matches_the_closed_form(tiny: RunResult) -> None:
    config = TraceBoundConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    # the same training images, drawn again from the run's "data" stream
    gen = RunContext(out_dir=Path("."), seed=config.seed).generator("data")
    both = load_images(config.dataset, None, config.n_train + config.n_test, gen, torch.float32)
    x = both.x[: config.n_train].flatten(1).double().numpy()
    y = both.targets[: config.n_train].numpy()
    # L_t = 1/2 sum_i (1 - lambda_i / lambda_max)^(2t) ||v_i^T y||^2 for f = X theta, theta_0 = 0
    lam, vecs = np.linalg.eigh(x @ x.T)
    energy = ((vecs.T @ y) ** 2).sum(axis=1)
    t = np.arange(config.linear_t + 1)[:, None]
    formula = 0.5 * (np.clip(1 - lam / lam.max(), 0, None) ** (2 * t) * energy).sum(axis=1)
    # float64 GD against a float64 closed form: rounding only
    np.testing.assert_allclose(arrays["linear_loss"], formula, rtol=1e-9)
    error = np.max(
        np.abs(arrays["linear_loss"] - arrays["linear_formula"]) / arrays["linear_formula"]
    )
    assert metrics["linear_model_relative_error"].value == pytest.approx(error, rel=1e-6)
    assert metrics["linear_model_relative_error"].value <= LINEAR_TOL


def test_tiny_run_figures_match_the_spectral_closed_forms(tiny: RunResult) -> None:
    config = TraceBoundConfig.model_validate(tiny.config)
    metrics = {m.name: m for m in tiny.metrics}
    arrays = np.load(tiny.run_dir / "arrays.npz")
    for name in config.networks:
        for init in config.inits:
            tag, key = f"{name},{init}", f"{name}_{init}"
            loss, lam = arrays[f"loss_{key}"], arrays[f"eigenvalues_{key}"]
            # the tiny grid falls drop-fold well within max_steps for every network
            hits = np.flatnonzero(loss <= loss[0] / config.drop)
            assert hits.size, f"{tag}: no {config.drop}-fold drop in {loss.size - 1} steps"
            t_star = int(hits[0])
            assert metrics[f"steps_to_drop[{tag}]"].value == t_star
            # trace prediction c sum_i (1 - eta lambda_i)^(2t) lambda_i with c = L_0 / tr K,
            # lambda_min bound (1 - eta lambda_min)^(2t) L_0, eta = 1 / lambda_max
            eta = 1.0 / lam.max()
            t = np.arange(loss.size)[:, None]
            decay = np.clip(1 - eta * lam, 0, None) ** (2 * t)
            trace = loss[0] * (decay * lam).sum(axis=1) / lam.sum()
            lmin = (1 - eta * max(lam.min(), 0.0)) ** (2 * t[:, 0])
            # both sides in float64 from the same eigenvalues: rounding only
            np.testing.assert_allclose(arrays[f"trace_{key}"], trace, rtol=1e-9)
            np.testing.assert_allclose(arrays[f"lambda_min_{key}"], lmin * loss[0], rtol=1e-9)
            ratio = metrics[f"trace_over_actual[{tag}]"].value
            assert ratio == pytest.approx(trace[t_star] / loss[t_star], rel=1e-9)
            fraction = metrics[f"lambda_min_bound_fraction[{tag}]"].value
            assert fraction == pytest.approx(lmin[t_star], rel=1e-9)
            linearized = arrays[f"linearized_{key}"]
            assert metrics[f"linearized_over_actual[{tag}]"].value == pytest.approx(
                linearized[t_star] / loss[t_star], rel=1e-9
            )
            assert metrics[f"trace_over_n[{tag}]"].value == pytest.approx(lam.mean(), rel=1e-12)
            # the linearized network starts at the actual loss (same f_0, same targets)
            assert linearized[0] == pytest.approx(loss[0], rel=1e-5)
    # f_0 = 0: the loss at t = 0 is ||Y||^2 / 2 of centered one-hot labels (0.45 per image)
    np.testing.assert_allclose(arrays["loss_mlp_zero"][0], 0.45 * config.n_train, rtol=1e-5)


def test_tiny_run_names_its_data_and_stores_the_positions(tiny: RunResult) -> None:
    config = TraceBoundConfig.model_validate(tiny.config)
    arrays = np.load(tiny.run_dir / "arrays.npz")
    assert tiny.dataset == (
        "scikit-learn digits (8x8), 100 of the 1797 images drawn uniformly: the first 60 for "
        "training, the other 40 for testing; seed 0"
    )
    gen = RunContext(out_dir=Path("."), seed=config.seed).generator("data")
    expected = torch.randperm(1797, generator=gen)[: config.n_train + config.n_test].numpy()
    np.testing.assert_array_equal(arrays["train_indices"], expected[: config.n_train])
    np.testing.assert_array_equal(arrays["test_indices"], expected[config.n_train :])


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def test_fashion_mnist_subsets_are_class_balanced_and_recorded(tmp_path: Path) -> None:
    """On small idx files (6 x 6 images): 20 training images (2 per class) from the training
    split, 10 test images (1 per class) from the test split, their positions and the data
    set's name stored with the measurement."""
    rng = np.random.default_rng(1)
    labels = {}
    for split, prefix, n in (("train", "train", 40), ("test", "t10k", 20)):
        labels[split] = rng.permutation(np.arange(n) % 10)
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 6, 6)))
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels[split])
    config = TraceBoundConfig(
        dataset="fashion-mnist",
        data_root=str(tmp_path),
        networks=("mlp",),
        inits=("zero",),
        n_train=20,
        n_test=10,
        mlp_width=8,
        drop=2.0,
        max_t=5,
        chunk_t=5,
        linear_t=2,
    )
    m = measure(config, RunContext(out_dir=tmp_path, seed=4))
    assert m.dataset == (
        "Fashion-MNIST train, 20 images (class-balanced); Fashion-MNIST test, 10 images "
        "(class-balanced); seed 4"
    )
    train_idx = np.asarray(m.arrays["train_indices"])
    test_idx = np.asarray(m.arrays["test_indices"])
    assert len(set(train_idx.tolist())) == 20 and len(set(test_idx.tolist())) == 10
    assert np.bincount(labels["train"][train_idx], minlength=10).tolist() == [2] * 10
    assert np.bincount(labels["test"][test_idx], minlength=10).tolist() == [1] * 10
    # f_0 = 0: the loss at t = 0 is ||Y||^2 / 2 of the drawn images' centered one-hot labels
    np.testing.assert_allclose(m.arrays["loss_mlp_zero"][0], 0.45 * 20, rtol=1e-5)


@pytest.mark.parametrize(("name", "init"), [("mlp", "zero"), ("cnn", "random")])
def test_tiny_run_ntk_trace_matches_gradient_norms(
    tiny: RunResult, name: NetName, init: str
) -> None:
    """tr(Theta) = sum over images i and outputs a of |d f_a(x_i) / d theta|^2, by autograd."""
    config = TraceBoundConfig.model_validate(tiny.config)
    ctx = RunContext(out_dir=Path("."), seed=config.seed)
    both = load_images(
        config.dataset, None, config.n_train + config.n_test, ctx.generator("data"), torch.float32
    )
    net = network(
        name,
        both,
        depth=config.depth,
        width=config.mlp_width if name == "mlp" else config.cnn_channels,
        w_std=config.w_std,
        b_std=config.b_std,
        generator=ctx.generator(f"init-{name}-{init}"),
        dtype=torch.float32,
        zero_output=init == "zero",
    )
    params = [p for p in net.parameters() if p.requires_grad]
    total = 0.0
    for i in range(config.n_train):
        out = net(both.x[i : i + 1])[0]
        for a in range(out.shape[0]):
            grads = torch.autograd.grad(out[a], params, retain_graph=True)
            total += float(sum(g.double().square().sum() for g in grads))
    entries = config.n_train * both.num_classes  # the full (n k) x (n k) kernel
    value = {m.name: m.value for m in tiny.metrics}[f"trace_over_n[{name},{init}]"]
    # float32 networks, a sum of 600 positive terms: 1e-4 covers the rounding
    assert value == pytest.approx(total / entries, rel=1e-4)


# --- helpers -------------------------------------------------------------------------------


def test_train_until_drop_stops_where_the_spectral_formula_says() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 30, dtype=torch.float64, generator=gen)
    y = torch.randn(12, 2, dtype=torch.float64, generator=gen)
    net = torch.nn.Linear(30, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        net.weight.zero_()
    lam, vecs = kernel_eigh(x @ x.T)
    eta = 1.0 / float(lam[0])
    curve, t_star = train_until_drop(net, x, y, eta=eta, drop=10.0, max_steps=500, chunk=7)
    formula = gd_loss_curve(
        lam, vecs, -y, torch.arange(501), learning_rate=eta, normalization="sum"
    )
    expected = int((formula <= formula[0] / 10).nonzero()[0])
    assert t_star == expected
    torch.testing.assert_close(curve, formula[: curve.shape[0]], rtol=1e-10, atol=0.0)


def test_linear_model_matches_formula() -> None:
    gen = torch.Generator().manual_seed(1)
    error, actual, formula = linear_model_check(
        torch.randn(40, 1, 4, 4, generator=gen), torch.randn(40, 3, generator=gen), 50
    )
    assert error <= 1e-10
    assert actual.shape == formula.shape == (51,)
    assert float(actual[-1]) < float(actual[0])


def test_experiment_is_registered_with_three_scales() -> None:
    exp = get_experiment(NAME)
    assert exp.claim_id == "D2"
    assert set(exp.scales) >= {"tiny", "quick", "paper"}
    assert exp.measure is not None


# --- paper-scale cost ---------------------------------------------------------------------


def test_docstring_paper_scale_counts_the_paper_networks() -> None:
    """The module's paper-scale cost states the paper CNN's parameters and flops per step."""
    import ntklab.experiments.trace_bound as module

    config = resolve_config(get_experiment(NAME), "paper", {})
    assert isinstance(config, TraceBoundConfig)
    doc = " ".join((module.__doc__ or "").split())
    assert "Paper scale (1000 Fashion-MNIST images of 28 x 28, MLP width 2048, CNN 128" in doc
    x = torch.zeros(1, 1, 28, 28)
    label = torch.zeros(1, dtype=torch.long)
    data = ImageData(x, label, torch.zeros(1, 10), 10, "blank", label, "one blank image")
    net = network(
        "cnn",
        data,
        depth=config.depth,
        width=config.cnn_channels,
        w_std=config.w_std,
        b_std=config.b_std,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float32,
        zero_output=True,
    )
    params = sum(p.numel() for p in net.parameters())
    assert f"{params / 1e6:.1f} million CNN parameters from :math:`f_0 = 0`" in doc
    # the C x C convolutions of both halves, forward and backward, on n_train images
    flops = 2 * 6 * 28 * 28 * 9 * config.cnn_channels**2 * (config.depth - 1) * config.n_train
    assert f":math:`{flops / 1e12:.1f} \\times 10^{{12}}` flops per step on {config.n_train}" in doc
    assert f"{config.max_t} steps" in doc
