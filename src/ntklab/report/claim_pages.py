"""The claims report: the committed results as a small site, one page per claim.

``ntklab report results --out DIR`` writes, from the committed results (see
:mod:`ntklab.report.claims`)::

    DIR/index.html, DIR/index.md          the claims table, quick and paper scale side by side
    DIR/<experiment>.html, .md            one claim: the paper's reported figure beside the
                                          quick and the paper-scale result

Each claim page shows the claim, the figure its paper reports, and for each committed scale
the headline metrics with their intervals, the verdict, the criterion as applied to the grid
that ran, the data set, the wall time, the machine, the code fingerprint and the date; then
every metric of both scales in one table, and the figures.

Figures are not committed. They are looked up in a folder of run folders (``--runs``, by
default ``ntklab-runs``) at ``<runs>/<experiment>/<scale>-<run key>/``, the folder of the run
that made the committed result; when it is not there, the page says so and gives the command
that makes it again. The HTML pages are self-contained (inline CSS, figures embedded as
``data:image/png;base64,`` URIs) and link to each other by relative paths; the Markdown pages
link their figures by relative paths.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from ntklab.experiments.base import Experiment, Metric
from ntklab.experiments.result import ResultCheck, RunResult

from ._format import code_digest, dataset_text, format_ci, format_value, verdict_meanings
from .claims import (
    COMMITTED_SCALES,
    NOT_RUN,
    ClaimRow,
    check_committed,
    claim_rows,
    config_note,
    duration_text,
    measured_text,
    not_run_text,
    number_text,
    render_claims_table,
    untabled_text,
)
from .html import html_page, png_data_uri, scale_badge
from .markdown import cell as md_cell
from .markdown import text as md_text
from .writer import _write_atomic

__all__ = [
    "DEFAULT_RUNS",
    "INDEX",
    "figure_path",
    "render_claim_html",
    "render_claim_markdown",
    "render_index_html",
    "render_index_markdown",
    "rerun_command",
    "write_claims_report",
]

#: Where the claim pages look for run folders by default (``ntklab run``'s ``--out``).
DEFAULT_RUNS = Path("ntklab-runs")
#: Stem of the index page (``index.html``, ``index.md``).
INDEX = "index"

_SCALE_TITLES = {"quick": "Quick scale", "paper": "Paper scale"}


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _verdict_html(verdict: str) -> str:
    return f'<span class="verdict {_e(verdict)}">{_e(verdict)}</span>'


def _set_value(value: Any) -> str:
    """A config value written as ``--set`` reads it back."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _overrides(experiment: Experiment, result: RunResult) -> list[str]:
    """``key=value`` for each config field of ``result`` that differs from its scale's default."""
    from ntklab.errors import NtklabError
    from ntklab.experiments.config import resolve_config

    try:
        default = resolve_config(experiment, result.scale).model_dump(mode="json")
    except NtklabError:
        return []
    return [
        f"{key}={_set_value(value)}"
        for key, value in sorted(result.config.items())
        if key in default and default[key] != value
    ]


def rerun_command(
    experiment: Experiment,
    scale: str,
    runs_root: Path | str,
    results_root: Path | str,
    result: RunResult | None = None,
) -> str:
    """The command that runs ``experiment`` at ``scale`` into ``runs_root`` and commits it.

    With ``result``, the config fields where the committed run differs from the scale's
    defaults are passed with ``--set``, so that the command asks for the same config.

    Examples
    --------
    >>> from ntklab.experiments import get_experiment
    >>> rerun_command(get_experiment("spectrum-s1"), "paper", "runs", "results")
    'ntklab run spectrum-s1 --scale paper --out runs --commit-to results'
    """
    words = ["ntklab", "run", experiment.name, "--scale", scale, "--out", str(runs_root)]
    if result is not None:
        for item in _overrides(experiment, result):
            words += ["--set", item]
    words += ["--commit-to", str(results_root)]
    return shlex.join(words)


def figure_path(result: RunResult, figure: str, runs_root: Path | str) -> Path | None:
    """Where ``figure`` of the committed ``result`` lies under ``runs_root``, if it is there.

    The run folder is ``<runs_root>/<experiment>/<scale>-<run key>``: the one that made the
    committed result (a run of other code or another config has another key).
    """
    if not result.run_key:
        return None
    path = Path(runs_root) / result.experiment / f"{result.scale}-{result.run_key}" / figure
    return path if path.is_file() else None


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


