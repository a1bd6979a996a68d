"""Blocked evaluation stays under its memory budget: peak memory measured, not timed.

The ``peak_memory`` fixture (``tests/conftest.py``) runs a snippet in a fresh interpreter,
resets the kernel's peak resident-set counter (``/proc/self/clear_refs``) just before the
measured call, and reports the growth of the peak (``VmHWM``) over the resident size at that
moment: everything the call touched, libraries' scratch included.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

MLP_SETUP = """
import math, ntklab as nl
block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
arch = nl.serial(block, block, block, nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
net = arch.to_torch(512, 10, in_features=784)
x = torch.randn({n}, 784)
nl.empirical.ntk(net, x[:2])  # one-time costs (lazy imports, code pages) are not the call's
"""


def _used(peak_memory: Callable[[str, str], int], n: int, budget: int | None) -> int:
    call = f"k = nl.empirical.ntk(net, x, max_memory={budget})\nassert k.shape == ({n}, {n})"
    return peak_memory(MLP_SETUP.format(n=n), call)


def _check(peak_memory: Callable[[str, str], int], n: int, budget: int) -> None:
    used = _used(peak_memory, n, budget)
    assert used <= budget, f"peak growth {used:,} bytes > budget {budget:,}"


def test_blocked_mlp_stays_under_budget(peak_memory: Callable[[str, str], int]) -> None:
    """n = 3000: a 36 MB result under a 100 MB budget, which binds: unblocked needs more."""
    budget = 100 * 2**20
    _check(peak_memory, 3000, budget)
    assert _used(peak_memory, 3000, None) > budget


@pytest.mark.slow
def test_blocked_mlp_n20000_stays_under_2gib(peak_memory: Callable[[str, str], int]) -> None:
    """The README's scale: n = 20,000 (a 1.6 GB float32 result) under a 2 GiB budget."""
    _check(peak_memory, 20000, 2 * 2**30)
