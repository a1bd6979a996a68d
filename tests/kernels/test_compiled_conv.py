"""The compiled CNTK step (``ntklab.kernels._compiled_conv``) against the eager recursion.

The eager path (``NTKLAB_DISABLE_FUSED=1``) is the reference. The step function itself (the
separable window sums, the ReLU duals, the pooled top) is checked without compiling on many
geometries (fast); inductor's CPU backend (``NTKLAB_COMPILED_CONV=1``) on a few (slow: one
compile costs tens of seconds). Every comparison also checks that the step ran.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from test_fused_conv import _assert_matches, _eager, _images  # the same eager references

import ntklab as nl
from ntklab.errors import NtklabValueError
from ntklab.kernels import AvgPool, Conv, Flatten, GlobalAvgPool, _compiled_conv

F32, F64 = torch.float32, torch.float64
RTOL = {F32: 1e-5, F64: 1e-12}
# K(x)'s own pairs hold correlations within an ulp of 1 at equal positions, where rounding
# moves the angle by sqrt(2 ulp); the diagonal of K(x) agrees to sqrt(16 eps) (test_fused.py)
DIAG_RTOL = {F32: math.sqrt(16 * torch.finfo(F32).eps), F64: math.sqrt(16 * torch.finfo(F64).eps)}


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Force the compiled path on the CPU with a fresh cache and failure record; counts the
    step functions built (one per step configuration)."""
    seen: list[int] = []
    real = _compiled_conv._compile

    def spy(fn: Callable[..., object]) -> Callable[..., object]:
        seen.append(1)
        return real(fn)

    monkeypatch.setattr(_compiled_conv, "_compile", spy)
    monkeypatch.setattr(_compiled_conv, "_failure", _compiled_conv._Failure())
    monkeypatch.setenv("NTKLAB_COMPILED_CONV", "1")
    _compiled_conv._compiled.cache_clear()
    yield seen
    _compiled_conv._compiled.cache_clear()


@pytest.fixture
def uncompiled(monkeypatch: pytest.MonkeyPatch, built: list[int]) -> list[int]:
    """As ``built``, with the step functions run as plain torch (no torch.compile)."""

    def plain(fn: Callable[..., object]) -> Callable[..., object]:
        built.append(1)
        return fn

    monkeypatch.setattr(_compiled_conv, "_compile", plain)
    return built


def _top(top: str, ndim: int) -> list[nl.kernels.Layer]:
    if top == "flatten":  # diagonal layout, the mean fused into the last step
        return [Flatten()]
    if top == "gap":  # full layout, the mean fused into the last step
        return [GlobalAvgPool()]
    return [AvgPool((2,) * ndim, (1,) * ndim, "VALID"), Flatten()]  # full, back to eager


def _arch(conv: tuple[Any, Any, Any], top: str, *, end_with_conv: bool = False) -> nl.Architecture:
    filt, strides, padding = conv
    second = "CIRCULAR" if padding == "CIRCULAR" else "SAME"
    three = (3,) * len(filt)
    tail = [Conv(filter_shape=three, padding=second, w_std=0.9)] if end_with_conv else []
    return nl.serial(
        Conv(filter_shape=filt, strides=strides, padding=padding, w_std=1.4, b_std=0.1),
        nl.Relu(),
        Conv(filter_shape=three, padding=second, w_std=1.3, b_std=0.2),
        nl.Relu(),
        *tail,
        *_top(top, len(filt)),
        nl.Dense(w_std=1.1, b_std=0.05),
    )


# (filter, strides, padding): even filters (uneven SAME pads), strides, explicit pads, and
# circular padding with a stride that does not divide the size (which the C kernel leaves)
CONVS_2D = [
    ((3, 3), (1, 1), "SAME"),
    ((2, 2), (1, 1), "SAME"),
    ((1, 1), (1, 1), "VALID"),
    ((5, 5), (1, 1), "CIRCULAR"),
    ((3, 2), (2, 1), "VALID"),
    ((3, 3), (2, 2), "SAME"),
    ((2, 3), (1, 1), (1, 2)),
    ((3, 3), (2, 2), "CIRCULAR"),
    ((3, 3), (3, 3), "CIRCULAR"),
]
CONVS_1D = [((3,), (1,), "SAME"), ((2,), (2,), "VALID"), ((5,), (1,), "CIRCULAR"), ((3,), (1,), 2)]


