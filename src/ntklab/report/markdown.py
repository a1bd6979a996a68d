"""The Markdown report: a claims table, then one section per run with its metrics and figures.

Figures are linked by their path relative to the report's folder, so the report renders
next to the run folders it describes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ntklab.experiments.result import RunResult

from ._format import (
    VERDICT_LABELS,
    code_counts,
    code_digest,
    count_scales,
    count_verdicts,
    criterion_label,
    dataset_text,
    format_ci,
    format_value,
    merged_versions,
    order_results,
    verdict_meanings,
)

__all__ = ["render_markdown"]


def text(value: object) -> str:
    """Text on one line, with ``<`` escaped so that it is never read as HTML."""
    return " ".join(str(value).split()).replace("<", "\\<")


def cell(value: object) -> str:
    """Text made safe for one Markdown table cell (no pipes, no line breaks, no HTML)."""
    return text(value).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _figure_links(result: RunResult, out_dir: Path) -> str:
    links = [f"[{f}]({_relative(result.run_dir / f, out_dir)})" for f in result.figures]
    return ", ".join(links) if links else "—"


def _verdict_cell(result: RunResult) -> str:
    cell = f"**{result.verdict}**"
    if result.verdict == "SMOKE":
        cell += " (not judged)"
    if result.other_code:
        cell += " (made by other code)"
    return cell


def _summary_rows(results: Sequence[RunResult], out_dir: Path) -> list[list[str]]:
    return [
        [
            r.claim_id,
            f"{r.experiment} ({r.scale})",
            dataset_text(r),
            r.criterion,
            r.summary,
            _verdict_cell(r),
            _figure_links(r, out_dir),
        ]
        for r in results
    ]


def _code_text(result: RunResult) -> str:
    """``code `digest` (source ..., torch ..., numpy ...)``, and whether other code made it."""
    code = result.code
    text = f"code `{code_digest(result)}`"
    if code.get("source"):
        text += (
            f" (source {code['source']}, torch {code.get('torch', '?')}, "
            f"numpy {code.get('numpy', '?')})"
        )
    if result.other_code:
        text += ", **made by other code** than the one running (reused with `--reuse-any`)"
    return text


def _section(result: RunResult, out_dir: Path) -> list[str]:
    verdict = VERDICT_LABELS.get(result.verdict, result.verdict)
    lines = [
        f"## {result.claim_id} `{result.experiment}`: {verdict} · scale {result.scale}",
        "",
        f"**Claim.** {text(result.claim)}",
        "",
        f"**Data set.** {text(dataset_text(result))}",
        "",
        f"**{criterion_label(result)}.** {text(result.criterion)}",
        "",
        f"**Measured.** {text(result.summary)}",
        "",
        (
            f"Scale `{result.scale}`, seed {result.seed}, {result.wall_time_s:.1f} s, "
            f"started {result.started_at}{' (reused)' if result.reused else ''}; "
            f"run folder `{_relative(result.run_dir, out_dir)}`; run key `{result.run_key}`, "
            f"{_code_text(result)}."
        ),
        "",
    ]
    if result.metrics:
        rows = [
            [
                m.name,
                format_value(m.value),
                format_ci(m.ci_low, m.ci_high),
                m.predicted or "—",
                m.unit,
                m.note,
            ]
            for m in result.metrics
        ]
        lines += _table(["Metric", "Value", "CI", "Predicted", "Unit", "Note"], rows)
        lines.append("")
    if result.notes:
        lines += [f"- {text(note)}" for note in result.notes]
        lines.append("")
    for figure in result.figures:
        caption = (
            f"{figure}: {result.experiment}, scale {result.scale}, data set: {dataset_text(result)}"
        )
        lines += [f"![{figure}]({_relative(result.run_dir / figure, out_dir)})", ""]
        lines += [f"*{text(caption)}*", ""]
    if result.error:
        lines += ["<details><summary>Traceback</summary>", "", "````text"]
        lines += [result.error.rstrip(), "````", "", "</details>", ""]
    lines += [
        "<details><summary>Config</summary>",
        "",
        "```json",
        json.dumps(result.config, indent=2, sort_keys=True),
        "```",
        "",
        "</details>",
        "",
    ]
    return lines


def render_markdown(
    results: Sequence[RunResult], out_dir: Path, generated_at: dt.datetime | None = None
) -> str:
    """The Markdown report of ``results``, with links relative to ``out_dir``.

    Parameters
    ----------
    results : sequence of RunResult
        The runs to report (ordered by claim id in the report).
    out_dir : Path
        Folder the report is written to; figure links are relative to it.
    generated_at : datetime, optional
        Time printed in the header (now, in UTC, by default).

    Returns
    -------
    str
        The report's text.
    """
    when = generated_at or dt.datetime.now(dt.UTC)
    ordered = order_results(results)
    counts = count_verdicts(ordered)
    versions = merged_versions(ordered)
    codes = code_counts(ordered)
    lines = [
        "# ntklab report",
        "",
        f"Generated {when.isoformat(timespec='seconds')}. "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + f" of {len(ordered)} runs.",
        "",
        "Scales: "
        + ", ".join(
            f"**{s}** {n} run{'s' if n != 1 else ''}" for s, n in count_scales(ordered).items()
        )
        + ".",
        "",
        " · ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        "Code fingerprints (ntklab source, torch, numpy): "
        + ", ".join(f"`{d}` ({n} run{'s' if n != 1 else ''})" for d, n in codes.items())
        + f"; {sum(r.other_code for r in ordered)} run(s) reused from other code "
        "(`--reuse-any`).",
        "",
        "What a verdict means:",
        "",
        *(f"- **{v}**: {meaning}" for v, meaning in verdict_meanings()),
        "",
        "## Claims",
        "",
    ]
    header = [
        "Claim",
        "Experiment (scale)",
        "Data set",
        "Criterion as applied",
        "Measured",
        "Verdict",
        "Figure",
    ]
    lines += _table(header, _summary_rows(ordered, Path(out_dir)))
    lines.append("")
    for result in ordered:
        lines += _section(result, Path(out_dir))
    return "\n".join(lines).rstrip() + "\n"
