"""The Markdown and HTML reports."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import os
import re
from pathlib import Path

import pytest

from ntklab.experiments import RunResult, run_experiment
from ntklab.experiments.testing import fake_experiment
from ntklab.report import write_report

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[RunResult]:
    out = tmp_path_factory.mktemp("runs")
    experiments = [
        fake_experiment("fake-err", "Z10", error=RuntimeError("boom <b>")),
        fake_experiment("fake-fail", "Z2", passed=False),
        fake_experiment("fake-pass", "Z1"),
    ]
    return [run_experiment(e, "tiny", out_root=out) for e in experiments]


def test_markdown_has_header_claims_table_and_sections(
    results: list[RunResult], tmp_path: Path
) -> None:
    md_path, _ = write_report(results, tmp_path, generated_at=WHEN)
    assert md_path == tmp_path / "report.md"
    md = md_path.read_text()
    assert md.startswith("# ntklab report\n")
    assert "Generated 2024-05-06T07:08:09+00:00. 1 PASS, 1 FAIL, 1 ERROR of 3 runs." in md
    assert f"torch {results[0].versions['torch']}" in md
    passing = results[2]
    link = Path(os.path.relpath(passing.run_dir / "line.png", tmp_path)).as_posix()
    row = (
        "| Z1 | fake-pass (tiny) | value equals n | value 4 matches prediction 4 | **PASS** | "
        f"[line.png]({link}) |"
    )
    assert row in md
    assert (
        "| Z10 | fake-err (tiny) | value equals n | error: RuntimeError: boom \\<b> "
        "| **ERROR** | — |" in md
    )
    # claims in natural order: Z1, Z2, Z10
    order = [md.index(f"## {c} ") for c in ("Z1", "Z2", "Z10")]
    assert order == sorted(order)
    assert "| value | 4 | [3, 5] | 4 |  |  |" in md
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
    assert len(uris) == 2
    png = (results[2].run_dir / "line.png").read_bytes()
    assert png in {base64.b64decode(u) for u in uris}
    assert "It has &lt;html&gt; &amp; | pipes." in html
    assert "<html> &" not in html
    assert "boom &lt;b&gt;" in html
    assert "<b>" not in html
    anchor = "fig-fake-pass-tiny-line"
    assert f'href="#{anchor}"' in html
    assert f'id="{anchor}"' in html
    assert "<td>Z1</td>" in html
    assert '<span class="verdict ERROR">ERROR</span>' in html


def test_missing_figure_is_reported_not_fatal(results: list[RunResult], tmp_path: Path) -> None:
    ghost = dataclasses.replace(results[2], figures=("ghost.png",))
    _, html_path = write_report([ghost], tmp_path / "nested" / "out")
    html = html_path.read_text()
    assert "figure ghost.png is missing" in html
    assert "data:image/png" not in html


def test_write_report_rejects_non_results(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"results\[0\]: expected a RunResult"):
        write_report(["nope"], tmp_path)  # type: ignore[list-item]
