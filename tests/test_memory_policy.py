"""The memory policy (:mod:`ntklab.memory`): cgroup and meminfo parsing on fake files, and one
``max_memory`` with one default across the public API."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import ntklab
import ntklab.memory as mem
from ntklab.errors import NtklabTypeError, NtklabValueError

UNLIMITED_V1 = "9223372036854771712"  # what cgroup v1 writes for "no limit" on x86-64


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the policy at empty fake /sys/fs/cgroup and /proc files under ``tmp_path``."""
    monkeypatch.setattr(mem, "CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.setattr(mem, "PROC_SELF_CGROUP", tmp_path / "proc_self_cgroup")
    monkeypatch.setattr(mem, "PROC_MEMINFO", tmp_path / "meminfo")
    return tmp_path


# ------------------------------------------------------------------------------ parsing


def test_cgroup_v2_takes_the_tightest_of_the_own_cgroup_and_its_ancestors(fake: Path) -> None:
    root = fake / "cgroup"
    _write(fake / "proc_self_cgroup", "0::/batch/job7")
    _write(root / "memory.max", "max")  # no limit at the root
    _write(root / "memory.current", "123")
    _write(root / "batch" / "memory.max", str(8 * 2**30))
    _write(root / "batch" / "memory.current", str(2 * 2**30))  # 6 GiB left
    _write(root / "batch" / "job7" / "memory.max", str(4 * 2**30))
    _write(root / "batch" / "job7" / "memory.current", str(3 * 2**30))  # 1 GiB left
    assert mem.cgroup_available() == 2**30
    _write(root / "batch" / "job7" / "memory.max", "max")
    assert mem.cgroup_available() == 6 * 2**30
    _write(root / "batch" / "memory.current", str(9 * 2**30))  # over the limit: nothing left
    assert mem.cgroup_available() == 0


def test_cgroup_v1_reads_the_memory_controller_and_skips_no_limit(fake: Path) -> None:
    root = fake / "cgroup" / "memory"
    _write(fake / "proc_self_cgroup", "5:cpu,cpuacct:/x\n4:memory:/process_api/abc\n1:cpu:/\n")
    _write(root / "memory.limit_in_bytes", UNLIMITED_V1)
    _write(root / "memory.usage_in_bytes", str(10**9))
    assert mem.cgroup_available() is None  # the root is unlimited, the job has no files yet
    _write(root / "process_api" / "abc" / "memory.limit_in_bytes", str(3 * 10**9))
    _write(root / "process_api" / "abc" / "memory.usage_in_bytes", str(10**9))
    assert mem.cgroup_available() == 2 * 10**9
    _write(root / "memory.limit_in_bytes", str(10**9 + 5))  # a container-wide limit binds
    assert mem.cgroup_available() == 5


def test_cgroup_without_files_or_with_garbage_is_no_limit(fake: Path) -> None:
    assert mem.cgroup_available() is None  # nothing exists
    _write(fake / "cgroup" / "memory.max", "not a number")
    _write(fake / "cgroup" / "memory" / "memory.limit_in_bytes", "")
    assert mem.cgroup_available() is None
    _write(fake / "cgroup" / "memory.max", "5000")  # v2 limit without memory.current
    assert mem.cgroup_available() == 5000


def test_meminfo_available(fake: Path) -> None:
    assert mem.meminfo_available() is None  # no file
    _write(fake / "meminfo", "MemTotal:       32000 kB\nMemFree:  100 kB")
    assert mem.meminfo_available() is None  # no MemAvailable line (kernels before 3.14)
    _write(fake / "meminfo", "MemTotal:       32000 kB\nMemAvailable:    2048 kB\nBuffers: 1 kB")
    assert mem.meminfo_available() == 2048 * 1024


def test_available_is_the_smallest_bound_and_the_default_a_fraction_of_it(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(fake / "meminfo", "MemAvailable: 4000000 kB")  # 4.096e9 bytes
    assert mem.available_memory() == 4_096_000_000
    _write(fake / "proc_self_cgroup", "0::/")
    _write(fake / "cgroup" / "memory.max", str(3 * 10**9))
    _write(fake / "cgroup" / "memory.current", str(10**9))
    assert mem.available_memory() == 2 * 10**9  # the cgroup binds
    assert mem.available_memory("cpu") == 2 * 10**9
    assert mem.default_max_memory() == int(mem.DEFAULT_FRACTION * 2 * 10**9) == 10**9
    # a CUDA device adds its free memory (mem_get_info faked: no GPU needed)
    calls: list[torch.device] = []

    def fake_mem_get_info(device: torch.device) -> tuple[int, int]:
        calls.append(device)
        return 123_456, 10**12

    monkeypatch.setattr(torch.cuda, "mem_get_info", fake_mem_get_info)
    assert mem.available_memory(torch.device("cuda", 1)) == 123_456
    assert calls == [torch.device("cuda", 1)]
    assert mem.default_max_memory("cuda:1") == 61_728
    assert mem.available_memory("cpu") == 2 * 10**9  # the CPU does not ask the GPU


def test_nothing_readable_falls_back(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mem, "_os_memory", lambda: 7 * 2**30)
    assert mem.available_memory() == 7 * 2**30
    monkeypatch.setattr(mem, "_os_memory", lambda: None)
    assert mem.available_memory() == mem.FALLBACK_MEMORY
    assert mem.default_max_memory() == mem.FALLBACK_MEMORY // 2


def test_this_machine_has_a_positive_policy() -> None:
    assert 0 < mem.default_max_memory() <= mem.available_memory()


def test_resolve_max_memory(fake: Path) -> None:
    _write(fake / "meminfo", "MemAvailable: 1000 kB")
    assert mem.resolve_max_memory(None) == 512_000
    assert mem.resolve_max_memory(2**40) == 2**40  # more than available is the caller's call
    assert mem.resolve_max_memory(np.int64(4096)) == 4096
    with pytest.raises(NtklabValueError, match="max_memory: expected a positive number of bytes"):
        mem.resolve_max_memory(0)
    with pytest.raises(NtklabTypeError, match=r"max_memory: expected an int \(bytes\) or None"):
        mem.resolve_max_memory(1.5e9)
    with pytest.raises(NtklabTypeError, match="max_memory"):
        mem.resolve_max_memory(True)
    with pytest.raises(NtklabTypeError, match="budget: expected an int"):
        mem.resolve_max_memory("1GB", name="budget")


def test_format_bytes() -> None:
    assert mem.format_bytes(100) == "100 B"
    assert mem.format_bytes(3 * 2**29) == "1.5 GiB"
    assert mem.format_bytes(2**45) == "32.0 TiB"


# ------------------------------------------------------------------------------ one name


def _public_o_n2_functions() -> dict[str, Callable[..., Any]]:
    """The public functions that may allocate O(n^2) bytes or more."""
    from ntklab.analysis import ntk_sup_distance
    from ntklab.distributed import kernel_array, kernel_to_zarr
    from ntklab.empirical import ntk, ntk_operator
    from ntklab.empirical.monte_carlo import monte_carlo_kernel, nngp
    from ntklab.empirical.ntk import plan
    from ntklab.kernels import Architecture
    from ntklab.nets.ensemble import train_ensemble
    from ntklab.solvers import falkon, kernel_operator, solve

    return {
        "empirical.ntk": ntk,
        "empirical.plan": plan,
        "empirical.ntk_operator": ntk_operator,
        "empirical.monte_carlo_kernel": monte_carlo_kernel,
        "empirical.nngp": nngp,
        "Architecture.kernel": Architecture.kernel,
        "solvers.kernel_operator": kernel_operator,
        "solvers.solve": solve,
        "solvers.falkon": falkon,
        "distributed.kernel_array": kernel_array,
        "distributed.kernel_to_zarr": kernel_to_zarr,
        "analysis.ntk_sup_distance": ntk_sup_distance,
        "nets.train_ensemble": train_ensemble,
    }


@pytest.mark.parametrize("name", sorted(_public_o_n2_functions()))
def test_every_o_n2_function_takes_max_memory_defaulting_to_the_policy(name: str) -> None:
    parameter = inspect.signature(_public_o_n2_functions()[name]).parameters["max_memory"]
    assert parameter.default is None  # None means the policy of ntklab.memory


def test_no_other_name_for_a_memory_budget() -> None:
    """Every public callable's memory argument is spelled ``max_memory`` and defaults to None
    (the experiments' configs, being rewritten separately, are left out)."""
    suspicious = re.compile(r"memory|budget|max_bytes|bytes_limit")
    offenders = []
    seen = 0
    for info in pkgutil.walk_packages(ntklab.__path__, "ntklab."):
        if info.name.startswith("ntklab.experiments") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj_name, obj in vars(module).items():
            if obj_name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            members = [obj] if inspect.isfunction(obj) else []
            if inspect.isclass(obj):
                members += [m for n, m in vars(obj).items() if inspect.isfunction(m)]
            for f in members:
                try:
                    params = inspect.signature(f).parameters
                except (TypeError, ValueError):
                    continue
                for p in params.values():
                    if suspicious.search(p.name):
                        seen += 1
                        if p.name != "max_memory" or p.default not in (None, p.empty):
                            offenders.append(f"{module.__name__}.{f.__qualname__}({p.name})")
    assert seen >= len(_public_o_n2_functions())
    assert offenders == []
