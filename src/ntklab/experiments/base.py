"""The data an experiment is made of: its config, its metrics, its outcome and its context.

An experiment is a short script of a claim in three pure steps, and a typed config
(:class:`ExperimentConfig`) with the scales it runs at:

- ``measure(config, ctx) -> Measurement``: data and computation to figures (metrics) and the
  arrays the plots need;
- ``judge(config, metrics) -> Judgement``: figures to a verdict, with the criterion's constants
  named beside it and the criterion's text rendered from the grid that actually ran;
- ``draw(config, metrics, arrays) -> {name: Figure}``: figures to plots.

:meth:`Experiment.run` only chains them into an :class:`Outcome`; the runner
(:mod:`ntklab.experiments.runner`) does everything else: resolving the config, seeding,
timing, writing the run folder and the verdict.

Example
-------
>>> from ntklab.experiments import (
...     ExperimentConfig, Judgement, Measurement, Metric, RunContext)
>>> SLOPE_RANGE = (-2.1, -1.9)
>>> class SlopeConfig(ExperimentConfig):
...     n: int = 64
>>> def measure(config: SlopeConfig, ctx: RunContext) -> Measurement:
...     return Measurement(metrics=(Metric("slope", -2.0, predicted=str(SLOPE_RANGE)),))
>>> def judge(config: SlopeConfig, metrics) -> Judgement:
...     slope = metrics["slope"].value
...     lo, hi = SLOPE_RANGE
...     return Judgement(
...         passed=lo <= slope <= hi,
...         summary=f"slope {slope:.2f} at n = {config.n}",
...         criterion=f"slope in [{lo}, {hi}] at n = {config.n}",
...     )
>>> judge(SlopeConfig(), metrics_by_name(measure(SlopeConfig(), None).metrics)).passed
True
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ntklab.errors import NtklabTypeError, NtklabValueError

from .._repr import short_repr

if TYPE_CHECKING:
    import numpy as np
    import torch
    from matplotlib.figure import Figure

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
    "metrics_by_name",
    "metrics_from_values",
    "no_progress",
    "verdict_of",
]

#: ``progress(fraction, message)``: fraction of the run done, in [0, 1], and what is happening.
ProgressCallback = Callable[[float, str], None]

#: Every experiment defines at least these scales: ``tiny`` (tests, seconds), ``quick``
#: (``ntklab reproduce``, minutes on a laptop) and ``paper`` (the full grid).
REQUIRED_SCALES: tuple[str, ...] = ("tiny", "quick", "paper")

#: The scales whose runs are judged. Any other scale (``tiny``) is a smoke run: its judgement
#: is recorded (``RunResult.criterion_met``) but its verdict is ``"SMOKE"``, never PASS/FAIL,
#: since its grid is too small for the claim's criterion to mean anything.
JUDGED_SCALES: tuple[str, ...] = ("quick", "paper")

#: A size or count of at least 1 (points, widths, seeds, bins, steps, ...).
Count = Annotated[int, Field(ge=1)]
#: A count that may be 0 (bootstrap resamples, warm-up steps, ...).
NonNegativeCount = Annotated[int, Field(ge=0)]
#: A finite, strictly positive real (a learning rate, a ridge, a standard deviation, ...).
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]

_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FIGURE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def no_progress(fraction: float, message: str) -> None:
    """Progress callback that ignores its arguments (the default)."""


class ExperimentConfig(BaseModel):
    """Base class of every experiment's config: typed, immutable, no unknown fields.

    Subclasses add fields with defaults; a scale of the experiment overrides some of them,
    and ``ntklab run NAME --set key=value`` overrides them again.

    Parameters
    ----------
    seed : int
        Seed of every random stream of the run (see :meth:`RunContext.generator`).
    dtype : {"float32", "float64"}
        Floating-point precision of the computation.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    dtype: Literal["float32", "float64"] = "float64"

    @property
    def torch_dtype(self) -> torch.dtype:
        """The :class:`torch.dtype` named by :attr:`dtype`."""
        import torch

        return torch.float64 if self.dtype == "float64" else torch.float32


