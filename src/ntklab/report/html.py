"""The HTML report: one self-contained file (inline CSS, figures as base64 data URIs).

Every piece of text from a result is escaped; the page loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Sequence
from html import escape
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
    figure_anchor,
    format_ci,
    format_value,
    merged_versions,
    order_results,
    section_anchor,
    verdict_meanings,
)

__all__ = ["CSS", "html_page", "png_data_uri", "render_html"]

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; color: #1d1d1f; line-height: 1.45; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.5rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .8rem 0; width: 100%; font-size: .92rem; }
th, td { border: 1px solid #d0d0d0; padding: .3rem .5rem; text-align: left;
         vertical-align: top; }
th { background: #f4f4f6; } td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.meta { color: #555; font-size: .9rem; }
.verdict { font-weight: 700; padding: .05rem .4rem; border-radius: .25rem; color: #fff; }
.PASS { background: #1a7f37; } .FAIL { background: #c62828; } .ERROR { background: #8a4b00; }
.SMOKE { background: #5b6770; }
.other-code { color: #8a4b00; font-weight: 600; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .85rem; }
pre { background: #f6f8fa; padding: .7rem; overflow-x: auto; font-size: .82rem; }
.missing { color: #c62828; }
.scale { font-weight: 600; padding: .05rem .4rem; border-radius: .25rem; border: 1px solid; }
.scale-tiny { color: #5b6770; } .scale-quick { color: #0b5cad; } .scale-paper { color: #6a1b9a; }
.dataset { color: #333; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5rem; }
.sides > section { min-width: 0; }
th.quick, td.quick { border-top: 3px solid #0b5cad; }
th.paper, td.paper { border-top: 3px solid #6a1b9a; }
.notrun { color: #777; font-style: italic; }
.wide { overflow-x: auto; margin: .8rem 0; } .wide > table { margin: 0; }
p code { overflow-wrap: anywhere; }
@media (max-width: 48rem) { body { margin: 1rem auto; } .sides { grid-template-columns: 1fr; } }
@media print { .wide { overflow-x: visible; } }
"""


def png_data_uri(path: Path) -> str | None:
    """``data:image/png;base64,...`` of the PNG at ``path``, or None if it cannot be read."""
    try:
        payload = Path(path).read_bytes()
    except OSError:
        return None
    return "data:image/png;base64," + base64.b64encode(payload).decode("ascii")


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def html_page(title: str, body: str) -> str:
    """A complete, self-contained HTML page: inline CSS, nothing loaded from anywhere.

    ``title`` is escaped; ``body`` is HTML.
    """
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def scale_badge(scale: str) -> str:
    """The scale of a run, marked so that it stands out (``scale quick``)."""
    return f'<span class="scale scale-{_e(scale)}">scale {_e(scale)}</span>'


def _verdict(verdict: str) -> str:
    return f'<span class="verdict {_e(verdict)}">{_e(verdict)}</span>'


def _verdict_cell(result: RunResult) -> str:
    cell = _verdict(result.verdict)
    if result.verdict == "SMOKE":
        cell += " (not judged)"
    if result.other_code:
        cell += ' <span class="other-code">made by other code</span>'
    return cell


def _code(result: RunResult) -> str:
    """The code fingerprint of a run, and whether other code made it."""
    code = result.code
    text = f"code <code>{_e(code_digest(result))}</code>"
    if code.get("source"):
        text += (
            f" (source {_e(code['source'])}, torch {_e(code.get('torch', '?'))}, "
            f"numpy {_e(code.get('numpy', '?'))})"
        )
    if result.other_code:
        text += (
            ', <span class="other-code">made by other code</span> than the one running '
            "(reused with <code>--reuse-any</code>)"
        )
    return text


def _meanings() -> str:
    items = "".join(f"<li>{_verdict(v)} {_e(meaning)}</li>" for v, meaning in verdict_meanings())
    return f'<p class="meta">What a verdict means:</p><ul class="meta">{items}</ul>'


def _figure_links(result: RunResult) -> str:
    links = [f'<a href="#{_e(figure_anchor(result, f))}">{_e(f)}</a>' for f in result.figures]
    return ", ".join(links) if links else "—"


