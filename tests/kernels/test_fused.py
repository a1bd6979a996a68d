"""The fused C kernel for [Relu, Dense] chains against the eager torch recursion.

The eager path (``NTKLAB_DISABLE_FUSED=1``) is the reference: the same recursion, written
with torch ops. Every comparison also checks that the fused kernel actually ran.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shlex
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ntklab.kernels import _fused
from ntklab.kernels.engine import Layer
from ntklab.kernels.kernel import Kernel, KernelState

F32, F64 = torch.float32, torch.float64
# elementwise tolerance, plus the same times the largest entry (entries that cancel to ~0)
RTOL = {F32: 1e-5, F64: 1e-13}

# Skipped only without a compiler: with one, an unavailable kernel is a failure.
pytestmark = pytest.mark.skipif(
    shutil.which(shlex.split(_fused._compiler())[0]) is None
    or os.environ.get("NTKLAB_DISABLE_FUSED") == "1",
    reason="no C compiler on PATH, or NTKLAB_DISABLE_FUSED=1",
)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the fused kernel (one per run of [Relu, Dense] layers)."""
    seen: list[int] = []
    real = _fused.fused_relu_dense_chain

    def spy(*args: Any, **kwargs: Any) -> tuple[Tensor, Tensor, float]:
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_fused, "fused_relu_dense_chain", spy)
    return seen


def _eager(
    monkeypatch: pytest.MonkeyPatch, arch: nl.Architecture, x1: Tensor, x2: Tensor | None
) -> Kernel:
    with monkeypatch.context() as m:
        m.setenv("NTKLAB_DISABLE_FUSED", "1")
        return arch.kernel(x1, x2)


def _assert_matches(fused: Kernel, eager: Kernel, rtol: float) -> None:
    for name in ("nngp", "ntk", "var1", "var2"):
        a, b = getattr(fused, name), getattr(eager, name)
        assert a.dtype == b.dtype and a.shape == b.shape
        scale = float(b.abs().max()) if b.numel() else 1.0
        torch.testing.assert_close(
            a, b, rtol=rtol, atol=rtol * scale, msg=lambda m, name=name: f"{name}: {m}"
        )


def _relu_net(depth: int, b_std: float | None) -> nl.Architecture:
    pairs = [layer for _ in range(depth) for layer in (nl.Relu(), nl.Dense(w_std=1.4, b_std=b_std))]
    return nl.serial(nl.Dense(w_std=1.5, b_std=b_std), *pairs)


# --------------------------------------------------------------------------------------------
# the polynomial arccos


@pytest.mark.parametrize("dtype", [F32, F64])
def test_acos_and_sin_within_a_few_ulp(dtype: torch.dtype) -> None:
    x = torch.linspace(-1.0, 1.0, 200_001, dtype=F64)
    edges = [-1.0, 1.0, -0.5, 0.5, 0.0, 1e-30, -1e-30]
    x = torch.cat([x, torch.tensor(edges, dtype=F64), 1 - torch.logspace(-16, -1, 200)])
    x = x.to(dtype)
    acos, sin = _fused._acos_sin(x)
    xd = x.double()
    eps = torch.finfo(dtype).eps
    # references in float64 on the same (rounded) inputs; sqrt((1-x)(1+x)) is exact to 1 ulp
    torch.testing.assert_close(acos.double(), torch.arccos(xd), rtol=3 * eps, atol=0.0)
    ref_sin = ((1 - xd) * (1 + xd)).sqrt()
    torch.testing.assert_close(sin.double(), ref_sin, rtol=3 * eps, atol=0.0)
    assert acos[x == 1].eq(0).all() and acos[x == -1].eq(math.pi).all()
    assert sin[x.abs() == 1].eq(0).all()


# --------------------------------------------------------------------------------------------
# fused == eager


SHAPES = [(37, None), (9, 7), (50, 1), (1, 33), (130, 33), (257, None)]  # ragged SIMD/tiles


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("depth", [1, 2, 5, 12])
@pytest.mark.parametrize("b_std", [0.1, None])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_matches_eager(
    monkeypatch: pytest.MonkeyPatch,
    calls: list[int],
    dtype: torch.dtype,
    depth: int,
    b_std: float | None,
    shape: tuple[int, int | None],
) -> None:
    n1, n2 = shape
    g = torch.Generator().manual_seed(depth * 1000 + n1)
    x1 = torch.randn(n1, 6, dtype=dtype, generator=g)
    x2 = None if n2 is None else torch.randn(n2, 6, dtype=dtype, generator=g)
    arch = _relu_net(depth, b_std)
    fused = arch.kernel(x1, x2)
    assert len(calls) == 1
    _assert_matches(fused, _eager(monkeypatch, arch, x1, x2), RTOL[dtype])
    if x2 is None:
        assert torch.equal(fused.nngp, fused.nngp.T) and torch.equal(fused.ntk, fused.ntk.T)
        assert torch.equal(fused.nngp.diagonal(), fused.var1)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("b_std", [0.3, None])