def _as_float(value: object, name: str) -> float:
    """Convert a Python, NumPy or 0-d torch number to ``float``, or raise a clear error."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, int | float):
        try:
            value = item()
        except (ValueError, RuntimeError) as exc:
            raise NtklabTypeError(
                f"{name}: expected a real number, received an array of shape "
                f"{tuple(getattr(value, 'shape', ()))}"
            ) from exc
    if not isinstance(value, int | float):
        raise NtklabTypeError(
            f"{name}: expected a real number, received {type(value).__name__} {value!r}"
        )
    return float(value)


def _as_bool(value: object, name: str) -> bool:
    """Convert ``bool``, ``numpy.bool_`` or a 0-d boolean tensor to ``bool``."""
    if isinstance(value, bool):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            inner = item()
        except (ValueError, RuntimeError):
            inner = None
        if isinstance(inner, bool):
            return inner
    raise NtklabTypeError(f"{name}: expected a bool, received {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class Metric:
    """One measured figure of a run, with its confidence interval and the prediction.

    Parameters
    ----------
    name : str
        Short identifier, e.g. ``"ntk_slope_depth3"``.
    value : float
        The point estimate (NumPy scalars and 0-d tensors are converted).
    ci_low, ci_high : float or None
        Confidence interval of the estimate, when it has one.
    predicted : str or None
        What the claim predicts, as text: ``"[-2.1, -1.9]"``, ``"2"``, ``"<= 0.01"``.
    unit : str
        Unit of ``value`` (empty when dimensionless).
    note : str
        One-line remark, e.g. how the figure was fitted.
    """

    name: str
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    predicted: str | None = None
    unit: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise NtklabValueError(
                f"Metric name: expected a non-empty string, received {self.name!r}"
            )
        object.__setattr__(self, "value", _as_float(self.value, f"Metric {self.name!r} value"))
        for bound in ("ci_low", "ci_high"):
            raw = getattr(self, bound)
            if raw is not None:
                object.__setattr__(self, bound, _as_float(raw, f"Metric {self.name!r} {bound}"))
        if self.predicted is not None and not isinstance(self.predicted, str):
            object.__setattr__(self, "predicted", str(self.predicted))

    @property
    def finite(self) -> bool:
        """Whether the value is a finite number (a NaN metric is a bug to report)."""
        return math.isfinite(self.value)


@short_repr
@dataclass(frozen=True)
class Outcome:
    """What an experiment's run function returns.

    Parameters
    ----------
    metrics : tuple of Metric
        The measured figures, in the order the report shows them.
    passed : bool
        Whether the measurement meets the claim's criterion (the verdict).
    summary : str
        One line, measured vs predicted, e.g. ``"NTK slopes -2.00..-1.98 in [-2.1,-1.9]"``.
    figures : mapping of str to matplotlib Figure
        ``name -> figure``, saved as ``name.png`` in the run folder (then closed).
    arrays : mapping of str to ndarray or Tensor
        Saved together in ``arrays.npz``.
    notes : tuple of str
        Remarks the report prints under the metrics (caveats, excluded points, ...).
    criterion : str
        The criterion as it applies to the grid that ran (from :class:`Judgement`); empty
        for the experiment's general :attr:`Experiment.criterion`.
    dataset : str
        The data set measured on (from :class:`Measurement`); empty for the experiment's.
    controls_failed : tuple of str
        The controls that did not come out as known (from :class:`Judgement`).
    """

    metrics: tuple[Metric, ...]
    passed: bool
    summary: str
    figures: Mapping[str, Figure] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray[Any, Any] | torch.Tensor] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    criterion: str = ""
    dataset: str = ""
    paper_scale_cost: str = ""
    dtype_field: str | None = None
    fixed_dtype: Literal["float32", "float64"] = "float64"
    uses_device: bool = False
    controls_failed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "controls_failed", _as_lines(self.controls_failed))
        metrics = tuple(self.metrics)
        for i, metric in enumerate(metrics):
            if not isinstance(metric, Metric):
                raise NtklabTypeError(
                    f"Outcome metrics[{i}]: expected Metric, received {type(metric).__name__}"
                )
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "passed", _as_bool(self.passed, "Outcome passed"))
        if not isinstance(self.summary, str):
            raise NtklabTypeError(
                f"Outcome summary: expected str, received {type(self.summary).__name__}"
            )
        for name in self.figures:
            if not isinstance(name, str) or not _FIGURE_NAME_RE.fullmatch(name):
                raise NtklabValueError(
                    "Outcome figures: expected names made of letters, digits, '_', '-', '.' "
                    f"(used as file names), received {name!r}"
                )
        for name in self.arrays:
            if not isinstance(name, str) or not name.isidentifier():
                raise NtklabValueError(
                    f"Outcome arrays: expected identifiers as names, received {name!r}"
                )
        notes = (self.notes,) if isinstance(self.notes, str) else tuple(self.notes)
        object.__setattr__(self, "notes", tuple(str(n) for n in notes))
        object.__setattr__(self, "figures", MappingProxyType(dict(self.figures)))
        object.__setattr__(self, "arrays", MappingProxyType(dict(self.arrays)))
        if not isinstance(self.criterion, str):
            raise NtklabTypeError(
                f"Outcome criterion: expected str, received {type(self.criterion).__name__}"
            )


#: Metrics by name, as :meth:`Experiment.judge` and :meth:`Experiment.draw` receive them.
Metrics = Mapping[str, Metric]


def metrics_by_name(metrics: tuple[Metric, ...] | list[Metric]) -> Metrics:
    """``{metric.name: metric}``, refusing duplicate names.

    Raises
    ------
    NtklabValueError
        When two metrics share a name (the judge could not tell which one it reads).
    """
    table: dict[str, Metric] = {}
    for metric in metrics:
        if metric.name in table:
            raise NtklabValueError(
                f"metrics: expected unique names, received {metric.name!r} twice"
            )
        table[metric.name] = metric
    return MappingProxyType(table)


def metrics_from_values(values: Mapping[str, float | tuple[float, float, float]]) -> Metrics:
    """Metrics built from plain numbers, for table-driven tests of a judge.

    Parameters
    ----------
    values : mapping
        ``name -> value`` or ``name -> (value, ci_low, ci_high)``.

    Examples
    --------
    >>> m = metrics_from_values({"slope": -2.0, "rate": (0.5, 0.4, 0.6)})
    >>> m["rate"].ci_high
    0.6
    """
    out = []
    for name, raw in values.items():
        if isinstance(raw, tuple):
            value, low, high = raw
            out.append(Metric(name, value, ci_low=low, ci_high=high))
        else:
            out.append(Metric(name, raw))
    return metrics_by_name(out)


@short_repr
@dataclass(frozen=True)
class Measurement:
    """What an experiment's ``measure`` step returns: figures, arrays, remarks.

    Parameters
    ----------
    metrics : tuple of Metric
        The measured figures, in the order the report shows them (unique names).
    arrays : mapping of str to ndarray or Tensor
        Everything ``draw`` plots (and what a reader may want to re-plot), saved together in
        ``arrays.npz``. ``draw`` receives them as NumPy arrays.
    notes : tuple of str
        Remarks about how the figures were measured (caveats, excluded points, ...).
    dataset : str
        The data set measured on, as it should be cited (e.g. ``"fashion-mnist train,
        2000 images (class-balanced, seed 0)"``); empty to use the experiment's
        :attr:`Experiment.dataset`.
    """

    metrics: tuple[Metric, ...]
    arrays: Mapping[str, np.ndarray[Any, Any] | torch.Tensor] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    dataset: str = ""
    paper_scale_cost: str = ""
    dtype_field: str | None = None
    fixed_dtype: Literal["float32", "float64"] = "float64"
    uses_device: bool = False

    def __post_init__(self) -> None:
        metrics = tuple(self.metrics)
        for i, metric in enumerate(metrics):
            if not isinstance(metric, Metric):
                raise NtklabTypeError(
                    f"Measurement metrics[{i}]: expected Metric, received {type(metric).__name__}"
                )
        metrics_by_name(metrics)  # unique names
        object.__setattr__(self, "metrics", metrics)
        for name in self.arrays:
            if not isinstance(name, str) or not name.isidentifier():
                raise NtklabValueError(
                    f"Measurement arrays: expected identifiers as names, received {name!r}"
                )
        object.__setattr__(self, "arrays", MappingProxyType(dict(self.arrays)))
        notes = (self.notes,) if isinstance(self.notes, str) else tuple(self.notes)
        object.__setattr__(self, "notes", tuple(str(n) for n in notes))

    @property
    def by_name(self) -> Metrics:
        """The metrics by name."""
        return metrics_by_name(self.metrics)


@dataclass(frozen=True)
class Judgement:
    """What an experiment's ``judge`` step returns.

    Parameters
    ----------
    passed : bool
        Whether the metrics meet the claim's criterion.
    summary : str
        One line, measured vs predicted, e.g. ``"NTK slopes -2.00..-1.98 in [-2.1,-1.9]"``.
    criterion : str
        The criterion as applied, rendered from the config that ran (its grid, its
        thresholds), e.g. ``"slope in [-2.1, -1.9] for depths 1, 3"``.
    controls_failed : tuple of str
        One line per control that did not come out as known (a control runs the same
        estimator on an input whose answer is known, e.g. labels built with a known slope).
        When any control fails, the estimator cannot be trusted on the real input either:
        the run's verdict is ERROR ("the estimator failed its control"), neither PASS nor
        FAIL, whatever ``passed`` says (see :func:`verdict_of`).
    """

    passed: bool
    summary: str
    criterion: str
    controls_failed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "passed", _as_bool(self.passed, "Judgement passed"))
        for name in ("summary", "criterion"):
            if not isinstance(getattr(self, name), str):
                raise NtklabTypeError(
                    f"Judgement {name}: expected str, received {type(getattr(self, name)).__name__}"
                )
        object.__setattr__(self, "controls_failed", _as_lines(self.controls_failed))


def _as_lines(value: object) -> tuple[str, ...]:
    """A tuple of str from a str (one line) or an iterable of str, or a clear error."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, tuple | list) or not all(isinstance(v, str) for v in items):
        raise NtklabTypeError(
            f"controls_failed: expected a tuple of str, received {type(value).__name__} "
            f"{value!r:.80}"
        )
    return tuple(items)


def verdict_of(passed: bool, controls_failed: tuple[str, ...], scale: str) -> str:
    """The verdict of a judged run: ``"ERROR"`` when a control failed at a judged scale,
    else ``"PASS"``/``"FAIL"`` from ``passed`` at a judged scale, ``"SMOKE"`` elsewhere.

    >>> verdict_of(True, (), "quick"), verdict_of(True, ("noise slope 0.4",), "quick")
    ('PASS', 'ERROR')
    >>> verdict_of(False, ("noise slope 0.4",), "tiny")
    'SMOKE'
    """
    if scale not in JUDGED_SCALES:
        return "SMOKE"
    if controls_failed:
        return "ERROR"
    return "PASS" if passed else "FAIL"


def arrays_as_numpy(
    arrays: Mapping[str, np.ndarray[Any, Any] | torch.Tensor],
) -> Mapping[str, np.ndarray[Any, Any]]:
    """The arrays as NumPy arrays (tensors detached and moved to the CPU)."""
    import numpy as np

    out: dict[str, np.ndarray[Any, Any]] = {}
    for name, array in arrays.items():
        detach = getattr(array, "detach", None)
        out[name] = np.asarray(detach().cpu().numpy() if callable(detach) else array)
    return MappingProxyType(out)


@dataclass(frozen=True)
class RunContext:
    """Everything a run function may use besides its config.

    Parameters
    ----------
    out_dir : Path
        Folder the run is being written to (a temporary folder renamed into place when the
        run ends). An experiment may write extra files here.
    progress : callable
        ``progress(fraction, message)``; fraction in [0, 1]. A no-op by default.
    experiment : str
        Name of the experiment being run.
    scale : str
        Scale being run (``"tiny"``, ``"quick"``, ``"paper"``).
    seed : int
        The config's seed.
    logger : logging.Logger
        Logger of the run (a child of ``"ntklab"``).
    device : str
        The device the run computes on (``ntklab run --device``: ``"cpu"``, ``"cuda"``,
        ``"cuda:1"``), checked before the run started. An experiment with
        :attr:`Experiment.uses_device` creates its data there (draw it from a CPU
        :meth:`generator` and move it, so that the numbers do not depend on the device).
    dtype : str
        The precision of the run's networks or kernels (``"float32"``/``"float64"``): the
        value of the experiment's :attr:`Experiment.dtype_field` (``--dtype`` sets it), or
        its :attr:`Experiment.fixed_dtype`.
    """

    out_dir: Path
    progress: ProgressCallback = no_progress
    experiment: str = ""
    scale: str = ""
    seed: int = 0
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("ntklab"))
    device: str = "cpu"
    dtype: str = "float64"

    @property
    def torch_device(self) -> torch.device:
        """:attr:`device` as a :class:`torch.device`."""
        import torch

        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        """:attr:`dtype` as a :class:`torch.dtype`."""
        import torch

        return torch.float32 if self.dtype == "float32" else torch.float64

    def stream_seed(self, stream: str = "default") -> int:
        """A 63-bit seed for the named random stream, derived from :attr:`seed`.

        Distinct streams (``"data"``, ``"init"``, ``"noise"``) are independent, and each is
        reproducible from the config's seed alone.
        """
        digest = hashlib.sha256(f"{self.seed}:{stream}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    def generator(
        self, stream: str = "default", device: str | torch.device = "cpu"
    ) -> torch.Generator:
        """A fresh :class:`torch.Generator` seeded with :meth:`stream_seed` of ``stream``.

        Examples
        --------
        >>> ctx = RunContext(out_dir=Path("."), seed=3)
        >>> import torch
        >>> a = torch.randn(2, generator=ctx.generator("data"))
        >>> b = torch.randn(2, generator=ctx.generator("data"))
        >>> bool((a == b).all())
        True
        """
        import torch

        gen = torch.Generator(device=device)
        gen.manual_seed(self.stream_seed(stream))
        return gen


