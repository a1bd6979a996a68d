"""A compiled (``torch.compile``) CNTK step for runs of ``[Conv, Relu]`` layers on GPUs.

The fused C kernel of :mod:`ntklab.kernels._fused_conv` runs on the CPU only. On a CUDA
device this module takes the same runs (:func:`ntklab.kernels._fused_conv.run_length`: NTK
parameterization, plain-number scales, 1-D and 2-D filters) and their ``GlobalAvgPool`` /
``Flatten`` top through one compiled function per ``[Conv, Relu]`` step, which inductor turns
into a few fused kernels (Triton on a GPU, C++ on a CPU). A step maps the pair tensors
``(n1, n2, *layout)`` (the full layout ``(H, H', W, W')`` or the diagonal ``(H, W)``) as

.. math::

    K'_{hh'} = \\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} K_{sh + d,\\, sh' + d} + \\sigma_b^2,
    \\qquad \\Theta'_{hh'} = K'_{hh'} + \\frac{\\sigma_w^2}{|f|}
    \\sum_{d \\in f} \\Theta_{sh + d,\\, sh' + d}

(Arora et al. 2019, arXiv:1904.11955), the window sum done as separable passes, one per
spatial dimension (the same offset on both positions of the pair, from zero- or periodically
padded tensors), then the ReLU's arc-cosine duals (Cho & Saul 2009) with the variances
:math:`v_1(h), v_2(h')` of the two inputs at the ReLU,

.. math::

    c = \\mathrm{clamp}\\Big(\\frac{K'}{\\sqrt{v_1 v_2}}, -1, 1\\Big), \\quad
    K'' = \\frac{\\sqrt{v_1 v_2}}{2\\pi} \\big(\\sqrt{1 - c^2} + (\\pi - \\arccos c)\\, c\\big),
    \\quad \\Theta'' = \\Theta' \\frac{\\pi - \\arccos c}{2\\pi},

and, in the last step, the mean over positions of the top. The per-input states (the
variances, :math:`O(n |S|)` on the diagonal) stay in eager torch. Results agree with the eager
recursion to rounding (1e-6 relative in float64 is what the tests ask; they see 1e-14).

Which path runs is decided per call of :meth:`Architecture.kernel`, by
``$NTKLAB_COMPILED_CONV``: unset or ``auto``, the compiled step on CUDA inputs (where the C
kernel cannot run) and the C kernel or the eager path elsewhere; ``0``, never; ``1``, on every
device, the CPU included (inductor's CPU backend; what the tests use). ``NTKLAB_DISABLE_FUSED=1``
turns it off as well (the eager path everywhere). It is skipped under autograd (the step is
computed without a graph) and for masked or graph inputs, as the C kernel is.

Each step configuration (spatial sizes, filter, stride, pads, layout, scales) is compiled once
per process into its own code object, so that configurations do not count against each
other in dynamo's recompile limit, with the two batch axes dynamic (blocks of pairs and ``x2``
of any size reuse it). The first call of a configuration pays the compile (seconds to a
minute; inductor caches its code on disk, ``TORCHINDUCTOR_CACHE_DIR``). When compiling or
running the compiled step fails (no Triton, no C++ compiler, an unsupported operation), a
:class:`RuntimeWarning` names the reason, the eager path computes the result, and the
compiled step is not tried again in this process. Peak memory per block of pairs is about the
eager path's (inputs, outputs and the intermediate window sums of both kernels), within what
``max_memory`` planning assumes (measured on the CPU; ``benchmarks/device_check.py`` measures
it on a GPU).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import os
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.nn import functional

from ..errors import NtklabValueError
from . import _fused
from .covariance import full_diagonal, next_diagonal, output_size, pad, pads_for
from .kernel import KernelState

if TYPE_CHECKING:
    from .engine import Flow, Layer

__all__ = ["enabled", "propagate_run"]

logger = logging.getLogger("ntklab")

_ENV = "NTKLAB_COMPILED_CONV"
_DTYPES = (torch.float32, torch.float64)
_INV_TWO_PI = 1.0 / (2.0 * math.pi)


class _Failure:
    """Why the compiled step failed in this process (``None``: it has not)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.lock = threading.Lock()


_failure = _Failure()


