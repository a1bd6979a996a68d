"""A scikit-learn estimator: the ensemble of infinitely wide networks trained to time t.

``KernelRegressor(arch).fit(X, y).predict(X_test)`` is the mean of :math:`\\mathcal{G}_t`
(:class:`~ntklab.dynamics.EnsembleDynamics`): kernel ridge regression with the NTK at
``t=None`` (infinity), the NNGP posterior mean with ``kernel="nngp"``, early-stopped kernel
gradient descent at finite ``t``. It follows the scikit-learn contract (``__init__`` only
stores, ``fit`` validates and returns ``self``, fitted attributes end in ``_``), so it works with
``sklearn.model_selection`` (``GridSearchCV`` over ``ridge`` or ``t``, ``cross_val_score``).
NumPy inputs give NumPy outputs; torch inputs give torch outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
from sklearn.utils.validation import check_array
from torch import Tensor

from .._checks import check_nonnegative, check_positive_int
from .._inputs import check_kernel_inputs
from ..errors import NtklabTypeError, NtklabValueError
from .feature_space import FeatureDynamics, feature_dynamics
from .function_space import EnsembleDynamics, Gaussian, _make_schedule, ensemble_dynamics

try:
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # scikit-learn < 1.6: the same validation as a method

    def _validate_data(estimator: Any, X: Any, **kwargs: Any) -> Any:
        return estimator._validate_data(X, **kwargs)


__all__ = ["KernelRegressor", "NotFittedError"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class NotFittedError(NtklabValueError, _SklearnNotFittedError):  # type: ignore[misc]
    """A method that needs a fitted estimator was called before ``fit`` (both ntklab's
    :class:`~ntklab.errors.NtklabValueError` and scikit-learn's ``NotFittedError``)."""


def _working_dtype(dtype: object) -> torch.dtype:
    """The estimator's ``dtype`` parameter as a floating torch dtype (None: float64)."""
    if dtype is None:
        return torch.float64
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if not isinstance(dtype, torch.dtype):
        try:
            name = np.dtype(dtype).name  # type: ignore[call-overload]
        except TypeError:
            name = ""
        if name in _DTYPES:
            return _DTYPES[name]
    raise NtklabTypeError(
        f"dtype: expected None, 'float32', 'float64' (or the numpy or torch dtype), got {dtype!r}"
    )


def _wrap(name: str, err: Exception) -> Exception:
    """scikit-learn's validation error as ntklab's, naming the argument (message kept)."""
    if isinstance(err, TypeError):
        return NtklabTypeError(f"{name}: {err}")
    return NtklabValueError(f"{name}: {err}")


def _check_tensor(name: str, t: Tensor, *, ndims: tuple[int, ...]) -> None:
    """What scikit-learn's ``check_array`` checks, for a torch tensor (kept on its device):
    inputs ``X`` of ``ndims=(2, 3, 4)`` axes (rows, or images ``(n, C, L)`` and
    ``(n, C, H, W)``), targets ``y`` of ``ndims=(1, 2)``."""
    if t.is_complex():
        raise NtklabValueError(f"{name}: Complex data not supported, got dtype {t.dtype}")
    if t.ndim < 2 and ndims[0] == 2:
        raise NtklabValueError(
            f"{name}: expected a 2-D tensor of shape (n, d) (or images (n, C, L), "
            f"(n, C, H, W) for an architecture with Conv layers), got shape "
            f"{tuple(t.shape)}. Reshape your data either using X.reshape(-1, 1) if your data "
            "has a single feature or X.reshape(1, -1) if it contains a single sample."
        )
    if t.ndim not in ndims:
        want = "(n,) or (n, k)" if ndims == (1, 2) else "(n, d), (n, C, L) or (n, C, H, W)"
        raise NtklabValueError(
            f"{name}: expected a tensor of shape {want}, got shape {tuple(t.shape)}"
        )
    if t.shape[0] < 1 or (t.ndim >= 2 and min(t.shape[1:]) < 1):
        raise NtklabValueError(
            f"{name}: expected at least 1 sample and 1 feature, got shape {tuple(t.shape)}"
        )
    if not bool(torch.isfinite(t.detach()).all()):
        raise NtklabValueError(f"{name}: Input {name} contains NaN or infinity.")


def _feature_seed(state: object) -> int:
    """The seed of the random features: ``random_state`` itself, a draw from a generator,
    or 0 for None."""
    if isinstance(state, torch.Generator):
        return int(torch.randint(0, 2**62, (1,), generator=state))
    return 0 if state is None else int(state)  # type: ignore[call-overload]


def _nd_tensor(X: Any, dtype: torch.dtype) -> tuple[Tensor, bool]:
    """A torch tensor, or a NumPy array of images ``(n, C, *S)`` (which scikit-learn's
    ``check_array`` refuses), as a tensor in ``dtype`` with scikit-learn's checks (real,
    finite, at least one sample); the flag says whether it was NumPy."""
    if isinstance(X, Tensor):
        _check_tensor("X", X, ndims=(2, 3, 4))
        return X.to(dtype), False
    numpy_dtype = np.float32 if dtype == torch.float32 else np.float64
    try:
        arr = check_array(X, allow_nd=True, dtype=numpy_dtype, input_name="X")
    except (TypeError, ValueError) as err:
        raise _wrap("X", err) from err
    return torch.tensor(arr, dtype=dtype), True


class KernelRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Regression with the infinite-width kernels of an architecture, trained to time ``t``.

    Parameters
    ----------
    architecture : Architecture or callable ``(x1, x2) -> Kernel``
    kernel : {"ntk", "nngp"}
        Gradient descent on the NTK (the trained ensemble), or on the NNGP (Bayesian
        inference at ``t=None``).
    t : float or None
        Training time in steps at ``learning_rate``, neural-tangents' ``t`` (the flow time is
        ``learning_rate * t``; None: infinity).
    learning_rate : float
    ridge : float
        Diagonal regularizer.
    ridge_relative : bool
        Whether ``ridge`` is relative to the mean diagonal of the train kernel (the default,
        as neural-tangents' ``diag_reg``) or absolute.
    schedule : {"flow", "gd"}
    normalization : {"mean", "sum"}
    dtype : None, "float32", "float64", or the numpy or torch dtype
        Working precision (None: float64). Inputs of any real dtype are converted to it.
    random_state : int, torch.Generator or None
        Seeds :meth:`sample_y` (draws of finite-time ensemble members' outputs), and the
        random features when ``num_features`` is set (None: seed 0).
    num_features : int or None
        None: the exact kernel. An int: regression in the space of that many random features
        of the kernel (:meth:`ntklab.kernels.engine.Architecture.features`, Zandieh et al.
        2021), :math:`O(n F^2)` instead of :math:`O(n^3)`; the architecture must be an ntklab
        architecture, and only the mean prediction is available
        (:class:`~ntklab.dynamics.feature_space.FeatureDynamics`).

    Attributes
    ----------
    X_train_ : Tensor of shape (n, d), or (n, C, *S) images
    y_train_ : Tensor of shape (n, k)
    n_features_in_ : int
        Entries of one input (``d``, or ``C * prod(S)`` for images).
    input_shape_ : tuple of int
        The shape of one input, ``(d,)`` or ``(C, *S)``; inputs at prediction must match it.
    dynamics_ : EnsembleDynamics, or FeatureDynamics with ``num_features``

    Notes
    -----
    Inputs are validated as scikit-learn validates them (``validate_data``): 2-D ``X`` with at
    least one sample and one feature, real and finite (complex, NaN and infinity refused),
    ``y`` of ``X``'s length, and at prediction the ``n_features_in_`` seen by ``fit``. NumPy
    arrays, lists and data frames go through scikit-learn's checks; torch tensors get the
    same checks on their own device (so that torch inputs stay torch, on their device, and
    differentiable in ``X``). ``y`` may have several columns (multi-output regression).

    ``X`` is whatever the architecture's ``kernel`` takes
    (:func:`ntklab._inputs.check_kernel_inputs`): for an architecture with Conv or pooling
    layers, channels-first images ``(n, C, H, W)`` or signals ``(n, C, L)``, as torch tensors
    or NumPy arrays (scikit-learn's 2-D check is then replaced by the same checks on the
    N-D array); channels-last images are refused, and at prediction the images must have the
    training images' channels and spatial shape (``input_shape_``).

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
        t: float | None = None,
        learning_rate: float = 1.0,
        ridge: float = 0.0,
        ridge_relative: bool = True,
        schedule: str = "flow",
        normalization: str = "mean",
        dtype: Any = None,
        random_state: int | torch.Generator | None = None,
        num_features: int | None = None,
    ) -> None:
        self.architecture = architecture
        self.kernel = kernel
        self.t = t
        self.learning_rate = learning_rate
        self.ridge = ridge
        self.ridge_relative = ridge_relative
        self.schedule = schedule
        self.normalization = normalization
        self.dtype = dtype
        self.random_state = random_state
        self.num_features = num_features

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.allow_nan = False
        return tags

    # ---------------------------------------------------------------------- validation
    def _check_X(self, X: Any, *, reset: bool) -> tuple[Tensor, bool]:
        """``(X as a tensor in the working dtype, was_not_a_tensor)``; sets or checks
        ``n_features_in_`` and ``input_shape_``, and checks ``X`` against what the
        architecture takes (flat rows, or channels-first images)."""
        dtype = _working_dtype(self.dtype)
        if isinstance(X, Tensor) or getattr(X, "ndim", 2) > 2:
            x, numpy_in = _nd_tensor(X, dtype)
            self._check_input_shape(x, reset=reset)
        else:
            numpy_dtype = np.float32 if dtype == torch.float32 else np.float64
            try:
                arr = _validate_data(self, X, reset=reset, dtype=numpy_dtype)
            except (TypeError, ValueError) as err:
                raise _wrap("X", err) from err
            x, numpy_in = torch.tensor(arr, dtype=dtype), True
            self._check_input_shape(x, reset=reset, features_checked=True)
        check_kernel_inputs(self.architecture, x, names=("X", "X"))
        return x, numpy_in

    def _check_input_shape(self, x: Tensor, *, reset: bool, features_checked: bool = False) -> None:
        """Record (``reset``) or check the shape of one input: ``input_shape_`` (``(d,)`` or
        ``(C, *S)``) and ``n_features_in_`` (its number of entries)."""
        shape = tuple(int(s) for s in x.shape[1:])
        if reset:
            self.input_shape_ = shape
            self.n_features_in_ = math.prod(shape)
            if not features_checked and hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return
        fitted = getattr(self, "input_shape_", (self.n_features_in_,))
        if shape == fitted or (features_checked and len(fitted) == 1):
            return
        if len(shape) == 1 and len(fitted) == 1:
            raise NtklabValueError(
                f"X: X has {shape[0]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        raise NtklabValueError(
            f"X: expected inputs of shape (m, {', '.join(map(str, fitted))}) like the "
            f"training X (channels and spatial shape {fitted}), got shape {tuple(x.shape)}"
        )

    def _check_y(self, y: Any, x: Tensor) -> Tensor:
        """``y`` of ``x``'s length as a tensor on ``x``'s device and dtype."""
        n = int(x.shape[0])
        if y is None:
            raise NtklabValueError(
                f"y: expected targets of length {n}; {type(self).__name__} requires y to be "
                "passed, but the target y is None"
            )
        if isinstance(y, Tensor):
            _check_tensor("y", y, ndims=(1, 2))
            target = y.to(device=x.device, dtype=x.dtype)
        else:
            numpy_dtype = np.float32 if x.dtype == torch.float32 else np.float64
            try:
                arr = check_array(
                    y, ensure_2d=False, dtype=numpy_dtype, input_name="y", ensure_min_samples=1
                )
            except (TypeError, ValueError) as err:
                raise _wrap("y", err) from err
            if arr.ndim not in (1, 2):
                raise NtklabValueError(
                    f"y: expected an array of shape (n,) or (n, k), got shape {arr.shape}"
                )
            target = torch.tensor(arr, dtype=x.dtype, device=x.device)
        if target.shape[0] != n:
            raise NtklabValueError(
                f"y: Found input variables with inconsistent numbers of samples: [{n}, "
                f"{int(target.shape[0])}] (X has {n} rows, y has {int(target.shape[0])})"
            )
        return target

    def _check_params(self) -> None:
        if self.architecture is None:
            raise NtklabValueError(
                "architecture: expected an ntklab architecture or kernel function, got None"
            )
        if self.kernel not in ("ntk", "nngp"):
            raise NtklabValueError(f"kernel: expected 'ntk' or 'nngp', got {self.kernel!r}")
        _working_dtype(self.dtype)
        # at fit, not first at predict (scikit-learn: __init__ stores, fit validates)
        check_nonnegative("ridge", self.ridge)
        if self.num_features is not None:
            check_positive_int("num_features", self.num_features)

    # ---------------------------------------------------------------------- fit / predict
    def fit(self, X: Any, y: Any) -> KernelRegressor:
        """Validate and store the training set; factorizations are computed lazily.

        Parameters
        ----------
        X : array-like or Tensor of shape (n, d), or images (n, C, *S)
        y : array-like or Tensor of shape (n,) or (n, k)

        Returns
        -------
        KernelRegressor
            ``self``, fitted: a refit replaces every fitted attribute.
        """
        self._check_params()
        x, _ = self._check_X(X, reset=True)
        targets = self._check_y(y, x)
        if self.num_features is not None:
            return self._fit_features(x, targets)
        self.dynamics_: EnsembleDynamics | FeatureDynamics = ensemble_dynamics(
            self.architecture,
            x,
            targets,
            learning_rate=self.learning_rate,
            ridge=self.ridge,
            ridge_relative=self.ridge_relative,
            schedule=self.schedule,
            normalization=self.normalization,
        )
        self.X_train_ = x
        self.y_train_ = self.dynamics_.y_train
        return self

    def _fit_features(self, x: Tensor, targets: Tensor) -> KernelRegressor:
        """``fit`` with ``num_features`` set: ridge regression in feature space."""
        schedule = _make_schedule(
            self.schedule, self.learning_rate, self.normalization, targets.numel()
        )
        self.dynamics_ = feature_dynamics(
            self.architecture,
            x,
            targets,
            schedule,
            num_features=self.num_features,  # type: ignore[arg-type]  # checked: an int
            seed=_feature_seed(self.random_state),
            ridge=self.ridge,
            ridge_relative=self.ridge_relative,
        )
        self.X_train_ = x
        self.y_train_ = self.dynamics_.y_train
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "dynamics_"):
            raise NotFittedError(
                f"{type(self).__name__}: expected a fitted model, call fit() first (this "
                f"{type(self).__name__} instance is not fitted yet)"
            )

    def _gaussian(self, X: Any, compute_cov: bool) -> tuple[Tensor | Gaussian, bool]:
        self._check_fitted()
        x, numpy_in = self._check_X(X, reset=False)
        x = x.to(self.X_train_.device)
        out = self.dynamics_.predict(self.t, x, self.kernel, compute_cov)  # type: ignore[arg-type]
        return out, numpy_in

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False) -> Any:
        """Mean of the ensemble's outputs on ``X`` (and their standard deviation or covariance).

        Parameters
        ----------
        X : array-like of shape (m, d), or images (m, C, *S) like the training X
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
        target = self._check_y(y, pred if pred.ndim == 2 else pred[:, None]).reshape(pred.shape)
        p2 = pred.reshape(pred.shape[0], -1)
        t2 = target.reshape(target.shape[0], -1)
        ss_res = (t2 - p2).square().sum(dim=0)
        ss_tot = (t2 - t2.mean(dim=0)).square().sum(dim=0)
        r2 = 1.0 - ss_res / ss_tot.clamp(min=torch.finfo(t2.dtype).tiny)
        return float(r2.mean())

    def sample_y(self, X: Any, n_samples: int = 1, random_state: Any = None) -> Any:
        """Draws of the outputs of ensemble members (finite ``t``) on ``X``.

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
