"""The record of a run, as written to ``result.json`` and read back.

``result.json`` is strict JSON (non-finite numbers are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``). Its fields, one per attribute of :class:`RunResult`
except ``run_dir`` and ``reused`` (which depend on where and how it is read)::

    schema_version, experiment, claim_id, claim, scale, config_hash, run_key, code,
    config, metrics, criterion, verdict, criterion_met, summary, dataset, notes, versions, seed,
    wall_time_s, started_at, figures, arrays, error, device, dtype

(``device`` and ``dtype``, the device the run computed on and the precision of its networks
or kernels, are read as ``"cpu"`` and ``""`` from files written before they existed), and last
``content_digest``: ``"sha256:<hex>"``, the SHA-256 of the canonical JSON of every other field
(:func:`content_digest`). A result that carries it is *sealed*.

Results check themselves
------------------------
:func:`check_result_file` reads a ``result.json`` the way every reader of results does
(``ntklab table``, ``ntklab report`` and its claim pages, the reuse of a run by ``ntklab run``
and ``ntklab reproduce``, ``ntklab verify``) and gives it one of these statuses
(:data:`RESULT_STATUSES`):

- ``valid``: sealed, and the experiment's current judge, applied to the recorded metrics with
  the recorded config and scale, gives the recorded verdict, ``criterion_met`` and criterion;
- ``unsealed``: as ``valid``, but without a digest (written before digests existed): tabled,
  with a note, never reused, refused by ``ntklab verify``;
- ``stale``: the digest holds but the current judge gives another criterion text, or cannot
  judge the recorded metrics or config (a metric renamed, a config field removed): the result
  was judged by another criterion than today's and must be rerun; never tabled as a current
  verdict, never reused;
- ``inconsistent``: the digest holds and the criterion is today's, yet the judge gives
  another verdict: refused;
- ``tampered``: the digest does not match the content: refused;
- ``damaged``: not a readable result (truncated, not JSON, a field missing or of the wrong
  type, an unknown schema version): refused.

An experiment that is no longer registered cannot judge its results: they read as ``stale``.
A result kept on purpose after its criterion changed is *history* (it lies in a folder named
``history``, e.g. ``results/history/``): ``ntklab verify`` checks its digest but accepts its
old criterion.

What a verdict means:

- ``PASS`` / ``FAIL``: at a judged scale (``quick``, ``paper``), the measured figures meet /
  miss the claim's criterion, as ``criterion`` states it for the grid that ran;
- ``SMOKE``: a ``tiny`` run, which checks that the code runs end to end; its grid is too small
  for the criterion, so it is not judged (``criterion_met`` still records the judge's answer,
  for tests);
- ``ERROR``: the experiment raised (``error`` holds the traceback).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ntklab.errors import NtklabValueError

from .._repr import short_repr
from .base import Metric
from .config import package_version

if TYPE_CHECKING:
    from .base import Experiment

__all__ = [
    "DIGEST_FIELD",
    "REFUSED_STATUSES",
    "RESULT_FILE",
    "RESULT_STATUSES",
    "SCHEMA_VERSION",
    "TABLED_STATUSES",
    "VERDICTS",
    "RecordedJudgement",
    "ResultCheck",
    "ResultStatus",
    "RunResult",
    "Verdict",
    "check_result",
    "check_result_file",
    "collect_versions",
    "content_digest",
    "judge_recorded",
]

#: The verdict of a run: PASS / FAIL at a judged scale, SMOKE for a run that is not judged
#: (``tiny``), ERROR when the experiment raised.
Verdict = Literal["PASS", "FAIL", "ERROR", "SMOKE"]
VERDICTS: tuple[Verdict, ...] = ("PASS", "FAIL", "ERROR", "SMOKE")
RESULT_FILE = "result.json"
SCHEMA_VERSION = 2

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

#: The field of ``result.json`` that seals it: ``"sha256:<hex>"`` of :func:`content_digest`.
DIGEST_FIELD = "content_digest"
_DIGEST_PREFIX = "sha256:"

#: What reading a result found (see the module docstring).
ResultStatus = Literal["valid", "unsealed", "stale", "inconsistent", "tampered", "damaged"]
RESULT_STATUSES: tuple[ResultStatus, ...] = (
    "valid",
    "unsealed",
    "stale",
    "inconsistent",
    "tampered",
    "damaged",
)
#: The statuses whose verdict is shown as a current verdict (``ntklab table``, claim pages).
TABLED_STATUSES: frozenset[ResultStatus] = frozenset({"valid", "unsealed"})
#: The statuses that are refused outright: the file cannot be believed.
REFUSED_STATUSES: frozenset[ResultStatus] = frozenset({"inconsistent", "tampered", "damaged"})


def content_digest(data: Mapping[str, Any]) -> str:
    """The digest that seals a ``result.json``: SHA-256 of its canonical JSON.

    The canonical JSON is the content of the file without :data:`DIGEST_FIELD`, with sorted
    keys, no whitespace, UTF-8 and strict numbers (``json.dumps(..., sort_keys=True,
    separators=(",", ":"), ensure_ascii=False, allow_nan=False)``): every field that
    identifies the result (metrics, verdict, criterion, ``criterion_met``, config, scale,
    code fingerprint, versions, ...) is covered, and the digest does not depend on the
    file's layout. Python's JSON writes floats by their shortest round-trip repr, so a file
    read back gives the digest it was written with.

    It is a checksum, not a signature: it catches a damaged or hand-edited file; anyone who
    can write the file can also recompute it (re-judging the metrics catches a verdict that
    does not follow from them, see :func:`check_result`).

    Examples
    --------
    >>> d = content_digest({"verdict": "PASS", "metrics": []})
    >>> d == content_digest({"metrics": [], "verdict": "PASS", "content_digest": "x"}), d[:7]
    (True, 'sha256:')
    """
    body = {key: value for key, value in data.items() if key != DIGEST_FIELD}
    text = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return _DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _digest_problem(data: Mapping[str, Any]) -> str | None:
    """None when ``data`` carries no digest or the right one; else what is wrong, one line."""
    if DIGEST_FIELD not in data:
        return None
    found = data[DIGEST_FIELD]
    try:
        expected = content_digest(data)
    except (TypeError, ValueError) as exc:  # a non-finite float, a value JSON cannot hold
        return f"content cannot be digested ({exc})"
    if found != expected:
        return f"content digest: expected {expected}, found {found!r}"
    return None


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> str:
    """The machine a run ran on: architecture, CPU count and total memory (no host name).

    Examples
    --------
    >>> "cores" in machine_description()
    True
    """
    cores = os.cpu_count() or 0
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo", encoding="ascii") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    return f"{platform.machine()}, {cores} cores{memory}"


def collect_versions() -> dict[str, str]:
    """Versions of ntklab, torch, numpy and python, the platform string and the machine.

    Read from the installed distributions, so nothing heavy is imported.
    """
    return {
        "ntklab": package_version(),
        "torch": _dist_version("torch"),
        "numpy": _dist_version("numpy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": machine_description(),
    }


def encode_float(value: float | None) -> float | str | None:
    """A float as strict JSON: non-finite values become ``"NaN"``/``"Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def decode_float(value: object, where: str) -> float | None:
    """Inverse of :func:`encode_float`."""
    if value is None:
        return None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise NtklabValueError(f"{where}: expected a number or null, received {value!r}")


