"""Analysis tools: rate fits with confidence intervals."""

from .rates import (
    BootstrapPowerLawFit,
    DecayModelComparison,
    ExponentialFit,
    PowerLawFit,
    compare_decay_models,
    fit_exponential_rate,
    fit_power_law,
    fit_power_law_bootstrap,
)

__all__ = [
    "BootstrapPowerLawFit",
    "DecayModelComparison",
    "ExponentialFit",
    "PowerLawFit",
    "compare_decay_models",
    "fit_exponential_rate",
    "fit_power_law",
    "fit_power_law_bootstrap",
]