# --- what a claim page shows, as plain text ---------------------------------------------


def _metric_value(metric: Metric | None) -> str:
    """A headline figure as the claims table shows it (3 significant digits)."""
    if metric is None:
        return "—"
    text = number_text(metric.value)
    if metric.ci_low is not None and metric.ci_high is not None:
        text += f" [{number_text(metric.ci_low)}, {number_text(metric.ci_high)}]"
    return text


def _metric_full(metric: Metric | None) -> str:
    """A metric as the run reports show it (4 significant digits)."""
    if metric is None:
        return "—"
    ci = format_ci(metric.ci_low, metric.ci_high)
    return format_value(metric.value) + ("" if ci == "—" else f" {ci}")


def _metric(result: RunResult, name: str) -> Metric | None:
    return next((m for m in result.metrics if m.name == name), None)


def _code_text(result: RunResult, current_code: str | None) -> str:
    code = result.code
    text = code_digest(result)
    if code.get("source"):
        text += (
            f" (source {code['source']}, torch {code.get('torch', '?')}, "
            f"numpy {code.get('numpy', '?')})"
        )
    if current_code is not None:
        same = code_digest(result) == current_code
        text += "; the current code" if same else f"; other than the current code ({current_code})"
    return text


def _headline_value(name: str) -> Callable[[RunResult], str]:
    def value(result: RunResult) -> str:
        return _metric_value(_metric(result, name))

    return value


def _comparison_rows(
    experiment: Experiment, current_code: str | None
) -> list[tuple[str, Callable[[RunResult], str]]]:
    """``(row label, value of a result)`` for the quick-vs-paper table of a claim page."""
    rows: list[tuple[str, Callable[[RunResult], str]]] = [
        (
            "Verdict",
            lambda r: (
                r.verdict
                + (" (made by other code)" if r.other_code else "")
                + (f" ({note})" if (note := config_note(experiment, r)) else "")
            ),
        ),
    ]
    for name in experiment.headline:
        rows.append((name, _headline_value(name)))
    rows += [
        ("Measured", lambda r: r.summary),
        ("Criterion as applied", lambda r: r.criterion),
        ("Data set", dataset_text),
        ("Wall time", lambda r: f"{duration_text(r.wall_time_s)} ({r.wall_time_s:.1f} s)"),
        ("Machine", lambda r: r.versions.get("machine", "not recorded")),
        ("Code fingerprint", lambda r: _code_text(r, current_code)),
        (
            "Versions",
            lambda r: ", ".join(
                f"{k} {r.versions[k]}"
                for k in ("ntklab", "torch", "numpy", "python")
                if k in r.versions
            ),
        ),
        ("Date", lambda r: r.started_at),
        ("Seed, run key", lambda r: f"seed {r.seed}, run key {r.run_key or 'not recorded'}"),
    ]
    return rows


def _metric_names(runs: Mapping[str, RunResult]) -> list[str]:
    return list(dict.fromkeys(m.name for r in runs.values() for m in r.metrics))


def _merged(values: Iterable[str | None]) -> str:
    distinct = list(dict.fromkeys(v for v in values if v))
    return " / ".join(distinct)


def _metric_row(name: str, runs: Mapping[str, RunResult]) -> list[str]:
    """Metric | per scale: value [CI] | predicted | unit | note."""
    found = {s: _metric(runs[s], name) if s in runs else None for s in COMMITTED_SCALES}
    metrics = [m for m in found.values() if m is not None]
    return [
        name,
        *(_metric_full(found[s]) if s in runs else NOT_RUN for s in COMMITTED_SCALES),
        _merged(m.predicted for m in metrics) or "—",
        _merged(m.unit for m in metrics),
        _merged(m.note for m in metrics),
    ]


def _metric_header() -> list[str]:
    return ["Metric", *(_SCALE_TITLES[s] for s in COMMITTED_SCALES), "Predicted", "Unit", "Note"]


def _tally(rows: Sequence[ClaimRow], scale: str) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        result, check = row.runs.get(scale), row.untabled(scale)
        key: str
        if result is not None:
            key = result.verdict
        elif check is not None:
            key = "stale" if check.status == "stale" else "refused"
        else:
            key = NOT_RUN
        counts[key] = counts.get(key, 0) + 1
    order = ["PASS", "FAIL", "ERROR", "SMOKE", "stale", "refused", NOT_RUN]
    return ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=order.index))


