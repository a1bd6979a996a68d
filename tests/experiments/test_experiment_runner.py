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

from experiment_helpers import FakeConfig, fake_experiment, registered, run_tiny
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    Experiment,
    Measurement,
    Metric,
    RunContext,
    RunResult,
    config_hash,
    resolve_config,
    run_experiment,
)
from ntklab.experiments import result as result_module
from ntklab.experiments import runner as runner_module
from ntklab.experiments.fingerprint import CodeFingerprint, code_fingerprint, run_key

RESULT_KEYS = {
    "schema_version",
    "device",
    "dtype",
    "experiment",
    "claim_id",
    "claim",
    "scale",
    "config_hash",
    "run_key",
    "code",
    "criterion_met",
    "dataset",
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
    "content_digest",
}


class Counter:
    """Wraps a measure function and counts its calls."""

    def __init__(self, experiment: Experiment) -> None:
        self.calls = 0
        assert experiment.measure is not None
        self.inner = experiment.measure

    def __call__(self, config: Any, ctx: RunContext) -> Measurement:
        self.calls += 1
        return self.inner(config, ctx)


def counted(experiment: Experiment) -> tuple[Experiment, Counter]:
    counter = Counter(experiment)
    return dataclasses.replace(experiment, measure=counter), counter


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
    assert result.config_hash == digest
    assert result.run_key == run_key(digest)
    assert result.run_dir == tmp_path / "fake-run" / f"tiny-{run_key(digest)}"
    assert (result.verdict, result.passed, result.reused, result.error) == (
        "SMOKE",
        False,
        False,
        None,
    )
    assert result.criterion_met is True
    assert result.summary == "smoke run, not judged: value 4 matches prediction 4"
    assert result.criterion == "value equals n = 4"
    assert result.code == code_fingerprint().as_dict()
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
    assert set(result.versions) == {"ntklab", "torch", "numpy", "python", "platform", "machine"}
    assert "cores" in result.versions["machine"]
    assert calls[0] == (0.0, "starting")
    assert (0.5, "halfway") in calls
    assert calls[-1] == (1.0, "SMOKE")
    assert leftovers(result.run_dir.parent) == []


