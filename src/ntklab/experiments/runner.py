"""Running an experiment into its run folder, atomically, with resume.

A run of experiment ``NAME`` at scale ``SCALE`` lives in ``<out_root>/NAME/SCALE-<key>/``
where ``<key>`` is :func:`~ntklab.experiments.fingerprint.run_key`: the hash of its config
together with the fingerprint of the code that runs it. The runner

1. resolves the config and checks that ``out_root`` can be written (before running);
2. returns the existing run if its ``result.json`` is valid, unless ``force`` (resume): sealed,
   and judged again by the current judge to the verdict it records
   (:func:`~ntklab.experiments.result.check_result_file`; anything else is recomputed). A run
   made by other code lies in another folder and is not reused (it is kept, not
   overwritten), unless ``reuse_any``: then the newest finished run of the same config is
   returned, labelled ``other_code``;
3. runs the experiment in a temporary sibling folder, with torch's global RNG seeded from the
   config (and restored afterwards), timing it and catching its exceptions (verdict ERROR);
   SIGINT and SIGTERM remove the temporary folder, and temporary folders left by killed
   processes of the same host are removed at the next start (the folder's name holds the
   process id and the host name, so a shared ``--out`` never loses another host's live run);
4. saves the figures (PNG, dpi 120) and arrays (``arrays.npz``), writes ``result.json``, and
   renames the folder into place: a crash never leaves a half-written run folder.

Runs at a scale outside :data:`~ntklab.experiments.base.JUDGED_SCALES` (``tiny``) are smoke
runs: their verdict is ``SMOKE`` and their judgement is only recorded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ntklab.errors import NtklabValueError

from .base import (
    Experiment,
    ExperimentConfig,
    Outcome,
    ProgressCallback,
    RunContext,
    verdict_of,
)
from .config import config_hash, resolve_config
from .fingerprint import code_fingerprint, run_key
from .placement import device_tag, dtype_overrides, resolve_device
from .registry import get_experiment
from .result import RESULT_FILE, RunResult, check_result_file, collect_versions

if TYPE_CHECKING:
    import torch

__all__ = [
    "ARRAYS_FILE",
    "FIGURE_DPI",
    "RunInterrupted",
    "check_experiment_device",
    "remove_stale_temp_dirs",
    "run_dir_for",
    "run_experiment",
]

logger = logging.getLogger("ntklab")

ARRAYS_FILE = "arrays.npz"
FIGURE_DPI = 120


def run_dir_for(
    out_root: Path, experiment: Experiment, scale: str, key: str, device: str = ""
) -> Path:
    """The run folder ``<out_root>/<name>/<scale>-<key>``, or ``<scale>-<key>-<device>`` for
    a run on another device than the CPU (``device`` is :func:`~.placement.device_tag`)."""
    suffix = f"-{device}" if device else ""
    return Path(out_root) / experiment.name / f"{scale}-{key}{suffix}"


_TEMP_MARK = ".tmp-"
_HOST_MARK = "@"


def _host_name() -> str:
    """This machine's name as it appears in a temporary folder's name (``[A-Za-z0-9._-]``)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname() or "unknown-host")
    return host[:64] or "unknown-host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temp_owner(name: str) -> tuple[int, str] | None:
    """``(pid, host)`` of a temporary folder named ``.<run>.tmp-<pid>@<host>-<random>``;
    None for any other name (a folder of an older ntklab without the host is one)."""
    if not name.startswith(".") or _TEMP_MARK not in name:
        return None
    owner = name.split(_TEMP_MARK, 1)[1]
    pid_text, at, rest = owner.partition(_HOST_MARK)
    host = rest.rsplit("-", 1)[0]  # mkdtemp's random suffix has no "-"
    if not at or not pid_text.isdigit() or not host or "-" not in rest:
        return None
    return int(pid_text), host


