"""The blocked operator and the solvers on it stay under their memory budget (peak RSS).

Same harness as ``tests/empirical/test_memory.py``: a fresh interpreter, the peak resident set
(``VmHWM``) reset through ``/proc/self/clear_refs`` just before the measured call, glibc's mmap
threshold pinned so that freed tiles are returned to the system.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

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

with open("/proc/self/clear_refs", "w") as f:
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
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
            env=env,
        )
        return int(done.stdout.strip().splitlines()[-1])

    return measure


SETUP = """
import ntklab as nl
from ntklab.solvers import kernel_operator, solve
arch = nl.serial(nl.Dense(1.5, 0.1), nl.Relu(), nl.Dense(1.5, 0.1), nl.Relu(), nl.Dense(1.5))
x = torch.randn({n}, 8, dtype=torch.float64)
v = torch.randn({n}, 2, dtype=torch.float64)
op = kernel_operator(arch, x, max_memory={budget})
op.subset(torch.arange(4)) @ v[:4]  # one-time costs (lazy imports, code pages)
"""

BUDGET = 24 * 2**20


def test_blocked_matmul_stays_under_budget(peak_memory: Callable[[str, str], int]) -> None:
    """n = 4000: the dense kernel alone is 128 MB (float64); a product under a 24 MiB budget."""
    setup = SETUP.format(n=4000, budget=BUDGET)
    used = peak_memory(setup, "out = op @ v\nd = op.diagonal()")
    assert used <= BUDGET, f"peak growth {used:,} bytes > budget {BUDGET:,}"
    dense = peak_memory(setup, "out = arch.kernel(x).ntk @ v")
    assert dense > BUDGET  # the budget binds: without blocks it is exceeded


def test_nystrom_recomputed_knm_stays_under_budget(peak_memory: Callable[[str, str], int]) -> None:
    """FALKON with K_nM (4000 x 400, 12.8 MB) recomputed in tiles under a 6 MiB budget, plus
    at most eight m x m matrices (K_MM, its factors and their temporaries: 1.3 MB each) and
    the CG vectors."""
    budget = 6 * 2**20
    setup = SETUP.format(n=4000, budget=budget)
    call = (
        "r = solve(op, v, 1.0, method='nystrom', n_centres=400, max_iter=5)\n"
        "assert r.iterations == 5"
    )
    used = peak_memory(setup, call)
    allowance = budget + 8 * 400 * 400 * 8 + 8 * 4000 * 2 * 8
    assert used <= allowance, f"peak growth {used:,} bytes > {allowance:,}"