@pytest.mark.parametrize("top", ["flatten", "gap", "avgpool"])
@pytest.mark.parametrize("conv", CONVS_2D + CONVS_1D, ids=str)
def test_step_function_matches_eager(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int], conv: tuple[Any, Any, Any], top: str
) -> None:
    """The function that is compiled, run as plain torch: separable window sums, ReLU duals
    and the pooled top equal the eager recursion to rounding, with and without ``x2``."""
    arch = _arch(conv, top)
    size = (8, 7) if len(conv[0]) == 2 else (9,)
    x1, x2 = _images(4, size, 0), _images(3, size, 1)
    for b in (None, x2):
        uncompiled.clear()
        got = arch.kernel(x1, b)
        assert len(uncompiled) == 2  # two [Conv, Relu] steps, each built once
        _assert_matches(got, _eager(monkeypatch, arch, x1, b), RTOL[F64], DIAG_RTOL[F64])
        _compiled_conv._compiled.cache_clear()


@pytest.mark.parametrize("dtype", [F32, F64])
def test_step_function_trailing_conv_and_float32(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int], dtype: torch.dtype
) -> None:
    """A run ending with a Conv (a step without ReLU, the mean fused into it), in both
    precisions."""
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap", end_with_conv=True)
    x1, x2 = _images(3, (6, 5), 2, dtype), _images(2, (6, 5), 3, dtype)
    got = arch.kernel(x1, x2)
    assert len(uncompiled) == 3
    _assert_matches(got, _eager(monkeypatch, arch, x1, x2), RTOL[dtype], DIAG_RTOL[dtype])


def test_step_function_in_branches(monkeypatch: pytest.MonkeyPatch, uncompiled: list[int]) -> None:
    """Runs inside the branches of ``parallel`` take the step too (and still equal eager)."""
    from ntklab.kernels import FanInSum, FanOut, Identity, parallel

    conv = Conv(filter_shape=(3, 3), w_std=1.3, b_std=0.1)
    arch = nl.serial(
        conv,
        nl.Relu(),
        FanOut(2),
        parallel(nl.serial(conv, nl.Relu(), conv), Identity()),
        FanInSum(),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(w_std=1.1),
    )
    x1, x2 = _images(3, (5, 5), 13), _images(2, (5, 5), 14)
    got = arch.kernel(x1, x2)
    assert len(uncompiled) == 2  # [Conv, Relu] (first run and branch), the branch's last Conv
    _assert_matches(got, _eager(monkeypatch, arch, x1, x2), RTOL[F64], DIAG_RTOL[F64])


def test_blocks_of_pairs_reuse_one_step(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int]
) -> None:
    """Blocks of image pairs sized by ``max_memory`` go through the same steps (built once
    for all blocks) and assemble the eager kernel."""
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap")
    x = _images(6, (5, 5), 4)
    one_pair = nl.kernels.engine.block_bytes(x, 1, 1, True, (5, 5))
    got = arch.kernel(x, max_memory=one_pair * 6)  # blocks of two inputs
    assert len(uncompiled) == 2
    _assert_matches(got, _eager(monkeypatch, arch, x, None), RTOL[F64], DIAG_RTOL[F64])


def test_each_step_compiles_on_its_own_code_object(uncompiled: list[int]) -> None:
    """dynamo keeps compiled graphs (and its recompile count) per code object: two step
    configurations must not share one, or the second would recompile the first's graph with
    dynamic spatial sizes (a functools.partial would share torch.compile's wrapper)."""
    window = _compiled_conv._Window(6, 3, 1, 1, 1)
    a = _compiled_conv._Step((window,), False, 1.0, 0.0, True, True, False)
    b = dataclasses.replace(a, windows=(dataclasses.replace(window, size=5),))
    fa, fb = _compiled_conv._compiled(a), _compiled_conv._compiled(b)
    assert isinstance(fa, types.FunctionType) and isinstance(fb, types.FunctionType)
    assert fa.__code__ is not fb.__code__
    assert fa.__defaults__ == (a,) and fb.__defaults__ == (b,)
    assert _compiled_conv._compiled(a) is fa and len(uncompiled) == 2


