"""The ``ntklab`` command: list, show, run and reproduce the experiments; table, report and
verify the committed results.

Exit codes: 0 when every verdict is PASS or SMOKE (a ``tiny`` run, not judged); 1 when a
verdict is FAIL or ERROR or a run or its report could not be written, when ``table`` or
``report`` refused a result (tampered, damaged, or a verdict that does not follow from its
metrics), and when ``verify`` found any problem; 2 on usage errors (unknown experiment or
scale, a ``--set`` or scale value that breaks the config's rules, a key set twice, unwritable
``--out``, a results folder that does not exist), reported in one line on stderr without a
traceback, before anything is computed.

Tables keep their full width when the output is a file or a pipe (rich's 80 columns apply
only to terminals, whose width is used).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ntklab.errors import NtklabError

if TYPE_CHECKING:
    from ntklab.experiments import Experiment, RunResult
    from ntklab.experiments.result import ResultCheck

__all__ = ["app", "main"]

DEFAULT_OUT = Path("ntklab-runs")
_VERDICT_STYLE = {
    "PASS": "bold green",
    "FAIL": "bold red",
    "ERROR": "bold yellow",
    "SMOKE": "bold cyan",
}
_VERDICT_LABEL = {"SMOKE": "SMOKE (smoke run, not judged)"}
#: Verdicts that make the command exit with status 1.
_BAD_VERDICTS = frozenset({"FAIL", "ERROR"})
#: Width of the output when it is not a terminal: wide enough that no table is cut.
_PIPE_WIDTH = 100_000

#: The ``ntklab`` command line (a :class:`typer.Typer`): ``list``, ``show``, ``run``,
#: ``reproduce``, ``table``, ``report`` and ``verify``; :func:`main` runs it.
app = typer.Typer(
    name="ntklab",
    help="Reproducible experiments on Neural Tangent Kernel theory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

OutOption = Annotated[
    Path,
    typer.Option("--out", help="Folder of the run folders (and of the reports)."),
]
ForceOption = Annotated[
    bool,
    typer.Option("--force", help="Rerun even if a run with the same config and code exists."),
]
CommitOption = Annotated[
    Path | None,
    typer.Option(
        "--commit-to",
        metavar="RESULTS",
        help="Also copy each finished quick or paper result to RESULTS/<scale>/<name>.json "
        "(the committed results that `ntklab table` tables).",
    ),
]
ReuseAnyOption = Annotated[
    bool,
    typer.Option(
        "--reuse-any",
        help="Reuse a finished run of the same config made by other code (another ntklab "
        "source, torch or numpy) instead of recomputing; it is labelled as such.",
    ),
]
ScaleOption = Annotated[
    str, typer.Option("--scale", help="Scale: tiny (seconds), quick (minutes) or paper.")
]
DeviceOption = Annotated[
    str,
    typer.Option(
        "--device",
        metavar="DEVICE",
        help="Device to compute on: cpu, cuda, cuda:N or mps (checked before the run; "
        "experiments that run on a GPU say so in `ntklab show NAME`).",
    ),
]
DtypeOption = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        metavar="float32|float64",
        help="Precision of the experiment's networks or kernels (default: its config's; "
        "float32 is the GPU-friendly choice). Refused by experiments with a fixed precision.",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Run on the Dask scheduler at ADDRESS (tcp://host:8786); needs ntklab[dask] and "
        "an --out every worker can write.",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        metavar="N",
        help="Run on a local Dask cluster of N worker processes (needs ntklab[dask]).",
    ),
]


def _is_tty() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def _stdout() -> Console:
    """The console of the results: the terminal's width, or no limit in a file or a pipe."""
    if _is_tty():
        return Console(highlight=False)
    return Console(highlight=False, width=_PIPE_WIDTH)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _usage_error(message: str) -> NoReturn:
    """Print a one-line error to stderr and exit with status 2."""
    _stderr().print(Text("error: ", style="bold red") + Text(" ".join(message.split())))
    raise typer.Exit(2)


def _version() -> str:
    try:
        return metadata.version("ntklab")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _version_callback(value: bool) -> None:
    if value:
        _stdout().print(f"ntklab {_version()}")
        raise typer.Exit()