def metric_to_dict(metric: Metric) -> dict[str, Any]:
    """A :class:`Metric` as a JSON-ready dict."""
    out = asdict(metric)
    for key in ("value", "ci_low", "ci_high"):
        out[key] = encode_float(out[key])
    return out


def metric_from_dict(data: Mapping[str, Any], where: str) -> Metric:
    """Inverse of :func:`metric_to_dict`."""
    if not isinstance(data, Mapping) or "name" not in data or "value" not in data:
        raise NtklabValueError(f"{where}: expected an object with 'name' and 'value'")
    value = decode_float(data["value"], f"{where}.value")
    return Metric(
        name=str(data["name"]),
        value=math.nan if value is None else value,
        ci_low=decode_float(data.get("ci_low"), f"{where}.ci_low"),
        ci_high=decode_float(data.get("ci_high"), f"{where}.ci_high"),
        predicted=None if data.get("predicted") is None else str(data["predicted"]),
        unit=str(data.get("unit", "")),
        note=str(data.get("note", "")),
    )


@short_repr
@dataclass(frozen=True)
class RunResult:
    """One run of one experiment, as recorded in its ``result.json``.

    Attributes
    ----------
    experiment, claim_id, claim, criterion : str
        Copied from the :class:`~ntklab.experiments.Experiment`.
    scale : str
        The scale run.
    config : dict
        The resolved config (JSON values).
    metrics : tuple of Metric
        The measured figures (empty on ERROR).
    verdict : {"PASS", "FAIL", "ERROR", "SMOKE"}
        Whether the criterion was met; ERROR when the experiment raised; SMOKE for a run at
        a scale that is not judged (``tiny``).
    criterion_met : bool or None
        The judge's answer (also at a smoke scale); None on ERROR.
    summary : str
        One line, measured vs predicted (the error's last line on ERROR).
    notes : tuple of str
        The experiment's remarks.
    versions : dict
        ``ntklab``, ``torch``, ``numpy``, ``python``, ``platform``.
    seed : int
        The config's seed.
    wall_time_s : float
        Seconds the run function took.
    started_at : str
        ISO 8601 UTC time the run started.
    figures : tuple of str
        PNG paths relative to ``run_dir``.
    run_dir : Path
        The run folder (where ``result.json`` lies).
    reused : bool
        Whether this result was found on disk instead of computed now.
    error : str or None
        The traceback when the verdict is ERROR.
    arrays : str or None
        Name of the ``.npz`` file holding the arrays, relative to ``run_dir``.
    config_hash : str
        Hash of experiment, scale and config (see :func:`~ntklab.experiments.config_hash`).
    run_key : str
        Key of the run folder: the config hash and the code fingerprint.
    code : dict
        The code fingerprint (:meth:`~ntklab.experiments.fingerprint.CodeFingerprint.as_dict`).
    other_code : bool
        Whether this result was made by code other than the running one (reused only with
        ``reuse_any``; see :mod:`ntklab.experiments.fingerprint`).
    dataset : str
        The data set measured on, as the experiment names it.
    device : str
        The device the run computed on (``ntklab run --device``), e.g. ``"cpu"``, ``"cuda"``.
    dtype : str
        The precision of the run's networks or kernels (``ntklab run --dtype``; see
        :attr:`~ntklab.experiments.Experiment.dtype_field`); ``""`` when not recorded.
    """

    experiment: str
    claim_id: str
    claim: str
    scale: str
    config: dict[str, Any]
    metrics: tuple[Metric, ...]
    criterion: str
    verdict: Verdict
    summary: str
    notes: tuple[str, ...]
    versions: dict[str, str]
    seed: int
    wall_time_s: float
    started_at: str
    figures: tuple[str, ...]
    run_dir: Path
    reused: bool = False
    error: str | None = None
    arrays: str | None = None
    config_hash: str = ""
    run_key: str = ""
    code: dict[str, str] = field(default_factory=dict)
    criterion_met: bool | None = None
    other_code: bool = False
    dataset: str = ""
    device: str = "cpu"
    dtype: str = ""

    @property
    def passed(self) -> bool:
        """Whether the verdict is PASS."""
        return self.verdict == "PASS"

    @property
    def figure_paths(self) -> tuple[Path, ...]:
        """Absolute paths of the figures."""
        return tuple(self.run_dir / f for f in self.figures)

    def to_json_dict(self) -> dict[str, Any]:
        """The content of ``result.json``, sealed by its :data:`DIGEST_FIELD` (last)."""
        data = {
            "schema_version": SCHEMA_VERSION,
            "experiment": self.experiment,
            "claim_id": self.claim_id,
            "claim": self.claim,
            "scale": self.scale,
            "config_hash": self.config_hash,
            "run_key": self.run_key,
            "code": dict(self.code),
            "config": self.config,
            "metrics": [metric_to_dict(m) for m in self.metrics],
            "criterion": self.criterion,
            "verdict": self.verdict,
            "criterion_met": self.criterion_met,
            "summary": self.summary,
            "dataset": self.dataset,
            "notes": list(self.notes),
            "versions": dict(self.versions),
            "seed": self.seed,
            "wall_time_s": self.wall_time_s,
            "started_at": self.started_at,
            "figures": list(self.figures),
            "arrays": self.arrays,
            "error": self.error,
            "device": self.device,
            "dtype": self.dtype,
        }
        data[DIGEST_FIELD] = content_digest(data)
        return data

    def write_json(self, path: Path) -> None:
        """Write :meth:`to_json_dict` to ``path`` (strict JSON, UTF-8)."""
        text = json.dumps(self.to_json_dict(), indent=2, ensure_ascii=False, allow_nan=False)
        path.write_text(text + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: Path | str) -> RunResult:
        """Read a ``result.json`` (``run_dir`` is its folder, ``reused`` is False).

        The format and the digest are checked (a file without a digest is read); the verdict
        is not judged again: :func:`check_result_file` does both, as every reader of results
        in ntklab does.

        Raises
        ------
        NtklabValueError
            When the file is not a valid result, or its digest does not match its content
            ("tampered or damaged"); the message names the file and the field.
        OSError
            When the file cannot be read.
        """
        path = Path(path)
        data = _read_json(path)
        problem = _digest_problem(data)
        if problem is not None:
            raise NtklabValueError(f"{path}: tampered or damaged: {problem}")
        return cls.from_dict(data, run_dir=path.parent, source=str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], run_dir: Path, source: str = "result") -> RunResult:
        """Build a result from the content of a ``result.json``; see :meth:`from_json`."""

        def need(key: str, kind: type | tuple[type, ...]) -> Any:
            if key not in data:
                raise NtklabValueError(f"{source}: missing field {key!r}")
            value = data[key]
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise NtklabValueError(
                    f"{source}: field {key!r} expected {kind}, received {value!r}"
                )
            return value

        verdict = need("verdict", str)
        if verdict not in VERDICTS:
            raise NtklabValueError(
                f"{source}: field 'verdict' expected one of {VERDICTS}, received {verdict!r}"
            )
        metrics = tuple(
            metric_from_dict(m, f"{source}: metrics[{i}]")
            for i, m in enumerate(need("metrics", list))
        )
        error = data.get("error")
        arrays = data.get("arrays")
        return cls(
            experiment=need("experiment", str),
            claim_id=need("claim_id", str),
            claim=need("claim", str),
            scale=need("scale", str),
            config=dict(need("config", dict)),
            metrics=metrics,
            criterion=need("criterion", str),
            verdict=cast(Verdict, verdict),
            summary=need("summary", str),
            notes=tuple(str(n) for n in need("notes", list)),
            versions={str(k): str(v) for k, v in need("versions", dict).items()},
            seed=need("seed", int),
            wall_time_s=float(need("wall_time_s", (int, float))),
            started_at=need("started_at", str),
            figures=tuple(str(f) for f in need("figures", list)),
            run_dir=Path(run_dir),
            reused=False,
            error=None if error is None else str(error),
            arrays=None if arrays is None else str(arrays),
            config_hash=str(data.get("config_hash", "")),
            run_key=str(data.get("run_key", "")),
            code={str(k): str(v) for k, v in dict(data.get("code") or {}).items()},
            criterion_met=_optional_bool(data.get("criterion_met"), f"{source}: criterion_met"),
            dataset=str(data.get("dataset", "")),
            device=str(data.get("device", "cpu")),
            dtype=str(data.get("dtype", "")),
        )

    def as_reused(self, other_code: bool = False) -> RunResult:
        """This result flagged as found on disk (and, with ``other_code``, as made by other
        code than the running one)."""
        return replace(self, reused=True, other_code=other_code)


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or a clear error (a truncated file is not JSON)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise NtklabValueError(f"{path}: expected a UTF-8 JSON result file ({exc})") from None
    except ValueError as exc:
        raise NtklabValueError(f"{path}: expected a JSON result file ({exc})") from None
    if not isinstance(data, dict):
        raise NtklabValueError(f"{path}: expected a JSON object, received {type(data).__name__}")
    return data