def remove_stale_temp_dirs(folder: Path) -> tuple[Path, ...]:
    """Remove the temporary run folders in ``folder`` left by dead processes of this host.

    A temporary folder is named ``.<run>.tmp-<pid>@<host>-<random>``; a process killed by
    SIGKILL (or a machine that went down) leaves one behind. It is removed only when
    ``<host>`` is this machine's name and no process ``<pid>`` runs here: with a shared
    ``--out`` (``--scheduler``), another host's folder is never touched, since its process
    id means nothing here. A folder of another host (or of an older ntklab, without the
    host in its name) is left in place and logged; remove it by hand once its run is known
    to be dead. Returns the folders removed.
    """
    removed = []
    if not folder.is_dir():
        return ()
    host = _host_name()
    for child in folder.iterdir():
        owner = _temp_owner(child.name)
        if owner is None or not child.is_dir():
            if child.name.startswith(".") and _TEMP_MARK in child.name and child.is_dir():
                logger.info("keeping temporary run folder %s (no host in its name)", child)
            continue
        pid, owner_host = owner
        if owner_host != host:
            logger.info("keeping temporary run folder %s of host %s", child, owner_host)
            continue
        if pid != 0 and _pid_alive(pid):
            continue
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
        logger.info("removed stale temporary run folder %s", child)
    return tuple(removed)


class RunInterrupted(BaseException):
    """Raised inside a run when the process receives SIGTERM (SIGINT raises
    :class:`KeyboardInterrupt`); the runner removes its temporary folder and re-raises."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into :class:`RunInterrupted` for the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise RunInterrupted(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _out_error(out_root: Path, reason: str) -> NtklabValueError:
    return NtklabValueError(
        f"out_root (--out): expected a writable directory, received {str(out_root)!r}: {reason}"
    )


def _make_temp_dir(out_root: Path, run_dir: Path) -> Path:
    """Create the run's temporary sibling folder, or explain why ``out_root`` is unusable."""
    if out_root.exists() and not out_root.is_dir():
        raise _out_error(out_root, "it is a file, not a directory")
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_dirs(run_dir.parent)
        prefix = f".{run_dir.name}{_TEMP_MARK}{os.getpid()}{_HOST_MARK}{_host_name()}-"
        temp = Path(tempfile.mkdtemp(prefix=prefix, dir=run_dir.parent))
        temp.chmod(0o755)  # mkdtemp creates 0700; run folders are meant to be shared
        return temp
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _out_error(out_root, f"cannot write {str(run_dir.parent)!r} ({reason})") from exc


def _load_reusable(
    run_dir: Path, experiment: Experiment, config: ExperimentConfig, device: str = "cpu"
) -> RunResult | None:
    """The finished run in ``run_dir`` if there is a valid one for ``config`` on ``device``.

    The file is checked as every reader checks it (:func:`~.result.check_result_file`): only
    a sealed result whose verdict the current judge gives again on its metrics is reused; a
    tampered, damaged, unsealed, stale or inconsistent one is recomputed (and replaced).
    """
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None
    check = check_result_file(path, experiment)
    if check.status != "valid" or check.result is None:
        logger.warning("not reusing %s, rerunning: %s", path, check.line())
        return None
    result = check.result
    if result.verdict == "ERROR":
        logger.info("previous run in %s ended in ERROR, rerunning", run_dir)
        return None
    if result.config != config.model_dump(mode="json"):
        logger.warning("config in %s differs from the requested one, rerunning", path)
        return None
    if result.device != device:
        logger.info("run in %s was made on %s, not %s, rerunning", path, result.device, device)
        return None
    return result


def _load_any_code(
    run_dir: Path,
    experiment: Experiment,
    scale: str,
    digest: str,
    config: ExperimentConfig,
    device: str = "cpu",
) -> RunResult | None:
    """The newest finished run of the same config on the same device by any code (for
    ``reuse_any``)."""
    candidates = []
    folder = run_dir.parent
    if not folder.is_dir():
        return None
    for child in folder.glob(f"{scale}-*"):
        if child.name.startswith("."):
            continue
        result = _load_reusable(child, experiment, config, device)
        if result is not None and result.config_hash == digest:
            candidates.append(result)
    if not candidates:
        return None
    newest = max(candidates, key=lambda r: r.started_at)
    return newest.as_reused(other_code=newest.run_key != _run_key_of(run_dir))