def _configure_logging(verbose: bool) -> None:
    if not verbose:
        return
    from rich.logging import RichHandler

    log = logging.getLogger("ntklab")
    if not any(isinstance(h, RichHandler) for h in log.handlers):
        log.addHandler(RichHandler(console=_stderr(), show_path=False))
    log.setLevel(logging.INFO)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log what the runs do to stderr.")
    ] = False,
) -> None:
    """Reproducible experiments on Neural Tangent Kernel theory."""
    _configure_logging(verbose)


def _texts(*values: str) -> list[Text]:
    """Table cells shown literally (rich would read ``[...]`` in a str as markup)."""
    return [Text(v) for v in values]


def _verdict_text(verdict: str) -> Text:
    """The verdict in its style; SMOKE spelled out as not judged."""
    return Text(_VERDICT_LABEL.get(verdict, verdict), style=_VERDICT_STYLE.get(verdict, "bold"))


def _code_line(result: RunResult) -> str:
    """The run key and the code fingerprint it is made of, in one line."""
    code = result.code
    if not code.get("digest"):
        return f"run key: {result.run_key or '—'} (no code fingerprint recorded)"
    return (
        f"run key: {result.run_key} = config {result.config_hash} + code {code['digest']} "
        f"(source {code.get('source', '?')}, torch {code.get('torch', '?')}, "
        f"numpy {code.get('numpy', '?')})"
    )


def _status(result: RunResult) -> str:
    """``"12.3 s"``, ``"reused"`` or ``"reused, made by other code"``."""
    if not result.reused:
        return f"{result.wall_time_s:.1f} s"
    return "reused, made by other code" if result.other_code else "reused"


def _metrics_table(result: RunResult) -> Table:
    from ntklab.report._format import format_ci, format_value

    table = Table(title="Metrics", title_justify="left")
    for column in ("metric", "value", "CI", "predicted", "unit", "note"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for m in result.metrics:
        table.add_row(
            *_texts(
                m.name,
                format_value(m.value),
                format_ci(m.ci_low, m.ci_high),
                m.predicted or "—",
                m.unit,
                m.note,
            )
        )
    return table


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _reason(result: RunResult) -> str:
    """Why a run did not pass, in one line."""
    if result.verdict == "ERROR":
        return f"{_last_line(result.error) or result.summary} (traceback in result.json)"
    return result.summary


@contextmanager
def _progress_bar() -> Iterator[Progress]:
    console = _stderr()
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[message]}", style="dim"),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        yield progress


def _dask_client(scheduler: str | None, workers: int | None) -> AbstractContextManager[Any]:
    """``ntklab.distributed.connect`` for --scheduler / --workers (usage errors exit 2)."""
    from ntklab.distributed import connect

    if scheduler is not None and workers is not None:
        _usage_error("--scheduler, --workers: expected at most one of them, got both")
    if workers is not None and workers < 1:
        _usage_error(f"--workers: expected a number of workers >= 1, got {workers}")
    return connect(scheduler, workers)


def _progress_callback(progress: Progress, task: TaskID) -> Callable[[float, str], None]:
    def update(fraction: float, message: str) -> None:
        progress.update(task, completed=100.0 * fraction, message=message)

    return update


@app.command("list")
def list_command() -> None:
    """List the registered experiments."""
    from ntklab.experiments import list_experiments

    experiments = list_experiments()
    table = Table(title=f"{len(experiments)} registered experiments", title_justify="left")
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("claim", no_wrap=True)
    table.add_column("summary")
    table.add_column("scales")
    for e in experiments:
        table.add_row(*_texts(e.name, e.claim_id, e.short_claim, ", ".join(e.scales)))
    _stdout().print(table)