def _mode() -> str:
    """``"auto"``, ``"off"`` or ``"on"``, from ``$NTKLAB_COMPILED_CONV``."""
    text = os.environ.get(_ENV, "").strip().lower()
    modes = {"": "auto", "auto": "auto", "0": "off", "1": "on"}
    if text not in modes:
        raise NtklabValueError(
            f"{_ENV}: expected '0', '1' or 'auto' (or unset), got {os.environ[_ENV]!r}"
        )
    return modes[text]


def enabled(x: Tensor) -> bool:
    """Whether kernels on inputs like ``x`` take the compiled step: float32/float64 inputs on
    a CUDA device, or on any device with ``NTKLAB_COMPILED_CONV=1``; never with
    ``NTKLAB_COMPILED_CONV=0``, ``NTKLAB_DISABLE_FUSED=1`` or after a failure to compile."""
    if os.environ.get(_fused._DISABLE_ENV) == "1":
        return False
    mode = _mode()
    if mode == "off" or _failure.reason is not None or x.dtype not in _DTYPES:
        return False
    return mode == "on" or x.device.type == "cuda"


@dataclasses.dataclass(frozen=True)
class _Window:
    """A convolution along one spatial dimension: input ``size``, ``window``, ``stride``,
    and the low and high pads."""

    size: int
    window: int
    stride: int
    lo: int
    hi: int

    @property
    def out(self) -> int:
        return (self.size + self.lo + self.hi - self.window) // self.stride + 1


@dataclasses.dataclass(frozen=True)
class _Step:
    """One compiled step: an optional convolution (``windows``, one per spatial dimension;
    empty for none) with ``scale`` :math:`= \\sigma_w^2 / |f|` and ``shift`` :math:`=
    \\sigma_b^2`, then an optional ReLU, then, with ``reduce``, the mean over all positions
    (the top). ``full``: the full layout (both positions of each spatial dimension)."""

    windows: tuple[_Window, ...]
    wrap: bool
    scale: float
    shift: float
    relu: bool
    full: bool
    reduce: bool


def _plan(layers: Sequence[Layer], shape: tuple[int, ...], full: bool, reduce: bool) -> list[_Step]:
    """The steps of a run on spatial ``shape``: each ``Conv`` with the ``Relu`` that follows
    it, a ``Relu`` without a ``Conv`` before it on its own. Raises the eager path's error
    when a window does not fit."""
    steps: list[_Step] = []
    for layer in layers:
        if layer.fused_kind == "relu":
            if steps and steps[-1].windows and not steps[-1].relu:
                steps[-1] = dataclasses.replace(steps[-1], relu=True)
            else:
                steps.append(_Step((), False, 1.0, 0.0, True, full, False))
            continue
        filt: tuple[int, ...] = layer.filter_shape  # type: ignore[attr-defined]
        strides: tuple[int, ...] = layer.strides  # type: ignore[attr-defined]
        padding = layer.padding  # type: ignore[attr-defined]
        windows = []
        for k, size in enumerate(shape):
            lo, hi = pads_for(padding, size, filt[k], strides[k], k)
            output_size(size, filt[k], strides[k], lo, hi, what="Conv")
            windows.append(_Window(size, filt[k], strides[k], lo, hi))
        shape = tuple(w.out for w in windows)
        w_std, b_std = layer.w_std, layer.b_std  # type: ignore[attr-defined]
        scale = float(w_std) ** 2 / math.prod(filt)
        shift = 0.0 if b_std is None else float(b_std) ** 2
        wrap = padding == "CIRCULAR"
        steps.append(_Step(tuple(windows), wrap, scale, shift, False, full, False))
    if reduce:
        steps[-1] = dataclasses.replace(steps[-1], reduce=True)
    return steps


def _window_sum(x: Tensor, axes: tuple[int, ...], window: _Window, wrap: bool) -> Tensor:
    """:math:`y_i = \\sum_{d < w} x_{si + d}` with the same offset ``d`` on every axis of
    ``axes`` (one pass of the separable window sum), after zero or periodic padding."""
    if window.lo or window.hi:
        for axis in axes:
            if wrap:
                x = pad(x, axis, window.lo, window.hi, wrap=True)
            else:  # constant_pad_nd: inductor folds it into the loads
                spec = [0, 0] * (x.ndim - axis)
                spec[-2:] = [window.lo, window.hi]
                x = functional.pad(x, spec)
    stop = window.stride * (window.out - 1) + 1
    total: Tensor | None = None
    for d in range(window.window):
        index: list[slice] = [slice(None)] * x.ndim
        for axis in axes:
            index[axis] = slice(d, d + stop, window.stride)
        part = x[tuple(index)]
        total = part if total is None else total + part
    assert total is not None  # a window has at least one offset
    return total