def _stray(root: Path | str, rows: Sequence[ClaimRow]) -> list[str]:
    """Committed results of experiments that are not among the rows."""
    names = {row.experiment.name for row in rows}
    committed = check_committed(root, [row.experiment for row in rows])
    return [f"{scale}/{name}.json" for name, scale in sorted(committed) if name not in names]


def _untabled_html(row: ClaimRow, scale: str) -> str | None:
    """The text of a scale whose committed result is not tabled (stale or refused)."""
    check = row.untabled(scale)
    return None if check is None else _e(untabled_text(check))


def _missing_text(experiment: Experiment, scale: str) -> str:
    """What a scale section says when the scale has no committed result."""
    cost = experiment.paper_scale_cost if scale == "paper" else ""
    return f"{NOT_RUN}: no committed result at this scale" + (
        f" (it takes {cost})." if cost else "."
    )


# --- HTML -------------------------------------------------------------------------------


def _index_cells_html(row: ClaimRow, experiment: Experiment, scale: str) -> str:
    result = row.runs.get(scale)
    untabled = _untabled_html(row, scale)
    if result is None:
        shown = untabled if untabled is not None else _e(not_run_text(experiment, scale))
        return f'<td class="{scale} notrun" colspan="2">{shown}</td>'
    measured = measured_text(result, experiment.headline) or "—"
    verdict = _verdict_html(result.verdict) + _config_note_html(experiment, result)
    return f'<td class="{scale}">{_e(measured)}</td><td class="{scale}">{verdict}</td>'


def _config_note_html(experiment: Experiment, result: RunResult) -> str:
    note = config_note(experiment, result)
    return f" ({_e(note)})" if note else ""


def render_index_html(
    rows: Sequence[ClaimRow],
    results_root: Path | str,
    runs_root: Path | str,
    generated_at: dt.datetime | None = None,
    current_code: str | None = None,
    stray: Sequence[str] = (),
) -> str:
    """The index page: the claims table with the quick and the paper scale side by side.

    Its cells are those of :func:`~ntklab.report.claims.claims_table`; each claim links to
    its page (``<experiment>.html``).
    """
    when = generated_at or dt.datetime.now(dt.UTC)
    scale_heads = "".join(
        f'<th class="{s}" colspan="2">{scale_badge(s)}</th>' for s in COMMITTED_SCALES
    )
    sub_heads = "".join(
        f'<th class="{s}">measured</th><th class="{s}">verdict</th>' for s in COMMITTED_SCALES
    )
    head = (
        '<tr><th rowspan="2">Claim</th><th rowspan="2">Reported figure</th>'
        f'{scale_heads}<th rowspan="2">Data set</th><th rowspan="2">Time</th></tr>'
        f"<tr>{sub_heads}</tr>"
    )
    body_rows = []
    for row in rows:
        exp = row.experiment
        body_rows.append(
            "<tr>"
            f'<td><a href="{_e(exp.name)}.html">{_e(exp.claim_id)} '
            f"<code>{_e(exp.name)}</code></a></td>"
            f"<td>{_e(exp.reported)}</td>"
            + "".join(_index_cells_html(row, exp, s) for s in COMMITTED_SCALES)
            + f"<td>{_e(row.dataset)}</td><td>{_e(row.time)}</td></tr>"
        )
    tallies = "; ".join(f"{scale_badge(s)} {_e(_tally(rows, s))}" for s in COMMITTED_SCALES)
    meanings = "".join(f"<li>{_verdict_html(v)} {_e(m)}</li>" for v, m in verdict_meanings())
    code = f" Current code <code>{_e(current_code)}</code>." if current_code is not None else ""
    parts = [
        "<h1>ntklab claims: quick and paper scale</h1>",
        f'<p class="meta">Generated {_e(when.isoformat(timespec="seconds"))} from the committed '
        f"results in <code>{_e(results_root)}</code> (<code>ntklab report</code>); figures "
        f"from the run folders in <code>{_e(runs_root)}</code>.{code}</p>",
        f'<p class="meta">{len(rows)} claims. {tallies}.</p>',
        '<p class="meta">Measured: the headline figures, value [interval]. '
        "What a verdict means:</p>",
        f'<ul class="meta">{meanings}</ul>',
        f'<div class="wide"><table><thead>{head}</thead>'
        f"<tbody>{''.join(body_rows)}</tbody></table></div>",
    ]
    if stray:
        items = "".join(f"<li><code>{_e(s)}</code></li>" for s in stray)
        parts.append(
            '<p class="missing">Committed results of experiments that are not registered '
            f"(not tabled):</p><ul>{items}</ul>"
        )
    return html_page("ntklab claims", "\n".join(parts))


