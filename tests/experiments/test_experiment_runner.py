"""The runner: run folders, atomic writes, errors, resume, result.json."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    Experiment,
    Metric,
    Outcome,
    RunContext,
    RunResult,
    config_hash,
    resolve_config,
    run_experiment,
)
from ntklab.experiments import result as result_module
from ntklab.experiments.testing import FakeConfig, fake_experiment, registered, run_tiny

RESULT_KEYS = {
    "schema_version",
    "experiment",
    "claim_id",
    "claim",
    "scale",
    "config_hash",
    "config",
    "metrics",
    "criterion",
    "verdict",
    "summary",
    "notes",
    "versions",
    "seed",
    "wall_time_s",
    "started_at",
    "figures",
    "arrays",
    "error",
}


class Counter:
    """Wraps a run function and counts its calls."""

    def __init__(self, experiment: Experiment) -> None:
        self.calls = 0
        self.inner = experiment.run

    def __call__(self, config: Any, ctx: RunContext) -> Outcome:
        self.calls += 1
        return self.inner(config, ctx)


def counted(experiment: Experiment) -> tuple[Experiment, Counter]:
    counter = Counter(experiment)
    return dataclasses.replace(experiment, run=counter), counter


@pytest.fixture
def fake() -> Iterator[Experiment]:
    with registered(fake_experiment("fake-run")) as (experiment,):
        yield experiment


def leftovers(folder: Path) -> list[str]:
    """Hidden temporary files or folders left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_pass_run_writes_the_run_folder(fake: Experiment, tmp_path: Path) -> None:
    calls: list[tuple[float, str]] = []
    result = run_experiment(
        "fake-run", "tiny", out_root=tmp_path, progress=lambda f, m: calls.append((f, m))
    )
    digest = config_hash(fake, "tiny", resolve_config(fake, "tiny"))
    assert result.run_dir == tmp_path / "fake-run" / f"tiny-{digest}"
    assert (result.verdict, result.passed, result.reused, result.error) == (
        "PASS",
        True,
        False,
        None,
    )
    assert result.summary == "value 4 matches prediction 4"
    assert sorted(p.name for p in result.run_dir.iterdir()) == [
        "arrays.npz",
        "line.png",
        "result.json",
    ]
    assert (result.run_dir / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(result.run_dir / "arrays.npz") as arrays:
        np.testing.assert_array_equal(arrays["widths"], [4, 8])
        assert arrays["noise"].shape == (4,)
    assert result.figures == ("line.png",)
    assert result.seed == 0
    assert set(result.versions) == {"ntklab", "torch", "numpy", "python", "platform"}
    assert calls[0] == (0.0, "starting")
    assert (0.5, "halfway") in calls
    assert calls[-1] == (1.0, "PASS")
    assert leftovers(result.run_dir.parent) == []


def test_result_json_schema_round_trip(fake: Experiment, tmp_path: Path) -> None:
    result = run_experiment("fake-run", "tiny", out_root=tmp_path)
    data = json.loads((result.run_dir / "result.json").read_text())
    assert set(data) == RESULT_KEYS
    assert data["metrics"][0] == {
        "name": "value",
        "value": 4.0,
        "ci_low": 3.0,
        "ci_high": 5.0,
        "predicted": "4",
        "unit": "",
        "note": "",
    }
    assert data["config"] == {**FakeConfig(n=4).model_dump(mode="json")}
    assert data["arrays"] == "arrays.npz"
    assert data["started_at"].endswith("Z")
    assert RunResult.from_json(result.run_dir / "result.json") == result


def test_non_finite_metrics_are_strict_json_and_flagged(tmp_path: Path) -> None:
    def run(config: Any, ctx: RunContext) -> Outcome:
        metrics = (Metric("a", float("nan")), Metric("b", 1.0, ci_low=-math.inf, ci_high=math.inf))
        return Outcome(metrics=metrics, passed=False, summary="nan")

    experiment = dataclasses.replace(fake_experiment("fake-nan"), run=run)
    result = run_experiment(experiment, "tiny", out_root=tmp_path)
    text = (result.run_dir / "result.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    back = RunResult.from_json(result.run_dir / "result.json")
    assert math.isnan(back.metrics[0].value)
    assert back.metrics[1].ci_low == -math.inf
    assert back.metrics[1].ci_high == math.inf
    assert any("'a' is not finite" in note for note in back.notes)


def test_experiment_exception_gives_error_verdict(tmp_path: Path) -> None:
    experiment = fake_experiment("fake-boom", error=RuntimeError("boom"))
    result = run_experiment(experiment, "tiny", out_root=tmp_path)
    assert result.verdict == "ERROR"
    assert result.error is not None
    assert "Traceback" in result.error
    assert "RuntimeError: boom" in result.error
    assert result.summary == "error: RuntimeError: boom"
    assert (result.metrics, result.figures, result.arrays) == ((), (), None)
    assert RunResult.from_json(result.run_dir / "result.json") == result
    assert leftovers(result.run_dir.parent) == []


def test_wrong_return_type_gives_error_verdict(tmp_path: Path) -> None:
    def run(config: Any, ctx: RunContext) -> Any:
        return None

    experiment = dataclasses.replace(fake_experiment("fake-none"), run=run)
    result = run_experiment(experiment, "tiny", out_root=tmp_path)
    assert result.verdict == "ERROR"
    assert "expected an Outcome, received NoneType" in (result.error or "")


def test_figure_that_cannot_be_saved_gives_error_and_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    def broken_savefig(self: Figure, *args: Any, **kwargs: Any) -> None:
        Path(args[0]).write_bytes(b"partial")
        raise ValueError("cannot draw")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    result = run_experiment(fake_experiment("fake-fig"), "tiny", out_root=tmp_path)
    assert result.verdict == "ERROR"
    assert "cannot draw" in (result.error or "")
    assert sorted(p.name for p in result.run_dir.iterdir()) == ["result.json"]


def test_crash_while_writing_leaves_no_folder(
    fake: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(self: RunResult, path: Path) -> None:
        path.write_text('{"half": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(result_module.RunResult, "write_json", crash)
    with pytest.raises(OSError, match="No space left"):
        run_experiment("fake-run", "tiny", out_root=tmp_path)
    assert list((tmp_path / "fake-run").iterdir()) == []


def test_crash_while_renaming_keeps_the_previous_run(
    fake: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_experiment("fake-run", "tiny", out_root=tmp_path)
    real_replace = os.replace

    def flaky(src: Any, dst: Any) -> None:
        if Path(src).name.startswith(".tiny-") and ".tmp-" in Path(src).name:
            raise OSError(5, "I/O error")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(OSError, match="I/O error"):
        run_experiment("fake-run", "tiny", out_root=tmp_path, force=True)
    assert RunResult.from_json(first.run_dir / "result.json") == first
    assert leftovers(first.run_dir.parent) == []


def test_interrupt_leaves_no_folder(tmp_path: Path) -> None:
    experiment = fake_experiment("fake-int", error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        run_experiment(experiment, "tiny", out_root=tmp_path)
    assert list((tmp_path / "fake-int").iterdir()) == []


def test_resume_reuses_and_force_reruns(tmp_path: Path) -> None:
    experiment, counter = counted(fake_experiment("fake-resume"))
    first = run_experiment(experiment, "tiny", out_root=tmp_path)
    second = run_experiment(experiment, "tiny", out_root=tmp_path)
    assert counter.calls == 1
    assert second.reused
    assert dataclasses.replace(second, reused=False) == first
    third = run_experiment(experiment, "tiny", out_root=tmp_path, force=True)
    assert counter.calls == 2
    assert not third.reused
    assert third.run_dir == first.run_dir
    assert leftovers(first.run_dir.parent) == []
    other = run_experiment(experiment, "tiny", {"n": "5"}, out_root=tmp_path)
    assert counter.calls == 3
    assert other.run_dir != first.run_dir


def test_error_and_corrupt_runs_are_not_reused(tmp_path: Path) -> None:
    failing = fake_experiment("fake-flaky", error=RuntimeError("transient"))
    assert run_experiment(failing, "tiny", out_root=tmp_path).verdict == "ERROR"
    fixed, counter = counted(fake_experiment("fake-flaky"))
    result = run_experiment(fixed, "tiny", out_root=tmp_path)
    assert (counter.calls, result.verdict) == (1, "PASS")
    (result.run_dir / "result.json").write_text("{not json")
    again = run_experiment(fixed, "tiny", out_root=tmp_path)
    assert (counter.calls, again.verdict, again.reused) == (2, "PASS", False)


def test_runs_are_deterministic_and_keep_the_global_rng(tmp_path: Path) -> None:
    def run(config: Any, ctx: RunContext) -> Outcome:
        drawn = torch.rand(3)  # the global RNG, seeded by the runner
        return Outcome(metrics=(), passed=True, summary="", arrays={"drawn": drawn})

    experiment = dataclasses.replace(fake_experiment("fake-rng"), run=run)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = run_experiment(experiment, "tiny", out_root=tmp_path / "a")
    assert torch.equal(torch.get_rng_state(), state)
    b = run_experiment(experiment, "tiny", out_root=tmp_path / "b")
    with np.load(a.run_dir / "arrays.npz") as xa, np.load(b.run_dir / "arrays.npz") as xb:
        np.testing.assert_array_equal(xa["drawn"], xb["drawn"])


@pytest.mark.parametrize("where", ["file", "under-file"])
def test_unwritable_out_root_fails_before_running(tmp_path: Path, where: str) -> None:
    experiment, counter = counted(fake_experiment("fake-out"))
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    out = blocker if where == "file" else blocker / "runs"
    with pytest.raises(NtklabValueError) as info:
        run_experiment(experiment, "tiny", out_root=out)
    assert "--out" in str(info.value)
    assert "out_root" in str(info.value)
    assert str(out) in str(info.value)
    assert counter.calls == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_out_root_fails_before_running(tmp_path: Path) -> None:
    experiment, counter = counted(fake_experiment("fake-ro"))
    tmp_path.joinpath("ro").mkdir(mode=0o555)
    with pytest.raises(NtklabValueError, match="--out"):
        run_experiment(experiment, "tiny", out_root=tmp_path / "ro" / "runs")
    assert counter.calls == 0


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_out_root_in_a_virtual_file_system_fails_before_running() -> None:
    experiment, counter = counted(fake_experiment("fake-proc"))
    with pytest.raises(NtklabValueError, match=r"out_root \(--out\).*/proc/ntklab-runs"):
        run_experiment(experiment, "tiny", out_root=Path("/proc/ntklab-runs"))
    assert counter.calls == 0


def test_usage_errors_are_raised_not_recorded(fake: Experiment, tmp_path: Path) -> None:
    with pytest.raises(NtklabValueError, match="unknown experiment"):
        run_experiment("fake-nope", out_root=tmp_path)
    with pytest.raises(NtklabValueError, match="--set n"):
        run_experiment("fake-run", "tiny", {"n": "x"}, out_root=tmp_path)
    assert not (tmp_path / "fake-run").exists()


def test_run_tiny_helper(tmp_path: Path) -> None:
    assert run_tiny(fake_experiment("fake-helper"), tmp_path).verdict == "PASS"
    with pytest.raises(AssertionError, match="RuntimeError: bad"):
        run_tiny(fake_experiment("fake-helper", error=RuntimeError("bad")), tmp_path)
