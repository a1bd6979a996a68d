"""The claims report: the committed results as an index and one page per claim."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import html as html_lib
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiment_helpers import fake_experiment, registered
from ntklab.cli import app
from ntklab.experiments import Experiment, RunResult, run_experiment
from ntklab.report.claim_pages import rerun_command, write_claims_report
from ntklab.report.claims import claims_table, commit_result

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
REPORTED = "value 4 <at n = 4> (the paper's Table 1)"


def _experiment(name: str, claim_id: str, passed: bool = True) -> Experiment:
    return dataclasses.replace(
        fake_experiment(name, claim_id, passed=passed),
        reported=REPORTED,
        headline=("value",),
        dataset="synthetic: Gaussian noise",
    )


@dataclasses.dataclass
class Committed:
    root: Path
    runs: Path
    experiments: list[Experiment]
    results: dict[tuple[str, str], RunResult]


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Committed:
    """fake-both: quick PASS and paper FAIL; fake-quick: quick only; fake-none: nothing."""
    tmp = tmp_path_factory.mktemp("claims")
    passes, fails = _experiment("x", "Z9").judge, _experiment("x", "Z9", passed=False).judge
    # its judge fails the paper scale (n = 64), so that both verdicts follow from the judge
    both = dataclasses.replace(
        _experiment("fake-both", "Z1"),
        judge=lambda config, metrics: (fails if config.n >= 64 else passes)(config, metrics),
    )
    quick_only = _experiment("fake-quick", "Z2")
    none = _experiment("fake-none", "Z3")
    both_paper = both
    results = {
        ("fake-both", "quick"): run_experiment(both, "quick", out_root=tmp / "runs"),
        ("fake-both", "paper"): run_experiment(both_paper, "paper", out_root=tmp / "runs"),
        ("fake-quick", "quick"): run_experiment(
            quick_only, "quick", {"n": "6"}, out_root=tmp / "runs"
        ),
    }
    for result in results.values():
        commit_result(result, tmp / "results")
    return Committed(tmp / "results", tmp / "runs", [both, quick_only, none], results)


def _write(c: Committed, out: Path, runs: Path | None = None) -> dict[str, str]:
    written = write_claims_report(
        c.root, out, runs_root=runs or c.runs, experiments=c.experiments, generated_at=WHEN
    )
    return {p.name: p.read_text() for p in written}


def _text(page: str) -> str:
    """The visible text of an HTML page, tags removed and entities decoded."""
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_index_shows_both_scales_with_the_claims_table(
    committed: Committed, tmp_path: Path
) -> None:
    pages = _write(committed, tmp_path)
    assert set(pages) == {
        "index.html",
        "index.md",
        *(f"fake-{n}.{ext}" for n in ("both", "quick", "none") for ext in ("html", "md")),
    }
    index = pages["index.html"]
    assert index.startswith("<!DOCTYPE html>")
    # a quick and a paper column group, side by side
    assert '<th class="quick" colspan="2"><span class="scale scale-quick">scale quick' in index
    assert '<th class="paper" colspan="2"><span class="scale scale-paper">scale paper' in index
    assert index.index("scale-quick") < index.index("scale-paper")
    # every cell of `ntklab table` is in the page
    table = claims_table(committed.root, committed.experiments)
    text = _text(index)
    for line in table.splitlines()[2:]:
        for cell in line.strip("|").split(" | "):
            for part in cell.strip().replace("\\|", "|").split("; "):
                assert part.replace("**", "").replace("`", "") in text, part
    row = index.split('href="fake-both.html"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="quick">value 8 [7, 9]</td>' in row
    assert '<td class="quick"><span class="verdict PASS">PASS</span></td>' in row
    assert '<td class="paper">value 64 [63, 65]</td>' in row
    assert '<span class="verdict FAIL">FAIL</span>' in row
    assert "value 4 &lt;at n = 4&gt; (the paper&#x27;s Table 1)" in row
    quick_row = index.split('href="fake-quick.html"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="paper notrun" colspan="2">not run</td>' in quick_row
    assert index.count('class="quick notrun"') == 1  # fake-none
    assert "scale quick</span> 2 PASS, 1 not run" in index
    assert "scale paper</span> 1 FAIL, 2 not run" in index
    # the Markdown index holds the table exactly as `ntklab table` prints it
    assert table in pages["index.md"]
    assert "- [Z1 `fake-both`](fake-both.md)" in pages["index.md"]


def test_claim_page_shows_the_reported_figure_and_both_results(
    committed: Committed, tmp_path: Path
) -> None:
    page = _write(committed, tmp_path)["fake-both.html"]
    quick = committed.results[("fake-both", "quick")]
    paper = committed.results[("fake-both", "paper")]
    assert '<a href="index.html">All claims</a>' in page
    assert "<strong>Reported figure (the paper).</strong> value 4 &lt;at n = 4&gt;" in page
    assert "It has &lt;html&gt; &amp; | pipes." in page and "<html> &" not in page
    text = _text(page)
    table = page.split("<h2>Reported, quick and paper scale</h2>", 1)[1].split("</table>")[0]
    assert table.index("scale-quick") < table.index("scale-paper")
    # one row per field, quick then paper
    for label, quick_cell, paper_cell in (
        ("value", "8 [7, 9]", "64 [63, 65]"),
        ("Criterion as applied", "value equals n = 8", "value equals n = 64"),
        ("Measured", "value 8 matches prediction 8", "value 64 misses prediction 64"),
        ("Data set", "synthetic: Gaussian noise", "synthetic: Gaussian noise"),
        ("Machine", quick.versions["machine"], paper.versions["machine"]),
        ("Date", quick.started_at, paper.started_at),
    ):
        assert (
            f'<tr><th>{label}</th><td class="quick">{html_lib.escape(quick_cell)}</td>'
            f'<td class="paper">{html_lib.escape(paper_cell)}</td></tr>'
        ) in table, label
    reported = '<th>Verdict</th><td rowspan="11">value 4 &lt;at n = 4&gt; (the paper&#x27;s'
    assert reported in table  # the reported figure beside both results
    assert '<td class="quick"><span class="verdict PASS">PASS</span></td>' in table
    assert '<td class="paper"><span class="verdict FAIL">FAIL</span></td>' in table
    assert f"{quick.code['digest']} (source {quick.code['source']}" in text
    assert f"run key {paper.run_key}" in text
    assert re.search(r"<th>Wall time</th><td class=\"quick\">\d+ s \(\d+\.\d s\)</td>", table)
    # every metric of both scales
    metrics = page.split("<h2>All metrics</h2>", 1)[1].split("</table>")[0]
    assert "<td>value</td><td>8 [7, 9]</td><td>64 [63, 65]</td><td>8 / 64</td>" in metrics
    assert "<td>spread</td><td>1.414</td><td>1.414</td><td>—</td><td>sd</td><td>a | b</td>" in (
        metrics
    )
    md = _write(committed, tmp_path / "md")["fake-both.md"]
    assert "**Reported figure (the paper).** value 4 \\<at n = 4> (the paper's Table 1)" in md
    assert "| value |  | 8 [7, 9] | 64 [63, 65] |" in md
    assert "| Verdict | value 4 \\<at n = 4> (the paper's Table 1) | PASS | FAIL |" in md


def test_missing_scales_say_not_run_and_how_to_run_them(
    committed: Committed, tmp_path: Path
) -> None:
    pages = _write(committed, tmp_path)
    page = pages["fake-quick.html"]
    command = (
        f"ntklab run fake-quick --scale paper --out {committed.runs} --commit-to {committed.root}"
    )
    assert '<td class="paper notrun" rowspan="' in page
    assert f"not run (run it with <code>{command}</code>)" in page
    assert "not run: no committed result at this scale" in page
    assert "<td>value</td><td>6 [5, 7]</td><td>not run</td>" in page
    nothing = pages["fake-none.html"]
    assert nothing.count("not run (run it with") == 2
    assert "not run at any scale." in nothing
    assert (
        "(the paper's Table 1) | PASS (ran with n=6 (current: 8)) | not run |"
        in pages["fake-quick.md"]
    )


def test_figures_are_embedded_when_the_runs_folder_holds_them(
    committed: Committed, tmp_path: Path
) -> None:
    page = _write(committed, tmp_path)["fake-both.html"]
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    expected = {
        (committed.results[("fake-both", s)].run_dir / "line.png").read_bytes()
        for s in ("quick", "paper")
    }
    assert {base64.b64decode(u) for u in uris} == expected and len(uris) == 2
    assert "line.png: fake-both, scale paper, data set: synthetic: Gaussian noise" in page
    assert "figure not available" not in page
    md = (tmp_path / "fake-both.md").read_text()
    quick_dir = committed.results[("fake-both", "quick")].run_dir
    link = Path(os.path.relpath(quick_dir / "line.png", tmp_path)).as_posix()
    assert f"![line.png]({link})" in md
    # self-contained: nothing is loaded from elsewhere
    for name in ("index.html", "fake-both.html"):
        text = (tmp_path / name).read_text()
        assert "http" not in text and "<script" not in text and "<link" not in text


def test_figures_not_at_hand_say_how_to_make_them(committed: Committed, tmp_path: Path) -> None:
    elsewhere = tmp_path / "no-runs"
    pages = _write(committed, tmp_path / "out", runs=elsewhere)
    page = pages["fake-both.html"]
    assert "data:image/png" not in page
    command = f"ntklab run fake-both --scale quick --out {elsewhere} --commit-to {committed.root}"
    assert f"figure not available: rerun with <code>{command}</code>" in page
    # the committed quick run of fake-quick set n=6: the command asks for the same config
    command = (
        f"ntklab run fake-quick --scale quick --out {elsewhere} --set n=6 "
        f"--commit-to {committed.root}"
    )
    assert f"figure not available: rerun with <code>{command}</code>" in pages["fake-quick.html"]
    assert f"line.png: figure not available: rerun with `{command}`." in pages["fake-quick.md"]


def test_rerun_command_writes_overrides_as_set_reads_them(committed: Committed) -> None:
    result = committed.results[("fake-quick", "quick")]
    changed = dataclasses.replace(
        result,
        config={**result.config, "widths": [1, 2], "use_bias": False, "label": "a b"},
    )
    command = rerun_command(committed.experiments[1], "quick", "runs", "res", changed)
    assert command == (
        "ntklab run fake-quick --scale quick --out runs --set 'label=a b' --set n=6 "
        "--set use_bias=false --set 'widths=[1,2]' --commit-to res"
    )


def test_report_command(committed: Committed, tmp_path: Path) -> None:
    out = tmp_path / "site"
    with registered(*committed.experiments):
        args = ["report", str(committed.root), "--out", str(out), "--runs", str(committed.runs)]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert f"claims report: {out / 'index.html'}" in result.output
        assert (out / "fake-both.html").is_file() and (out / "index.md").is_file()
        assert "data:image/png;base64," in (out / "fake-both.html").read_text()
        # the CLI compares each result's code with the running code
        assert re.search(
            r"; (the current code|other than the current code \(\w+\))</td>",
            (out / "fake-both.html").read_text(),
        )
        bad = tmp_path / "bad"
        (bad / "quick").mkdir(parents=True)
        (bad / "quick" / "fake-both.json").write_text("{}")
        result = CliRunner().invoke(app, ["report", str(bad), "--out", str(out)])
        assert result.exit_code == 1  # a damaged result is refused (not tabled), not a usage error
        assert "fake-both.json: damaged: schema_version" in " ".join(result.output.split())
        assert "Traceback" not in result.output
