"""The empirical kernels under ``max_memory``: a result that cannot fit is refused before any
kernel computation, by an explicit budget or by the default policy (:mod:`ntklab.memory`)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ntklab as nl
import ntklab.memory as mem
from ntklab.empirical import jacobian, structured
from ntklab.empirical.monte_carlo import monte_carlo_kernel
from ntklab.errors import NtklabValueError


def _net(k: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, k))


@pytest.fixture
def no_kernel_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every algorithm of ``empirical.ntk`` fails the test if it is called."""

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a kernel block was computed before the refusal")

    for module, name in [
        (structured, "ntk_structured"),
        (jacobian, "ntk_jacobian"),
        (jacobian, "ntk_vp"),
    ]:
        monkeypatch.setattr(module, name, forbidden)


@pytest.fixture
def small_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A machine with 8 MiB available and no cgroup limit: the policy grants 4 MiB."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {8 * 1024} kB\n")
    monkeypatch.setattr(mem, "PROC_MEMINFO", meminfo)
    monkeypatch.setattr(mem, "CGROUP_ROOT", tmp_path / "no_cgroup")
    return mem.default_max_memory()


@pytest.mark.usefixtures("no_kernel_computation")
def test_a_result_larger_than_max_memory_is_refused_before_any_block() -> None:
    """n = 50 inputs, k = 3 outputs, full: 50 * 50 * 9 float32 = 90,000 bytes."""
    x = torch.randn(50, 3)
    with pytest.raises(NtklabValueError) as err:
        nl.empirical.ntk(_net(3), x, outputs="full", max_memory=60_000)
    message = str(err.value)
    assert message.startswith("max_memory: expected more than the 90,000 bytes")
    for part in ["n1 = 50", "n2 = 50", "k = 3", "50 x 50 x 3 x 3", "max_memory = 60,000"]:
        assert part in message, (part, message)


def test_the_same_call_under_a_budget_that_fits_the_result_blocks_and_agrees() -> None:
    net, x = _net(3), torch.randn(50, 3, dtype=torch.float32)
    whole = nl.empirical.ntk(net, x, outputs="full", max_memory=2**30)
    chosen = nl.empirical.plan(nl.empirical.functional_model(net), x, None, "full")
    budget = chosen.result_bytes + chosen.block_bytes // 3  # the result fits, one block not
    blocked = nl.empirical.plan(nl.empirical.functional_model(net), x, None, "full", "auto", budget)
    assert blocked.block1 < 50
    torch.testing.assert_close(
        nl.empirical.ntk(net, x, outputs="full", max_memory=budget), whole, rtol=1e-5, atol=1e-6
    )


@pytest.mark.usefixtures("no_kernel_computation")
def test_the_default_is_the_policy_not_unbounded(small_policy: int) -> None:
    """The README's example, n = 20,000 with ten outputs and ``outputs="full"``: 160 GB of
    float32, refused at once under the default policy (here 4 MiB) instead of failing inside
    a torch allocation."""
    assert small_policy == 4 * 2**20
    x = torch.randn(20_000, 3)
    start = time.perf_counter()
    with pytest.raises(NtklabValueError) as err:
        nl.empirical.ntk(_net(10), x, outputs="full")
    assert time.perf_counter() - start < 5.0
    message = str(err.value)
    assert "160,000,000,000 bytes" in message and "n1 = 20000" in message
    assert re.search(r"max_memory = 4,194,304 bytes .*the default, max_memory=None", message)
    with pytest.raises(NtklabValueError, match="the default, max_memory=None"):
        nl.empirical.ntk(_net(1), torch.randn(2_000, 3))  # 16 MB of trace kernel


def test_other_empirical_kernels_refuse_too(small_policy: int) -> None:
    x = torch.randn(2_000, 3, dtype=torch.float64)
    with pytest.raises(NtklabValueError, match=r"max_memory: expected at least the 32,000,000"):
        nl.empirical.nngp(_net(1).double(), x)  # 2000^2 float64
    nl.empirical.nngp(_net(1).double(), x[:500])  # 2 MB fits
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    with pytest.raises(NtklabValueError, match=r"max_memory: expected at least [\d,]+ bytes"):
        monte_carlo_kernel(arch, x, width=8, n_samples=2)
    mc = monte_carlo_kernel(arch, x[:20], width=8, n_samples=4, max_memory=2**20)
    assert mc.ntk.shape == (20, 20)


def test_empirical_operator_resolves_the_policy_at_construction(small_policy: int) -> None:
    op = nl.empirical.ntk_operator(_net(2), torch.randn(5, 3))
    assert op.max_memory == small_policy
    assert nl.empirical.ntk_operator(_net(2), torch.randn(5, 3), max_memory=1234).max_memory == 1234
