"""Experiment sweeps and ensembles on a Dask cluster.

A sweep is a list of :class:`SweepTask` (an experiment, a scale, ``--set`` overrides); an
ensemble is a sweep over seeds (``sweep_tasks(name, grid={"seed": [...]})``). Each task is one
:func:`~ntklab.experiments.run_experiment` call on a worker, which writes its run folder into
``out_root`` atomically, keyed by the config hash. A worker that dies mid-run loses only its
temporary folder; Dask reschedules the task on another worker (up to the scheduler's
``distributed.scheduler.allowed-failures`` deaths), and since an experiment is a function of
its config (the runner seeds torch from it) the rerun writes the same result.

Workers run torch with one thread each (:func:`connect` installs a worker plugin that sets
it), and every worker must reach ``out_root`` (a shared file system on a real cluster).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ntklab._checks import check_positive_int
from ntklab.errors import NtklabTypeError, NtklabValueError

from ._deps import require

if TYPE_CHECKING:
    from ntklab.experiments import Experiment, RunResult

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "SweepTask",
    "connect",
    "run_sweep",
    "sweep_tasks",
    "torch_threads_plugin",
]

logger = logging.getLogger("ntklab")

#: Seconds :func:`connect` waits for a scheduler given by address to answer.
DEFAULT_CONNECT_TIMEOUT = 10.0
_PLUGIN_NAME = "ntklab-torch-threads"


@dataclass(frozen=True)
class SweepTask:
    """One run of a sweep: an experiment at a scale with ``--set`` overrides.

    Parameters
    ----------
    experiment : str or Experiment
        A registered name (resolved on the worker) or an Experiment object (pickled).
    scale : str
        ``"tiny"``, ``"quick"`` or ``"paper"``.
    overrides : mapping of str to str
        ``--set key=value`` overrides, e.g. ``{"seed": "3"}``.
    """

    experiment: str | Experiment
    scale: str = "quick"
    overrides: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def name(self) -> str:
        """The experiment's name."""
        return self.experiment if isinstance(self.experiment, str) else self.experiment.name


def sweep_tasks(
    experiment: str | Experiment,
    scale: str = "quick",
    grid: Mapping[str, Sequence[object]] = MappingProxyType({}),
) -> list[SweepTask]:
    """The tasks of a grid sweep: one per point of the Cartesian product of ``grid``.

    Parameters
    ----------
    experiment : str or Experiment
    scale : str
    grid : mapping of str to sequence
        ``field -> values``; values are written as ``--set`` strings (``str(value)``).
        ``{"seed": range(8)}`` is an ensemble of 8 seeds.

    Returns
    -------
    list of SweepTask
        In row-major order of ``grid`` (the last field varies fastest); one task when
        ``grid`` is empty.

    Examples
    --------
    >>> [t.overrides for t in sweep_tasks("spectrum-s1", "tiny", {"seed": [0, 1]})]
    [{'seed': '0'}, {'seed': '1'}]
    """
    keys = list(grid)
    for key in keys:
        values = grid[key]
        if isinstance(values, str) or not isinstance(values, Sequence | range):
            raise NtklabTypeError(
                f"grid[{key!r}]: expected a sequence of values, got {type(values).__name__}"
            )
        if len(values) == 0:
            raise NtklabValueError(f"grid[{key!r}]: expected at least one value, got none")
    return [
        SweepTask(experiment, scale, dict(zip(keys, map(str, point), strict=True)))
        for point in itertools.product(*(grid[k] for k in keys))
    ]


def torch_threads_plugin(threads: int = 1) -> Any:
    """A Dask worker plugin that sets torch's intra-op threads on each worker.

    The previous count is restored when the worker closes (which matters for in-process
    workers, ``LocalCluster(processes=False)``, that share torch with the client).
    """
    threads = check_positive_int("threads", threads)
    distributed = require("distributed")

    class TorchThreads(distributed.WorkerPlugin):  # type: ignore[misc,name-defined]
        name = _PLUGIN_NAME

        def __init__(self, n: int) -> None:
            self.n = n
            self.previous: int | None = None

        def setup(self, worker: Any) -> None:
            import torch

            self.previous = torch.get_num_threads()
            torch.set_num_threads(self.n)

        def teardown(self, worker: Any) -> None:
            import torch

            if self.previous is not None:
                torch.set_num_threads(self.previous)

    return TorchThreads(threads)