def _figure_html(result: RunResult, figure: str, runs_root: Path | str, command: str) -> str:
    caption = (
        f"{_e(figure)}: {_e(result.experiment)}, scale {_e(result.scale)}, "
        f"data set: {_e(dataset_text(result))}"
    )
    path = figure_path(result, figure, runs_root)
    uri = None if path is None else png_data_uri(path)
    if uri is None:
        body = (
            f'<p class="missing">figure not available: rerun with <code>{_e(command)}</code> '
            "(figures are not committed; the run folder "
            f"<code>{_e(Path(runs_root) / result.experiment)}/{_e(result.scale)}-"
            f"{_e(result.run_key)}</code> is not there)</p>"
        )
    else:
        body = f'<img src="{uri}" alt="{_e(result.experiment)} ({_e(result.scale)}): {_e(figure)}">'
    return f"<figure>{body}<figcaption>{caption}</figcaption></figure>"


def _scale_section_html(
    experiment: Experiment,
    scale: str,
    result: RunResult | None,
    runs_root: Path | str,
    results_root: Path | str,
    untabled: ResultCheck | None = None,
) -> str:
    command = rerun_command(experiment, scale, runs_root, results_root, result)
    parts = [f'<section class="{scale}">', f"<h2>{_e(_SCALE_TITLES[scale])}</h2>"]
    if result is None and untabled is not None:
        parts.append(
            f'<p class="notrun">{_e(untabled_text(untabled))}: {_e(untabled.line())}. '
            f"Run it again with <code>{_e(command)}</code>.</p>"
        )
    elif result is None:
        parts.append(
            f'<p class="notrun">{_e(_missing_text(experiment, scale))} '
            f"Run it with <code>{_e(command)}</code>.</p>"
        )
    else:
        parts.append(f"<p><strong>Measured.</strong> {_e(result.summary)}</p>")
        if result.notes:
            parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
        if not result.figures:
            parts.append('<p class="meta">This run has no figures.</p>')
        parts += [_figure_html(result, f, runs_root, command) for f in result.figures]
        config = json.dumps(result.config, indent=2, sort_keys=True)
        parts.append(f"<details><summary>Config</summary><pre>{_e(config)}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def render_claim_html(
    row: ClaimRow,
    results_root: Path | str,
    runs_root: Path | str,
    generated_at: dt.datetime | None = None,
    current_code: str | None = None,
) -> str:
    """The page of one claim: the reported figure beside the quick and the paper result.

    Parameters
    ----------
    row : ClaimRow
        The experiment and its committed results.
    results_root : Path
        The folder of committed results (named in the page and in the commands it gives).
    runs_root : Path
        The folder of run folders where the figures are looked up.
    generated_at : datetime, optional
        Time printed in the header (now, in UTC, by default).
    current_code : str, optional
        Digest of the running code; when given, each result says whether it was made by it.
    """
    when = generated_at or dt.datetime.now(dt.UTC)
    exp = row.experiment
    scales = COMMITTED_SCALES
    head = (
        "<tr><th></th><th>reported (the paper)</th>"
        + "".join(f'<th class="{s}">{scale_badge(s)}</th>' for s in scales)
        + "</tr>"
    )
    labels = _comparison_rows(exp, current_code)
    body_rows = []
    for i, (label, value) in enumerate(labels):
        cells = []
        if i == 0:
            cells.append(f'<td rowspan="{len(labels)}">{_e(exp.reported or "not stated")}</td>')
        for s in scales:
            result = row.runs.get(s)
            if result is None:
                if i == 0:
                    command = rerun_command(exp, s, runs_root, results_root)
                    untabled = _untabled_html(row, s)
                    cells.append(
                        f'<td class="{s} notrun" rowspan="{len(labels)}">'
                        f"{untabled if untabled is not None else _e(not_run_text(exp, s))} "
                        f"(run it with <code>{_e(command)}</code>)</td>"
                    )
                continue
            if i == 0:  # the verdict, as a badge
                shown = _verdict_html(result.verdict)
                if result.other_code:
                    shown += ' <span class="other-code">made by other code</span>'
            else:
                shown = _e(value(result))
            cells.append(f'<td class="{s}">{shown}</td>')
        body_rows.append(f"<tr><th>{_e(label)}</th>{''.join(cells)}</tr>")
    names = _metric_names(row.runs)
    metric_rows = "".join(
        "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _metric_row(n, row.runs)) + "</tr>"
        for n in names
    )
    metric_head = "".join(f"<th>{_e(h)}</th>" for h in _metric_header())
    parts = [
        f'<p class="meta"><a href="{INDEX}.html">All claims</a></p>',
        f"<h1>{_e(exp.claim_id)} <code>{_e(exp.name)}</code>: quick and paper scale</h1>",
        f'<p class="meta">Generated {_e(when.isoformat(timespec="seconds"))} from '
        f"<code>{_e(results_root)}</code>; figures from <code>{_e(runs_root)}</code>.</p>",
        f"<p><strong>Claim.</strong> {_e(exp.claim)}</p>",
        f"<p><strong>Criterion.</strong> {_e(exp.criterion)}</p>",
        f"<p><strong>Reported figure (the paper).</strong> {_e(exp.reported or 'not stated')}</p>",
        f'<p class="dataset"><strong>Data set.</strong> {_e(row.dataset)}</p>',
        "<h2>Reported, quick and paper scale</h2>",
        f'<div class="wide"><table><thead>{head}</thead>'
        f"<tbody>{''.join(body_rows)}</tbody></table></div>",
        "<h2>All metrics</h2>",
        (
            f'<div class="wide"><table><thead><tr>{metric_head}</tr></thead>'
            f"<tbody>{metric_rows}</tbody></table></div>"
            if names
            else f'<p class="notrun">{_e(NOT_RUN)} at any scale.</p>'
        ),
        '<div class="sides">',
        *(
            _scale_section_html(exp, s, row.runs.get(s), runs_root, results_root, row.untabled(s))
            for s in scales
        ),
        "</div>",
    ]
    return html_page(f"{exp.claim_id} {exp.name}: quick and paper scale", "\n".join(parts))