def _format_value(value: Any) -> str:
    """A config value as ``--set`` would take it: ``4,8``, ``true``, ``none``, ``0.001``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple | list):
        return ",".join(_format_value(v) for v in value) if value else "[]"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


@app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Experiment name (see `ntklab list`).")],
) -> None:
    """Show an experiment's claim, criterion and config keys, with their value at each scale."""
    from ntklab.experiments import JUDGED_SCALES, get_experiment, resolve_config
    from ntklab.experiments.config import config_checks, config_fields

    try:
        experiment = get_experiment(name)
    except NtklabError as exc:
        _usage_error(str(exc))
    config_type = experiment.config_type
    specs = config_fields(config_type)
    values: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for scale, overrides in experiment.scales.items():
        try:
            values[scale] = dict(resolve_config(experiment, scale))
        except NtklabError as exc:
            problems.append(str(exc))
            values[scale] = {s.key: overrides.get(s.key, s.default) for s in specs}

    console = _stdout()
    console.print(Text(f"{experiment.name} ({experiment.claim_id})", style="bold"))
    console.print(Text("claim: ", style="bold") + Text(" ".join(experiment.claim.split())))
    console.print(
        Text("criterion: ", style="bold")
        + Text(" ".join(experiment.criterion.split()))
        + Text(
            f" (judged at scales {', '.join(s for s in JUDGED_SCALES if s in experiment.scales)}"
            "; each run records the criterion as applied to its grid)",
            style="dim",
        )
    )
    console.print(Text("runs on: ", style="bold") + Text(_placement_text(experiment)))
    table = Table(title=f"Config keys ({config_type.__name__})", title_justify="left")
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("type")
    table.add_column("default")
    table.add_column("constraints")
    for scale in experiment.scales:
        table.add_column(scale)
    if any(s.description for s in specs):
        table.add_column("about")
    for spec in specs:
        row = [Text(spec.key), Text(spec.type), Text(_format_value(spec.default))]
        row.append(Text("; ".join(spec.constraints) or "—"))
        for scale, overrides in experiment.scales.items():
            shown = Text(_format_value(values[scale].get(spec.key)))
            shown.stylize("bold" if spec.key in overrides else "dim")
            row.append(shown)
        if any(s.description for s in specs):
            row.append(Text(spec.description))
        table.add_row(*row)
    console.print(table)
    if console.color_system is not None:
        console.print(Text("Bold: the scale's own value; dim: the default.", style="dim"))
    for check in config_checks(config_type):
        console.print(Text(f"check across keys: {check}"))
    if problems:
        err = _stderr()
        for problem in problems:
            err.print(Text("error: ", style="bold red") + Text(" ".join(problem.split())))
        raise typer.Exit(1)


def _placement_text(experiment: Experiment) -> str:
    """Where and in which precision ``experiment`` runs (``--device``, ``--dtype``)."""
    where = "cpu, cuda, mps (--device)" if experiment.uses_device else "cpu only"
    if experiment.dtype_field is None:
        return f"{where}; fixed precision {experiment.fixed_dtype}"
    return f"{where}; --dtype sets {experiment.dtype_field}"


def _write_run_report(result: RunResult) -> Path:
    """Write ``report.md`` and ``report.html`` of one run into its run folder."""
    from ntklab.report import write_report

    _, html_path = write_report([result], result.run_dir)
    return html_path


@app.command("run")
def run_command(
    name: Annotated[str, typer.Argument(help="Experiment name (see `ntklab list`).")],
    scale: ScaleOption = "quick",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Override a config field (repeatable): --set n=64 --set widths=64,128.",
        ),
    ] = None,
    out: OutOption = DEFAULT_OUT,
    force: ForceOption = False,
    reuse_any: ReuseAnyOption = False,
    scheduler: SchedulerOption = None,
    workers: WorkersOption = None,
    commit_to: CommitOption = None,
    device: DeviceOption = "cpu",
    dtype: DtypeOption = None,
) -> None:
    """Run one experiment; print its verdict, metrics, run key and run folder, and write its
    report (report.html, report.md) in the run folder."""
    from ntklab.experiments import get_experiment, resolve_config, run_experiment
    from ntklab.experiments.placement import check_dtype, dtype_overrides
    from ntklab.experiments.runner import check_experiment_device

    try:
        if dtype is not None:
            check_dtype(dtype)
        overrides = _set_options(set_ or [])
        dev = check_experiment_device(get_experiment(name), device)
        if scheduler is not None or workers is not None:
            if reuse_any:
                _usage_error("--reuse-any: not available with --scheduler or --workers")
            if dev.type != "cpu":
                _usage_error("--device: only cpu with --scheduler or --workers")
            overrides = dtype_overrides(get_experiment(name), dtype, overrides)
            resolve_config(get_experiment(name), scale, overrides)  # before any worker starts
            from ntklab.distributed import SweepTask, run_sweep

            with _dask_client(scheduler, workers) as client:
                (result,) = run_sweep([SweepTask(name, scale, overrides)], client, out, force=force)
        else:
            with _progress_bar() as progress:
                task = progress.add_task(name, total=100.0, message="")
                result = run_experiment(
                    name,
                    scale=scale,
                    overrides=overrides,
                    out_root=out,
                    force=force,
                    progress=_progress_callback(progress, task),
                    reuse_any=reuse_any,
                    device=str(dev),
                    dtype=dtype,
                )
    except NtklabError as exc:
        _usage_error(str(exc))
    except OSError as exc:
        _stderr().print(Text(f"error: could not write the run of {name}: {exc}", style="red"))
        raise typer.Exit(1) from None

    console = _stdout()
    header = _verdict_text(result.verdict) + Text(
        f"  {result.experiment} ({result.claim_id}), scale {result.scale}"
    )
    console.print(header)
    console.print(Text(result.summary))
    if result.verdict == "SMOKE":
        console.print(Text(f"criterion, not judged at scale {result.scale}: {result.criterion}"))
    else:
        console.print(Text(f"criterion: {result.criterion}"))
    if result.metrics:
        console.print(_metrics_table(result))
    for note in result.notes:
        console.print(Text(f"note: {note}", style="dim"))
    console.print(Text(f"run folder: {result.run_dir} ({_status(result)})"))
    console.print(Text(f"device: {result.device}, dtype: {result.dtype or 'not recorded'}"))
    console.print(Text(_code_line(result)))
    if result.other_code:
        from ntklab.experiments.fingerprint import code_fingerprint

        console.print(
            Text(
                f"made by other code: this code is {code_fingerprint().digest}; "
                "rerun without --reuse-any to recompute",
                style="yellow",
            )
        )
    report_written = True
    try:
        console.print(Text(f"report: {_write_run_report(result)}"))
    except OSError as exc:
        _stderr().print(Text(f"error: could not write the report of {name}: {exc}", style="red"))
        report_written = False
    if commit_to is not None:
        _commit(result, commit_to, console)
    if result.verdict in _BAD_VERDICTS:
        _stderr().print(
            _verdict_text(result.verdict) + Text(f" {result.experiment}: {_reason(result)}")
        )
    if result.verdict in _BAD_VERDICTS or not report_written:
        raise typer.Exit(1)


