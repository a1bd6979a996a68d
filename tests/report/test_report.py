"""The Markdown and HTML reports."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import os
import re
from pathlib import Path

import pytest

from experiment_helpers import fake_experiment
from ntklab.experiments import RunResult, run_experiment
from ntklab.experiments.fingerprint import code_fingerprint
from ntklab.report import render_html, render_markdown, write_report

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[RunResult]:
    out = tmp_path_factory.mktemp("runs")
    experiments = [
        fake_experiment("fake-err", "Z10", error=RuntimeError("boom <b>")),
        fake_experiment("fake-fail", "Z2", passed=False),
        dataclasses.replace(fake_experiment("fake-pass", "Z1"), dataset="synthetic: noise <n>"),
    ]
    judged = [run_experiment(e, "quick", out_root=out) for e in experiments]
    smoke = run_experiment(fake_experiment("fake-smoke", "Z3"), "tiny", out_root=out)
    return [*judged, smoke]


def test_markdown_has_header_claims_table_and_sections(
    results: list[RunResult], tmp_path: Path
) -> None:
    md_path, _ = write_report(results, tmp_path, generated_at=WHEN)
    assert md_path == tmp_path / "report.md"
    md = md_path.read_text()
    assert md.startswith("# ntklab report\n")
    assert "Generated 2024-05-06T07:08:09+00:00. 1 PASS, 1 FAIL, 1 ERROR, 1 SMOKE of 4 runs." in md
    assert f"torch {results[0].versions['torch']}" in md
    passing = results[2]
    link = Path(os.path.relpath(passing.run_dir / "line.png", tmp_path)).as_posix()
    row = (  # the criterion as applied to the grid that ran (n = 8), not the general one
        "| Z1 | fake-pass (quick) | synthetic: noise \\<n> | value equals n = 8 "
        f"| value 8 matches prediction 8 | **PASS** | [line.png]({link}) |"
    )
    assert row in md
    assert "Scales: **quick** 3 runs, **tiny** 1 run." in md
    assert "## Z1 `fake-pass`: PASS · scale quick\n" in md
    assert "**Data set.** synthetic: noise \\<n>" in md
    assert "*line.png: fake-pass, scale quick, data set: synthetic: noise \\<n>*" in md
    assert (
        "| Z10 | fake-err (quick) | not named (the run records no data set) "
        "| value equals n | error: RuntimeError: boom \\<b> | **ERROR** | — |" in md
    )
    # claims in natural order: Z1, Z2, Z3, Z10
    order = [md.index(f"## {c} ") for c in ("Z1", "Z2", "Z3", "Z10")]
    assert order == sorted(order)
    assert "| value | 8 | [7, 9] | 8 |  |  |" in md
    assert "| spread | 1.414 | — | — | sd | a \\| b |" in md
    assert f"![line.png]({link})" in md
    assert "RuntimeError: boom <b>" in md  # inside the traceback's code block
    assert "It has \\<html> & \\| pipes." not in md  # pipes are only escaped in tables
    assert "It has \\<html> & | pipes." in md


def test_html_is_self_contained_and_escaped(results: list[RunResult], tmp_path: Path) -> None:
    _, html_path = write_report(results, tmp_path, generated_at=WHEN)
    html = html_path.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "http" not in html
    assert "<link" not in html
    assert "<script" not in html
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 3
    png = (results[2].run_dir / "line.png").read_bytes()
    assert png in {base64.b64decode(u) for u in uris}
    assert "It has &lt;html&gt; &amp; | pipes." in html
    assert "<html> &" not in html
    assert "boom &lt;b&gt;" in html
    assert "<b>" not in html
    anchor = "fig-fake-pass-quick-line"
    assert f'href="#{anchor}"' in html
    assert f'id="{anchor}"' in html
    assert "<td>Z1</td>" in html
    assert '<span class="verdict ERROR">ERROR</span>' in html


def test_reports_mark_the_scale_and_name_the_data_set(results: list[RunResult]) -> None:
    html = render_html(results, generated_at=WHEN)
    quick = '<span class="scale scale-quick">scale quick</span>'
    tiny = '<span class="scale scale-tiny">scale tiny</span>'
    assert f"Scales: {quick} 3 runs, {tiny} 1 run." in html
    assert f"<td>{quick}</td>" in html and f"<td>{tiny}</td>" in html
    # in the summary row, in the section's title and beside the figure
    assert (
        f'(quick)</td><td>{quick}</td><td class="dataset">synthetic: noise &lt;n&gt;</td>' in html
    )
    assert f"<code>fake-pass</code> {quick} <span" in html
    assert "<strong>Data set.</strong> synthetic: noise &lt;n&gt;</p>" in html
    assert "line.png: fake-pass, scale quick, data set: synthetic: noise &lt;n&gt;" in html
    assert html.count("not named (the run records no data set)") >= 3


def test_missing_figure_is_reported_not_fatal(results: list[RunResult], tmp_path: Path) -> None:
    ghost = dataclasses.replace(results[2], figures=("ghost.png",))
    _, html_path = write_report([ghost], tmp_path / "nested" / "out")
    html = html_path.read_text()
    assert "figure ghost.png is missing" in html
    assert "data:image/png" not in html


def test_write_report_rejects_non_results(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"results\[0\]: expected a RunResult"):
        write_report(["nope"], tmp_path)  # type: ignore[list-item]


def test_reports_say_what_a_verdict_means_and_show_smoke_runs(results: list[RunResult]) -> None:
    md = render_markdown(results, results[0].run_dir.parent.parent, generated_at=WHEN)
    html = render_html(results, generated_at=WHEN)
    assert "What a verdict means:" in md and "What a verdict means:" in html
    judged = "at a judged scale (quick and paper), the measured figures meet the claim's criterion"
    smoke = "a smoke run (scale tiny): it shows that the code runs end to end"
    assert f"- **PASS**: {judged}" in md
    assert f"- **SMOKE**: {smoke}" in md
    assert judged.replace("'", "&#x27;") in html and smoke in html
    assert "not judged" in md.split("- **SMOKE**", 1)[1].split("\n", 1)[0]
    # the smoke run: its own label, its criterion as applied but not judged
    assert "## Z3 `fake-smoke`: SMOKE (smoke run, not judged)" in md
    assert (
        "| Z3 | fake-smoke (tiny) | not named (the run records no data set) | value equals n = 4 |"
        in md
    )
    assert "| **SMOKE** (not judged) |" in md
    assert (
        "**Criterion as applied to this grid (not judged at scale tiny).** value equals n = 4" in md
    )
    assert "**Criterion as applied to this grid.** value equals n = 8" in md
    assert '<span class="verdict SMOKE">SMOKE</span> (smoke run, not judged)</h2>' in html
    assert ".SMOKE {" in html
    assert "Criterion as applied to this grid (not judged at scale tiny).</strong>" in html


def test_reports_show_the_code_fingerprint_and_other_code(results: list[RunResult]) -> None:
    fp = code_fingerprint()
    passing = results[2]
    assert passing.code["digest"] == fp.digest
    md = render_markdown(results, passing.run_dir.parent.parent, generated_at=WHEN)
    html = render_html(results, generated_at=WHEN)
    code = f"code `{fp.digest}` (source {fp.source}, torch {fp.torch}, numpy {fp.numpy})"
    assert f"run key `{passing.run_key}`, {code}." in md
    assert f"Code fingerprints (ntklab source, torch, numpy): `{fp.digest}` (4 runs); " in md
    assert "0 run(s) reused from other code" in md
    assert f"<code>{passing.run_key}</code>, code <code>{fp.digest}</code>" in html
    assert "made by other code" not in md and "made by other code" not in html

    other = dataclasses.replace(
        passing, reused=True, other_code=True, code={**passing.code, "digest": "feedfacefeedface"}
    )
    old = dataclasses.replace(results[1], code={})  # recorded before code fingerprints
    md = render_markdown([other, old], passing.run_dir.parent.parent, generated_at=WHEN)
    html = render_html([other, old], generated_at=WHEN)
    assert "| **PASS** (made by other code) |" in md
    assert "code `feedfacefeedface`" in md and ", **made by other code** than the one" in md
    assert "`feedfacefeedface` (1 run), `unknown` (1 run); 1 run(s) reused from other code" in md
    assert "code `unknown`" in md
    assert '<span class="verdict PASS">PASS</span> <span class="other-code">made by other' in html