@pytest.mark.parametrize(("passed", "verdict"), [(True, "PASS"), (False, "FAIL")])
def test_judged_scales_give_the_judges_verdict(tmp_path: Path, passed: bool, verdict: str) -> None:
    for scale in ("quick", "paper"):
        result = run_experiment(fake_experiment("fake-j", passed=passed), scale, out_root=tmp_path)
        assert (result.verdict, result.criterion_met) == (verdict, passed)
        assert not result.summary.startswith("smoke")
    tiny = run_experiment(fake_experiment("fake-j", passed=passed), "tiny", out_root=tmp_path)
    assert (tiny.verdict, tiny.criterion_met) == ("SMOKE", passed)


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
    def measure(config: Any, ctx: RunContext) -> Measurement:
        metrics = (
            Metric("value", float("nan")),
            Metric("b", 1.0, ci_low=-math.inf, ci_high=math.inf),
        )
        return Measurement(metrics=metrics)

    experiment = dataclasses.replace(fake_experiment("fake-nan", figure=False), measure=measure)
    result = run_experiment(experiment, "tiny", out_root=tmp_path)
    text = (result.run_dir / "result.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    back = RunResult.from_json(result.run_dir / "result.json")
    assert math.isnan(back.metrics[0].value)
    assert back.metrics[1].ci_low == -math.inf
    assert back.metrics[1].ci_high == math.inf
    assert any("'value' is not finite" in note for note in back.notes)


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


@pytest.mark.parametrize("step", ["measure", "judge"])
def test_wrong_return_type_gives_error_verdict(tmp_path: Path, step: str) -> None:
    def wrong(*args: Any) -> Any:
        return None

    expected = "Measurement" if step == "measure" else "Judgement"
    experiment = dataclasses.replace(fake_experiment("fake-none"), **{step: wrong})
    result = run_experiment(experiment, "tiny", out_root=tmp_path)
    assert result.verdict == "ERROR"
    assert f"expected a {expected}, received NoneType" in (result.error or "")


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
    assert (counter.calls, result.verdict) == (1, "SMOKE")
    (result.run_dir / "result.json").write_text("{not json")
    again = run_experiment(fixed, "tiny", out_root=tmp_path)
    assert (counter.calls, again.verdict, again.reused) == (2, "SMOKE", False)


def test_runs_are_deterministic_and_keep_the_global_rng(tmp_path: Path) -> None:
    def measure(config: Any, ctx: RunContext) -> Measurement:
        drawn = torch.rand(3)  # the global RNG, seeded by the runner
        return Measurement(metrics=(Metric("value", 1.0),), arrays={"drawn": drawn})

    experiment = dataclasses.replace(fake_experiment("fake-rng", figure=False), measure=measure)
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
    assert run_tiny(fake_experiment("fake-helper"), tmp_path).verdict == "SMOKE"
    with pytest.raises(AssertionError, match="RuntimeError: bad"):
        run_tiny(fake_experiment("fake-helper", error=RuntimeError("bad")), tmp_path)


def test_run_tiny_catches_a_judgement_that_does_not_follow_from_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ntklab.experiments import base

    original = base.Outcome.__post_init__

    def inverted(self: Any) -> None:
        original(self)
        object.__setattr__(self, "passed", not self.passed)

    monkeypatch.setattr(base.Outcome, "__post_init__", inverted)
    with pytest.raises(AssertionError, match="judge gives True on the recorded metrics"):
        run_tiny(fake_experiment("fake-inverted"), tmp_path)


def test_code_fingerprint_hashes_every_source_file(tmp_path: Path) -> None:
    from ntklab.experiments.fingerprint import source_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub").mkdir()
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    first, files = source_digest(tmp_path / "pkg")
    assert files == 2
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 3\n")
    assert source_digest(tmp_path / "pkg")[0] != first
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    assert source_digest(tmp_path / "pkg")[0] == first
    (tmp_path / "pkg" / "sub" / "b.py").rename(tmp_path / "pkg" / "c.py")
    assert source_digest(tmp_path / "pkg")[0] != first  # paths count, not only contents
    fp = code_fingerprint()
    assert fp.torch == torch.__version__.split("+")[0] or fp.torch.startswith(torch.__version__)
    other = dataclasses.replace(fp, numpy="0.0")
    assert other.digest != fp.digest
    assert run_key("abc", other) != run_key("abc", fp)


def test_a_code_change_recomputes_and_keeps_the_old_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ntklab.experiments import fingerprint, runner

    experiment, counter = counted(fake_experiment("fake-code"))
    old = run_experiment(experiment, "quick", out_root=tmp_path)
    assert (old.verdict, old.other_code) == ("PASS", False)
    changed = CodeFingerprint("0" * 16, "9.9", "9.9", 1)
    monkeypatch.setattr(runner, "run_key", lambda d: fingerprint.run_key(d, changed))
    monkeypatch.setattr(runner, "code_fingerprint", lambda: changed)
    new = run_experiment(experiment, "quick", out_root=tmp_path)
    assert counter.calls == 2  # recomputed, not answered with the old verdict
    assert not new.reused
    assert new.run_dir != old.run_dir
    assert new.code["digest"] == changed.digest != old.code["digest"]
    assert RunResult.from_json(old.run_dir / "result.json") == old  # the old folder is kept
    # --reuse-any: with no run by the running code, the old one is returned, labelled
    new_dir = new.run_dir
    import shutil

    shutil.rmtree(new_dir)
    reused = run_experiment(experiment, "quick", out_root=tmp_path, reuse_any=True)
    assert counter.calls == 2
    assert (reused.reused, reused.other_code, reused.run_dir) == (True, True, old.run_dir)
    # a run by the running code is preferred, and is not labelled
    run_experiment(experiment, "quick", out_root=tmp_path)
    mine = run_experiment(experiment, "quick", out_root=tmp_path, reuse_any=True)
    assert (mine.reused, mine.other_code, mine.run_dir) == (True, False, new_dir)


def test_stale_temporary_folders_are_removed_at_the_next_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    folder = tmp_path / "fake-stale"
    folder.mkdir()
    host = runner_module._host_name()
    stale = folder / f".tiny-abc.tmp-{dead_pid}@{host}-xyz"
    stale.mkdir()
    (stale / "half.png").write_bytes(b"x")
    alive = folder / f".tiny-abc.tmp-{os.getpid()}@{host}-xyz"
    alive.mkdir()  # a run of a live process (this one) is left alone
    run_experiment(fake_experiment("fake-stale"), "tiny", out_root=tmp_path)
    assert not stale.exists()
    assert alive.exists()


def test_temporary_folders_of_another_host_are_never_removed(tmp_path: Path) -> None:
    """With a shared --out (--scheduler), a process id of another host means nothing here:
    that host's live run folder must survive, whatever runs here under that id."""
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    folder = tmp_path / "fake-shared"
    folder.mkdir()
    other = folder / f".tiny-abc.tmp-{int(dead.stdout)}@another-host.example-xyz12345"
    other.mkdir()
    (other / "half.png").write_bytes(b"x")
    legacy = folder / f".tiny-abc.tmp-{int(dead.stdout)}-xyz"  # no host: who knows whose
    legacy.mkdir()
    result = run_experiment(fake_experiment("fake-shared"), "tiny", out_root=tmp_path)
    assert other.exists() and (other / "half.png").exists()
    assert legacy.exists()
    # the folder this run used named this host, and was renamed into place
    assert result.run_dir.is_dir()
    assert runner_module._temp_owner(f".x.tmp-12@{runner_module._host_name()}-ab_9") == (
        12,
        runner_module._host_name(),
    )


def test_sigterm_during_a_run_leaves_no_temporary_folder(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    tests_dir = str(Path(__file__).resolve().parent.parent)  # for experiment_helpers
    script = f"""
import sys
import time
from pathlib import Path
sys.path.insert(0, {tests_dir!r})
from ntklab.experiments import Measurement, Metric
from ntklab.experiments.runner import run_experiment
from experiment_helpers import fake_experiment
import dataclasses

def slow(config, ctx):
    Path({str(tmp_path)!r}, "started").write_text("1")
    time.sleep(60)
    return Measurement(metrics=(Metric("value", 1.0),))

exp = dataclasses.replace(fake_experiment("fake-term"), measure=slow)
run_experiment(exp, "tiny", out_root={str(tmp_path / "runs")!r})
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    assert list((tmp_path / "runs" / "fake-term").iterdir()) == []


def test_saved_figures_name_the_experiment_scale_and_data_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    captions: list[str] = []
    real = Figure.savefig

    def recording(self: Figure, *args: Any, **kwargs: Any) -> None:
        captions.extend(t.get_text() for t in self.texts)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    exp = dataclasses.replace(fake_experiment("fake-cap"), dataset="synthetic: noise")
    run_experiment(exp, "quick", out_root=tmp_path)
    assert captions == ["fake-cap, scale quick: synthetic: noise"]
