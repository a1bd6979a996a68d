"""Shared test settings: quiet OpenMP spinning on shared CPUs, float64 helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator, fresh for each test."""
    return torch.Generator().manual_seed(1234)


# Peak-memory harness (tests/empirical/test_memory.py, tests/solvers/test_solver_memory.py): a
# snippet runs in a fresh interpreter, the kernel's peak resident-set counter is reset through
# /proc/self/clear_refs just before the measured call, and the growth of the peak (VmHWM) over
# the resident size at that moment is reported: everything the call touched, libraries' scratch
# included. (getrusage's ru_maxrss would not do: Linux keeps it across execve, so it would
# include the pytest parent's size.)
_HARNESS = """
import gc, os
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
import torch
torch.manual_seed(0)
{setup}
gc.collect()

def status(field):
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024

with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
    f.write("5")
before = status("VmRSS")
{call}
print(status("VmHWM") - before)
"""


@pytest.fixture
def peak_memory() -> Callable[[str, str], int]:
    """``peak_memory(setup, call) -> bytes`` grown by ``call``, measured in a subprocess."""
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS measurement reads /proc (Linux)")

    def measure(setup: str, call: str) -> int:
        code = _HARNESS.format(setup=textwrap.dedent(setup), call=textwrap.dedent(call))
        # glibc keeps freed large blocks in its heap once its mmap threshold has grown, so
        # that RSS would track the allocator's history rather than live memory: pin it
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=1200,
            env=env,
        )
        return int(done.stdout.strip().splitlines()[-1])

    return measure
