"""Kernel ridge regression, exact leave-one-out ridge selection, and the scikit-learn estimator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ntklab as nl
from ntklab.dynamics import KernelRegressor, kernel_ridge_regression, select_ridge_loo
from ntklab.errors import NtklabValueError

F64 = torch.float64


def test_loo_residuals_equal_refitting_without_each_point(arch, data) -> None:
    x, y, _ = data
    k = arch.kernel(x).ntk
    ridges = [1e-3, 1e-1, 1.0, 10.0]
    sel = select_ridge_loo(k, y, ridges)
    for r, mse in zip(ridges, sel.loo_mse.tolist(), strict=True):
        errors = []
        for i in range(12):
            keep = [j for j in range(12) if j != i]
            pred = kernel_ridge_regression(k[keep][:, keep], y[keep], k[i : i + 1, keep], ridge=r)
            errors.append((pred - y[i]).square().mean())
        assert mse == pytest.approx(float(torch.stack(errors).mean()), rel=1e-9)
    assert sel.ridge == ridges[int(np.argmin(sel.loo_mse.numpy()))]


def test_loo_needs_positive_ridges(arch, data) -> None:
    x, y, _ = data
    with pytest.raises(NtklabValueError, match="ridges: expected a finite value > 0"):
        select_ridge_loo(arch.kernel(x).ntk, y, [0.0, 1.0])
    with pytest.raises(NtklabValueError, match="ridge: expected a finite value >= 0"):
        kernel_ridge_regression(arch.kernel(x).ntk, y, ridge=-1.0)


def test_estimator_matches_the_dynamics_and_sklearn_tools(arch) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=40)
    model = KernelRegressor(arch, ridge=1e-2, t=50.0, random_state=3).fit(x[:30], y[:30])
    pred, std = model.predict(x[30:], return_std=True)
    assert isinstance(pred, np.ndarray) and pred.shape == (10,) and std.shape == (10,)
    dyn = nl.dynamics.ensemble_dynamics(
        arch, torch.from_numpy(x[:30]), torch.from_numpy(y[:30]), ridge=1e-2
    )
    g = dyn.predict(50.0, torch.from_numpy(x[30:]), "ntk", compute_cov=True)
    np.testing.assert_allclose(pred, g.mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(std, g.covariance.diagonal().sqrt().numpy(), rtol=1e-10)
    # R^2 as scikit-learn defines it.
    from sklearn.metrics import r2_score

    assert model.score(x[30:], y[30:]) == pytest.approx(r2_score(y[30:], pred), rel=1e-12)
    # Works inside scikit-learn's model selection (get_params / clone).
    from sklearn.model_selection import GridSearchCV

    search = GridSearchCV(KernelRegressor(arch), {"ridge": [1e-3, 1e-1]}, cv=3).fit(x, y)
    assert search.best_params_["ridge"] in (1e-3, 1e-1)
    # Draws have the ensemble's mean and covariance.
    draws = model.sample_y(x[30:33], n_samples=20000)
    g3 = dyn.predict(50.0, torch.from_numpy(x[30:33]), "ntk", compute_cov=True)
    np.testing.assert_allclose(draws.mean(0), g3.mean.numpy(), atol=0.05)
    np.testing.assert_allclose(np.cov(draws.T), g3.covariance.numpy(), atol=0.05)
    np.testing.assert_allclose(draws, model.sample_y(x[30:33], n_samples=20000))  # seeded


def test_estimator_torch_in_torch_out_and_errors(arch, data) -> None:
    x, y, xt = data
    model = KernelRegressor(arch, kernel="nngp").fit(x, y)
    out = model.predict(xt)
    assert isinstance(out, torch.Tensor) and out.shape == (5, 2)
    with pytest.raises(NtklabValueError, match="call fit"):
        KernelRegressor(arch).predict(xt)
    with pytest.raises(NtklabValueError, match="kernel: expected 'ntk' or 'nngp'"):
        KernelRegressor(arch, kernel="rbf").fit(x, y)