def _optional_bool(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise NtklabValueError(f"{where}: expected true, false or null, received {value!r}")


# --- reading a result the way every reader does: digest, format, and the judge again ------


@dataclass(frozen=True)
class RecordedJudgement:
    """What an experiment's current judge says of a recorded result.

    Attributes
    ----------
    verdict : {"PASS", "FAIL", "ERROR", "SMOKE"}
        The verdict the runner would record (:func:`~ntklab.experiments.base.verdict_of`).
    criterion : str
        The criterion text as the judge renders it from the recorded config.
    criterion_met : bool
        The judge's answer.
    """

    verdict: Verdict
    criterion: str
    criterion_met: bool


def judge_recorded(result: RunResult, experiment: Experiment) -> RecordedJudgement:
    """Apply ``experiment``'s current judge to the metrics, config and scale ``result`` records.

    Parameters
    ----------
    result : RunResult
        A recorded result with metrics (not an ERROR of an experiment that raised).
    experiment : Experiment
        The experiment that made it, as the running code defines it.

    Returns
    -------
    RecordedJudgement
        The verdict, criterion and answer a run with these metrics would record today.

    Raises
    ------
    NtklabValueError
        When the current config type refuses the recorded config (a field added, removed or
        constrained since), or the current judge cannot read the recorded metrics (a metric
        renamed): the result was made by other code than today's.
    """
    from pydantic import ValidationError

    from .base import Judgement, metrics_by_name, verdict_of

    try:
        config = experiment.config_type.model_validate(result.config)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "config"
        raise NtklabValueError(
            f"config: the current {experiment.config_type.__name__} refuses the recorded "
            f"config ({where}: {first.get('msg', exc)})"
        ) from None
    try:
        judgement = experiment.judge(config, metrics_by_name(result.metrics))
    except Exception as exc:  # today's judge reads metrics this result does not have
        raise NtklabValueError(
            f"metrics: the current judge of {experiment.name!r} cannot judge the recorded "
            f"metrics ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(judgement, Judgement):
        raise NtklabValueError(
            f"judge of {experiment.name!r}: expected a Judgement, "
            f"received {type(judgement).__name__}"
        )
    verdict = cast(Verdict, verdict_of(judgement.passed, judgement.controls_failed, result.scale))
    return RecordedJudgement(
        verdict=verdict,
        criterion=judgement.criterion or experiment.criterion,
        criterion_met=judgement.passed,
    )


@dataclass(frozen=True)
class ResultCheck:
    """What reading one ``result.json`` found (see the module docstring).

    Attributes
    ----------
    path : Path
        The file read.
    status : {"valid", "unsealed", "stale", "inconsistent", "tampered", "damaged"}
        The verdict on the file itself.
    result : RunResult or None
        The result as recorded; None when it could not be read (``damaged``, ``tampered``).
    problem : str
        What is wrong, in one line, with the expected and the found value; ``""`` when
        ``valid``.
    current_criterion : str or None
        The criterion the current judge gives for the recorded config (None when it could
        not judge); differs from ``result.criterion`` when ``stale``.
    """

    path: Path
    status: ResultStatus
    result: RunResult | None = None
    problem: str = ""
    current_criterion: str | None = None

    @property
    def tabled(self) -> bool:
        """Whether the recorded verdict may be shown as a current verdict."""
        return self.status in TABLED_STATUSES and self.result is not None

    @property
    def refused(self) -> bool:
        """Whether the file cannot be believed (inconsistent, tampered or damaged)."""
        return self.status in REFUSED_STATUSES

    def line(self) -> str:
        """``"<path>: <status>: <problem>"``, one line."""
        text = f"{self.path}: {self.status}"
        return f"{text}: {' '.join(self.problem.split())}" if self.problem else text


def _schema_problem(data: Mapping[str, Any]) -> str | None:
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        return f"schema_version: expected an integer, found {version!r}"
    if not 1 <= version <= SCHEMA_VERSION:
        return f"schema_version: expected 1 to {SCHEMA_VERSION}, found {version}"
    return None


def check_result(
    data: Mapping[str, Any], path: Path | str, experiment: Experiment | None = None
) -> ResultCheck:
    """Check the content of a ``result.json``: its format, its digest, and its verdict
    judged again by the current code.

    Parameters
    ----------
    data : mapping
        The parsed content of the file.
    path : Path
        Where it was read (``run_dir`` of the result is its folder).
    experiment : Experiment, optional
        The experiment whose judge applies (default: the registered experiment the result
        names; when it is not registered the result is ``stale``).

    Returns
    -------
    ResultCheck
        The status, the result when it could be read, and the problem in one line.
    """
    path = Path(path)
    problem = _digest_problem(data)
    if problem is not None:
        return ResultCheck(path, "tampered", problem=f"tampered or damaged: {problem}")
    problem = _schema_problem(data)
    if problem is not None:
        return ResultCheck(path, "damaged", problem=problem)
    try:
        result = RunResult.from_dict(data, run_dir=path.parent, source="result")
    except NtklabValueError as exc:
        return ResultCheck(path, "damaged", problem=str(exc).removeprefix("result: "))
    sealed = DIGEST_FIELD in data
    if experiment is None:
        from .registry import get_experiment

        try:
            experiment = get_experiment(result.experiment)
        except NtklabValueError:
            return ResultCheck(
                path,
                "stale",
                result,
                f"experiment: {result.experiment!r} is not registered by the current code, "
                "so nothing can judge it",
            )
    elif experiment.name != result.experiment:
        return ResultCheck(
            path,
            "damaged",
            result,
            f"experiment: expected {experiment.name!r}, found {result.experiment!r}",
        )
    unsealed = "" if sealed else "no content digest (written before results were sealed)"
    if result.verdict == "ERROR" and not result.metrics:
        return ResultCheck(path, "valid" if sealed else "unsealed", result, unsealed)
    try:
        again = judge_recorded(result, experiment)
    except NtklabValueError as exc:
        return ResultCheck(path, "stale", result, f"judged by other code: {exc}; rerun")
    if again.criterion != result.criterion:
        return ResultCheck(
            path,
            "stale",
            result,
            f"judged by another criterion: recorded {result.criterion!r}, current "
            f"{again.criterion!r}; rerun",
            again.criterion,
        )
    for name, expected, found in (
        ("verdict", again.verdict, result.verdict),
        ("criterion_met", again.criterion_met, result.criterion_met),
    ):
        if expected != found:
            return ResultCheck(
                path,
                "inconsistent",
                result,
                f"{name}: expected {json.dumps(expected)} (the judge on the recorded metrics), "
                f"found {json.dumps(found)}",
                again.criterion,
            )
    return ResultCheck(path, "valid" if sealed else "unsealed", result, unsealed, again.criterion)


def check_result_file(path: Path | str, experiment: Experiment | None = None) -> ResultCheck:
    """Read and check a ``result.json`` (see :func:`check_result`); an unreadable, truncated
    or non-JSON file is ``damaged``.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> (folder / "result.json").write_text('{"verdict": "PA')
    15
    >>> check_result_file(folder / "result.json").status
    'damaged'
    """
    path = Path(path)
    try:
        data = _read_json(path)
    except OSError as exc:
        return ResultCheck(path, "damaged", problem=f"cannot be read ({exc.strerror or exc})")
    except NtklabValueError as exc:
        return ResultCheck(path, "damaged", problem=str(exc).removeprefix(f"{path}: "))
    return check_result(data, path, experiment)