def _commit(result: RunResult, root: Path, console: Console) -> None:
    """Copy a judged result to ``root/<scale>/<name>.json`` (smoke and ERROR runs are not)."""
    from ntklab.report.claims import commit_result

    if result.verdict not in ("PASS", "FAIL") or result.scale not in ("quick", "paper"):
        console.print(Text(f"not committed ({result.verdict} at scale {result.scale})"))
        return
    console.print(Text(f"committed: {commit_result(result, root)}"))


def _set_options(items: Sequence[str]) -> dict[str, str]:
    """``--set`` items as overrides, refusing a key set twice (``n=1`` and ``n=2``, or
    ``n-train=1`` and ``n_train=2``): which one was meant cannot be told."""
    from ntklab.errors import NtklabValueError
    from ntklab.experiments import parse_set_options

    first: dict[str, str] = {}
    for item in items:
        key = item.partition("=")[0].strip()
        same = key.replace("-", "_")
        if key and same in first:
            raise NtklabValueError(
                f"--set {key}: expected each key at most once, received {first[same]!r} "
                f"and {item!r}"
            )
        first[same] = item
    return parse_set_options(items)


def _print_problems(checks: Sequence[ResultCheck], command: str) -> bool:
    """Print one line on stderr per result that is not valid; True when one is refused
    (tampered, damaged or inconsistent)."""
    err = _stderr()
    for check in checks:
        if check.status == "valid":
            continue
        style = "red" if check.refused else "yellow"
        label = "refused" if check.refused else "note"
        err.print(Text(f"{label}: ", style=f"bold {style}") + Text(check.line(), style=style))
    refused = [c for c in checks if c.refused]
    if refused:
        err.print(
            Text(
                f"error: {command}: {len(refused)} result(s) refused (not tabled); "
                "`ntklab verify` lists every problem",
                style="bold red",
            )
        )
    return bool(refused)


@app.command("table")
def table_command(
    results: Annotated[
        Path, typer.Argument(help="Folder of committed results (quick/ and paper/).")
    ] = Path("results"),
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            metavar="FILE",
            help="Replace the generated block of FILE (the README) instead of printing.",
        ),
    ] = None,
) -> None:
    """Print the claims table made from the committed results (Markdown), or write it into
    FILE between its claims-table markers.

    Every result is checked as it is read (digest, format, verdict judged again): a stale
    one is shown as stale, a tampered, damaged or inconsistent one as refused, each with a
    line on stderr; the command then exits 1 (after writing the table)."""
    from ntklab.report.claims import claim_rows, render_claims_table, replace_table

    try:
        rows = claim_rows(results)
        table = render_claims_table(rows)
        text = None
        if write is not None:
            text = replace_table(write.read_text(encoding="utf-8"), table)
    except NtklabError as exc:
        _usage_error(str(exc))
    except OSError as exc:
        _usage_error(f"--write: cannot read {str(write)!r} ({exc.strerror or exc})")
    if write is None or text is None:
        sys.stdout.write(table)
    else:
        write.write_text(text, encoding="utf-8")
        _stdout().print(Text(f"claims table written to {write}"))
    if _print_problems([c for row in rows for c in row.checks.values()], "table"):
        raise typer.Exit(1)


