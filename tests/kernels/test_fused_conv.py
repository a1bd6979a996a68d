"""The fused C kernel for runs of [Conv, Relu] layers against the eager torch recursion and
the stored neural-tangents references.

The eager path (``NTKLAB_DISABLE_FUSED=1``) is the reference: the same recursion, written
with torch ops. Every comparison also checks how many times the fused kernel ran.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_conv import REFERENCE, build  # the spec reader of test_conv.py
from torch import Tensor

import ntklab as nl
from ntklab.kernels import AvgPool, Conv, Flatten, GlobalAvgPool, _fused, _fused_conv
from ntklab.kernels.kernel import Kernel

F32, F64 = torch.float32, torch.float64
# elementwise tolerance, plus the same times the largest entry
RTOL = {F32: 1e-5, F64: 1e-12}
# K(x)'s own pairs under pooling hold correlations within an ulp of 1 at equal positions:
# rounding moves the angle by sqrt(2 * ulp) there (the fused kernel snaps them to 1), so the
# diagonal of K(x) agrees to sqrt(16 eps) (as in test_fused.py)
DIAG_RTOL = {F32: math.sqrt(16 * torch.finfo(F32).eps), F64: math.sqrt(16 * torch.finfo(F64).eps)}

pytestmark = pytest.mark.skipif(
    shutil.which(shlex.split(_fused._compiler())[0]) is None
    or os.environ.get("NTKLAB_DISABLE_FUSED") == "1",
    reason="no C compiler on PATH, or NTKLAB_DISABLE_FUSED=1",
)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the fused convolution kernel (pair and per-input runs)."""
    seen: list[int] = []
    real = _fused_conv.fused_conv_chain

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_fused_conv, "fused_conv_chain", spy)
    return seen


def _eager(
    monkeypatch: pytest.MonkeyPatch, arch: nl.Architecture, x1: Tensor, x2: Tensor | None
) -> Kernel:
    with monkeypatch.context() as m:
        m.setenv("NTKLAB_DISABLE_FUSED", "1")
        return arch.kernel(x1, x2)


def _assert_matches(fused: Kernel, eager: Kernel, rtol: float, diag_rtol: float) -> None:
    """Off-diagonal entries to ``rtol``, the diagonal of a square K(x) to ``diag_rtol``."""
    for name in ("nngp", "ntk", "var1", "var2"):
        a, b = getattr(fused, name), getattr(eager, name)
        assert a.dtype == b.dtype and a.shape == b.shape
        scale = float(b.abs().max())
        if name in ("nngp", "ntk"):
            off = ~torch.eye(*a.shape, dtype=torch.bool)
            torch.testing.assert_close(a[off], b[off], rtol=rtol, atol=rtol * scale)
            a, b = a.diagonal(), b.diagonal()
        torch.testing.assert_close(a, b, rtol=diag_rtol, atol=diag_rtol * scale)


def _images(n: int, size: tuple[int, ...], seed: int, dtype: torch.dtype = F64) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, *size, dtype=dtype, generator=g)


# (filter, strides, padding): even filters (uneven SAME pads), strides, explicit pads
CONVS_2D = [
    ((3, 3), (1, 1), "SAME"),
    ((2, 2), (1, 1), "SAME"),
    ((1, 1), (1, 1), "VALID"),
    ((5, 5), (1, 1), "CIRCULAR"),
    ((3, 2), (2, 1), "VALID"),
    ((3, 3), (2, 2), "SAME"),
    ((2, 3), (1, 1), (1, 2)),
    ((3, 3), (2, 2), "CIRCULAR"),
]
CONVS_1D = [((3,), (1,), "SAME"), ((2,), (2,), "VALID"), ((5,), (1,), "CIRCULAR"), ((3,), (1,), 2)]
TOPS = ("flatten", "gap", "avgpool")