def _convolve(x: Tensor, step: _Step) -> Tensor:
    """The window sums of ``step`` on ``x`` ``(n1, n2, *layout)``, dimension by dimension."""
    for k, window in enumerate(step.windows):
        axes = (2 + 2 * k, 3 + 2 * k) if step.full else (2 + k,)
        x = _window_sum(x, axes, window, step.wrap)
    return x


def step_function(
    cov: Tensor, ntk: Tensor | None, s1: Tensor, s2: Tensor, step: _Step
) -> tuple[Tensor, Tensor | None, Tensor]:
    """One step on the pair tensors ``cov``, ``ntk`` ``(n1, n2, *layout)`` (``ntk=None``: a
    zero NTK), with ``s1``, ``s2`` the square roots of the variances at the ReLU, shaped to
    broadcast against them. Returns the new NNGP and NTK and :math:`\\max(|c| - 1)` over the
    correlations (NaN or inf when an entry was not finite; -1 without a ReLU).

    This is the function that is compiled; it runs eagerly as well (the tests check both)."""
    t: Tensor | None
    if step.windows:
        k = _convolve(cov, step) * step.scale + step.shift
        t = k.clone() if ntk is None else k + _convolve(ntk, step) * step.scale
    else:
        k, t = cov, ntk
    excess = k.new_full((), -1.0)
    if step.relu:
        s = s1 * s2
        c = k / s
        excess = (c.abs() - 1.0).amax()
        c = c.clamp(-1.0, 1.0)
        j0 = torch.arccos(-c)  # pi - theta
        j1 = torch.sqrt(torch.clamp(1.0 - c * c, min=0.0)) + j0 * c
        k = s * j1 * _INV_TWO_PI
        t = None if t is None else t * j0 * _INV_TWO_PI
    if step.reduce:
        dims = tuple(range(2, k.ndim))
        k = k.mean(dim=dims)
        t = None if t is None else t.mean(dim=dims)
    return k, t, excess


_StepFn = Callable[[Tensor, Tensor | None, Tensor, Tensor], tuple[Tensor, Tensor | None, Tensor]]
_counter = itertools.count()


def _compile(fn: Callable[..., object]) -> Callable[..., object]:
    """``torch.compile`` with the options of this module (a seam for the tests)."""
    return torch.compile(fn, fullgraph=True)


@functools.lru_cache(maxsize=128)
def _compiled(step: _Step) -> _StepFn:
    """The compiled :func:`step_function` of ``step``, on a code object of its own: dynamo
    keeps its compiled graphs per code object, so steps do not evict each other, and the
    spatial sizes of one step never turn dynamic because another step has others."""
    code = step_function.__code__
    code = code.replace(co_name=f"{code.co_name}_{next(_counter)}")
    # ``step`` as the default of the last parameter: torch.compile of a functools.partial
    # would wrap every step in one shared function (one code object for all of them)
    fn = types.FunctionType(code, step_function.__globals__, code.co_name, (step,))
    return _compile(fn)  # type: ignore[return-value]


def _position_variances(diag: KernelState) -> Tensor:
    """The variances ``(n, *S)`` of each input at each position (a per-input state)."""
    if diag.full_spatial:
        return full_diagonal(diag.cov, 1, diag.spatial_ndim)
    return diag.cov


def _scales(v1: Tensor, v2: Tensor | None, full: bool) -> tuple[Tensor, Tensor]:
    """``sqrt(v)`` of both inputs, shaped ``(n1, 1, ...)`` and ``(1, n2, ...)`` to broadcast
    against the pair layout (``v2=None``: the inputs of ``x1``)."""
    tiny = torch.finfo(v1.dtype).tiny
    s1 = v1.clamp_min(tiny).sqrt()
    s2 = s1 if v2 is None else v2.clamp_min(tiny).sqrt()
    sizes = s1.shape[1:]
    if full:
        first = [d for size in sizes for d in (size, 1)]
        second = [d for size in sizes for d in (1, size)]
    else:
        first = second = list(sizes)
    return s1.reshape(s1.shape[0], 1, *first), s2.reshape(1, s2.shape[0], *second)


