"""A worker process killed mid-sweep: Dask retries its task, the results are complete and
identical to local runs (slow: starts worker processes)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ntklab.experiments import RunResult, run_experiment

pytest.importorskip("distributed")

from ntklab.distributed import connect, run_sweep, sweep_tasks


def comparable(result: RunResult) -> tuple[Any, ...]:
    return (result.config, result.metrics, result.verdict, result.summary, result.run_dir.name)


@pytest.mark.slow
def test_killed_worker_is_retried_and_results_are_identical(tmp_path: Path) -> None:
    tasks = sweep_tasks("network-rates", "tiny", {"seed": list(range(6))})
    outcome: dict[str, Any] = {}
    with connect(workers=2) as client:
        client.wait_for_workers(2, timeout=60)
        before = set(client.scheduler_info()["workers"])

        def sweep() -> None:
            try:
                outcome["results"] = run_sweep(tasks, client, tmp_path / "dask")
            except BaseException as exc:  # reported by the assertion below
                outcome["error"] = exc

        thread = threading.Thread(target=sweep)
        thread.start()
        deadline = time.monotonic() + 60
        victim = None
        while victim is None and time.monotonic() < deadline:
            busy = [w for w, keys in client.processing().items() if keys]
            victim = busy[0] if busy else None
            time.sleep(0.05)
        assert victim is not None, "no task started within 60 s"
        time.sleep(0.5)  # inside the run: the worker is importing or computing
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        thread.join(timeout=300)
        assert not thread.is_alive(), "the sweep did not finish within 300 s"
        after = set(client.scheduler_info()["workers"])
    assert "error" not in outcome, outcome.get("error")
    assert victim in before and victim not in after  # the worker did die
    results: list[RunResult] = outcome["results"]
    assert [r.config["seed"] for r in results] == list(range(6))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = [
            run_experiment(t.experiment, t.scale, t.overrides, out_root=tmp_path / "local")
            for t in tasks
        ]
    finally:
        torch.set_num_threads(threads)
    assert [comparable(r) for r in results] == [comparable(r) for r in local]