def _top(top: str, ndim: int) -> list[nl.kernels.Layer]:
    if top == "flatten":  # diagonal layout, summed in C
        return [Flatten()]
    if top == "gap":  # full layout, summed in C
        return [GlobalAvgPool()]
    return [AvgPool((2,) * ndim, (1,) * ndim, "VALID"), Flatten()]  # full, back to torch


def _arch(conv: tuple[Any, Any, Any], top: str) -> nl.Architecture:
    filt, strides, padding = conv
    second = "CIRCULAR" if padding == "CIRCULAR" else "SAME"
    three = (3,) * len(filt)
    return nl.serial(
        Conv(filter_shape=filt, strides=strides, padding=padding, w_std=1.4, b_std=0.1),
        nl.Relu(),
        Conv(filter_shape=three, padding=second, w_std=1.3, b_std=0.2),
        nl.Relu(),
        *_top(top, len(filt)),
        nl.Dense(w_std=1.1, b_std=0.05),
    )


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("top", TOPS)
@pytest.mark.parametrize("conv", CONVS_2D + CONVS_1D, ids=str)
def test_fused_matches_eager(
    monkeypatch: pytest.MonkeyPatch,
    calls: list[int],
    conv: tuple[Any, Any, Any],
    top: str,
    dtype: torch.dtype,
) -> None:
    arch = _arch(conv, top)
    size = (8, 6) if len(conv[0]) == 2 else (9,)
    x1, x2 = _images(4, size, 0, dtype), _images(3, size, 1, dtype)
    for b in (None, x2):
        calls.clear()
        fused = arch.kernel(x1, b)
        # one run over the pairs; with x2 in the full layout, one per input batch more (the
        # images' own full covariances)
        assert len(calls) == (3 if b is not None and top != "flatten" else 1)
        rtol = RTOL[dtype]
        _assert_matches(fused, _eager(monkeypatch, arch, x1, b), rtol, DIAG_RTOL[dtype])
        if b is None and top != "avgpool":  # summed in C: mirrored pairs are equal
            assert torch.equal(fused.nngp, fused.nngp.T) and torch.equal(fused.ntk, fused.ntk.T)


def test_float32_is_close_to_float64(calls: list[int]) -> None:
    """The float32 kernel against float64 (window sums in float32): 5 x [Conv 3x3, Relu]."""
    block = [Conv(filter_shape=(3, 3), w_std=math.sqrt(2.0), b_std=0.1), nl.Relu()]
    for top in (Flatten(), GlobalAvgPool()):
        arch = nl.serial(*(block * 5), top, nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
        x = _images(5, (12, 12), 3)
        k64, k32 = arch.kernel(x), arch.kernel(x.float())
        for name in ("nngp", "ntk"):
            a, b = getattr(k64, name), getattr(k32, name)
            assert b.dtype == F32
            assert float((a - b.double()).abs().max() / a.abs().max()) <= 1e-5, name
    assert len(calls) == 4


def test_runs_between_eager_layers(monkeypatch: pytest.MonkeyPatch, calls: list[int]) -> None:
    """A run that starts with a Relu after an eager layer (standard parameterization), a run
    that reads the pair tensors (after AvgPool, with an NTK), and tensor scales (eager)."""
    arch = nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.2, b_std=0.1, width=4, parameterization="standard"),
        nl.Relu(),  # fused: [Relu, Conv, Relu] (input tensors with an NTK)
        Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1),
        nl.Relu(),
        AvgPool((2, 2)),
        Conv(filter_shape=(2, 2), w_std=1.3, b_std=0.0),  # fused: [Conv, Relu], then GAP
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(w_std=1.0, b_std=0.1),
    )
    x1, x2 = _images(3, (6, 6), 4), _images(2, (6, 6), 5)
    for b in (None, x2):
        calls.clear()
        fused = arch.kernel(x1, b)
        assert len(calls) == (2 if b is None else 6)  # with x2: the images' own runs too
        _assert_matches(fused, _eager(monkeypatch, arch, x1, b), RTOL[F64], DIAG_RTOL[F64])
    tensor_scale = nl.serial(Conv(filter_shape=3, w_std=torch.tensor(1.3)), nl.Relu(), Flatten())
    calls.clear()
    tensor_scale.kernel(_images(2, (7,), 6))
    assert not calls


