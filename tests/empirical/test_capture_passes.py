"""Capture passes over spans of the examples (``structured._capture_spans``), and ntklab's
empirical NTK called from several threads on one module.

The structured NTK runs its capture passes (forward, ``k`` backward passes, per-example
factors) one after another on equal spans of the examples. These tests check that many small
passes give the one-pass result and the float64 Jacobian contraction's, that a failure in a
later pass (cotangents that stop factoring) still ends in the right kernel, and that
concurrent calls on one module leave the module as it was (``functional_call`` swaps its
parameters during a call: unserialized, two threads swap each other's back).
"""

from __future__ import annotations

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
N = 40


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


@pytest.fixture
def pass_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The examples of each capture pass (``_forward`` calls), in order."""
    seen: list[int] = []
    real = st._forward

    def spy(fm: object, layers: object, x: Tensor, *args: object) -> st._Forward:
        seen.append(x.shape[0])
        return real(fm, layers, x, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(st, "_forward", spy)
    return seen


@pytest.mark.parametrize("name", ["gap_cnn", "resblock_bn", "mlp"])
@pytest.mark.parametrize("outputs", ["trace", "full"])
def test_many_passes_equal_one_pass_and_reference(
    name: str, outputs: str, pass_sizes: list[int]
) -> None:
    model, x = _model(name)
    fm = functional_model(model)
    many = ntk_structured(fm, x, None, outputs, chunk_size=7)  # type: ignore[arg-type]
    assert sorted(pass_sizes[-6:]) == [6, 6, 7, 7, 7, 7]  # 40 examples in 6 passes of 6 or 7
    torch.testing.assert_close(many, reduce(jacrev_ntk(model, x), outputs), **TOL)
    pass_sizes.clear()
    one = ntk_structured(fm, x, None, outputs, chunk_size=N)  # type: ignore[arg-type]
    assert pass_sizes[-1] == N
    torch.testing.assert_close(many, one, atol=1e-13, rtol=1e-13)
    cross = ntk_structured(fm, x, x[:17], outputs, chunk_size=7)  # type: ignore[arg-type]
    torch.testing.assert_close(cross, one[:, :17], atol=1e-12, rtol=1e-12)


def test_unfactored_in_a_later_pass_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factored layer whose check fails in a later capture pass (the first chose the
    factored path) makes the kernel be recomputed on another path: the result is still the
    Jacobian contraction's."""
    model, x = _model("gap_cnn")
    calls = {"n": 0, "failed": 0}
    real = sc.factor_cotangents

    def flaky(cot: Tensor, rtol: float | None = None) -> tuple[Tensor, Tensor] | None:
        calls["n"] += 1
        if calls["n"] > 2:  # the path check and the first pass's factors pass, then fail
            calls["failed"] += 1
            return None
        return real(cot, rtol)

    monkeypatch.setattr(st, "factor_cotangents", flaky)
    got = ntk_structured(functional_model(model), x, None, "full", chunk_size=10)
    assert calls["failed"] >= 1
    torch.testing.assert_close(got, jacrev_ntk(model, x), **TOL)


@pytest.mark.parametrize(("n", "chunk"), [(128, 60), (40, 100), (1000, 64), (64, 27), (5, 1)])
def test_capture_spans_partition_the_examples(n: int, chunk: int) -> None:
    spans = st._capture_spans(n, chunk)
    covered = [i for s in spans for i in range(s.start, s.stop)]
    assert covered == list(range(n))  # consecutive, disjoint, complete
    sizes = [s.stop - s.start for s in spans]
    assert len(spans) == -(-n // chunk)  # as few passes as the chunk allows
    assert max(sizes) <= chunk and max(sizes) - min(sizes) <= 1  # no small last pass


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


def test_cut_layer_buffers_reused_across_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The input cotangents of a cut layer land in one buffer for all the passes of a call
    (no page faults for a fresh one each pass), and the kernel is still the reference's."""
    model, x = _model("resblock_bn")
    kept: list[Tensor] = []  # alive, so a fresh allocation could not take the same address
    real = st._split

    def spy(*args: object, **kwargs: object) -> tuple[tuple[Tensor, Tensor], Tensor]:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        kept.append(found[1])
        return found

    monkeypatch.setattr(st, "_split", spy)
    got = ntk_structured(functional_model(model), x, None, "trace", chunk_size=7)
    assert len(kept) == 6 and len({t.data_ptr() for t in kept}) == 1
    torch.testing.assert_close(got, reduce(jacrev_ntk(model, x), "trace"), **TOL)
