"""``ntklab verify``, and ``ntklab table`` / ``ntklab report`` on results that do not check
out: an edited metric, an edited verdict, a tampered digest, a truncated file, a stale
criterion; and ``verify`` on the repository's own committed results (CI runs it)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from experiment_helpers import registered
from ntklab.cli import app
from ntklab.experiments import (
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    RunContext,
    run_experiment,
)
from ntklab.experiments.result import DIGEST_FIELD, content_digest
from ntklab.report.claims import commit_result

REPO_RESULTS = Path(__file__).resolve().parents[1] / "results"


class SlopeConfig(ExperimentConfig):
    slope: float = -2.0


def slope_experiment(name: str, min_slope: float = -2.1) -> Experiment:
    def measure(config: SlopeConfig, ctx: RunContext) -> Measurement:
        return Measurement(metrics=(Metric("slope", config.slope),))

    def judge(config: SlopeConfig, metrics: Metrics) -> Judgement:
        slope = metrics["slope"].value
        return Judgement(slope >= min_slope, f"slope {slope:.2f}", f"slope >= {min_slope}")

    return Experiment(
        name=name,
        claim_id="Z8",
        claim="The slope is at least -2.1.",
        criterion="slope >= -2.1",
        config_type=SlopeConfig,
        scales={"tiny": {}, "quick": {}, "paper": {"slope": -7.5}},
        measure=measure,
        judge=judge,
        draw=lambda config, metrics, arrays: {},
        headline=("slope",),
    )


@pytest.fixture
def results(tmp_path: Path) -> Iterator[Path]:
    """Committed results of a registered slope experiment: quick PASS (-2), paper FAIL (-7.5)."""
    exp = slope_experiment("fake-slope")
    with registered(exp):
        root = tmp_path / "results"
        for scale in ("quick", "paper"):
            commit_result(run_experiment(exp, scale, out_root=tmp_path / "runs"), root)
        yield root


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def edit(path: Path, change: Any, reseal: bool = False) -> None:
    data = json.loads(path.read_text())
    change(data)
    if reseal:
        data[DIGEST_FIELD] = content_digest(data)
    path.write_text(json.dumps(data, indent=2))


def slope_to(value: float) -> Any:
    return lambda data: data["metrics"][0].update(value=value)


def verdict_to(verdict: str) -> Any:
    return lambda data: data.update(verdict=verdict, criterion_met=verdict == "PASS")


def row(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("| Z8 `fake-slope`"))


def test_a_clean_folder_verifies(results: Path) -> None:
    out = invoke("verify", str(results))
    assert out.exit_code == 0, out.output
    assert f"2 results under {results} verified: 2 valid" in out.output
    table = invoke("table", str(results))
    assert table.exit_code == 0, table.output
    assert "slope -2; **PASS**" in row(table.output)
    assert "slope -7.5; **FAIL**" in row(table.output)


@pytest.mark.parametrize(
    ("scale", "change", "reseal", "status"),
    [
        ("quick", slope_to(-7.5), False, "tampered"),  # the criterion needs >= -2.1
        ("quick", slope_to(-7.5), True, "inconsistent"),
        ("paper", verdict_to("PASS"), False, "tampered"),
        ("paper", verdict_to("PASS"), True, "inconsistent"),
        (
            "quick",
            lambda data: data.update({DIGEST_FIELD: "sha256:" + "0" * 64}),
            False,
            "tampered",
        ),
    ],
)
def test_edited_results_are_refused_by_table_report_and_verify(
    results: Path, tmp_path: Path, scale: str, change: Any, reseal: bool, status: str
) -> None:
    path = results / scale / "fake-slope.json"
    edit(path, change, reseal)
    out = invoke("verify", str(results))
    assert out.exit_code == 1
    line = next(x for x in out.output.splitlines() if str(path) in x)
    assert f": {status}: " in line
    if status == "inconsistent":
        assert "expected" in line and "found" in line
    assert "1 problem(s) in 2 results" in out.output

    table = invoke("table", str(results))
    assert table.exit_code == 1
    cells = row(table.output).split(" | ")
    cell = cells[2] if scale == "quick" else cells[3]
    assert cell.startswith("refused: ") and "PASS" not in cell and "-7.5" not in cell
    assert "result(s) refused" in table.output

    report = invoke("report", str(results), "--out", str(tmp_path / "site"))
    assert report.exit_code == 1
    page = (tmp_path / "site" / "fake-slope.html").read_text()
    index = (tmp_path / "site" / "index.md").read_text()
    assert "refused: " in page and "refused: " in row(index)
    # the untouched quick PASS still shows; an edited quick result does not
    assert (scale == "quick") == ("**PASS**" not in row(index))


def test_a_truncated_result_is_reported_damaged(results: Path) -> None:
    path = results / "quick" / "fake-slope.json"
    path.write_text(path.read_text()[:100])
    out = invoke("verify", str(results))
    assert out.exit_code == 1 and f"{path}: damaged: expected a JSON result file" in " ".join(
        out.output.split()
    )
    table = invoke("table", str(results))
    assert table.exit_code == 1 and "refused: damaged" in row(table.output)


def test_a_stale_result_is_shown_as_stale_and_verify_fails_unless_kept_as_history(
    results: Path,
) -> None:
    stricter = slope_experiment("fake-slope", min_slope=-1.5)  # today's criterion changed
    with registered(stricter):
        table = invoke("table", str(results))
        assert table.exit_code == 0, table.output  # honest, not refused
        cell = row(table.output).split(" | ")[2]
        assert cell == "stale: was PASS under an earlier criterion (slope >= -2.1); rerun"
        out = invoke("verify", str(results))
        assert out.exit_code == 1
        assert "stale: judged by another criterion: recorded 'slope >= -2.1', current " in (
            " ".join(out.output.split())
        )
        history = results / "history"
        history.mkdir()
        for scale in ("quick", "paper"):
            shutil.move(results / scale, history / scale)
        out = invoke("verify", str(results))
        assert out.exit_code == 0, out.output
        assert "(2 stale kept as history)" in out.output


def test_unsealed_results_are_tabled_with_a_note_and_refused_by_verify(results: Path) -> None:
    edit(results / "quick" / "fake-slope.json", lambda data: data.pop(DIGEST_FIELD))
    table = invoke("table", str(results))
    assert table.exit_code == 0
    assert "slope -2; **PASS** (unsealed: no content digest)" in row(table.output)
    out = invoke("verify", str(results))
    assert out.exit_code == 1 and "unsealed: no content digest" in out.output


@pytest.mark.parametrize("command", ["table", "report", "verify"])
def test_a_results_folder_that_does_not_exist_is_a_usage_error(
    command: str, tmp_path: Path
) -> None:
    out = invoke(
        command,
        str(tmp_path / "nonexistent"),
        *(["--out", str(tmp_path / "o")] if command == "report" else []),
    )
    assert out.exit_code == 2
    assert "no such folder" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_verify_of_a_folder_without_results_fails(tmp_path: Path) -> None:
    out = invoke("verify", str(tmp_path))
    assert out.exit_code == 1 and "no result files" in out.output


def test_the_committed_results_verify() -> None:
    """CI runs this: every committed result is sealed and its verdict and criterion are
    what the current judges give. A result judged by a criterion that has since changed
    fails here until it is rerun and committed (or moved to results/history/)."""
    out = invoke("verify", str(REPO_RESULTS))
    assert out.exit_code == 0, out.output
