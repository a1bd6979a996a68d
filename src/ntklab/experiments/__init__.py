"""Named, reproducible experiments: one per claim of the papers ntklab reproduces.

Importing this package registers every experiment (each module registers its own at import
time). Run one with :func:`run_experiment` or ``ntklab run NAME``; all of them with
``ntklab reproduce``.
"""

# ruff: noqa: I001  (experiment modules must be imported after the re-exports they use)
from .base import (
    JUDGED_SCALES,
    REQUIRED_SCALES,
    Count,
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    NonNegativeCount,
    Outcome,
    PositiveFloat,
    ProgressCallback,
    RunContext,
    metrics_by_name,
    metrics_from_values,
    no_progress,
    verdict_of,
)
from .config import config_hash, parse_set_options, resolve_config
from .registry import get_experiment, list_experiments, register, unregister
from .result import RunResult, Verdict
from .runner import run_dir_for, run_experiment

# ---------------------------------------------------------------------------------------------
# Experiment modules. Importing one registers its experiment; keep these imports below the
# re-exports above, which the modules use (``from ntklab.experiments import register``).
# One line per module, in claim order, each marked "noqa" for F401 (imported for its side
# effect), e.g. `from . import spectrum_s1`.
# ---------------------------------------------------------------------------------------------
from . import spectrum_s1  # noqa: F401
from . import rkhs_vs_architecture  # noqa: F401
from . import sawtooth_samples  # noqa: F401
from . import bandlimited  # noqa: F401
from . import sparse_parity  # noqa: F401
from . import kernel_rates  # noqa: F401
from . import network_rates  # noqa: F401
from . import ntk_concentration  # noqa: F401
from . import double_descent  # noqa: F401
from . import flow_equals_krr  # noqa: F401
from . import lazy_training  # noqa: F401
from . import label_alignment  # noqa: F401
from . import trace_bound  # noqa: F401
from . import gp_convergence  # noqa: F401
from . import cntk_vs_cnn  # noqa: F401
from . import attention_kernel  # noqa: F401

__all__ = [
    "JUDGED_SCALES",
    "REQUIRED_SCALES",
    "Count",
    "Experiment",
    "ExperimentConfig",
    "Judgement",
    "Measurement",
    "Metric",
    "Metrics",
    "NonNegativeCount",
    "Outcome",
    "PositiveFloat",
    "ProgressCallback",
    "RunContext",
    "RunResult",
    "Verdict",
    "config_hash",
    "get_experiment",
    "list_experiments",
    "metrics_by_name",
    "metrics_from_values",
    "no_progress",
    "parse_set_options",
    "register",
    "resolve_config",
    "run_dir_for",
    "run_experiment",
    "unregister",
    "verdict_of",
]
