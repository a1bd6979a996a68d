"""Experiment sweeps on Dask: results identical to local runs; unreachable schedulers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.experiments import RunResult, run_experiment

pytest.importorskip("distributed")

from ntklab.distributed import SweepTask, connect, run_sweep, sweep_tasks

EXPERIMENT = "network-rates"  # random networks, about 1 s at scale tiny


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def comparable(result: RunResult) -> tuple[Any, ...]:
    """Everything a run produces that does not depend on where or when it ran."""
    return (
        result.experiment,
        result.config,
        result.config_hash,
        result.metrics,
        result.verdict,
        result.summary,
        result.figures,
        result.run_dir.name,
    )


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with connect(workers=1, processes=False) as c:
        yield c


def test_sweep_tasks_grid() -> None:
    tasks = sweep_tasks(EXPERIMENT, "tiny", {"seed": [0, 1], "n_test": (8,)})
    assert [t.overrides for t in tasks] == [
        {"seed": "0", "n_test": "8"},
        {"seed": "1", "n_test": "8"},
    ]
    assert sweep_tasks("spectrum-s1", "tiny") == [SweepTask("spectrum-s1", "tiny", {})]
    with pytest.raises(NtklabValueError, match=r"grid\['seed'\]: expected at least one value"):
        sweep_tasks(EXPERIMENT, "tiny", {"seed": []})
    with pytest.raises(NtklabTypeError, match=r"grid\['seed'\]: expected a sequence"):
        sweep_tasks(EXPERIMENT, "tiny", {"seed": "01"})


def test_torch_threads_set_on_worker_and_restored() -> None:
    before = torch.get_num_threads()
    with connect(workers=1, processes=False) as c:
        assert set(c.run(torch.get_num_threads).values()) == {1}
    assert torch.get_num_threads() == before


def test_sweep_identical_to_local_runs(client: Any, tmp_path: Path) -> None:
    tasks = sweep_tasks(EXPERIMENT, "tiny", {"seed": [3, 4]})
    seen: list[int] = []
    results = run_sweep(tasks, client, tmp_path / "dask", on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1]
    assert [r.config["seed"] for r in results] == [3, 4]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' setting: identical arithmetic, bit for bit
    try:
        local = [
            run_experiment(t.experiment, t.scale, t.overrides, out_root=tmp_path / "local")
            for t in tasks
        ]
    finally:
        torch.set_num_threads(threads)
    assert [comparable(r) for r in results] == [comparable(r) for r in local]
    assert all(not r.reused and (r.run_dir / "result.json").is_file() for r in results)
    # a second sweep resumes from the run folders
    again = run_sweep(tasks, client, tmp_path / "dask")
    assert all(r.reused for r in again)


def test_sweep_rejects_bad_tasks_before_submitting(client: Any, tmp_path: Path) -> None:
    with pytest.raises(NtklabValueError, match="no-such-experiment"):
        run_sweep([SweepTask("no-such-experiment", "tiny")], client, tmp_path)
    with pytest.raises(NtklabTypeError, match=r"tasks\[0\]: expected a SweepTask"):
        run_sweep([EXPERIMENT], client, tmp_path)  # type: ignore[list-item]
    assert not tmp_path.joinpath(EXPERIMENT).exists()


def test_unreachable_scheduler_errors_within_timeout() -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    start = time.perf_counter()
    with (
        pytest.raises(NtklabValueError, match=r"scheduler: .* did not answer within 1 s"),
        connect(address, timeout=1.0),
    ):
        pass
    assert time.perf_counter() - start < 10.0


def test_connect_needs_exactly_one_target() -> None:
    with pytest.raises(NtklabValueError, match="expected exactly one of"), connect():
        pass
    with pytest.raises(NtklabValueError, match="expected exactly one of"), connect("x", 2):
        pass
    with (
        pytest.raises(NtklabValueError, match="workers: expected an int >= 1, got 0"),
        connect(workers=0),
    ):
        pass
