"""Closed-form training dynamics: gradient flow and descent at any time, for one linearized
network and for the Gaussian process of an ensemble; kernel ridge regression, GP posteriors,
linearized and Taylor-expanded models, the flow of any loss in function space (ODE), and a
scikit-learn estimator (``KernelRegressor``, imported on first use)."""

from typing import Any

from .descent import Normalization, Schedule, critical_learning_rate, loss_normalizer
from .early_stopping import (
    early_stopping_time,
    kernel_gd_coefficients_s1,
    kernel_gd_excess_risk_s1,
)
from .function_space import (
    EnsembleDynamics,
    Gaussian,
    LinearizedDynamics,
    ensemble_dynamics,
    linearized_dynamics,
)
from .inference import RidgeSelection, gp_posterior, kernel_ridge_regression, select_ridge_loo
from .linearize import LinearizedModel, linearize
from .model_selection import ValidationRidgeSelection, select_ridge_validation, validation_split
from .taylor import TaylorModel, taylor_expand

__all__ = [
    "EnsembleDynamics",
    "Gaussian",
    "KernelRegressor",
    "LinearizedDynamics",
    "LinearizedModel",
    "Normalization",
    "RidgeSelection",
    "Schedule",
    "TaylorModel",
    "ValidationRidgeSelection",
    "critical_learning_rate",
    "early_stopping_time",
    "ensemble_dynamics",
    "gp_posterior",
    "kernel_gd_coefficients_s1",
    "kernel_gd_excess_risk_s1",
    "kernel_ridge_regression",
    "linearize",
    "linearized_dynamics",
    "loss_normalizer",
    "select_ridge_loo",
    "select_ridge_validation",
    "taylor_expand",
    "validation_split",
]


def __getattr__(name: str) -> Any:
    # scikit-learn is imported only when its estimator is used.
    if name == "KernelRegressor":
        from .estimator import KernelRegressor

        return KernelRegressor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
