"""The ``ntklab`` command, through typer's CliRunner."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner, Result

from experiment_helpers import FakeConfig, fake_experiment, registered
from ntklab.cli import app
from ntklab.experiments import (
    Count,
    Experiment,
    Measurement,
    Metric,
    PositiveFloat,
    RunContext,
    RunResult,
)
from ntklab.experiments.fingerprint import code_fingerprint
from ntklab.experiments.result import content_digest


@pytest.fixture(autouse=True)
def fakes() -> Iterator[None]:
    with registered(
        fake_experiment("fake-pass", "Z1"),
        fake_experiment("fake-fail", "Z2", passed=False),
        fake_experiment("fake-err", "Z3", error=RuntimeError("boom [x]")),
    ):
        yield


def invoke(*args: str, columns: int = 200) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


def only_run_dir(root: Path) -> Path:
    (run_dir,) = (d for d in root.iterdir() if not d.name.startswith("."))
    return run_dir


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
    result = invoke("run", "fake-pass", "--scale", "quick", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "PASS  fake-pass (Z1), scale quick" in result.output
    assert "value 8 matches prediction 8" in result.output
    assert "criterion: value equals n = 8" in result.output  # as applied to the grid
    assert "spread" in result.output
    run_dir = only_run_dir(tmp_path / "fake-pass")
    assert f"run folder: {run_dir}" in result.output
    stored = RunResult.from_json(run_dir / "result.json")
    assert stored.verdict == "PASS"
    fp = code_fingerprint()
    assert (
        f"run key: {stored.run_key} = config {stored.config_hash} + code {fp.digest} "
        f"(source {fp.source}, torch {fp.torch}, numpy {fp.numpy})"
    ) in result.output
    again = invoke("run", "fake-pass", "--scale", "quick", "--out", str(tmp_path))
    assert again.exit_code == 0
    assert f"run folder: {run_dir} (reused)" in again.output


def test_run_writes_its_report_and_says_where(tmp_path: Path) -> None:
    result = invoke("run", "fake-pass", "--scale", "quick", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(tmp_path / "fake-pass")
    assert f"report: {run_dir / 'report.html'}" in result.output
    html = (run_dir / "report.html").read_text()
    assert "fake-pass" in html and "data:image/png;base64," in html
    assert "| Z1 | fake-pass (quick) |" in (run_dir / "report.md").read_text()
    assert not (tmp_path / "report.html").exists()  # the reproduce report is left alone


def test_tiny_run_is_a_smoke_run_that_exits_0(tmp_path: Path) -> None:
    for name in ("fake-pass", "fake-fail"):  # a smoke run is not judged, whatever its judge
        result = invoke("run", name, "--scale", "tiny", "--out", str(tmp_path))
        assert result.exit_code == 0, result.output
        assert f"SMOKE (smoke run, not judged)  {name} (Z" in result.output
        assert "criterion, not judged at scale tiny: value equals n = 4" in result.output
        assert RunResult.from_json(only_run_dir(tmp_path / name) / "result.json").verdict == (
            "SMOKE"
        )
        assert f"report: {only_run_dir(tmp_path / name) / 'report.html'}" in result.output


def test_run_with_set(tmp_path: Path) -> None:
    result = invoke(
        "run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path),
        "--set", "n=6", "--set", "widths=1,2", "--set", "use_bias=false",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "value 6 matches prediction 6" in result.output
    config = RunResult.from_json(only_run_dir(tmp_path / "fake-pass") / "result.json").config
    assert (config["n"], config["widths"], config["use_bias"]) == (6, [1, 2], False)


def test_run_fail_exits_1_with_reason(tmp_path: Path) -> None:
    result = invoke("run", "fake-fail", "--scale", "quick", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "FAIL fake-fail: value 8 misses prediction 8" in result.output
    assert "report: " in result.output


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
        (
            ["run", "fake-pass", "--set", "scale_factor=nan"],
            "--set scale_factor: expected float, finite, received 'nan'",
        ),
        (
            ["run", "fake-pass", "--set", "scale_factor=-inf"],
            "--set scale_factor: expected float, finite, received '-inf'",
        ),
        (["run", "fake-pass", "--set", "seed=-1"], "--set seed: expected int >= 0, received '-1'"),
        (
            ["run", "fake-pass", "--set", "widths="],
            "--set widths: expected tuple[int, ...], non-empty, received '' (empty)",
        ),
        (["show", "fake-pas"], "unknown experiment 'fake-pas'"),
        (
            ["run", "fake-pass", "--reuse-any", "--workers", "2"],
            "--reuse-any: not available with --scheduler or --workers",
        ),
        (
            ["reproduce", "--reuse-any", "--scheduler", "tcp://x:1"],
            "--reuse-any: not available with --scheduler or --workers",
        ),
        (
            ["run", "fake-pass", "--workers", "2", "--set", "seed=-3"],
            "--set seed: expected int >= 0, received '-3'",
        ),
        (["reproduce", "--only", "nope"], "unknown experiment 'nope'"),
        (["reproduce", "--scale", "huge"], "received 'huge'"),
    ],
)
def test_usage_errors_exit_2_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    out = ["--out", str(tmp_path)] if args[0] != "show" else []
    result = invoke(*args, *out)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not result.stdout.strip()
    assert not any(tmp_path.iterdir())  # refused before anything ran


class StrictConfig(FakeConfig):
    """The fake config with the constraints an experiment declares."""

    n: Count = 8
    scale_factor: PositiveFloat = 1.0

    @pydantic.field_validator("widths")
    @classmethod
    def _increasing(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        """Widths strictly increasing."""
        if list(value) != sorted(set(value)):
            raise ValueError("widths must be strictly increasing")
        return value

    @pydantic.model_validator(mode="after")
    def _n_within_widths(self) -> StrictConfig:
        """n at most 16 times the largest width."""
        if self.n > 16 * max(self.widths):
            raise ValueError(f"n = {self.n} exceeds 16 times the largest width")
        return self


def strict_experiment() -> Experiment:
    return dataclasses.replace(fake_experiment("fake-strict", "Z7"), config_type=StrictConfig)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("n=0", "--set n: expected int >= 1, received '0' (Input should be greater than or equal"),
        ("scale_factor=0", "--set scale_factor: expected float > 0, finite, received '0'"),
        ("widths=8,4", "received '8,4' (widths must be strictly increasing)"),
        ("n=1000", "with --set n=1000: n = 1000 exceeds 16 times the largest width"),
    ],
)
def test_experiment_constraints_exit_2_in_one_line(
    tmp_path: Path, setting: str, expected: str
) -> None:
    with registered(strict_experiment()):
        result = invoke("run", "fake-strict", "--set", setting, "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert len(result.output.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def cells(output: str, key: str) -> list[str]:
    """The cells of the table row whose first cell is ``key``."""
    for line in output.splitlines():
        parts = [c.strip() for c in re.split("[│┃]", line)[1:-1]]
        if parts and parts[0] == key:
            return parts
    raise AssertionError(f"no row {key!r} in:\n{output}")


def test_show_lists_claim_criterion_keys_constraints_and_scales() -> None:
    with registered(strict_experiment()):
        result = invoke("show", "fake-strict", columns=80)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "fake-strict (Z7)" in out
    assert "claim: The fake claim of fake-strict holds. It has <html> & | pipes." in out
    assert "criterion: value equals n (judged at scales quick, paper;" in out
    header = cells(out, "key")
    assert header == ["key", "type", "default", "constraints", "tiny", "quick", "paper"]
    assert cells(out, "n") == ["n", "int", "8", ">= 1", "4", "8", "64"]
    assert cells(out, "seed") == ["seed", "int", "0", ">= 0", "0", "0", "0"]
    assert cells(out, "scale_factor") == [
        "scale_factor",
        "float",
        "1",
        "> 0; finite",
        "1",
        "1",
        "1",
    ]
    assert cells(out, "widths") == [
        "widths", "tuple[int, ...]", "4,8", "non-empty; Widths strictly increasing.",
        "4,8", "4,8", "64,128",
    ]  # fmt: skip
    assert cells(out, "activation")[1:4] == ["one of 'relu', 'erf'", "relu", "—"]
    assert "check across keys: n at most 16 times the largest width." in out


def long_metric_experiment(metric: str) -> Experiment:
    base = fake_experiment("fake-long", "Z9", figure=False)

    def measure(config: FakeConfig, ctx: RunContext) -> Measurement:
        value = Metric("value", config.n * config.scale_factor, predicted=str(config.n))
        return Measurement(metrics=(value, Metric(metric, 1.0, predicted="about 1")))

    return dataclasses.replace(base, measure=measure)


def test_tables_keep_their_full_width_in_a_pipe(tmp_path: Path) -> None:
    metric = "relative_kernel_change_at_the_widest_network_" + "x" * 80
    with registered(long_metric_experiment(metric)):
        for columns in (80, 40):  # COLUMNS applies to terminals only
            result = invoke(
                "run", "fake-long", "--scale", "quick", "--out", str(tmp_path), columns=columns
            )
            assert result.exit_code == 0, result.output
            row = next(line for line in result.output.splitlines() if metric[:20] in line)
            assert metric in row
            assert "about 1" in row


def test_reuse_any_reuses_a_run_made_by_other_code_and_labels_it(tmp_path: Path) -> None:
    args = ("run", "fake-pass", "--scale", "quick", "--out", str(tmp_path))
    assert invoke(*args).exit_code == 0
    run_dir = only_run_dir(tmp_path / "fake-pass")
    # the same config run by other code: another run key, another code digest
    old_key, old_digest = "0123456789ab", "feedfacefeedface"
    old_dir = run_dir.with_name(f"quick-{old_key}")
    run_dir.rename(old_dir)
    data = json.loads((old_dir / "result.json").read_text())
    data["run_key"], data["code"]["digest"] = old_key, old_digest
    data["content_digest"] = content_digest(data)  # as that code would have sealed it
    (old_dir / "result.json").write_text(json.dumps(data))

    reused = invoke(*args, "--reuse-any")
    assert reused.exit_code == 0, reused.output
    assert f"run folder: {old_dir} (reused, made by other code)" in reused.output
    assert f"code {old_digest}" in reused.output
    assert f"made by other code: this code is {code_fingerprint().digest}" in reused.output
    assert "made by other code" in (old_dir / "report.html").read_text()

    fresh = invoke(*args)  # without --reuse-any a code change recomputes, the old run is kept
    assert fresh.exit_code == 0, fresh.output
    assert f"run folder: {run_dir} (" in fresh.output
    assert "reused" not in fresh.output
    assert old_dir.is_dir() and run_dir.is_dir()
    assert RunResult.from_json(run_dir / "result.json").run_key != old_key


def test_unwritable_out_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker, blocker / "runs"):
        result = invoke("run", "fake-pass", "--scale", "tiny", "--out", str(out))
        assert result.exit_code == 2
        assert "--out" in result.output
        assert "Traceback" not in result.output


def test_reproduce_writes_both_reports(tmp_path: Path) -> None:
    result = invoke("reproduce", "--scale", "quick", "--out", str(tmp_path), "--only", "fake-pass")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").is_file()
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert "| Z1 | fake-pass (quick) |" in (tmp_path / "report.md").read_text()
    assert "fake-pass" in result.output
    assert f"report: {tmp_path / 'report.html'}" in result.output
    assert f"code: {code_fingerprint().digest}" in result.output


def test_tiny_reproduce_of_smoke_runs_exits_0(tmp_path: Path) -> None:
    only = ("--only", "fake-pass", "--only", "fake-fail")
    result = invoke("reproduce", "--scale", "tiny", "--out", str(tmp_path), *only)
    assert result.exit_code == 0, result.output
    assert result.output.count("SMOKE (smoke run, not judged)") == 2
    md = (tmp_path / "report.md").read_text()
    assert "## Z2 `fake-fail`: SMOKE (smoke run, not judged)" in md
    with_error = invoke(
        "reproduce", "--scale", "tiny", "--out", str(tmp_path), "--only", "fake-err"
    )
    assert with_error.exit_code == 1
    assert "ERROR fake-err: RuntimeError: boom [x]" in with_error.output


def test_reproduce_reports_failures_and_exits_1(tmp_path: Path) -> None:
    only = ("--only", "fake-pass", "--only", "fake-fail", "--only", "fake-err")
    result = invoke("reproduce", "--scale", "quick", "--out", str(tmp_path), *only)
    assert result.exit_code == 1
    assert "FAIL fake-fail: value 8 misses prediction 8" in result.output
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


def test_smoke_has_its_own_style(tmp_path: Path) -> None:
    colors = {"FORCE_COLOR": "1", "TERM": "xterm"}
    runner = CliRunner()
    smoke = runner.invoke(
        app, ["run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path)], env=colors
    )
    judged = runner.invoke(app, ["run", "fake-pass", "--out", str(tmp_path)], env=colors)
    assert smoke.exit_code == 0 and judged.exit_code == 0
    assert smoke.stdout.startswith("\x1b[1;36mSMOKE (smoke run, not judged)")  # bold cyan
    assert judged.stdout.startswith("\x1b[1;32mPASS")  # bold green


@pytest.mark.parametrize("second", ["n=9", "n = 9", "n=8"])
def test_a_key_set_twice_is_refused_naming_it(tmp_path: Path, second: str) -> None:
    result = invoke("run", "fake-pass", "--set", "n=8", "--set", second, "--out", str(tmp_path))
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "--set n: expected each key at most once, received 'n=8' and" in text
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing ran


def test_a_key_set_twice_under_two_spellings_is_refused(tmp_path: Path) -> None:
    result = invoke(
        "run",
        "fake-pass",
        "--set",
        "scale_factor=2",
        "--set",
        "scale-factor=3",
        "--out",
        str(tmp_path),
    )
    assert result.exit_code == 2
    assert "--set scale-factor: expected each key at most once" in " ".join(result.output.split())