def test_zero_variance_inputs(
    monkeypatch: pytest.MonkeyPatch, calls: list[int], dtype: torch.dtype, b_std: float | None
) -> None:
    """Zero inputs have variance 0 (clamped at tiny: correlation 0). With a bias they are all
    the same input after the first layer, so there is one per batch (duplicates are tested
    below)."""
    g = torch.Generator().manual_seed(5)
    x1 = torch.randn(20, 4, dtype=dtype, generator=g)
    x2 = torch.randn(9, 4, dtype=dtype, generator=g)
    x1[4] = 0.0
    if b_std is None:
        x1[::3], x2[1] = 0.0, 0.0
    arch = _relu_net(4, b_std)
    for b in (None, x2):
        fused = arch.kernel(x1, b)
        assert all(torch.isfinite(t).all() for t in (fused.nngp, fused.ntk))
        _assert_matches(fused, _eager(monkeypatch, arch, x1, b), RTOL[dtype])
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", [F32, F64])
def test_near_degenerate_correlations(
    monkeypatch: pytest.MonkeyPatch, calls: list[int], dtype: torch.dtype
) -> None:
    """Duplicates, negations and near-duplicates: correlations at +-1 within rounding.

    Where :math:`|c|` is within a few ulp of 1, rounding moves the angle by
    :math:`\\sqrt{2 \\delta c}`, so any two implementations differ by up to
    :math:`\\sqrt{16\\epsilon}` there (the fused kernel snaps such correlations to +-1).
    Everywhere else they agree to rounding.
    """
    g = torch.Generator().manual_seed(6)
    base = torch.randn(12, 5, dtype=F64, generator=g)
    rows = [base, base[:4], -base[4:8], base[8:] * (1 + 1e-9), base[:2] + 1e-12]
    x = torch.cat(rows).to(dtype)
    eps = torch.finfo(dtype).eps
    for b_std in (0.1, None):
        arch = _relu_net(3, b_std)
        for x2 in (None, x.flip(0)):
            fused, eager = arch.kernel(x, x2), _eager(monkeypatch, arch, x, x2)
            _assert_matches(fused, eager, rtol=math.sqrt(16 * eps))
    # and what was the motivation: K(x) and K(x, x) agree, though K(x) sets the diagonal
    arch = _relu_net(3, 0.1)
    _assert_matches(arch.kernel(x), arch.kernel(x, x.clone()), RTOL[dtype])
    assert len(calls) == 6


def test_mixed_architecture_runs_and_eager_layers(
    monkeypatch: pytest.MonkeyPatch, calls: list[int]
) -> None:
    """Fused runs interleaved with layers that stay eager (other activations, standard
    parameterization, tensor-valued scales)."""
    x1 = torch.randn(30, 4, dtype=F64, generator=torch.Generator().manual_seed(7))
    x2 = torch.randn(11, 4, dtype=F64, generator=torch.Generator().manual_seed(8))
    arch = nl.serial(
        nl.Dense(w_std=1.2, b_std=0.1),
        nl.Erf(),
        nl.Dense(w_std=1.3, b_std=None),
        nl.Relu(),
        nl.Dense(w_std=1.4, b_std=0.2),  # fused: [Dense, Relu, Dense]
        nl.Relu(),
        nl.Dense(w_std=torch.tensor(1.3), b_std=0.1),  # tensor scale: eager
        nl.Relu(),
        nl.Dense(w_std=1.1, b_std=0.1, width=64),  # fused: [Relu, Dense]
        nl.Relu(),
        nl.Dense(w_std=1.0, b_std=0.1, parameterization="standard"),  # eager
        nl.Relu(),
        nl.Dense(w_std=1.2, b_std=0.0),  # fused: [Relu, Dense] after an eager Dense
    )
    for b in (None, x2):
        _assert_matches(arch.kernel(x1, b), _eager(monkeypatch, arch, x1, b), RTOL[F64])
    assert len(calls) == 6


def test_split_runs() -> None:
    d, r, e = nl.Dense(w_std=1.0), nl.Relu(), nl.Erf()
    std = nl.Dense(w_std=1.0, parameterization="standard")
    layers = (d, r, d, e, d, r, r, d, r, std, d, r, d, r, d)
    assert _fused.split_runs(layers) == [
        ((d, r, d), True),
        ((e, d, r), False),
        ((r, d), True),
        ((r, std), False),
        ((d, r, d, r, d), True),
    ]
    assert _fused.split_runs((d, e, d)) == [((d, e, d), False)]
    assert _fused.split_runs((d,)) == [((d,), False)]


