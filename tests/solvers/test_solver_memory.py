"""The blocked operator and the solvers on it stay under their memory budget (peak RSS).

The ``peak_memory`` fixture of ``tests/conftest.py``: a fresh interpreter, the peak resident set
(``VmHWM``) reset through ``/proc/self/clear_refs`` just before the measured call, glibc's mmap
threshold pinned so that freed tiles are returned to the system.
"""

from __future__ import annotations

from collections.abc import Callable

SETUP = """
import ntklab as nl
from ntklab.solvers import kernel_operator, solve
block = [nl.Dense(w_std=1.5, b_std=0.1), nl.Relu()]
arch = nl.serial(*block, *block, nl.Dense(w_std=1.5))
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
        "r = solve(op, v, 1.0, method='nystrom', n_centres=400, max_iter=5, on_failure='warn')\n"
        "assert r.iterations == 5"
    )
    used = peak_memory(setup, call)
    allowance = budget + 8 * 400 * 400 * 8 + 8 * 4000 * 2 * 8
    assert used <= allowance, f"peak growth {used:,} bytes > {allowance:,}"
