"""The record of a run, as written to ``result.json`` and read back.

``result.json`` is strict JSON (non-finite numbers are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``). Its fields, one per attribute of :class:`RunResult`
except ``run_dir`` and ``reused`` (which depend on where and how it is read)::

    schema_version, experiment, claim_id, claim, scale, config_hash, run_key, code,
    config, metrics, criterion, verdict, criterion_met, summary, dataset, notes, versions, seed,
    wall_time_s, started_at, figures, arrays, error, device, dtype

(``device`` and ``dtype``, the device the run computed on and the precision of its networks
or kernels, are read as ``"cpu"`` and ``""`` from files written before they existed.)

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
import json
import math
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, cast

from ntklab.errors import NtklabValueError

from .._repr import short_repr
from .base import Metric
from .config import package_version

__all__ = [
    "RESULT_FILE",
    "SCHEMA_VERSION",
    "VERDICTS",
    "RunResult",
    "Verdict",
    "collect_versions",
]

#: The verdict of a run: PASS / FAIL at a judged scale, SMOKE for a run that is not judged
#: (``tiny``), ERROR when the experiment raised.
Verdict = Literal["PASS", "FAIL", "ERROR", "SMOKE"]
VERDICTS: tuple[Verdict, ...] = ("PASS", "FAIL", "ERROR", "SMOKE")
RESULT_FILE = "result.json"
SCHEMA_VERSION = 2

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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
        """The content of ``result.json``."""
        return {
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

    def write_json(self, path: Path) -> None:
        """Write :meth:`to_json_dict` to ``path`` (strict JSON, UTF-8)."""
        text = json.dumps(self.to_json_dict(), indent=2, ensure_ascii=False, allow_nan=False)
        path.write_text(text + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: Path | str) -> RunResult:
        """Read a ``result.json`` (``run_dir`` is its folder, ``reused`` is False).

        Raises
        ------
        NtklabValueError
            When the file is not a valid result; the message names the file and the field.
        OSError
            When the file cannot be read.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise NtklabValueError(f"{path}: expected a JSON result file ({exc})") from None
        if not isinstance(data, dict):
            raise NtklabValueError(f"{path}: expected a JSON object, received {type(data)}")
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


def _optional_bool(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise NtklabValueError(f"{where}: expected true, false or null, received {value!r}")
