"""The ensemble's mean prediction with the kernel of random features, in :math:`O(nF^2)`.

:class:`FeatureDynamics` is the mean of :class:`~ntklab.dynamics.EnsembleDynamics` with the
kernel :math:`\\Phi\\Phi^T` of ``num_features`` random features of the architecture
(:meth:`ntklab.kernels.engine.Architecture.features`; Zandieh et al. 2021, arXiv:2106.07880)
in place of the exact NTK or NNGP:

.. math::

    \\mu_t(x) = \\phi(x)^T W \\operatorname{diag}\\Big(\\frac{1 - D_t(s + \\rho)}{s + \\rho}\\Big)
    W^T \\Phi^T Y,

with :math:`\\Phi^T\\Phi = W \\operatorname{diag}(s) W^T` (:class:`ntklab.solvers.FeatureOperator`)
and :math:`D_t` the schedule's residual factor (:mod:`.descent`); at :math:`t = \\infty` it is
ridge regression in feature space, or the minimum-norm least-squares fit without ridge. The
ridge relative to the mean diagonal uses the features' mean squared norm. Costs
:math:`O(nF^2 + F^3)` memory :math:`O(nF + F^2)`; only the mean (no covariance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from .._repr import short_repr
from ..errors import NtklabValueError
from ..solvers.low_rank import FeatureOperator, pseudo_inverse_values
from .descent import Schedule
from .function_space import Get, _shape_times, as_targets
from .train_kernel import as_times, ridge_value

__all__ = ["FeatureDynamics"]


@short_repr
@dataclass(frozen=True, eq=False)
class FeatureDynamics:
    """Mean outputs of the ensemble trained with the random-feature kernel :math:`\\Phi\\Phi^T`.

    Parameters
    ----------
    architecture : Architecture
        Anything with ``features(x, num_features, seed=, get=)``.
    x_train : Tensor of shape (n, d) or (n, C, *S)
    y_train : Tensor of shape (n, k)
    schedule : Schedule
    num_features, seed : int
        Of the features (the same draws for training and test inputs).
    ridge, ridge_relative
        As in :class:`~ntklab.dynamics.EnsembleDynamics`.
    vector : bool
        The targets were 1-D (predictions drop their last axis).
    """

    architecture: Any
    x_train: Tensor
    y_train: Tensor
    schedule: Schedule
    num_features: int
    seed: int = 0
    ridge: float = 0.0
    ridge_relative: bool = True
    vector: bool = False
    _ops: dict[str, FeatureOperator] = field(default_factory=dict, repr=False)

    def featurize(self, x: Tensor, get: Get) -> Tensor:
        """The features of ``x`` (n, num_features) in the targets' dtype."""
        phi: Tensor = self.architecture.features(x, self.num_features, seed=self.seed, get=get)
        return phi.to(self.y_train.dtype)

    def operator(self, get: Get) -> FeatureOperator:
        """The training features' kernel, cached per ``get``."""
        if get not in self._ops:
            self._ops[get] = FeatureOperator(self.featurize(self.x_train, get))
        return self._ops[get]

    def predict(
        self,
        t: object | None = None,
        x_test: Tensor | None = None,
        get: Get = "ntk",
        compute_cov: bool = False,
    ) -> Tensor:
        """Mean outputs at ``x_test`` after time(s) ``t`` (in steps; None is infinity).

        Returns
        -------
        Tensor of shape ``t.shape + (m, k)`` (``k`` dropped for 1-D targets)
        """
        if compute_cov:
            raise NtklabValueError(
                "compute_cov: expected False with random features (num_features set): only "
                "the mean prediction is available; use the exact kernel for covariances"
            )
        if get not in ("ntk", "nngp"):
            raise NtklabValueError(f"get: expected 'nngp' or 'ntk', got {get!r}")
        if x_test is None:
            x_test = self.x_train
        op = self.operator(get)
        mean_diag = op.diagonal().mean().reshape(1, 1)
        rho = ridge_value(mean_diag, self.ridge, self.ridge_relative)
        y = self.y_train
        if t is None:
            shape = None
            weights = op.weights(lambda s: pseudo_inverse_values(s + rho), y)[None]
        else:
            times, shape = as_times(t, like=y)
            self.schedule.check_times(times)
            top = float(op.gram_eigh.values[-1]) + rho
            self.schedule.check_stable(top)
            weights = op.weights(lambda s: self.schedule.integrated(s + rho, times), y)
        phi_test = self.featurize(x_test, get)
        mean = phi_test @ weights  # shape: (T, m, k)
        return _shape_times(mean, shape, self.vector)


def feature_dynamics(
    architecture: Any,
    x_train: Tensor,
    y_train: Tensor,
    schedule: Schedule,
    *,
    num_features: int,
    seed: int,
    ridge: float,
    ridge_relative: bool,
) -> FeatureDynamics:
    """:class:`FeatureDynamics` with ``y_train`` of shape (n,) or (n, k)."""
    if not callable(getattr(architecture, "features", None)):
        raise NtklabValueError(
            "num_features: expected an ntklab architecture (with a features method) when "
            f"num_features is set, got {type(architecture).__name__}"
        )
    y, vector = as_targets(y_train, int(x_train.shape[0]), like=x_train)
    return FeatureDynamics(
        architecture,
        x_train,
        y,
        schedule,
        num_features,
        seed,
        ridge,
        ridge_relative,
        vector,
    )