def _run_key_of(run_dir: Path) -> str:
    """The run key in a run folder's name ``<scale>-<key>[-<device>]``."""
    return run_dir.name.split("-", 1)[1].split("-")[0]


def _checked_progress(callback: ProgressCallback | None) -> ProgressCallback:
    """Wrap a progress callback so that the fraction is clamped to [0, 1]."""
    if callback is None:
        return lambda fraction, message: None
    inner = callback

    def progress(fraction: float, message: str) -> None:
        inner(min(1.0, max(0.0, float(fraction))), str(message))

    return progress


@contextlib.contextmanager
def _seeded_torch(seed: int) -> Iterator[None]:
    """Seed torch's global CPU RNG for the block and restore it afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _call_experiment(
    experiment: Experiment, config: ExperimentConfig, ctx: RunContext
) -> tuple[Outcome | None, str | None, float]:
    """Run the experiment; return ``(outcome, traceback, seconds)``."""
    start = time.perf_counter()
    try:
        with _seeded_torch(config.seed):
            outcome = experiment.run(config, ctx)
        if not isinstance(outcome, Outcome):
            raise TypeError(
                f"run function of {experiment.name!r}: expected an Outcome, "
                f"received {type(outcome).__name__}"
            )
    except Exception:
        logger.info("experiment %s raised", experiment.name, exc_info=True)
        return None, traceback.format_exc(), time.perf_counter() - start
    return outcome, None, time.perf_counter() - start


def _close_figure(figure: Any) -> None:
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)


def _save_figures(outcome: Outcome, folder: Path, caption: str = "") -> tuple[str, ...]:
    """Save every figure as ``name.png`` (dpi 120) with ``caption`` (the experiment, scale
    and data set) in its bottom-left corner, close it, and return the file names."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = []
    try:
        for name, figure in outcome.figures.items():
            if not isinstance(figure, Figure):
                raise TypeError(
                    f"Outcome figures[{name!r}]: expected a matplotlib Figure, "
                    f"received {type(figure).__name__}"
                )
            FigureCanvasAgg(figure)
            if caption:
                figure.text(0.005, 0.005, caption, fontsize=6, color="0.35", va="bottom")
            figure.savefig(folder / f"{name}.png", dpi=FIGURE_DPI, format="png")
            names.append(f"{name}.png")
    finally:
        for figure in outcome.figures.values():
            _close_figure(figure)
    return tuple(names)


def _save_arrays(outcome: Outcome, folder: Path) -> str | None:
    """Save the arrays in ``arrays.npz``; return its name, or None when there are none."""
    if not outcome.arrays:
        return None
    import numpy as np

    converted: dict[str, np.ndarray[Any, Any]] = {}
    for name, array in outcome.arrays.items():
        detach = getattr(array, "detach", None)
        value = detach().cpu().numpy() if callable(detach) else array
        converted[name] = np.asarray(value)
    np.savez_compressed(folder / ARRAYS_FILE, **converted)  # type: ignore[arg-type]
    return ARRAYS_FILE


def _remove_children(folder: Path, keep: set[Path]) -> None:
    for child in folder.iterdir():
        if child not in keep:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _materialize(
    outcome: Outcome | None, error: str | None, folder: Path, caption: str = ""
) -> tuple[tuple[str, ...], str | None, str | None]:
    """Save figures and arrays; return ``(figures, arrays_file, error)``.

    A failure here is the experiment's (a figure that cannot be drawn, an array that cannot
    be converted): it becomes an ERROR, and what was saved of the outcome is removed.
    """
    if outcome is None:
        return (), None, error
    before = set(folder.iterdir())
    try:
        return _save_figures(outcome, folder, caption), _save_arrays(outcome, folder), None
    except Exception:
        logger.info("saving the outcome failed", exc_info=True)
        _remove_children(folder, before)
        return (), None, traceback.format_exc()


