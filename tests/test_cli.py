"""The ``ntklab`` command, through typer's CliRunner."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from ntklab.cli import app
from ntklab.experiments import RunResult
from ntklab.experiments.testing import fake_experiment, registered


@pytest.fixture(autouse=True)
def fakes() -> Iterator[None]:
    with registered(
        fake_experiment("fake-pass", "Z1"),
        fake_experiment("fake-fail", "Z2", passed=False),
        fake_experiment("fake-err", "Z3", error=RuntimeError("boom [x]")),
    ):
        yield


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"ntklab {metadata.version('ntklab')}"


def test_list_shows_the_experiments() -> None:
    result = invoke("list")
    assert result.exit_code == 0
    for name, claim in (("fake-pass", "Z1"), ("fake-fail", "Z2"), ("fake-err", "Z3")):
        line = next(line for line in result.output.splitlines() if name in line)
        assert claim in line
        assert "tiny, quick, paper" in line
    assert "The fake claim of fake-pass holds." in result.output


def test_run_pass(tmp_path: Path) -> None:
    result = invoke("run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "PASS  fake-pass (Z1), scale tiny" in result.output
    assert "value 4 matches prediction 4" in result.output
    assert "spread" in result.output
    run_dir = next((tmp_path / "fake-pass").iterdir())
    assert f"run folder: {run_dir}" in result.output
    assert RunResult.from_json(run_dir / "result.json").verdict == "PASS"
    again = invoke("run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path))
    assert again.exit_code == 0
    assert "(reused)" in again.output


def test_run_with_set(tmp_path: Path) -> None:
    result = invoke(
        "run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path),
        "--set", "n=6", "--set", "widths=1,2", "--set", "use_bias=false",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "value 6 matches prediction 6" in result.output
    config = RunResult.from_json(next((tmp_path / "fake-pass").iterdir()) / "result.json").config
    assert (config["n"], config["widths"], config["use_bias"]) == (6, [1, 2], False)


def test_run_fail_exits_1_with_reason(tmp_path: Path) -> None:
    result = invoke("run", "fake-fail", "--scale", "tiny", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "FAIL fake-fail: value 4 misses prediction 4" in result.output


def test_run_error_exits_1_with_reason(tmp_path: Path) -> None:
    result = invoke("run", "fake-err", "--scale", "tiny", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "ERROR fake-err: RuntimeError: boom [x]" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["run", "fake-pas"],
            "unknown experiment 'fake-pas'; expected one of: ",
        ),
        (
            ["run", "fake-pas"],
            "Did you mean 'fake-pass'?",
        ),
        (["run", "fake-pass", "--set", "n=abc"], "--set n: expected int, received 'abc'"),
        (["run", "fake-pass", "--set", "nn=3"], "unknown config key 'nn'"),
        (["run", "fake-pass", "--set", "n"], "--set: expected key=value, received 'n'"),
        (["run", "fake-pass", "--scale", "huge"], "received 'huge'"),
        (["reproduce", "--only", "nope"], "unknown experiment 'nope'"),
        (["reproduce", "--scale", "huge"], "received 'huge'"),
    ],
)
def test_usage_errors_exit_2_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = invoke(*args, "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_unwritable_out_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker, blocker / "runs"):
        result = invoke("run", "fake-pass", "--scale", "tiny", "--out", str(out))
        assert result.exit_code == 2
        assert "--out" in result.output
        assert "Traceback" not in result.output


def test_reproduce_writes_both_reports(tmp_path: Path) -> None:
    result = invoke("reproduce", "--scale", "tiny", "--out", str(tmp_path), "--only", "fake-pass")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").is_file()
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert "| Z1 | fake-pass (tiny) |" in (tmp_path / "report.md").read_text()
    assert "fake-pass" in result.output
    assert f"report: {tmp_path / 'report.html'}" in result.output


def test_reproduce_reports_failures_and_exits_1(tmp_path: Path) -> None:
    result = invoke("reproduce", "--scale", "tiny", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "FAIL fake-fail: value 4 misses prediction 4" in result.output
    assert "ERROR fake-err: RuntimeError: boom [x]" in result.output
    assert "fake-pass:" not in result.output
    md = (tmp_path / "report.md").read_text()
    for claim, name, verdict in (("Z1", "fake-pass", "PASS"), ("Z2", "fake-fail", "FAIL")):
        assert f"## {claim} `{name}`: {verdict}" in md
    assert "## Z3 `fake-err`: ERROR" in md


def test_reproduce_with_no_experiments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ntklab.experiments import registry

    monkeypatch.setattr(registry, "_REGISTRY", {})
    result = invoke("reproduce", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "no experiments are registered" in result.output


def test_main_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    from ntklab.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "ntklab" in capsys.readouterr().out