def _dynamic_batch(cov: Tensor, ntk: Tensor | None, s1: Tensor, s2: Tensor) -> None:
    """Compile for any batch sizes from the first call (blocks of pairs and ``x2`` vary
    them): mark the two batch axes of the pair tensors and of the scales dynamic."""
    mark = torch._dynamo.maybe_mark_dynamic
    for x in (cov, ntk):
        if x is not None:
            mark(x, 0)
            mark(x, 1)
    if s1.ndim:
        mark(s1, 0)
        mark(s2, 1)


def _fail(err: BaseException) -> None:
    """Record and announce a failure of the compiled step (once per process)."""
    lines = str(err).strip().splitlines()
    reason = f"{type(err).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")
    with _failure.lock:
        first = _failure.reason is None
        _failure.reason = reason
    if first:
        warnings.warn(
            f"the compiled convolution kernel (torch.compile) failed ({reason}); the eager "
            f"recursion computes this and later kernels in this process (set {_ENV}=0 to skip "
            "the attempt)",
            RuntimeWarning,
            stacklevel=5,  # out of the engine
        )
    logger.debug("compiled convolution step failed", exc_info=err)


def propagate_run(
    layers: Sequence[Layer], flow: Flow, top: Layer | None
) -> tuple[Flow, bool] | None:
    """Propagate ``flow`` through a run from :func:`ntklab.kernels._fused_conv.run_length`
    with the compiled steps; with ``top`` (the layer after the run) a ``GlobalAvgPool`` on
    the full layout or a ``Flatten`` on the diagonal one, through it too (then the second
    value is True).

    Returns ``None``, with nothing modified, when the eager path should run instead: the
    compiled step is off for these inputs (:func:`enabled`), a ReLU would read a product of
    branches or non-finite variances (the eager path raises or warns), or compiling failed
    (after a warning)."""
    from .engine import Flow
    from .pooling import Flatten, GlobalAvgPool

    if not enabled(flow.pair.cov):
        return None
    flow = flow.materialized()
    pair = flow.pair
    full = pair.full_spatial
    if not ((isinstance(top, GlobalAvgPool) and full) or (isinstance(top, Flatten) and not full)):
        top = None
    steps = _plan(layers, pair.spatial_shape, full, top is not None)
    # the per-input states, eagerly, and the variances entering each ReLU
    d1, d2 = flow.diag1, flow.diag2
    scales: list[tuple[Tensor, Tensor]] = []
    for layer in layers:
        if layer.fused_kind == "relu":
            if d1.product:
                return None  # the eager path raises
            v1 = _position_variances(d1)
            v2 = None if d2 is None else _position_variances(d2)
            if not all(bool(torch.isfinite(v).all()) for v in (v1, v1 if v2 is None else v2)):
                return None  # the eager path raises
            scales.append(_scales(v1, v2, full))
        d1 = next_diagonal(layer, d1)
        d2 = None if d2 is None else next_diagonal(layer, d2)
    cov, ntk = pair.cov, pair.ntk
    excesses = []
    relu = iter(scales)
    one = cov.new_ones(())
    try:
        for step in steps:
            s1, s2 = next(relu) if step.relu else (one, one)
            _dynamic_batch(cov, ntk, s1, s2)
            cov, ntk, excess = _compiled(step)(cov, ntk, s1, s2)
            excesses.append(excess)
    except (torch.OutOfMemoryError, MemoryError):
        raise
    except Exception as err:  # any failure of dynamo or inductor
        _fail(err)
        return None
    _fused._check_excess(max(float(torch.stack(excesses).max()), 0.0), cov.dtype)
    if top is not None:
        d1 = next_diagonal(top, d1)
        d2 = None if d2 is None else next_diagonal(top, d2)
    state = dataclasses.replace(
        pair,
        cov=cov,
        ntk=ntk,
        fan_in=d1.fan_in,
        spatial_ndim=d1.spatial_ndim,
        full_spatial=d1.full_spatial,
        gaussian=d1.gaussian,
        product=d1.product,
    )
    return Flow(state, d1, d2).refreshed(), top is not None