def _freeze_scales(scales: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    return MappingProxyType({str(k): MappingProxyType(dict(v)) for k, v in scales.items()})


@dataclass(frozen=True)
class Experiment:
    """A named, reproducible test of one claim of a paper.

    Parameters
    ----------
    name : str
        Lower-case kebab-case name used on the command line, e.g. ``"spectrum-s1"``.
    claim_id : str
        Identifier of the claim in the claims table, e.g. ``"A1"``.
    claim : str
        The claim, as a short paragraph.
    criterion : str
        The numeric criterion of the verdict, in words.
    config_type : type of ExperimentConfig
        The experiment's config class; every field has a default.
    scales : mapping of str to mapping
        ``scale -> {field: value}`` overrides of the config defaults; must contain
        ``"tiny"``, ``"quick"`` and ``"paper"``.
    measure : callable
        ``measure(config, ctx) -> Measurement``.
    judge : callable
        ``judge(config, metrics) -> Judgement``; pure, metrics by name.
    draw : callable
        ``draw(config, metrics, arrays) -> {name: Figure}``; pure, arrays as NumPy.
    reported : str
        The figure the claim's paper reports (with its data set), shown beside the measured
        one in the claims table, e.g. ``"label slope 2, residual slope 1 (CIFAR-10)"``.
    headline : tuple of str
        Names of the metrics the claims table shows as the measured figure.
    dataset : str
        The data set the experiment measures on by default (``"synthetic: ..."`` for
        generated data); a run may name another (:attr:`Measurement.dataset`).
    paper_scale_cost : str
        Empty when the paper scale runs within an hour on a 2-core machine; otherwise its
        measured cost and what it would take, in one line (e.g. ``"about 1.5 days on 2
        cores (training 81M example-steps); needs a GPU"``), shown in the claims table and
        on the claim's page in place of a paper result. The module docstring gives the
        measurement behind it.
    dtype_field : str or None
        The config field that ``ntklab run --dtype`` sets (the precision of the networks or
        kernels, where float32 is meaningful, e.g. ``"net_dtype"``); None when the
        experiment computes in a fixed precision (:attr:`fixed_dtype`) that its figures need.
    fixed_dtype : str
        The precision of an experiment without ``dtype_field`` (recorded in its results).
    uses_device : bool
        Whether ``measure`` creates its tensors on :attr:`RunContext.device`; only ``cpu``
        is accepted for ``--device`` otherwise.
    criterion_change : str
        When the criterion last changed and why, in one line (``"2026-12-04: ..."``; empty
        when it never did). The claims table shows it beside the previous verdict, the
        result judged by the earlier criterion (kept under ``results/history/``). A criterion
        changes because it did not test the claim, never because of the figure it produced.
    """

    name: str
    claim_id: str
    claim: str
    criterion: str
    config_type: type[ExperimentConfig]
    scales: Mapping[str, Mapping[str, Any]]
    measure: Callable[[Any, RunContext], Measurement]
    judge: Callable[[Any, Metrics], Judgement]
    draw: Callable[[Any, Metrics, Mapping[str, Any]], Mapping[str, Figure]]
    reported: str = ""
    headline: tuple[str, ...] = ()
    dataset: str = ""
    paper_scale_cost: str = ""
    dtype_field: str | None = None
    fixed_dtype: Literal["float32", "float64"] = "float64"
    uses_device: bool = False
    criterion_change: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise NtklabValueError(
                "Experiment name: expected lower-case kebab-case such as 'spectrum-s1', "
                f"received {self.name!r}"
            )
        if not isinstance(self.claim_id, str) or not self.claim_id.strip():
            raise NtklabValueError(
                f"Experiment {self.name!r} claim_id: expected an id such as 'A1', "
                f"received {self.claim_id!r}"
            )
        if not (
            isinstance(self.config_type, type) and issubclass(self.config_type, ExperimentConfig)
        ):
            raise NtklabTypeError(
                f"Experiment {self.name!r} config_type: expected a subclass of "
                f"ExperimentConfig, received {self.config_type!r}"
            )
        for step in ("measure", "judge", "draw"):
            if not callable(getattr(self, step)):
                raise NtklabTypeError(
                    f"Experiment {self.name!r} {step}: expected a callable, "
                    f"received {type(getattr(self, step)).__name__}"
                )
        missing = [s for s in REQUIRED_SCALES if s not in self.scales]
        if missing:
            raise NtklabValueError(
                f"Experiment {self.name!r} scales: expected the scales {list(REQUIRED_SCALES)}, "
                f"missing {missing}"
            )
        if self.dtype_field is not None and self.dtype_field not in self.config_type.model_fields:
            raise NtklabValueError(
                f"Experiment {self.name!r} dtype_field: expected a field of "
                f"{self.config_type.__name__}, received {self.dtype_field!r}"
            )
        object.__setattr__(self, "scales", _freeze_scales(self.scales))

    def run_dtype(self, config: ExperimentConfig) -> str:
        """The precision a run of ``config`` computes in: its :attr:`dtype_field`, else
        :attr:`fixed_dtype`."""
        if self.dtype_field is None:
            return self.fixed_dtype
        return str(getattr(config, self.dtype_field))

    def run(self, config: ExperimentConfig, ctx: RunContext) -> Outcome:
        """``measure``, then ``judge`` and ``draw`` on what it measured, as one Outcome."""
        measurement = self.measure(config, ctx)
        if not isinstance(measurement, Measurement):
            raise NtklabTypeError(
                f"measure of {self.name!r}: expected a Measurement, "
                f"received {type(measurement).__name__}"
            )
        metrics = measurement.by_name
        judgement = self.judge(config, metrics)
        if not isinstance(judgement, Judgement):
            raise NtklabTypeError(
                f"judge of {self.name!r}: expected a Judgement, received {type(judgement).__name__}"
            )
        figures = self.draw(config, metrics, arrays_as_numpy(measurement.arrays))
        return Outcome(
            metrics=measurement.metrics,
            passed=judgement.passed,
            summary=judgement.summary,
            figures=figures,
            arrays=measurement.arrays,
            notes=measurement.notes,
            criterion=judgement.criterion,
            dataset=measurement.dataset,
            controls_failed=judgement.controls_failed,
        )

    @property
    def short_claim(self) -> str:
        """The claim's first sentence, at most 80 characters."""
        text = " ".join(self.claim.split())
        first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
        return first if len(first) <= 80 else first[:79].rstrip() + "…"