@contextmanager
def connect(
    scheduler: str | None = None,
    workers: int | None = None,
    *,
    timeout: float | None = None,
    processes: bool = True,
) -> Iterator[Any]:
    """A ``distributed.Client`` for a scheduler address or a local cluster, closed on exit.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler, e.g. ``"tcp://10.0.0.5:8786"``.
    workers : int, optional
        Otherwise, start a local cluster of this many workers with one thread each.
    timeout : float, optional
        Seconds to wait for the scheduler to answer (default ``DEFAULT_CONNECT_TIMEOUT``,
        10 s).
    processes : bool
        Local cluster only: worker processes (default) or threads of this process.

    Yields
    ------
    distributed.Client
        With :func:`torch_threads_plugin` (one torch thread per worker) registered.

    Raises
    ------
    NtklabValueError
        When both or neither of ``scheduler`` and ``workers`` are given, or when the
        scheduler does not answer within ``timeout`` seconds.
    MissingExtraError
        When dask/distributed are not installed.
    """
    if (scheduler is None) == (workers is None):
        raise NtklabValueError(
            "scheduler, workers: expected exactly one of a scheduler address or a number of "
            f"local workers, got scheduler={scheduler!r}, workers={workers!r}"
        )
    if timeout is None:
        timeout = DEFAULT_CONNECT_TIMEOUT
    if not (isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0):
        raise NtklabValueError(f"timeout: expected a number of seconds > 0, got {timeout!r}")
    distributed = require("distributed")
    cluster: Any = None
    if scheduler is not None:
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise NtklabValueError(
                f"scheduler: expected an address such as 'tcp://host:8786', got {scheduler!r}"
            )
        start = time.perf_counter()
        try:
            client = distributed.Client(scheduler, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            waited = time.perf_counter() - start
            raise NtklabValueError(
                f"scheduler: expected the address of a running Dask scheduler, received "
                f"{scheduler!r}, which did not answer within {timeout:g} s "
                f"(waited {waited:.1f} s: {exc})"
            ) from None
    else:
        n = check_positive_int("workers", workers)
        cluster = distributed.LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
        )
        client = distributed.Client(cluster, set_as_default=False)
    try:
        client.register_plugin(torch_threads_plugin(1), name=_PLUGIN_NAME)
        busy = {w: t for w, t in client.nthreads().items() if t > 1}
        if busy:
            logger.warning(
                "workers with more than one thread share torch's global RNG, which the runner "
                "seeds per experiment: sweeps on them may not be reproducible (%s)",
                ", ".join(f"{w}: {t}" for w, t in sorted(busy.items())),
            )
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run_task(task: SweepTask, out_root: str, force: bool) -> RunResult:
    """Run one task on a worker (module-level, so that it pickles by reference)."""
    from ntklab.experiments import run_experiment

    return run_experiment(
        task.experiment, scale=task.scale, overrides=task.overrides, out_root=out_root, force=force
    )


def run_sweep(
    tasks: Sequence[SweepTask],
    client: Any,
    out_root: Path | str = Path("ntklab-runs"),
    *,
    force: bool = False,
    on_result: Callable[[int, RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every task on the client's workers; return the results in task order.

    Parameters
    ----------
    tasks : sequence of SweepTask
    client : distributed.Client
        From :func:`connect` (or any client whose workers can import ntklab).
    out_root : Path
        Root of the run folders, reachable by every worker.
    force : bool
        Rerun tasks whose run folder already exists.
    on_result : callable, optional
        ``on_result(index, result)`` in the client process, as each task finishes.

    Returns
    -------
    list of RunResult
        ``results[i]`` is the run of ``tasks[i]``; identical in config, metrics and verdict
        to a local :func:`~ntklab.experiments.run_experiment` of the same task.

    Raises
    ------
    NtklabValueError
        Before anything is submitted: an unknown experiment or scale, a bad override.
    OSError
        When a worker could not write a run folder.
    distributed.KilledWorker
        When a task killed more workers than the scheduler allows.
    """
    from ntklab.experiments import get_experiment, resolve_config

    items = list(tasks)
    for i, task in enumerate(items):
        if not isinstance(task, SweepTask):
            raise NtklabTypeError(f"tasks[{i}]: expected a SweepTask, got {type(task).__name__}")
        # resolve names here, so that workers need not share this process's registry
        experiment = (
            get_experiment(task.experiment) if isinstance(task.experiment, str) else task.experiment
        )
        resolve_config(experiment, task.scale, task.overrides)
        items[i] = replace(task, experiment=experiment, overrides=dict(task.overrides))
    distributed = require("distributed")
    root = str(Path(out_root).absolute())
    futures = [
        client.submit(_run_task, task, root, force, pure=False, key=f"ntklab-{task.name}-{i}")
        for i, task in enumerate(items)
    ]
    index = {f.key: i for i, f in enumerate(futures)}
    results: list[RunResult | None] = [None] * len(items)
    try:
        for future in distributed.as_completed(futures, loop=client.loop):
            i = index[future.key]
            results[i] = future.result()
            logger.info("sweep: %s finished (%d of %d)", items[i].name, i + 1, len(items))
            if on_result is not None:
                on_result(i, results[i])  # type: ignore[arg-type]
    finally:
        client.cancel([f for f in futures if not f.done()])
    return [r for r in results if r is not None]