def test_autograd_and_unsupported_inputs_stay_eager(calls: list[int]) -> None:
    arch = _relu_net(2, 0.1)
    x = torch.randn(6, 3, dtype=F64, requires_grad=True)
    arch.kernel(x).ntk.sum().backward()
    assert x.grad is not None and not calls
    with pytest.raises(NtklabTypeError, match="float32 or float64"):  # half precision refused
        arch.kernel(torch.randn(6, 3, dtype=torch.bfloat16))
    assert not calls
    with torch.no_grad():
        arch.kernel(x)
    assert len(calls) == 1


def test_result_does_not_depend_on_the_thread_count(calls: list[int]) -> None:
    x = torch.randn(300, 5, dtype=F32, generator=torch.Generator().manual_seed(9))
    arch = _relu_net(6, 0.1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = arch.kernel(x)
    finally:
        torch.set_num_threads(threads)
    many = arch.kernel(x)
    assert torch.equal(one.nngp, many.nngp) and torch.equal(one.ntk, many.ntk)
    assert len(calls) == 2


def test_100_layer_relu_float32_is_close_to_float64(calls: list[int]) -> None:
    """Max-normalized error <= 1e-4; no NumericalWarning (every clamp is rounding)."""
    x = torch.randn(40, 10, dtype=F64, generator=torch.Generator().manual_seed(2))
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    arch = nl.serial(*([block] * 100), nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k64 = arch.kernel(x)
        k32 = arch.kernel(x.float())
    assert len(calls) == 2
    for name in ("nngp", "ntk"):
        a, b = getattr(k64, name), getattr(k32, name)
        assert b.dtype == F32 and torch.isfinite(b).all()
        assert float((a - b.double()).abs().max() / a.abs().max()) <= 1e-4, name


# --------------------------------------------------------------------------------------------
# warnings and errors


@dataclasses.dataclass(frozen=True)
class _Inflate(Layer):
    """Scales the off-diagonal kernel but not the variances: breaks Cauchy-Schwarz."""

    factor: float = 1.5

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.cov is state.var1:  # the diagonal pass
            return state
        return dataclasses.replace(state, cov=state.cov * self.factor)

    def module(self, *args: Any, **kwargs: Any) -> nn.Module:
        raise NotImplementedError


def test_correlation_beyond_rounding_warns_like_eager(
    monkeypatch: pytest.MonkeyPatch, calls: list[int]
) -> None:
    x = torch.randn(10, 3, dtype=F64, generator=torch.Generator().manual_seed(10))
    arch = nl.serial(
        nl.Dense(w_std=1.0, b_std=0.0), _Inflate(), nl.Relu(), nl.Dense(w_std=1.0, b_std=0.1)
    )
    with pytest.warns(NumericalWarning, match="beyond rounding") as record:
        fused = arch.kernel(x)
    assert len(calls) == 1
    assert record[0].filename.endswith("engine.py")  # attributed to ntklab, as eager's
    with pytest.warns(NumericalWarning, match="beyond rounding"):
        eager = _eager(monkeypatch, arch, x, None)
    _assert_matches(fused, eager, RTOL[F64])


def test_max_excess_and_non_finite_input() -> None:
    v = torch.ones(1, 3, dtype=F64)
    w2, b2 = torch.ones(1, dtype=F64), torch.zeros(1, dtype=F64)
    cov = torch.full((3, 3), 1.25, dtype=F64)
    _, ntk, excess = _fused.fused_relu_dense_chain(cov, None, v, v, w2, b2)
    assert excess == pytest.approx(0.25)
    # clamped to c = 1: K = 1/2, Theta = 0 + 1 * 0 * J0 + K
    torch.testing.assert_close(cov, torch.full((3, 3), 0.5, dtype=F64))
    torch.testing.assert_close(ntk, cov)
    bad = torch.zeros(3, 3, dtype=F64)
    bad[1, 2] = math.nan
    with pytest.raises(NtklabValueError, match="finite correlations"):
        _fused.fused_relu_dense_chain(bad, None, v, v, w2, b2)
    with pytest.raises(NtklabValueError, match="var2s"):
        _fused.fused_relu_dense_chain(cov, None, v, v[:, :2], w2, b2)


# --------------------------------------------------------------------------------------------
# compilation, cache, fallback


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty cache directory and a loader that has not tried to load anything yet."""
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    yield tmp_path


def test_without_a_compiler_falls_back_silently(
    monkeypatch: pytest.MonkeyPatch,
    fresh_loader: Path,
    calls: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("CC", "ntklab-no-such-compiler")
    x = torch.randn(8, 3, dtype=F64, generator=torch.Generator().manual_seed(11))
    arch = _relu_net(2, 0.1)
    with caplog.at_level(logging.DEBUG, logger="ntklab"), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _fused.available() is False
        k = arch.kernel(x)
    assert "ntklab-no-such-compiler" in caplog.text
    assert not calls and not list(fresh_loader.glob("*.so"))
    _assert_matches(k, _eager(monkeypatch, arch, x, None), 0.0)


def test_disabled_by_environment(monkeypatch: pytest.MonkeyPatch, calls: list[int]) -> None:
    monkeypatch.setenv("NTKLAB_DISABLE_FUSED", "1")
    assert _fused.available() is False
    _relu_net(2, 0.1).kernel(torch.randn(5, 3))
    assert not calls


def test_compiles_once_into_the_cache(monkeypatch: pytest.MonkeyPatch, fresh_loader: Path) -> None:
    assert _fused.available()
    (lib,) = fresh_loader.glob("fused_relu_*.so")
    assert not [p for p in fresh_loader.iterdir() if p.name.startswith(".build-")]

    def no_compile(*args: Any) -> None:
        raise AssertionError("recompiled although the library is cached")

    monkeypatch.setattr(_fused, "_compile", no_compile)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    assert _fused.available()
    assert list(fresh_loader.glob("fused_relu_*.so")) == [lib]


def test_loading_keeps_denormals() -> None:
    """The library is linked without -ffast-math: crtfastmath.o would set flush-to-zero for
    the whole process."""
    assert _fused.available()
    assert math.ldexp(1.0, -1070) * 0.5 > 0.0  # a subnormal times 0.5, at run time
    assert float(torch.tensor(1e-310, dtype=F64) * 0.5) > 0.0


def test_a_corrupted_library_is_compiled_again_not_loaded(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: Path
) -> None:
    assert _fused.available()
    (lib,) = fresh_loader.glob("fused_relu_*.so")
    assert lib.name in (fresh_loader / "manifest.json").read_text()
    assert _fused._verified(lib)
    # truncated (a crash, a full disk, a bad copy); written as a new file, since the loaded
    # library is mapped into this process
    partial = lib.with_name("partial")
    partial.write_bytes(lib.read_bytes()[:1000])
    partial.replace(lib)
    assert not _fused._verified(lib)
    compiled: list[Path] = []
    real = _fused._compile

    def counting(target: Path, flags: tuple[str, ...]) -> None:
        compiled.append(target)
        real(target, flags)

    monkeypatch.setattr(_fused, "_compile", counting)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    assert _fused.available()
    assert compiled == [lib]
    assert _fused._verified(lib)


def test_the_cache_key_follows_source_compiler_version_and_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flags = _fused._flag_sets()[0]
    base = _fused._library_path(flags)
    assert _fused._library_path(_fused._flag_sets()[1]) != base
    monkeypatch.setattr(_fused, "_compiler_version", lambda: "gcc (Other) 99.1")
    assert _fused._library_path(flags) != base
    monkeypatch.undo()
    monkeypatch.setattr(_fused, "SOURCE", _fused.SOURCE + "\n/* changed */\n")
    assert _fused._library_path(flags) != base


def test_a_slow_compiler_times_out_once_and_falls_back(
    monkeypatch: pytest.MonkeyPatch,
    fresh_loader: Path,
    tmp_path_factory: pytest.TempPathFactory,
    calls: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    bin_dir = tmp_path_factory.mktemp("bin")
    slow = bin_dir / "slowcc"
    slow.write_text('#!/bin/sh\n[ "$1" = --version ] && echo slowcc 1.0 && exit 0\nsleep 30\n')
    slow.chmod(0o755)
    monkeypatch.setenv("CC", str(slow))
    monkeypatch.setenv("NTKLAB_COMPILE_TIMEOUT", "0.5")
    with caplog.at_level(logging.DEBUG, logger="ntklab"):
        assert _fused.available() is False
    announcements = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(announcements) == 1 and "compiling" in announcements[0].getMessage()
    assert "took more than 0.5 s" in caplog.text
    failed = list(fresh_loader.glob("*.failed"))
    assert len(failed) == len(_fused._flag_sets())
    x = torch.randn(6, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    arch = _relu_net(2, 0.1)
    _assert_matches(arch.kernel(x), _eager(monkeypatch, arch, x, None), 0.0)
    assert not calls
    # the next process does not wait for the compiler again
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())

    def no_compile(*args: Any) -> None:
        raise AssertionError("tried to compile again after a recorded failure")

    monkeypatch.setattr(_fused, "_compile", no_compile)
    assert _fused.available() is False
