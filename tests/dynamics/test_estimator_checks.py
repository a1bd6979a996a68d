"""``KernelRegressor`` against scikit-learn's estimator contract (``parametrize_with_checks``:
about fifty checks of validation, cloning, idempotence, dtypes, multi-output, pickling), and
the same validation on torch inputs, which scikit-learn's checks do not send."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

import ntklab as nl
from ntklab.dynamics import KernelRegressor
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def _small() -> KernelRegressor:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    return KernelRegressor(arch, ridge=1e-3)


@parametrize_with_checks([_small(), KernelRegressor(_small().architecture, t=10.0)])
def test_sklearn_contract(estimator: KernelRegressor, check: Callable[[Any], None]) -> None:
    check(estimator)


def test_torch_inputs_get_the_same_validation() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(10, 3, generator=g, dtype=F64), torch.randn(10, generator=g, dtype=F64)
    model = _small()
    with pytest.raises(SklearnNotFittedError, match="call fit"):
        model.predict(x)
    with pytest.raises(NtklabValueError, match="call fit"):
        model.predict(x)
    with pytest.raises(NtklabValueError, match="X: Complex data not supported"):
        model.fit(x.to(torch.complex128), y)
    bad = x.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(NtklabValueError, match="X: Input X contains NaN or infinity"):
        model.fit(bad, y)
    with pytest.raises(NtklabValueError, match="y: Input y contains NaN or infinity"):
        model.fit(x, y.clone().fill_(float("inf")))
    with pytest.raises(NtklabValueError, match="Reshape your data"):
        model.fit(x[:, 0], y)
    with pytest.raises(NtklabValueError, match="at least 1 sample"):
        model.fit(x[:0], y[:0])
    with pytest.raises(NtklabValueError, match="inconsistent numbers of samples"):
        model.fit(x, y[:7])
    with pytest.raises(NtklabValueError, match="requires y to be passed"):
        model.fit(x, None)
    model.fit(x, y)
    with pytest.raises(
        NtklabValueError, match="X has 2 features, but KernelRegressor is expecting"
    ):
        model.predict(x[:, :2])
    with pytest.raises(NtklabValueError, match="X: X has 2 features"):
        model.predict(x[:, :2].numpy())  # the NumPy path says the same


def test_torch_in_torch_out_numpy_in_numpy_out_and_dtypes() -> None:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 3, generator=g, dtype=F64), torch.randn(12, 2, generator=g, dtype=F64)
    model = _small().fit(x, y)
    out = model.predict(x[:4])
    assert isinstance(out, torch.Tensor) and out.shape == (4, 2) and out.dtype == F64
    as_numpy = model.predict(x[:4].numpy())
    assert isinstance(as_numpy, np.ndarray)
    np.testing.assert_allclose(as_numpy, out.numpy(), rtol=1e-12)
    # a float32 torch input is computed in the working dtype (float64 by default)
    torch.testing.assert_close(model.predict(x[:4].float()), out, rtol=1e-6, atol=1e-7)
    # the working dtype by name, numpy or torch dtype
    for dtype in ("float32", np.float32, torch.float32):
        low = KernelRegressor(model.architecture, ridge=1e-3, dtype=dtype).fit(x, y)
        pred = low.predict(x[:4])
        assert pred.dtype == torch.float32
        torch.testing.assert_close(pred.double(), out, rtol=1e-3, atol=1e-3)
    with pytest.raises(NtklabTypeError, match="dtype: expected None, 'float32', 'float64'"):
        KernelRegressor(model.architecture, dtype=torch.int64).fit(x, y)
    with pytest.raises(NtklabTypeError, match="dtype: expected None"):
        KernelRegressor(model.architecture, dtype="float16").fit(x, y)


def test_refit_replaces_everything_and_one_sample_works() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(20, 4)), rng.normal(size=20)
    model = _small()
    first = model.fit(x, y).predict(x[:5])
    model.fit(x[:, :3], y)  # a refit with other features
    assert model.n_features_in_ == 3
    again = model.fit(x, y).predict(x[:5])
    np.testing.assert_array_equal(first, again)
    one = _small().fit(x[:1], y[:1]).predict(x[:3])
    assert one.shape == (3,) and np.isfinite(one).all()


@pytest.mark.parametrize(
    ("ridge", "error"),
    [(-1.0, NtklabValueError), (float("nan"), NtklabValueError), ("a", NtklabTypeError)],
)
def test_ridge_is_checked_at_fit(ridge: Any, error: type[Exception]) -> None:
    """Before, a bad ridge passed fit and was refused only at predict (scikit-learn's rule:
    __init__ stores, fit validates)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 3, generator=g, dtype=F64), torch.randn(6, generator=g, dtype=F64)
    model = KernelRegressor(_small().architecture, ridge=ridge)  # __init__ only stores
    assert model.ridge is ridge
    with pytest.raises(error, match="ridge: expected a"):
        model.fit(x, y)
    assert not hasattr(model, "dynamics_")
