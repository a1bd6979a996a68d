"""A scikit-learn estimator: the ensemble of infinitely wide networks trained to time t.

``KernelRegressor(arch).fit(X, y).predict(X_test)`` is the mean of :math:`\\mathcal{G}_t`
(:class:`~ntklab.dynamics.EnsembleDynamics`): kernel ridge regression with the NTK at
``time=None`` (infinity), the NNGP posterior mean with ``kernel="nngp"``, early-stopped kernel
gradient descent at finite ``time``. It follows the scikit-learn contract (``__init__`` only
stores, ``fit`` validates and returns ``self``, fitted attributes end in ``_``), so it works with
``sklearn.model_selection`` (``GridSearchCV`` over ``ridge`` or ``time``, ``cross_val_score``).
NumPy inputs give NumPy outputs; torch inputs give torch outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from torch import Tensor

from ..errors import NtklabTypeError, NtklabValueError
from .function_space import EnsembleDynamics, Gaussian, ensemble_dynamics

__all__ = ["KernelRegressor"]


def _to_tensor(x: Any, name: str, dtype: torch.dtype) -> tuple[Tensor, bool]:
    """``(tensor, was_numpy)``."""
    if isinstance(x, Tensor):
        return x.to(dtype), False
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise NtklabTypeError(f"{name}: expected an array-like of numbers, got {type(x)}") from err
    return torch.as_tensor(arr, dtype=dtype), True


class KernelRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Regression with the infinite-width kernels of an architecture, trained to time ``time``.

    Parameters
    ----------
    architecture : Architecture or callable ``(x1, x2) -> Kernel``
    kernel : {"ntk", "nngp"}
        Gradient descent on the NTK (the trained ensemble), or on the NNGP (Bayesian
        inference at ``time=None``).
    time : float or None
        Training time in steps of ``learning_rate`` (None: infinity).
    learning_rate : float
    ridge : float
        Diagonal regularizer.
    ridge_relative : bool
        Whether ``ridge`` is relative to the mean diagonal of the train kernel (the default,
        as neural-tangents' ``diag_reg``) or absolute.
    schedule : {"flow", "gd"}
    normalization : {"mean", "sum"}
    dtype : torch.dtype
        Working precision (float64 by default).
    random_state : int, torch.Generator or None
        Seeds :meth:`sample_y` (draws of finite-time ensemble members' outputs).

    Attributes
    ----------
    X_train_ : Tensor of shape (n, d)
    y_train_ : Tensor of shape (n, k)
    n_features_in_ : int
    dynamics_ : EnsembleDynamics

    Examples
    --------
    >>> import numpy as np, ntklab as nl
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    >>> model = nl.dynamics.KernelRegressor(nl.serial(nl.Dense(), nl.Relu(), nl.Dense()))
    >>> model.fit(X, y).predict(X[:2]).shape
    (2,)
    """

    def __init__(
        self,
        architecture: Any = None,
        *,
        kernel: str = "ntk",
        time: float | None = None,
        learning_rate: float = 1.0,
        ridge: float = 0.0,
        ridge_relative: bool = True,
        schedule: str = "flow",
        normalization: str = "mean",
        dtype: torch.dtype = torch.float64,
        random_state: int | torch.Generator | None = None,
    ) -> None:
        self.architecture = architecture
        self.kernel = kernel
        self.time = time
        self.learning_rate = learning_rate
        self.ridge = ridge
        self.ridge_relative = ridge_relative
        self.schedule = schedule
        self.normalization = normalization
        self.dtype = dtype
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> KernelRegressor:
        """Store the training set and factorize nothing yet (factorizations are lazy)."""
        if self.architecture is None:
            raise NtklabValueError(
                "architecture: expected an ntklab architecture or kernel function, got None"
            )
        if self.kernel not in ("ntk", "nngp"):
            raise NtklabValueError(f"kernel: expected 'ntk' or 'nngp', got {self.kernel!r}")
        x, _ = _to_tensor(X, "X", self.dtype)
        targets, _ = _to_tensor(y, "y", self.dtype)
        self.dynamics_: EnsembleDynamics = ensemble_dynamics(
            self.architecture,
            x,
            targets,
            learning_rate=self.learning_rate,
            diag_reg=self.ridge,
            diag_reg_absolute_scale=not self.ridge_relative,
            schedule=self.schedule,
            normalization=self.normalization,
        )
        self.X_train_ = x
        self.y_train_ = self.dynamics_.y_train
        self.n_features_in_ = int(x.shape[1])
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "dynamics_"):
            raise NtklabValueError("KernelRegressor: expected a fitted model, call fit() first")

    def _gaussian(self, X: Any, compute_cov: bool) -> tuple[Tensor | Gaussian, bool]:
        self._check_fitted()
        x, numpy_in = _to_tensor(X, "X", self.dtype)
        out = self.dynamics_.predict(self.time, x, self.kernel, compute_cov)  # type: ignore[arg-type]
        return out, numpy_in

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False) -> Any:
        """Mean of the ensemble's outputs on ``X`` (and their standard deviation or covariance).

        Parameters
        ----------
        X : array-like of shape (m, d)
        return_std : bool
            Also return the standard deviation of each output, shape (m,).
        return_cov : bool
            Also return the covariance, shape (m, m) (the same for each output column).
        """
        if return_std and return_cov:
            raise NtklabValueError("return_std, return_cov: expected at most one True, got both")
        out, numpy_in = self._gaussian(X, return_std or return_cov)

        def convert(t: Tensor) -> Any:
            return t.detach().cpu().numpy() if numpy_in else t

        if isinstance(out, Gaussian):
            cov = out.covariance
            second = cov.diagonal().clamp(min=0).sqrt() if return_std else cov
            return convert(out.mean), convert(second)
        return convert(out)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Coefficient of determination :math:`R^2` of the mean prediction (averaged over
        outputs, as scikit-learn)."""
        if sample_weight is not None:
            raise NtklabValueError("sample_weight: expected None (not supported), got weights")
        pred, _ = self._gaussian(X, False)
        assert isinstance(pred, Tensor)
        target, _ = _to_tensor(y, "y", self.dtype)
        target = target.reshape(pred.shape)
        p2 = pred.reshape(pred.shape[0], -1)
        t2 = target.reshape(target.shape[0], -1)
        ss_res = (t2 - p2).square().sum(dim=0)
        ss_tot = (t2 - t2.mean(dim=0)).square().sum(dim=0)
        r2 = 1.0 - ss_res / ss_tot.clamp(min=torch.finfo(t2.dtype).tiny)
        return float(r2.mean())

    def sample_y(self, X: Any, n_samples: int = 1, random_state: Any = None) -> Any:
        """Draws of the outputs of ensemble members (finite ``time``) on ``X``.

        Returns
        -------
        array of shape (n_samples, m, k) (k dropped for 1-D targets)
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
            raise NtklabValueError(f"n_samples: expected an int >= 1, got {n_samples!r}")
        out, numpy_in = self._gaussian(X, True)
        assert isinstance(out, Gaussian)
        state = self.random_state if random_state is None else random_state
        gen = (
            state
            if isinstance(state, torch.Generator)
            else torch.Generator().manual_seed(
                int(state) if state is not None else int(torch.seed() % (2**63))
            )
        )
        cov = out.covariance
        eig_vals, eig_vecs = torch.linalg.eigh(cov)
        root = eig_vecs * eig_vals.clamp(min=0).sqrt()  # shape: (m, m)
        mean = out.mean if out.mean.ndim == 2 else out.mean[:, None]
        z = torch.randn(n_samples, cov.shape[0], mean.shape[1], generator=gen, dtype=cov.dtype).to(
            cov.device
        )
        draws = mean[None] + root @ z
        if out.mean.ndim == 1:
            draws = draws[..., 0]
        return draws.cpu().numpy() if numpy_in else draws