# --- Markdown ---------------------------------------------------------------------------


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_index_markdown(
    rows: Sequence[ClaimRow],
    results_root: Path | str,
    runs_root: Path | str,
    generated_at: dt.datetime | None = None,
    stray: Sequence[str] = (),
) -> str:
    """The index page in Markdown: the claims table exactly as ``ntklab table`` prints it,
    then a link to each claim's page."""
    when = generated_at or dt.datetime.now(dt.UTC)
    tallies = "; ".join(f"{s}: {_tally(rows, s)}" for s in COMMITTED_SCALES)
    lines = [
        "# ntklab claims: quick and paper scale",
        "",
        f"Generated {when.isoformat(timespec='seconds')} from the committed results in "
        f"`{results_root}` (`ntklab report`); figures from the run folders in `{runs_root}`.",
        "",
        f"{len(rows)} claims. {tallies}.",
        "",
        render_claims_table(rows).rstrip("\n"),
        "",
        "Claim pages:",
        "",
        *(
            f"- [{r.experiment.claim_id} `{r.experiment.name}`]({r.experiment.name}.md)"
            for r in rows
        ),
    ]
    if stray:
        lines += ["", "Committed results of experiments that are not registered (not tabled):", ""]
        lines += [f"- `{s}`" for s in stray]
    return "\n".join(lines) + "\n"


def _md_missing(row: ClaimRow, scale: str, index: int) -> str:
    """A comparison-table cell of a scale without a tabled result."""
    check = row.untabled(scale)
    if check is None:
        return NOT_RUN
    return untabled_text(check) if index == 0 else "—"