def _summary_table(results: Sequence[RunResult]) -> str:
    rows = []
    for r in results:
        rows.append(
            "<tr>"
            f"<td>{_e(r.claim_id)}</td>"
            f'<td><a href="#{_e(section_anchor(r))}">{_e(r.experiment)}</a> ({_e(r.scale)})</td>'
            f"<td>{scale_badge(r.scale)}</td>"
            f'<td class="dataset">{_e(dataset_text(r))}</td>'
            f"<td>{_e(r.criterion)}</td>"
            f"<td>{_e(r.summary)}</td>"
            f"<td>{_verdict_cell(r)}</td>"
            f"<td>{_figure_links(r)}</td>"
            "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "Claim",
            "Experiment",
            "Scale",
            "Data set",
            "Criterion as applied",
            "Measured",
            "Verdict",
            "Figure",
        )
    )
    return (
        f'<div class="wide"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _metrics_table(result: RunResult) -> str:
    rows = [
        "<tr>"
        f"<td>{_e(m.name)}</td>"
        f'<td class="num">{_e(format_value(m.value))}</td>'
        f'<td class="num">{_e(format_ci(m.ci_low, m.ci_high))}</td>'
        f"<td>{_e(m.predicted or '—')}</td>"
        f"<td>{_e(m.unit)}</td>"
        f"<td>{_e(m.note)}</td>"
        "</tr>"
        for m in result.metrics
    ]
    head = "".join(f"<th>{h}</th>" for h in ("Metric", "Value", "CI", "Predicted", "Unit", "Note"))
    return (
        f'<div class="wide"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def figure_caption(result: RunResult, figure: str) -> str:
    """``"line.png: fake-pass, scale quick, data set ..."`` (HTML-escaped)."""
    return (
        f"{_e(figure)}: {_e(result.experiment)}, scale {_e(result.scale)}, "
        f"data set: {_e(dataset_text(result))}"
    )


def _figure(result: RunResult, figure: str) -> str:
    anchor = _e(figure_anchor(result, figure))
    uri = png_data_uri(result.run_dir / figure)
    if uri is None:
        body = f'<p class="missing">figure {_e(figure)} is missing from the run folder</p>'
    else:
        body = f'<img src="{uri}" alt="{_e(result.experiment)}: {_e(figure)}">'
    caption = figure_caption(result, figure)
    return f'<figure id="{anchor}">{body}<figcaption>{caption}</figcaption></figure>'


def _section(result: RunResult) -> str:
    reused = " (reused)" if result.reused else ""
    label = VERDICT_LABELS.get(result.verdict, "")
    note = f" {_e(label.removeprefix(result.verdict).strip())}" if label else ""
    parts = [
        f'<section id="{_e(section_anchor(result))}">',
        f"<h2>{_e(result.claim_id)} <code>{_e(result.experiment)}</code> "
        f"{scale_badge(result.scale)} {_verdict(result.verdict)}{note}</h2>",
        f"<p><strong>Claim.</strong> {_e(result.claim)}</p>",
        f'<p class="dataset"><strong>Data set.</strong> {_e(dataset_text(result))}</p>',
        f"<p><strong>{_e(criterion_label(result))}.</strong> {_e(result.criterion)}</p>",
        f"<p><strong>Measured.</strong> {_e(result.summary)}</p>",
        f'<p class="meta">Scale <code>{_e(result.scale)}</code>, seed {_e(result.seed)}, '
        f"{result.wall_time_s:.1f} s, started {_e(result.started_at)}{reused}; "
        f"run folder <code>{_e(result.run_dir)}</code>; run key "
        f"<code>{_e(result.run_key)}</code>, {_code(result)}.</p>",
    ]
    if result.metrics:
        parts.append(_metrics_table(result))
    if result.notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
    parts += [_figure(result, f) for f in result.figures]
    if result.error:
        parts.append(
            f"<details open><summary>Traceback</summary><pre>{_e(result.error)}</pre></details>"
        )
    config = json.dumps(result.config, indent=2, sort_keys=True)
    parts.append(f"<details><summary>Config</summary><pre>{_e(config)}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def render_html(results: Sequence[RunResult], generated_at: dt.datetime | None = None) -> str:
    """The self-contained HTML report of ``results``.

    Parameters
    ----------
    results : sequence of RunResult
        The runs to report (ordered by claim id in the report).
    generated_at : datetime, optional
        Time printed in the header (now, in UTC, by default).

    Returns
    -------
    str
        The page, with its figures embedded as ``data:image/png;base64,`` URIs.
    """
    when = generated_at or dt.datetime.now(dt.UTC)
    ordered = order_results(results)
    counts = count_verdicts(ordered)
    versions = " · ".join(f"{_e(k)} {_e(v)}" for k, v in merged_versions(ordered).items())
    tally = ", ".join(f"{n} {_verdict(v)}" for v, n in counts.items())
    codes = ", ".join(
        f"<code>{_e(d)}</code> ({n} run{'s' if n != 1 else ''})"
        for d, n in code_counts(ordered).items()
    )
    other = sum(r.other_code for r in ordered)
    scales = ", ".join(
        f"{scale_badge(s)} {n} run{'s' if n != 1 else ''}" for s, n in count_scales(ordered).items()
    )
    body = "\n".join(
        [
            "<h1>ntklab report</h1>",
            f'<p class="meta">Generated {_e(when.isoformat(timespec="seconds"))}. '
            f"{tally} of {len(ordered)} runs.</p>",
            f'<p class="meta">Scales: {scales}.</p>',
            f'<p class="meta">{versions}</p>',
            f'<p class="meta">Code fingerprints (ntklab source, torch, numpy): {codes}; '
            f"{other} run(s) reused from other code (<code>--reuse-any</code>).</p>",
            _meanings(),
            "<h2>Claims</h2>",
            _summary_table(ordered),
            *(_section(r) for r in ordered),
        ]
    )
    return html_page("ntklab report", body)