def _install(temp_dir: Path, run_dir: Path) -> None:
    """Rename ``temp_dir`` to ``run_dir``, replacing an existing run folder."""
    if not run_dir.exists():
        try:
            os.replace(temp_dir, run_dir)
            return
        except OSError:
            if not run_dir.exists():
                raise
    old = run_dir.with_name(f".{run_dir.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(run_dir, old)
    try:
        os.replace(temp_dir, run_dir)
    except OSError:
        os.replace(old, run_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "error"


def _notes(outcome: Outcome | None) -> tuple[str, ...]:
    """The outcome's notes, plus one per metric that is not a finite number."""
    if outcome is None:
        return ()
    flagged = tuple(
        f"metric {m.name!r} is not finite ({m.value})" for m in outcome.metrics if not m.finite
    )
    for note in flagged:
        logger.warning("%s", note)
    return outcome.notes + flagged


def _build_result(
    experiment: Experiment,
    scale: str,
    config: ExperimentConfig,
    digest: str,
    run_dir: Path,
    started_at: str,
    seconds: float,
    outcome: Outcome | None,
    outputs: tuple[tuple[str, ...], str | None, str | None],
    ctx: RunContext,
) -> RunResult:
    figures, arrays, error = outputs
    ok = outcome is not None and error is None
    criterion = experiment.criterion
    criterion_met: bool | None = None
    dataset = experiment.dataset
    if ok and outcome is not None:
        criterion_met = outcome.passed
        dataset = outcome.dataset or experiment.dataset
        criterion = outcome.criterion or experiment.criterion
        verdict: Any = verdict_of(outcome.passed, outcome.controls_failed, scale)
        if verdict == "SMOKE":
            summary = f"smoke run, not judged: {outcome.summary}"
        elif verdict == "ERROR":
            summary = "the estimator failed its control: " + "; ".join(outcome.controls_failed)
        else:
            summary = outcome.summary
    else:
        verdict = "ERROR"
        summary = f"error: {_last_line(error or '')}"
    return RunResult(
        experiment=experiment.name,
        claim_id=experiment.claim_id,
        claim=experiment.claim,
        scale=scale,
        config=config.model_dump(mode="json"),
        metrics=outcome.metrics if ok and outcome is not None else (),
        criterion=criterion,
        verdict=verdict,
        criterion_met=criterion_met,
        dataset=dataset,
        summary=summary,
        notes=_notes(outcome),
        versions=collect_versions(),
        seed=config.seed,
        wall_time_s=round(seconds, 6),
        started_at=started_at,
        figures=figures,
        run_dir=run_dir,
        reused=False,
        error=error,
        arrays=arrays,
        config_hash=digest,
        run_key=_run_key_of(run_dir),
        code=code_fingerprint().as_dict(),
        device=ctx.device,
        dtype=ctx.dtype,
    )


def check_experiment_device(experiment: Experiment, device: object) -> torch.device:
    """``device`` resolved on this machine (:func:`~.placement.resolve_device`), refused for
    an experiment that runs on the CPU only (:attr:`~.base.Experiment.uses_device`)."""
    dev = resolve_device(device)
    if dev.type != "cpu" and not experiment.uses_device:
        raise NtklabValueError(
            f"device (--device): experiment {experiment.name!r} runs on the CPU only (its "
            f"measure does not place its tensors on a device), got {str(dev)!r}"
        )
    return dev


def run_experiment(
    name_or_experiment: str | Experiment,
    scale: str = "quick",
    overrides: Mapping[str, str] = MappingProxyType({}),
    out_root: Path | str = Path("ntklab-runs"),
    force: bool = False,
    progress: ProgressCallback | None = None,
    reuse_any: bool = False,
    device: str = "cpu",
    dtype: str | None = None,
) -> RunResult:
    """Run an experiment (or reuse its earlier run) and write its run folder.

    Parameters
    ----------
    name_or_experiment : str or Experiment
        A registered name or an :class:`~ntklab.experiments.Experiment`.
    scale : str
        ``"tiny"``, ``"quick"`` or ``"paper"`` (any scale the experiment defines).
    overrides : mapping of str to str
        ``--set key=value`` overrides (see :func:`~ntklab.experiments.resolve_config`).
    out_root : Path
        Root of the run folders (the CLI's ``--out``).
    force : bool
        Rerun even when a finished run with the same config and code exists.
    progress : callable, optional
        ``progress(fraction, message)``, called by the experiment and at start and end.
    reuse_any : bool
        Reuse a finished run of the same config made by other code (another version of
        ntklab's source, torch or numpy) when there is no run by this code; the result is
        then labelled ``other_code``. Off by default: a code change recomputes.
    device : str
        Where the run computes (the CLI's ``--device``): ``"cpu"``, ``"cuda"``, ``"cuda:1"``,
        ``"mps"``; checked against the machine and the experiment
        (:attr:`~ntklab.experiments.Experiment.uses_device`) before anything runs. A run on
        another device than the CPU has its own run folder ``<scale>-<key>-<device>``.
    dtype : {"float32", "float64"}, optional
        The precision of the networks or kernels (the CLI's ``--dtype``): sets the
        experiment's :attr:`~ntklab.experiments.Experiment.dtype_field` (default: the
        config's). Refused for an experiment with a fixed precision other than ``dtype``.

    Returns
    -------
    RunResult
        The result; ``verdict`` is ``"ERROR"`` (with the traceback in ``error``) when the
        experiment raised, ``"SMOKE"`` at a scale that is not judged. ``reused`` tells
        whether it was found on disk, ``other_code`` whether other code made it.

    Raises
    ------
    NtklabValueError
        Before anything runs: unknown experiment or scale, bad override, an ``out_root``
        that cannot be written, a device this machine does not have or the experiment does
        not run on, or a ``dtype`` it does not take.
    OSError
        When writing the finished run fails; no run folder is left behind.
    """
    experiment = (
        name_or_experiment
        if isinstance(name_or_experiment, Experiment)
        else get_experiment(name_or_experiment)
    )
    dev = check_experiment_device(experiment, device)
    config = resolve_config(experiment, scale, dtype_overrides(experiment, dtype, overrides))
    digest = config_hash(experiment, scale, config)
    out_root = Path(out_root)
    run_dir = run_dir_for(out_root, experiment, scale, run_key(digest), device_tag(dev))
    report = _checked_progress(progress)

    if not force:
        previous = _load_reusable(run_dir, experiment, config, str(dev))
        if previous is None and reuse_any:
            previous = _load_any_code(run_dir, experiment, scale, digest, config, str(dev))
        elif previous is not None:
            previous = previous.as_reused()
        if previous is not None:
            logger.info("reusing %s", previous.run_dir)
            report(1.0, "reused")
            return previous

    with _sigterm_interrupts():
        temp_dir = _make_temp_dir(out_root, run_dir)
        try:
            ctx = RunContext(
                out_dir=temp_dir,
                progress=report,
                experiment=experiment.name,
                scale=scale,
                seed=config.seed,
                logger=logger.getChild(experiment.name),
                device=str(dev),
                dtype=experiment.run_dtype(config),
            )
            now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            started_at = now.replace("+00:00", "Z")
            logger.info("running %s at scale %s into %s", experiment.name, scale, run_dir)
            report(0.0, "starting")
            outcome, error, seconds = _call_experiment(experiment, config, ctx)
            dataset = (outcome.dataset if outcome else "") or experiment.dataset
            caption = f"{experiment.name}, scale {scale}" + (f": {dataset}" if dataset else "")
            outputs = _materialize(outcome, error, temp_dir, caption)
            result = _build_result(
                experiment,
                scale,
                config,
                digest,
                run_dir,
                started_at,
                seconds,
                outcome,
                outputs,
                ctx,
            )
            result.write_json(temp_dir / RESULT_FILE)
            _install(temp_dir, run_dir)
        except BaseException:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
    logger.info("%s: %s (%.2f s)", experiment.name, result.verdict, seconds)
    report(1.0, result.verdict)
    return result
