"""``ntklab run/reproduce --scheduler ADDRESS``: same runs as the local default."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from experiment_helpers import fake_experiment, registered
from ntklab.cli import app

pytest.importorskip("distributed")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        yield str(cluster.scheduler_address)


@pytest.fixture
def fakes() -> Iterator[None]:
    with registered(fake_experiment("fake-pass"), fake_experiment("fake-fail", passed=False)):
        yield


def metrics(run_root: Path, name: str) -> object:
    (path,) = run_root.joinpath(name).glob("*/result.json")
    data = json.loads(path.read_text())
    return path.parent.name, data["metrics"], data["verdict"]


def test_run_on_scheduler_matches_local(scheduler: str, tmp_path: Path, fakes: None) -> None:
    local = invoke("run", "fake-pass", "--scale", "quick", "--out", str(tmp_path / "a"))
    remote = invoke(
        "run",
        "fake-pass",
        "--scale",
        "quick",
        "--out",
        str(tmp_path / "b"),
        "--scheduler",
        scheduler,
    )
    assert local.exit_code == 0, local.output
    assert remote.exit_code == 0, remote.output
    assert "PASS" in remote.stdout
    assert metrics(tmp_path / "a", "fake-pass") == metrics(tmp_path / "b", "fake-pass")


def test_reproduce_on_scheduler(scheduler: str, tmp_path: Path, fakes: None) -> None:
    out = tmp_path / "runs"
    result = invoke(
        "reproduce", "--scale", "quick", "--only", "fake-pass", "--only", "fake-fail",
        "--out", str(out), "--scheduler", scheduler,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "FAIL fake-fail" in result.stderr
    assert (out / "report.md").is_file()
    assert metrics(out, "fake-pass")[2] == "PASS"
    assert metrics(out, "fake-fail")[2] == "FAIL"


def test_unreachable_scheduler_is_a_usage_error(
    tmp_path: Path, fakes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ntklab.distributed.sweeps

    monkeypatch.setattr(ntklab.distributed.sweeps, "DEFAULT_CONNECT_TIMEOUT", 1.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    result = invoke(
        "run", "fake-pass", "--scale", "tiny", "--out", str(tmp_path), "--scheduler", address
    )
    assert result.exit_code == 2, result.output
    assert "did not answer within 1 s" in " ".join(result.stderr.split())
    assert address in result.stderr


def test_scheduler_and_workers_together_is_a_usage_error(tmp_path: Path, fakes: None) -> None:
    result = invoke(
        "run", "fake-pass", "--out", str(tmp_path), "--scheduler", "tcp://x:1", "--workers", "2"
    )
    assert result.exit_code == 2
    assert "expected at most one of them" in result.stderr
    result = invoke("reproduce", "--out", str(tmp_path), "--workers", "0")
    assert result.exit_code == 2
    assert "--workers: expected a number of workers >= 1, got 0" in result.stderr
