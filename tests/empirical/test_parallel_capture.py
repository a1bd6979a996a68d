"""Capture passes side by side in threads (``structured._capture_workers``), and ntklab's
empirical NTK called from several threads on one module.

The structured NTK runs its capture passes (forward, ``k`` backward passes, per-example
factors) in as many Python threads as torch has intra-op threads, on disjoint spans of the
examples. These tests check that the parallel passes give the sequential result and the
float64 Jacobian contraction's, that they really ran in several threads, that a failure in
one of them (cotangents that stop factoring) still ends in the right kernel, and that
concurrent calls on one module leave the module as it was (``functional_call`` swaps its
parameters during a call: unserialized, two threads swap each other's back).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import pytest
import torch
from test_structured_conv import TOL, GapCnn, ResBlock, _randomize_norms, jacrev_ntk, reduce
from torch import Tensor, nn

import ntklab as nl
from ntklab.empirical import structured as st
from ntklab.empirical import structured_conv as sc
from ntklab.empirical._functional import functional_model
from ntklab.empirical.structured import ntk_structured

F64 = torch.float64
N = 40  # enough examples for passes in two threads (at least 8 each, two per thread)


@pytest.fixture
def two_threads() -> Iterator[None]:
    """torch's intra-op thread count set to 2 (as on a 2-core CI machine), then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def capture_threads(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The identities of the threads that ran capture passes (``_forward`` calls)."""
    seen: set[int] = set()
    real = st._forward

    def spy(*args: object, **kwargs: object) -> st._Forward:
        seen.add(threading.get_ident())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(st, "_forward", spy)
    return seen


def _model(name: str) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if name == "gap_cnn":
        return GapCnn().to(F64).eval(), torch.randn(N, 3, 6, 6, dtype=F64, generator=gen)
    if name == "resblock_bn":
        return _randomize_norms(ResBlock().to(F64)), torch.randn(
            N, 2, 5, 5, dtype=F64, generator=gen
        )
    mlp = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)).to(F64)
    return mlp, torch.randn(N, 5, dtype=F64, generator=gen)


@pytest.mark.parametrize("name", ["gap_cnn", "resblock_bn", "mlp"])
@pytest.mark.parametrize("outputs", ["trace", "full"])
def test_parallel_passes_equal_sequential_and_reference(
    name: str,
    outputs: str,
    two_threads: None,
    capture_threads: set[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, x = _model(name)
    fm = functional_model(model)
    parallel = ntk_structured(fm, x, None, outputs)  # type: ignore[arg-type]
    assert len(capture_threads) >= 2  # passes ran in worker threads, not only the caller
    torch.testing.assert_close(parallel, reduce(jacrev_ntk(model, x), outputs), **TOL)
    monkeypatch.setattr(st, "_capture_workers", lambda *args: 1)
    capture_threads.clear()
    sequential = ntk_structured(fm, x, None, outputs)  # type: ignore[arg-type]
    assert capture_threads == {threading.get_ident()}
    torch.testing.assert_close(parallel, sequential, atol=1e-13, rtol=1e-13)
    cross = ntk_structured(fm, x, x[:17], outputs)  # type: ignore[arg-type]
    torch.testing.assert_close(cross, parallel[:, :17], atol=1e-12, rtol=1e-12)


def test_unfactored_in_a_worker_retries(
    two_threads: None, capture_threads: set[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A factored layer whose check fails in the passes run by worker threads (the first
    pass, in the calling thread, chose the factored path) makes the kernel be recomputed on
    another path: the result is still the Jacobian contraction's."""
    model, x = _model("gap_cnn")
    main = threading.get_ident()
    failed = {"n": 0}
    lock = threading.Lock()
    real = sc.factor_cotangents

    def flaky(cot: Tensor, rtol: float | None = None) -> tuple[Tensor, Tensor] | None:
        if threading.get_ident() != main:
            with lock:
                failed["n"] += 1
            return None
        return real(cot, rtol)

    monkeypatch.setattr(st, "factor_cotangents", flaky)
    got = ntk_structured(functional_model(model), x, None, "full")
    assert len(capture_threads) >= 2 and failed["n"] >= 1
    torch.testing.assert_close(got, jacrev_ntk(model, x), **TOL)


@pytest.mark.parametrize(("n", "chunk", "workers"), [(128, 60, 2), (40, 100, 2), (1000, 64, 4)])
def test_capture_spans_partition_the_examples(n: int, chunk: int, workers: int) -> None:
    spans = st._capture_spans(n, chunk, workers)
    covered = [i for s in spans for i in range(s.start, s.stop)]
    assert covered == list(range(n))  # consecutive, disjoint, complete
    assert spans[0] == slice(0, st._PARALLEL_MIN_EXAMPLES)
    rest = spans[1:]
    assert len(rest) % workers == 0  # the threads finish together
    assert max(s.stop - s.start for s in rest) <= chunk // workers  # one pass's memory, shared
    assert st._capture_spans(n, chunk, 1) == [
        slice(a, min(a + chunk, n)) for a in range(0, n, chunk)
    ]


def test_capture_workers_rules(two_threads: None) -> None:
    x = torch.zeros(1)
    assert st._capture_workers(x, 128, 60) == 2
    assert st._capture_workers(x, 31, 60) == 1  # too few examples for two passes a thread
    assert st._capture_workers(x, 128, 15) == 1  # passes of 7 examples would be too small
    torch.set_num_threads(1)
    assert st._capture_workers(x, 128, 60) == 1


@pytest.mark.parametrize("method", ["structured", "jacobian"])
def test_concurrent_calls_on_one_module(method: Literal["structured", "jacobian"]) -> None:
    """Four threads computing the eNTK of one module at once get the sequential kernel, and
    the module keeps its own parameters (requires_grad, identity, values)."""
    model, x = _model("resblock_bn")
    before = {name: (p, p.detach().clone()) for name, p in model.named_parameters()}
    expected = nl.empirical.ntk(model, x[:12], method=method)

    def one(_: int) -> Tensor:
        return nl.empirical.ntk(model, x[:12], method=method)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(8)))
    for got in results:
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)
    for name, p in model.named_parameters():
        same, value = before[name]
        assert p is same and p.requires_grad
        torch.testing.assert_close(p.detach(), value, atol=0, rtol=0)