@app.command("report")
def report_command(
    results: Annotated[
        Path, typer.Argument(help="Folder of committed results (quick/ and paper/).")
    ] = Path("results"),
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder of the claims report (index.html, one page per claim)."),
    ] = Path("ntklab-report"),
    runs: Annotated[
        Path,
        typer.Option(
            "--runs",
            help="Folder of run folders where the figures of the committed runs are looked up.",
        ),
    ] = DEFAULT_OUT,
) -> None:
    """Write the claims report of the committed results: index.html (and index.md) with the
    quick and paper scale side by side, and one page per claim (reported figure, quick and
    paper results, all metrics, figures when the run folders are in --runs)."""
    from ntklab.experiments import list_experiments
    from ntklab.experiments.fingerprint import code_fingerprint
    from ntklab.report.claim_pages import write_claims_report
    from ntklab.report.claims import check_committed

    try:
        checks = check_committed(results, list_experiments())
        written = write_claims_report(
            results, out, runs_root=runs, current_code=code_fingerprint().digest
        )
    except NtklabError as exc:
        _usage_error(str(exc))
    except OSError as exc:
        _stderr().print(Text(f"error: could not write the claims report: {exc}", style="red"))
        raise typer.Exit(1) from None
    _stdout().print(Text(f"claims report: {written[0]} ({len(written) // 2 - 1} claim pages)"))
    if _print_problems(list(checks.values()), "report"):
        raise typer.Exit(1)