def test_failure_warns_and_falls_back(monkeypatch: pytest.MonkeyPatch, built: list[int]) -> None:
    """A compile failure is announced with its reason once, the eager path computes the
    kernel, and the compiled step is not tried again."""

    def broken(fn: Callable[..., object]) -> Callable[..., object]:
        built.append(1)

        def run(*args: object) -> object:
            raise RuntimeError("Cannot find a working triton installation\nmore detail")

        return run

    monkeypatch.setattr(_compiled_conv, "_compile", broken)
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap")
    x1, x2 = _images(3, (5, 4), 5), _images(2, (5, 4), 6)
    with pytest.warns(RuntimeWarning, match=r"failed \(RuntimeError: Cannot find a working trit"):
        got = arch.kernel(x1, x2)
    assert len(built) == 1
    assert "triton" in str(_compiled_conv._failure.reason)
    _assert_matches(got, _eager(monkeypatch, arch, x1, x2), RTOL[F64], DIAG_RTOL[F64])
    assert not _compiled_conv.enabled(x1)
    arch.kernel(x1, x2)  # no second warning (RuntimeWarnings from ntklab are errors here)
    assert len(built) == 1


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("NTKLAB_COMPILED_CONV", "0"),
        ("NTKLAB_COMPILED_CONV", "auto"),  # the CPU takes the C kernel or the eager path
        ("NTKLAB_DISABLE_FUSED", "1"),
    ],
)
def test_opt_out_and_auto_on_cpu(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int], env: str, value: str
) -> None:
    monkeypatch.setenv(env, value)
    x = _images(2, (4, 4), 7)
    _arch(((3, 3), (1, 1), "SAME"), "gap").kernel(x)
    assert uncompiled == []


def test_not_under_autograd_and_bad_setting(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int]
) -> None:
    """Inputs that need gradients take the eager path (the step has no backward); an
    unknown setting is refused with the variable's name."""
    x = _images(2, (4, 4), 8).requires_grad_()
    k = _arch(((3, 3), (1, 1), "SAME"), "flatten").kernel(x)
    assert uncompiled == [] and k.ntk.requires_grad
    monkeypatch.setenv("NTKLAB_COMPILED_CONV", "yes")
    with pytest.raises(NtklabValueError, match=r"NTKLAB_COMPILED_CONV: expected '0', '1'"):
        _compiled_conv.enabled(x)


def test_non_finite_inputs_raise_as_eager(
    monkeypatch: pytest.MonkeyPatch, uncompiled: list[int]
) -> None:
    """Finite images whose kernel overflows: the error of the eager path, not a NaN."""
    x = _images(3, (4, 4), 9)
    x[1] *= 1e160  # its squares overflow float64
    arch = _arch(((3, 3), (1, 1), "SAME"), "gap")
    with pytest.raises(NtklabValueError) as eager:
        _eager(monkeypatch, arch, x, None)
    with pytest.raises(NtklabValueError) as got:
        arch.kernel(x)
    assert str(got.value) == str(eager.value)


# inductor's CPU backend: one compile per step configuration, tens of seconds each
COMPILED_CASES = [
    pytest.param(((3, 3), (2, 2), "VALID"), "gap", (7, 6), id="2d-valid-stride-gap"),
    pytest.param(((3, 3), (1, 1), "SAME"), "flatten", (6, 5), id="2d-same-flatten"),
    pytest.param(((3,), (2,), "SAME"), "gap", (9,), id="1d-same-stride-gap"),
    pytest.param(((2,), (1,), "VALID"), "flatten", (8,), id="1d-valid-flatten"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("conv", "top", "size"), COMPILED_CASES)
def test_inductor_cpu_matches_eager(
    monkeypatch: pytest.MonkeyPatch,
    built: list[int],
    conv: tuple[Any, Any, Any],
    top: str,
    size: tuple[int, ...],
) -> None:
    """``torch.compile`` (inductor, CPU) of the steps equals the eager recursion to 1e-6
    relative in float64, with and without ``x2``, for batches of other sizes too (the batch
    axes are compiled dynamic: no step is built twice)."""
    arch = _arch(conv, top)
    x1, x2, x3 = _images(4, size, 10), _images(3, size, 11), _images(5, size, 12)
    for a, b in ((x1, x2), (x1, None), (x3, x1)):
        got = arch.kernel(a, b)
        assert _compiled_conv._failure.reason is None
        _assert_matches(got, _eager(monkeypatch, arch, a, b), 1e-6, 1e-6)
    assert len(built) == 2
