"""ensemble_dynamics and KernelRegressor on images and 1-D signals: the same closed forms as
on flat inputs, computed here from the dense ``arch.kernel``; and the input errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

import ntklab as nl
from ntklab.dynamics import KernelRegressor, ensemble_dynamics
from ntklab.errors import NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool

F64 = torch.float64
CNN2 = nl.serial(
    Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense(w_std=1.2)
)
CNN1 = nl.serial(
    Conv(filter_shape=(3,), w_std=1.4, b_std=0.1), nl.Erf(), Flatten(), nl.Dense(w_std=1.2)
)
MLP = nl.serial(nl.Dense(w_std=1.4, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.2))


def _data(shape: tuple[int, ...], n: int, m: int, k: int = 2) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, *shape, dtype=F64, generator=gen)
    xt = torch.randn(m, *shape, dtype=F64, generator=gen)
    y = torch.randn(n, k, dtype=F64, generator=gen)
    return x, xt, y


CASES = [
    pytest.param(CNN2, (2, 5, 5), id="images"),
    pytest.param(CNN1, (3, 7), id="signals"),
]


def _reference(arch: object, x: Tensor, xt: Tensor, y: Tensor, t: float, lr: float) -> tuple:
    """Mean and covariance of the trained ensemble at flow time ``lr * t`` from the dense
    kernels, by eigendecomposition (no ridge, mean-normalized loss)."""
    k_xx, k_tx, k_tt = arch.kernel(x), arch.kernel(xt, x), arch.kernel(xt)  # type: ignore[attr-defined]
    theta, nngp = k_xx.ntk, k_xx.nngp
    lam, v = torch.linalg.eigh(theta)
    n_out = y.numel()
    phi = v @ torch.diag((1 - torch.exp(-lr * t * lam / n_out)) / lam) @ v.T  # Theta^-1 (I - D_t)
    a = k_tx.ntk @ phi  # shape: (m, n)
    mean = a @ y
    cross = a @ k_tx.nngp.T
    cov = k_tt.nngp - cross - cross.T + a @ nngp @ a.T
    return mean, cov


@pytest.mark.parametrize(("arch", "shape"), CASES)
def test_ensemble_dynamics_on_images_is_the_dense_closed_form(arch: object, shape: tuple) -> None:
    x, xt, y = _data(shape, 6, 4)
    dyn = ensemble_dynamics(arch, x, y, learning_rate=0.5)
    out = dyn.predict(3.0, xt, "ntk", compute_cov=True)
    mean, cov = _reference(arch, x, xt, y, 3.0, 0.5)
    assert_close(out.mean, mean, rtol=1e-7, atol=1e-9)
    assert_close(out.covariance, cov, rtol=1e-6, atol=1e-9)
    # the closed form is not trivially zero or the targets
    assert float(mean.abs().max()) > 1e-3 and not torch.allclose(mean, y[: len(mean)])


@pytest.mark.parametrize(("arch", "shape"), CASES)
def test_kernel_regressor_on_images_is_the_dense_ridge_solve(arch: object, shape: tuple) -> None:
    x, xt, y = _data(shape, 7, 5, k=1)
    ridge = 0.1
    k = arch.kernel(x).ntk  # type: ignore[attr-defined]
    reg = k + ridge * k.diagonal().mean() * torch.eye(len(x), dtype=F64)
    expected = arch.kernel(xt, x).ntk @ torch.linalg.solve(reg, y)  # type: ignore[attr-defined]
    model = KernelRegressor(arch, ridge=ridge).fit(x, y[:, 0])
    assert_close(model.predict(xt), expected[:, 0], rtol=1e-8, atol=1e-10)
    assert model.input_shape_ == shape and model.n_features_in_ == int(np.prod(shape))
    # NumPy images: same answer, NumPy out
    model_np = KernelRegressor(arch, ridge=ridge).fit(x.numpy(), y[:, 0].numpy())
    pred = model_np.predict(xt.numpy())
    assert isinstance(pred, np.ndarray)
    np.testing.assert_allclose(pred, expected[:, 0].numpy(), rtol=1e-8, atol=1e-10)


def test_kernel_regressor_image_score_and_std() -> None:
    x, xt, y = _data((2, 5, 5), 7, 5, k=1)
    model = KernelRegressor(CNN2, t=2.0).fit(x, y)
    mean, std = model.predict(xt, return_std=True)
    gauss = ensemble_dynamics(CNN2, x, y).predict(2.0, xt, "ntk", compute_cov=True)
    assert_close(mean, gauss.mean)
    assert_close(std, gauss.covariance.diagonal().sqrt())
    assert model.score(x, y) == pytest.approx(
        1.0 - float(((y - model.predict(x)) ** 2).sum()) / float(((y - y.mean()) ** 2).sum())
    )


# -------------------------------------------------------------------------------- errors
def test_images_for_an_architecture_without_spatial_layers_are_refused() -> None:
    x, _, y = _data((2, 5, 5), 4, 2)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x_train: expected a 2-D tensor of shape \(n, d\), got 4-D shape \(4, 2, 5, 5\); "
            r"the architecture has no spatial layer.*x_train.flatten\(1\)"
        ),
    ):
        ensemble_dynamics(MLP, x, y)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"X: expected a 2-D tensor .*got 4-D shape \(4, 2, 5, 5\); the architecture has no"
            r" spatial layer"
        ),
    ):
        KernelRegressor(MLP).fit(x, y)
    with pytest.raises(NtklabValueError, match=r"X: expected a 2-D tensor .*got 4-D shape"):
        KernelRegressor(MLP).fit(x.numpy(), y.numpy())
    # and flat rows for a CNN
    with pytest.raises(
        NtklabValueError,
        match=r"x_train: expected a 4-D tensor of shape \(n, C, H, W\), got 2-D shape \(4, 50\)",
    ):
        ensemble_dynamics(CNN2, x.flatten(1), y)


def test_channels_last_images_are_refused() -> None:
    x = torch.randn(3, 8, 8, 3, dtype=F64)
    y = torch.randn(3, dtype=F64)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x_train: expected a channels-first batch \(n, C, H, W\), got shape \(3, 8, 8, 3"
            r"\).*x_train.permute\(0, 3, 1, 2\)"
        ),
    ):
        ensemble_dynamics(CNN2, x, y)
    with pytest.raises(NtklabValueError, match=r"X: expected a channels-first batch"):
        KernelRegressor(CNN2).fit(x, y)
    with pytest.raises(NtklabValueError, match=r"X: expected a channels-first batch"):
        KernelRegressor(CNN2).fit(x.numpy(), y.numpy())


def test_test_images_of_another_spatial_shape_are_refused() -> None:
    x, _, y = _data((2, 5, 5), 4, 2)
    other = torch.randn(2, 2, 6, 6, dtype=F64)
    dyn = ensemble_dynamics(CNN2, x, y)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x_test: expected the channels and spatial shape of x_train, \(2, 5, 5\), got sha"
            r"pe \(2, 2, 6, 6\)"
        ),
    ):
        dyn.predict(1.0, other)
    model = KernelRegressor(CNN2).fit(x, y)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"X: expected inputs of shape \(m, 2, 5, 5\) like the training X.*got shape \(2, 2"
            r", 6, 6\)"
        ),
    ):
        model.predict(other)
    with pytest.raises(NtklabValueError, match=r"X: expected inputs of shape \(m, 2, 5, 5\)"):
        model.predict(other.numpy())
    # flat rows with as many entries as an image: refused too, also for a kernel function
    flat = KernelRegressor(CNN2.kernel).fit(x, y)
    with pytest.raises(NtklabValueError, match=r"X: expected inputs of shape \(m, 2, 5, 5\)"):
        flat.predict(x.flatten(1).numpy())


def test_cross_validation_on_numpy_images_scores_the_dense_solve() -> None:
    """scikit-learn's model selection slices image arrays along the first axis: the score of
    the first fold is the R^2 of the dense ridge solve on the other two."""
    from sklearn.model_selection import KFold, cross_val_score

    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 2, 5, 5))
    y = x.mean(axis=(1, 2, 3)) + 0.1 * rng.normal(size=12)
    scores = cross_val_score(KernelRegressor(CNN2, ridge=0.1), x, y, cv=KFold(3))
    test, train = slice(0, 4), slice(4, 12)
    xt, xf = torch.from_numpy(x[test]), torch.from_numpy(x[train])
    k = CNN2.kernel(xf).ntk
    reg = k + 0.1 * k.diagonal().mean() * torch.eye(8, dtype=F64)
    pred = CNN2.kernel(xt, xf).ntk @ torch.linalg.solve(reg, torch.from_numpy(y[train]))
    yt = torch.from_numpy(y[test])
    r2 = 1 - float(((yt - pred) ** 2).sum() / ((yt - yt.mean()) ** 2).sum())
    assert scores[0] == pytest.approx(r2, rel=1e-9)