@app.command("verify")
def verify_command(
    results: Annotated[
        Path,
        typer.Argument(help="Folder of results: committed results, run folders, or both."),
    ] = Path("results"),
) -> None:
    """Check every result under RESULTS: its content digest, its format, and its verdict
    and criterion judged again by the current code from its metrics and config.

    Prints one line per problem (file, what, expected vs found) and exits 1 when there is
    one (a result that is tampered, damaged, inconsistent, unsealed, or stale: judged by
    another criterion than today's; a stale result kept in a folder named ``history`` is
    not a problem); prints a summary and exits 0 when every result checks out."""
    from ntklab.report.claims import check_folder

    try:
        checks = check_folder(results)
    except NtklabError as exc:
        _usage_error(str(exc))
    history = [
        c
        for c in checks
        if c.status == "stale" and "history" in c.path.relative_to(results).parts[:-1]
    ]
    problems = [c for c in checks if c.status != "valid" and c not in history]
    err = _stderr()
    for check in problems:
        err.print(Text(check.line(), style="red"))
    counts: dict[str, int] = {}
    for check in checks:
        counts[check.status] = counts.get(check.status, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    kept = f" ({len(history)} stale kept as history)" if history else ""
    if not checks:
        err.print(Text(f"error: verify: no result files under {results}", style="bold red"))
        raise typer.Exit(1)
    if problems:
        err.print(
            Text(
                f"{len(problems)} problem(s) in {len(checks)} results under {results}: "
                f"{tally}{kept}",
                style="bold red",
            )
        )
        raise typer.Exit(1)
    _stdout().print(Text(f"{len(checks)} results under {results} verified: {tally}{kept}"))


def _select(only: Sequence[str]) -> list[Experiment]:
    from ntklab.experiments import get_experiment, list_experiments

    if not only:
        return list_experiments()
    return [get_experiment(name) for name in dict.fromkeys(only)]


def _summary_table(results: Sequence[RunResult]) -> Table:
    table = Table(title="Claims", title_justify="left")
    table.add_column("claim", no_wrap=True)
    table.add_column("experiment", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("measured")
    table.add_column("time", justify="right", no_wrap=True)
    for r in results:
        table.add_row(
            Text(r.claim_id),
            Text(r.experiment),
            _verdict_text(r.verdict),
            Text(r.summary),
            Text(_status(r)),
        )
    return table


@app.command("reproduce")
def reproduce_command(
    scale: ScaleOption = "quick",
    out: OutOption = DEFAULT_OUT,
    force: ForceOption = False,
    reuse_any: ReuseAnyOption = False,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", metavar="NAME", help="Run only this experiment (repeatable)."),
    ] = None,
    scheduler: SchedulerOption = None,
    workers: WorkersOption = None,
    commit_to: CommitOption = None,
) -> None:
    """Run every registered experiment, then write report.md and report.html in --out.

    Exits 0 when every verdict is PASS or SMOKE (a tiny run, not judged), 1 on FAIL or ERROR.
    """
    from ntklab.experiments import resolve_config, run_experiment
    from ntklab.experiments.fingerprint import code_fingerprint
    from ntklab.report import write_report

    try:
        if reuse_any and (scheduler is not None or workers is not None):
            _usage_error("--reuse-any: not available with --scheduler or --workers")
        experiments = _select(only or [])
        for experiment in experiments:
            resolve_config(experiment, scale)
    except NtklabError as exc:
        _usage_error(str(exc))
    if not experiments:
        _stderr().print(Text("error: no experiments are registered", style="red"))
        raise typer.Exit(1)

    results: list[RunResult] = []
    problems: list[str] = []
    if scheduler is not None or workers is not None:
        results = _reproduce_on_dask(experiments, scale, out, force, scheduler, workers)
        problems = [
            f"{r.verdict} {r.experiment}: {_reason(r)}"
            for r in results
            if r.verdict in _BAD_VERDICTS
        ]
    else:
        with _progress_bar() as progress:
            overall = progress.add_task("all experiments", total=len(experiments), message="")
            for experiment in experiments:
                progress.update(overall, message=experiment.name)
                task = progress.add_task(experiment.name, total=100.0, message="")
                try:
                    result = run_experiment(
                        experiment,
                        scale=scale,
                        out_root=out,
                        force=force,
                        progress=_progress_callback(progress, task),
                        reuse_any=reuse_any,
                    )
                except NtklabError as exc:
                    progress.stop()
                    _usage_error(str(exc))
                except OSError as exc:
                    problems.append(f"{experiment.name}: could not write the run ({exc})")
                else:
                    results.append(result)
                    if result.verdict in _BAD_VERDICTS:
                        problems.append(f"{result.verdict} {result.experiment}: {_reason(result)}")
                    if commit_to is not None:
                        _commit(result, commit_to, progress.console)
                progress.remove_task(task)
                progress.advance(overall)

    console = _stdout()
    if results:
        console.print(_summary_table(results))
        fp = code_fingerprint()
        console.print(
            Text(
                f"code: {fp.digest} (source {fp.source}, torch {fp.torch}, numpy {fp.numpy}); "
                f"{sum(r.other_code for r in results)} of {len(results)} results made by "
                "other code"
            )
        )
        try:
            md_path, html_path = write_report(results, out)
        except OSError as exc:
            problems.append(f"could not write the report in {out} ({exc})")
        else:
            console.print(Text(f"report: {md_path}\nreport: {html_path}"))
    if problems:
        err = _stderr()
        err.print(Text(f"{len(problems)} problem(s) in {len(experiments)} experiments:"))
        for problem in problems:
            err.print(Text(f"  {problem}", style="red"))
        raise typer.Exit(1)


def _reproduce_on_dask(
    experiments: Sequence[Experiment],
    scale: str,
    out: Path,
    force: bool,
    scheduler: str | None,
    workers: int | None,
) -> list[RunResult]:
    """Run the experiments as one sweep on Dask (``reproduce --scheduler/--workers``)."""
    from ntklab.distributed import SweepTask, run_sweep

    tasks = [SweepTask(e, scale) for e in experiments]
    try:
        with _dask_client(scheduler, workers) as client, _progress_bar() as progress:
            overall = progress.add_task("all experiments", total=len(tasks), message="on dask")

            def advance(index: int, result: RunResult) -> None:
                progress.update(overall, advance=1, message=result.experiment)

            return run_sweep(tasks, client, out, force=force, on_result=advance)
    except NtklabError as exc:
        _usage_error(str(exc))
    except OSError as exc:
        _stderr().print(Text(f"error: could not write a run: {exc}", style="red"))
        raise typer.Exit(1) from None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``ntklab`` command."""
    app(args=None if argv is None else list(argv), prog_name="ntklab")
