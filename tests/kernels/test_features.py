"""Random features of the NNGP and NTK (ntklab.kernels.features) against the exact kernels."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch

import ntklab as nl
from ntklab.dynamics import KernelRegressor
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    Erf,
    FanInSum,
    FanOut,
    Flatten,
    GlobalAvgPool,
    LayerNorm,
    engine,
    features,
)
from ntklab.solvers import FeatureOperator, low_rank, solve

F64 = torch.float64


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _fc(depth: int) -> nl.kernels.Architecture:
    block = [nl.Dense(w_std=1.5, b_std=0.2), nl.Relu()]
    return nl.serial(*(block * depth), nl.Dense(w_std=1.2, b_std=0.3))


def _cnn_gap(depth: int) -> nl.kernels.Architecture:
    block = [Conv(filter_shape=3, w_std=1.4, b_std=0.2), nl.Relu()]
    return nl.serial(*(block * depth), GlobalAvgPool(), nl.Dense(w_std=1.2, b_std=0.3))


def _exact(arch: nl.kernels.Architecture, x: torch.Tensor, get: str) -> torch.Tensor:
    k = arch.kernel(x)
    return k.ntk if get == "ntk" else k.nngp


def _rel_error(phi: torch.Tensor, k: torch.Tensor) -> float:
    """:math:`\\|\\Phi\\Phi^T - K\\|_F / \\|K\\|_F`."""
    return float(torch.linalg.norm(phi @ phi.T - k) / torch.linalg.norm(k))


CASES = {
    "fc2": (lambda: _fc(2), lambda: _randn(12, 5)),
    "fc3": (lambda: _fc(3), lambda: _randn(12, 5)),
    "cnn_gap_1d": (lambda: _cnn_gap(2), lambda: _randn(8, 2, 6)),
    "cnn_gap_2d": (
        lambda: nl.serial(
            Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.2),
            nl.Relu(),
            GlobalAvgPool(),
            nl.Dense(w_std=1.2, b_std=0.3),
        ),
        lambda: _randn(6, 2, 4, 4),
    ),
}


@pytest.mark.parametrize("get", ["ntk", "nngp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_error_falls_as_inverse_square_root_of_features(case: str, get: str) -> None:
    """Monte Carlo rate: the root mean square (over 16 seeds) of the relative Frobenius
    error against F has log-log slope -1/2."""
    make_arch, make_x = CASES[case]
    arch, x = make_arch(), make_x()
    k = _exact(arch, x, get)
    counts = [32, 64, 128, 256, 512]
    rms = []
    for f in counts:
        errors = [_rel_error(arch.features(x, f, seed=s, get=get), k) for s in range(16)]
        rms.append(math.sqrt(np.mean(np.square(errors))))
    slope = np.polyfit(np.log(counts), np.log(rms), 1)[0]
    assert -0.6 <= slope <= -0.4, (slope, rms)
    assert rms[-1] < 0.25, rms


def _mean_and_se(arch, x, f: int, get: str, seeds: int) -> tuple[torch.Tensor, torch.Tensor]:
    draws = torch.stack(
        [(lambda p: p @ p.T)(arch.features(x, f, seed=s, get=get)) for s in range(seeds)]
    )
    return draws.mean(0), draws.std(0) / math.sqrt(seeds)


UNBIASED = {
    "fc1": (
        lambda: nl.serial(nl.Dense(w_std=1.5, b_std=0.2), nl.Relu(), nl.Dense(w_std=1.1)),
        lambda: _randn(5, 3),
    ),
    "fc1_erf": (
        lambda: nl.serial(nl.Dense(w_std=1.5, b_std=0.2), Erf(), nl.Dense(w_std=1.1, b_std=0.1)),
        lambda: _randn(5, 3),
    ),
    "cnn1_gap": (lambda: _cnn_gap(1), lambda: _randn(4, 2, 5)),
    "cnn1_pool_flatten": (
        lambda: nl.serial(
            Conv(filter_shape=3, w_std=1.4, b_std=0.2),
            nl.Relu(),
            AvgPool(2),
            Flatten(),
            nl.Dense(w_std=1.2, b_std=0.3),
        ),
        lambda: _randn(4, 2, 6),
    ),
}


@pytest.mark.parametrize("get", ["ntk", "nngp"])
@pytest.mark.parametrize("case", sorted(UNBIASED))
def test_unbiased_with_one_activation(case: str, get: str) -> None:
    """With one activation the inner products are unbiased: the mean over 200 seeds is within
    4.5 standard errors of the exact kernel in every entry, while 1.1 K is not."""
    make_arch, make_x = UNBIASED[case]
    arch, x = make_arch(), make_x()
    mean, se = _mean_and_se(arch, x, 64, get, 200)
    k = _exact(arch, x, get)
    z = ((mean - k).abs() / se).max()
    assert z < 4.5, float(z)
    assert ((mean - 1.1 * k).abs() / se).max() > 4.5


@pytest.mark.parametrize("get", ["ntk", "nngp"])
def test_deep_bias_is_small_against_the_spread(get: str) -> None:
    """Deeper, the bias is O(1/m): the seed average is far closer to K than one draw."""
    arch, x = _fc(3), _randn(6, 4)
    k = _exact(arch, x, get)
    mean, _ = _mean_and_se(arch, x, 64, get, 100)
    one = np.mean([_rel_error(arch.features(x, 64, seed=s, get=get), k) for s in range(10)])
    bias = float(torch.linalg.norm(mean - k) / torch.linalg.norm(k))
    assert bias < 0.25 * one, (bias, one)


@pytest.mark.parametrize("case", ["fc2", "cnn_gap_1d"])
def test_deterministic_by_seed_and_independent_of_blocks(case: str) -> None:
    make_arch, make_x = CASES[case]
    arch, x = make_arch(), make_x()
    whole = arch.features(x, 96, seed=7)
    again = arch.features(x, 96, seed=7)
    torch.testing.assert_close(whole, again, rtol=0, atol=0)
    parts = torch.cat([arch.features(x[:5], 96, seed=7), arch.features(x[5:], 96, seed=7)])
    torch.testing.assert_close(parts, whole, rtol=1e-12, atol=1e-12)
    blocks = arch.features(x, 96, seed=7, block_size=3)
    torch.testing.assert_close(blocks, whole, rtol=1e-12, atol=1e-12)
    assert whole.shape == (x.shape[0], 96)
    assert not torch.allclose(arch.features(x, 96, seed=8), whole)
    # a cross kernel from separately featurized inputs approximates the exact cross kernel
    k12 = arch.kernel(x[:5], x[5:]).ntk
    phi = arch.features(x, 1024, seed=1)
    cross = phi[:5] @ phi[5:].T
    assert float(torch.linalg.norm(cross - k12) / torch.linalg.norm(k12)) < 0.15


def test_features_follow_dtype_and_max_memory() -> None:
    arch, x = _fc(2), _randn(10, 4)
    phi32 = arch.features(x.float(), 64, seed=0)
    assert phi32.dtype == torch.float32
    torch.testing.assert_close(phi32.double(), arch.features(x, 64, seed=0), rtol=1e-4, atol=1e-5)
    small = arch.features(x, 64, seed=0, max_memory=3 * 8032)  # three rows per block
    torch.testing.assert_close(small, arch.features(x, 64, seed=0), rtol=1e-12, atol=1e-12)
    with pytest.raises(NtklabValueError, match="max_memory"):
        arch.features(x, 64, max_memory=64)


@pytest.mark.parametrize(
    ("layer", "name"),
    [
        (LayerNorm(), "LayerNorm"),
        (FanOut(2), "FanOut"),
        (nl.Dense(w_std=1.0, parameterization="standard", width=8), "parameterization"),
    ],
)
def test_unsupported_layer_is_named(layer: object, name: str) -> None:
    layers = [nl.Dense(w_std=1.5), nl.Relu(), layer]
    if name == "FanOut":
        layers += [FanInSum()]
    arch = nl.serial(*layers, nl.Dense())
    with pytest.raises(NtklabValueError, match=rf"layers\[2\].*{name}") as info:
        arch.features(_randn(4, 3), 32)
    assert "Dense and Conv" in str(info.value)


def test_bad_arguments() -> None:
    arch, x = _fc(1), _randn(4, 3)
    with pytest.raises(NtklabValueError, match="num_features"):
        arch.features(x, 0)
    with pytest.raises(NtklabTypeError, match="seed"):
        arch.features(x, 8, seed="a")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="seed"):
        arch.features(x, 8, seed=2**70)
    with pytest.raises(NtklabValueError, match="get"):
        arch.features(x, 8, get="both")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="num_features: expected at least"):
        arch.features(x, 2)
    with pytest.raises(NtklabValueError, match="x: expected finite"):
        arch.features(torch.full((3, 3), float("nan"), dtype=F64), 8)


def test_exact_when_there_is_no_activation() -> None:
    arch, x = (
        nl.serial(nl.Dense(w_std=1.3, b_std=0.4), nl.Dense(w_std=0.8, b_std=0.1)),
        _randn(5, 3),
    )
    for get in ("ntk", "nngp"):
        phi = arch.features(x, 16, get=get)
        torch.testing.assert_close(phi @ phi.T, _exact(arch, x, get), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("layers", "shape"),
    [
        ((Conv(filter_shape=3, w_std=1.3, b_std=0.2), Conv(filter_shape=2, strides=2)), (4, 2, 7)),
        (
            (Conv(filter_shape=3, padding="CIRCULAR", w_std=0.9), AvgPool(2, padding="SAME")),
            (4, 2, 5),
        ),
        ((Conv(filter_shape=(2, 3), strides=(1, 2), padding="VALID", b_std=0.5),), (3, 2, 4, 5)),
    ],
)
def test_linear_cnn_features_are_exact(layers: tuple[object, ...], shape: tuple[int, ...]) -> None:
    """Without activations (and Flatten, which sketches) the features are exact: stacked
    patches, pads, strides and pooling."""
    x = _randn(*shape)
    arch = nl.serial(*layers, GlobalAvgPool(), nl.Dense(w_std=1.1, b_std=0.3))
    for get in ("ntk", "nngp"):
        phi = arch.features(x, 256, get=get)
        torch.testing.assert_close(phi @ phi.T, _exact(arch, x, get), rtol=1e-10, atol=1e-12)


def test_walsh_hadamard_and_srht_rows() -> None:
    from scipy.linalg import hadamard

    h = torch.tensor(hadamard(16), dtype=F64)
    x = _randn(3, 16)
    torch.testing.assert_close(features.walsh_hadamard(x), x @ h)
    signs = torch.tensor([1.0, -1.0] * 8, dtype=F64)
    rows = torch.tensor([3, 0, 3, 9])
    a = _randn(2, 11, seed=1)
    dense = h[rows] * signs  # the sampled rows of H D
    torch.testing.assert_close(features.SRHT(signs, rows)(a), a @ dense[:, :11].T)


def test_feature_operator_matches_dense_solve() -> None:
    phi = _randn(30, 8)
    op = FeatureOperator(phi)
    y = _randn(30, seed=1)
    k = phi @ phi.T
    torch.testing.assert_close(op.matmul(y), k @ y)
    torch.testing.assert_close(op.diagonal(), k.diagonal())
    got = solve(op, y, ridge=0.5, method="cg", tol=1e-11, max_iter=200).solution
    torch.testing.assert_close(got, torch.linalg.solve(k + 0.5 * torch.eye(30, dtype=F64), y))
    # feature-space weights: Phi_* beta = K_*X (K + rho)^-1 y  (push-through identity)
    beta = op.weights(lambda s: 1.0 / (s + 0.5), y[:, None])
    torch.testing.assert_close(phi @ beta, k @ got[:, None], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kernel", ["ntk", "nngp"])
def test_regression_with_features_approaches_exact(kernel: str) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(80, 4, generator=g, dtype=F64)
    xt = torch.randn(60, 4, generator=g, dtype=F64)
    w = torch.randn(4, generator=g, dtype=F64) / 2

    def target(z: torch.Tensor) -> torch.Tensor:
        return z @ w + 0.3 * torch.tanh(z[:, 0] * z[:, 1])

    arch = _fc(1)
    exact = KernelRegressor(arch, kernel=kernel, ridge=0.1).fit(x, target(x)).predict(xt)
    exact_mse = float((exact - target(xt)).square().mean())

    def gap(f: int) -> tuple[float, float]:
        dist, mse = [], []
        for s in range(3):
            model = KernelRegressor(arch, kernel=kernel, ridge=0.1, num_features=f, random_state=s)
            pred = model.fit(x, target(x)).predict(xt)
            dist.append(float((pred - exact).square().mean()))
            mse.append(float((pred - target(xt)).square().mean()))
        return float(np.mean(dist)), float(np.mean(mse))

    d_small, mse_small = gap(32)
    d_large, mse_large = gap(512)
    assert d_large < d_small / 8, (d_small, d_large)  # the gap shrinks about as 1/F
    assert mse_large - exact_mse < 0.2 * (mse_small - exact_mse), (mse_large, exact_mse)


def test_regressor_with_features_finite_time_and_refusals() -> None:
    x, y, xt = _randn(40, 3), _randn(40, seed=1), _randn(7, 3, seed=2)
    arch = _fc(1)
    exact = KernelRegressor(arch, t=5.0).fit(x, y).predict(xt)
    approx = KernelRegressor(arch, t=5.0, num_features=1024, random_state=0).fit(x, y)
    pred = approx.predict(xt)
    far = KernelRegressor(arch, t=5.0, num_features=32, random_state=0).fit(x, y).predict(xt)
    assert float((pred - exact).norm()) < 0.3 * float((far - exact).norm())
    assert float((pred - exact).norm() / exact.norm()) < 0.15
    with pytest.raises(NtklabValueError, match="compute_cov"):
        approx.predict(xt, return_std=True)
    with pytest.raises(NtklabValueError, match="num_features"):
        KernelRegressor(arch, num_features=0).fit(x, y)
    # min-norm interpolation without ridge when F >= n: the training targets are reproduced
    interp = KernelRegressor(arch, num_features=256, random_state=1).fit(x, y)
    torch.testing.assert_close(interp.predict(x), y, rtol=1e-6, atol=1e-6)


def test_docstring_examples() -> None:
    for module in (features, low_rank, engine):
        result = doctest.testmod(module)
        assert result.attempted >= 1
        assert result.failed == 0