def render_claim_markdown(
    row: ClaimRow,
    results_root: Path | str,
    runs_root: Path | str,
    out_dir: Path | str,
    generated_at: dt.datetime | None = None,
    current_code: str | None = None,
) -> str:
    """The page of one claim in Markdown; figures linked relative to ``out_dir``."""
    when = generated_at or dt.datetime.now(dt.UTC)
    exp = row.experiment
    scales = COMMITTED_SCALES
    table_rows = [
        [
            label,
            (exp.reported or "not stated") if i == 0 else "",
            *(value(row.runs[s]) if s in row.runs else _md_missing(row, s, i) for s in scales),
        ]
        for i, (label, value) in enumerate(_comparison_rows(exp, current_code))
    ]
    lines = [
        f"[All claims]({INDEX}.md)",
        "",
        f"# {exp.claim_id} `{exp.name}`: quick and paper scale",
        "",
        f"Generated {when.isoformat(timespec='seconds')} from `{results_root}`; figures from "
        f"`{runs_root}`.",
        "",
        f"**Claim.** {md_text(exp.claim)}",
        "",
        f"**Criterion.** {md_text(exp.criterion)}",
        "",
        f"**Reported figure (the paper).** {md_text(exp.reported or 'not stated')}",
        "",
        f"**Data set.** {md_text(row.dataset)}",
        "",
        "## Reported, quick and paper scale",
        "",
        *_md_table(["", "Reported (the paper)", *(_SCALE_TITLES[s] for s in scales)], table_rows),
        "",
        "## All metrics",
        "",
    ]
    names = _metric_names(row.runs)
    if names:
        lines += _md_table(_metric_header(), [_metric_row(n, row.runs) for n in names])
    else:
        lines.append(f"{NOT_RUN} at any scale.")
    for s in scales:
        result = row.runs.get(s)
        command = rerun_command(exp, s, runs_root, results_root, result)
        lines += ["", f"## {_SCALE_TITLES[s]}", ""]
        untabled = row.untabled(s)
        if result is None and untabled is not None:
            lines.append(
                f"{md_text(untabled_text(untabled))}: {md_text(untabled.line())}. "
                f"Run it again with `{command}`."
            )
            continue
        if result is None:
            lines.append(f"{md_text(_missing_text(exp, s))} Run it with `{command}`.")
            continue
        lines += [f"**Measured.** {md_text(result.summary)}"]
        if result.notes:
            lines += ["", *(f"- {md_text(n)}" for n in result.notes)]
        for figure in result.figures:
            caption = (
                f"{figure}: {result.experiment}, scale {result.scale}, "
                f"data set: {dataset_text(result)}"
            )
            path = figure_path(result, figure, runs_root)
            lines.append("")
            if path is None:
                lines.append(f"{figure}: figure not available: rerun with `{command}`.")
            else:
                lines += [
                    f"![{figure}]({_relative(path, Path(out_dir))})",
                    "",
                    f"*{md_text(caption)}*",
                ]
    return "\n".join(lines) + "\n"


# --- writing ----------------------------------------------------------------------------


def write_claims_report(
    results_root: Path | str,
    out_dir: Path | str,
    runs_root: Path | str = DEFAULT_RUNS,
    experiments: Iterable[Experiment] | None = None,
    generated_at: dt.datetime | None = None,
    current_code: str | None = None,
) -> list[Path]:
    """Write the claims report of the committed results under ``results_root`` to ``out_dir``.

    Parameters
    ----------
    results_root : Path
        The folder of committed results (``quick/``, ``paper/``).
    out_dir : Path
        The folder of the report (created if needed).
    runs_root : Path
        The folder of run folders where the figures of the committed runs are looked up.
    experiments : iterable of Experiment, optional
        The claims (default: every registered experiment, in claim order).
    generated_at : datetime, optional
        Time printed in the pages (now, in UTC, by default).
    current_code : str, optional
        Digest of the running code (:func:`~ntklab.experiments.fingerprint.code_fingerprint`);
        when given, each result says whether the current code made it.

    Returns
    -------
    list of Path
        The files written: ``index.html``, ``index.md``, then each claim's ``.html`` and
        ``.md``.

    Raises
    ------
    NtklabValueError
        When a committed file is not a valid result, or is misfiled.
    """
    when = generated_at or dt.datetime.now(dt.UTC)
    rows = claim_rows(results_root, experiments)
    stray = _stray(results_root, rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages: list[tuple[Path, str]] = [
        (
            out / f"{INDEX}.html",
            render_index_html(rows, results_root, runs_root, when, current_code, stray),
        ),
        (out / f"{INDEX}.md", render_index_markdown(rows, results_root, runs_root, when, stray)),
    ]
    for row in rows:
        name = row.experiment.name
        pages.append(
            (
                out / f"{name}.html",
                render_claim_html(row, results_root, runs_root, when, current_code),
            )
        )
        pages.append(
            (
                out / f"{name}.md",
                render_claim_markdown(row, results_root, runs_root, out, when, current_code),
            )
        )
    for path, text in pages:
        _write_atomic(path, text)
    return [path for path, _ in pages]
