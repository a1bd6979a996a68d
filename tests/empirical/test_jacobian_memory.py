"""``method="jacobian"`` stays within ``max_memory``: the peak resident memory of a fresh
process computing a kernel whose per-example Jacobians (about 63 MB in all) cannot be held at
once grows by at most the budget."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(
    """
    import sys, torch, ntklab as nl
    from torch import nn

    def high_water_mark():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    budget = int(sys.argv[1])
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    x1, x2 = torch.randn(24, 100), torch.randn(27, 100)
    warm = nl.empirical.ntk(net, x1[:2], x2[:3], method="jacobian", outputs="full")
    base = high_water_mark()  # after imports and a first call (allocator, torch.func)
    got = nl.empirical.ntk(net, x1, x2, method="jacobian", outputs="full", max_memory=budget)
    grown = high_water_mark() - base
    ok = bool(torch.isfinite(got).all()) and tuple(got.shape) == (24, 27, 10, 10)
    print(grown, int(ok))
    """
)


def test_jacobian_method_peak_memory_stays_within_max_memory() -> None:
    budget = 16 * 2**20  # the 24 + 27 Jacobians take 51 x 10 x 30,730 x 4 bytes = 63 MB
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(budget)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    grown, ok = map(int, run.stdout.split())
    assert ok == 1
    assert grown <= budget, f"peak grew by {grown:,} bytes under max_memory = {budget:,}"