def test_circular_stride_not_dividing_the_size_stays_eager(
    monkeypatch: pytest.MonkeyPatch, calls: list[int]
) -> None:
    """Periodic padding with a stride that does not divide the size has no offset classes:
    that Conv runs eager, the [Relu, Conv, Relu] after it fused."""
    arch = _arch(((3, 3), (2, 2), "CIRCULAR"), "gap")
    x = _images(3, (7, 6), 7)  # 7 % 2 != 0
    fused = arch.kernel(x)
    assert len(calls) == 1
    _assert_matches(fused, _eager(monkeypatch, arch, x, None), RTOL[F64], DIAG_RTOL[F64])


def test_three_dimensional_convolutions_stay_eager(
    monkeypatch: pytest.MonkeyPatch, calls: list[int]
) -> None:
    """The fused kernel has 1-D and 2-D layouts only: 3-D filters (``(n, C, D, H, W)``) take
    the eager path, with either top, and give its values."""
    x = _images(3, (4, 5, 3), 8)
    for top in (GlobalAvgPool(), Flatten()):
        arch = nl.serial(
            Conv(filter_shape=(3, 3, 3), w_std=1.4, b_std=0.1),
            nl.Relu(),
            Conv(filter_shape=(2, 3, 1), w_std=1.3, b_std=0.1),
            nl.Relu(),
            top,
            nl.Dense(w_std=1.1, b_std=0.05),
        )
        calls.clear()
        k = arch.kernel(x)
        assert not calls
        _assert_matches(k, _eager(monkeypatch, arch, x, None), RTOL[F64], DIAG_RTOL[F64])


def _reference_cases() -> list[dict[str, Any]]:
    import json

    cases: list[dict[str, Any]] = json.loads(REFERENCE.read_text())["cases"]
    return cases


@pytest.mark.parametrize("case", _reference_cases(), ids=lambda c: c["name"])
def test_neural_tangents_references_through_the_fused_path(
    calls: list[int], case: dict[str, Any]
) -> None:
    """Every stored neural-tangents case (float64) to 1e-6, and the fused kernel ran in each
    case with a run of NTK-parameterized Conv and Relu layers."""
    layers = build(case["architecture"])
    arch = nl.serial(*layers)
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=1e-9)
    fusable = any(layer.fused_kind == "conv" for layer in layers)
    assert bool(calls) == fusable


def test_result_does_not_depend_on_the_thread_count(calls: list[int]) -> None:
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap")
    x = _images(5, (6, 6), 8, F32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = arch.kernel(x)
        torch.set_num_threads(3)
        many = arch.kernel(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one.nngp, many.nngp) and torch.equal(one.ntk, many.ntk)
    assert len(calls) == 2


def test_autograd_stays_eager_and_disabled_by_environment(
    monkeypatch: pytest.MonkeyPatch, calls: list[int]
) -> None:
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap")
    x = _images(2, (5, 5), 9).requires_grad_(True)
    arch.kernel(x).ntk.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and not calls
    monkeypatch.setenv("NTKLAB_DISABLE_FUSED", "1")
    with torch.no_grad():
        arch.kernel(x)
    assert not calls


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty cache directory and a loader that has not tried to load anything yet."""
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    yield tmp_path


def test_without_a_compiler_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: Path, calls: list[int]
) -> None:
    monkeypatch.setenv("CC", "ntklab-no-such-compiler")
    for top in ("flatten", "gap"):
        arch = _arch(((3, 3), (1, 1), "SAME"), top)
        x = _images(3, (5, 5), 10)
        k = arch.kernel(x)
        assert not calls and not _fused.available()
        _assert_matches(k, _eager(monkeypatch, arch, x, None), 0.0, 0.0)
