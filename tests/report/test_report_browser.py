"""The HTML reports in a real headless browser (Chromium, network blocked).

The report of a tiny ``ntklab run`` and the claims report that ``ntklab report`` writes of the
committed ``results/``: no request fails or leaves the machine, every image is decoded, the
verdict, metrics and criterion are visible, the tables have their rows, the page fits a
phone's width and prints. A report with an image deleted or a table cut fails the same check.
Skipped where Chromium and chromedriver are absent (see ``tests/_browser.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from _browser import Expected, chromium, page_problems
from ntklab.cli import app
from ntklab.experiments import RunResult
from ntklab.report import write_report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
EXPERIMENT = "double-descent"  # the fastest at tiny scale (about 1 s), one figure

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    done = CliRunner().invoke(app, ["run", EXPERIMENT, "--scale", "tiny", "--out", str(out)])
    assert done.exit_code == 0, done.output
    (report,) = out.glob(f"{EXPERIMENT}/tiny-*/report.html")
    return report.parent


@pytest.fixture(scope="module")
def claims_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("claims")
    args = ["report", str(RESULTS), "--out", str(base / "site"), "--runs", str(base / "none")]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    return base / "site"


def _run_expected(run: Path) -> Expected:
    """What the report of the run in ``run`` must show, read from its result.json."""
    data = json.loads((run / "result.json").read_text())
    return Expected(
        texts=[data["verdict"], data["criterion"], data["claim"]]
        + [m["name"] for m in data["metrics"]],
        table_rows=[1, len(data["metrics"])],  # the claims table, the metrics table
        images=len(data["figures"]),
        selectors=[f".verdict.{data['verdict']}"],
    )


def _committed() -> dict[str, dict[str, dict[str, Any]]]:
    """experiment -> scale -> committed result (the JSON files of ``results/<scale>/``)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(RESULTS.glob("*/*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "experiment" in data and "verdict" in data:
            found.setdefault(data["experiment"], {})[path.parent.name] = data
    return found


_VERDICT = re.compile(r"\**(PASS|FAIL|ERROR|SMOKE)\b")
_PLAIN = re.compile(r"[\w\[\]=,.;:()<>/ -]+")


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """The body rows of each table of a Markdown page, as lists of cells."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if re.fullmatch(r"\|(-+\|)+", line.strip()):
            current = []
            tables.append(current)
        elif current is not None and line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        else:
            current = None
    return tables


def test_run_report_in_browser(driver: Any, run_dir: Path) -> None:
    expected = _run_expected(run_dir)
    assert expected.images >= 1
    problems = page_problems(driver, (run_dir / "report.html").as_uri(), expected)
    assert not problems, "\n".join(problems)


def test_claims_report_in_browser(driver: Any, claims_dir: Path) -> None:
    committed = _committed()
    assert len(committed) >= 10
    index = Expected(
        texts=[name for name in committed], table_rows=[len(committed)], selectors=[".verdict"]
    )
    problems = [
        f"index: {p}" for p in page_problems(driver, (claims_dir / "index.html").as_uri(), index)
    ]
    linked = re.findall(r'href="([^"#/]+\.html)"', (claims_dir / "index.html").read_text())
    assert sorted(linked) == sorted(f"{name}.html" for name in committed)
    for page in linked:
        # The Markdown twin of the page, written by its own renderer, says which rows each
        # table has (which committed results are tabled is the claims module's business).
        name = page.removesuffix(".html")
        tables = _markdown_tables((claims_dir / f"{name}.md").read_text())
        labels = [row[0] for table in tables for row in table if _PLAIN.fullmatch(row[0])]
        judged = any(_VERDICT.match(cell) for cell in tables[0][0][2:])  # the verdict row
        claim_id = next(iter(committed[name].values()))["claim_id"]
        expected = Expected(
            texts=[claim_id, name, *labels],
            table_rows=[len(table) for table in tables],
            selectors=[".verdict"] if judged else [],
        )
        problems += [
            f"{page}: {p}" for p in page_problems(driver, (claims_dir / page).as_uri(), expected)
        ]
    assert not problems, "\n".join(problems)


def test_broken_reports_fail(driver: Any, run_dir: Path, tmp_path: Path) -> None:
    """Negative controls: the same checks catch a deleted figure and a cut table."""
    expected = _run_expected(run_dir)
    # a figure deleted from a copy of the run folder, the report written again from it
    copy = shutil.copytree(run_dir, tmp_path / "run")
    figure = json.loads((copy / "result.json").read_text())["figures"][0]
    (copy / figure).unlink()
    write_report([RunResult.from_json(copy / "result.json")], copy)
    problems = page_problems(driver, (copy / "report.html").as_uri(), expected)
    assert any(p.startswith("0 images, expected 1") for p in problems), problems
    # a figure whose bytes are cut short: the page still has its <img>, which does not decode
    page = (run_dir / "report.html").read_text()
    broken = tmp_path / "truncated.html"
    broken.write_text(re.sub(r'(src="data:image/png;base64,)[^"]*"', r'\1iVBORw0KGgo="', page))
    problems = page_problems(driver, broken.as_uri(), expected)
    assert any(p.startswith("image not shown") for p in problems), problems
    # the metrics table cut out of the HTML
    cut = tmp_path / "cut.html"
    tables = re.findall(r"<table>.*?</table>", page, flags=re.S)
    cut.write_text(page.replace(tables[-1], ""))
    problems = page_problems(driver, cut.as_uri(), expected)
    assert any(p.startswith("table rows") for p in problems), problems
    assert any(p.startswith("not visible") for p in problems), problems
    # a file that is not there, and a request to the network
    leaky = tmp_path / "leaky.html"
    leaky.write_text(
        page.replace("</body>", '<img src="gone.png"><img src="https://example.org/x.png"></body>')
    )
    problems = page_problems(driver, leaky.as_uri(), expected)
    assert any("request failed" in p and "gone.png" in p for p in problems), problems
    assert any(p.startswith("requested https://example.org") for p in problems), problems


def test_phone_and_print_checks_fail_on_a_wide_page(driver: Any, tmp_path: Path) -> None:
    """Negative control: a page wider than a phone, without a viewport, fails the phone check."""
    wide = tmp_path / "wide.html"
    wide.write_text('<!DOCTYPE html><html><body><p style="width:60rem">x</p></body></html>')
    problems = page_problems(driver, wide.as_uri(), Expected(texts=["x"]))
    assert any("laid out 980 px wide" in p for p in problems), problems
    wide.write_text(
        '<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width">'
        '</head><body><p style="width:60rem">x</p></body></html>'
    )
    problems = page_problems(driver, wide.as_uri(), Expected(texts=["x"]))
    assert any("scrolls sideways" in p for p in problems), problems
