"""A fused CPU kernel for runs of ``[Conv, Relu]`` layers on image pairs (the CNTK).

The eager recursion rewrites the carried ``(n1, n2, *S)`` tensors (or ``(n1, n2, H, H', W,
W')`` in the full layout that pooling needs) about a dozen times per layer. For a run of
``Conv`` (NTK parameterization, plain-number scales) and ``Relu`` layers, this module sends
each image pair through the whole run in C instead, with a few kB of scratch memory:

.. math::

    K'_{hh'} = \\frac{\\sigma_w^2}{|f|} \\sum_{d \\in f} K_{sh + d,\\, sh' + d} + \\sigma_b^2,
    \\qquad \\Theta'_{hh'} = K'_{hh'} + \\frac{\\sigma_w^2}{|f|}
    \\sum_{d \\in f} \\Theta_{sh + d,\\, sh' + d}

for a convolution (Arora et al. 2019, arXiv:1904.11955) and the arc-cosine duals of
:mod:`ntklab.kernels._fused` for a ReLU, with the variances :math:`v_1(h), v_2(h')` of the
two images at the ReLU's input.

A convolution sums along diagonals of the position pairs, :math:`K'_{hh'} = \\sum_d K_{sh + d,
sh' + d}`: the position pairs :math:`(h, h + \\delta)` of one offset :math:`\\delta` of a
layer's output read only the pairs of offset :math:`s \\delta` of its input (modulo the size
for ``CIRCULAR`` padding), whatever the other axis does. The kernel therefore
takes one image pair and one offset :math:`\\delta` of the last layer at a time (an *item*),
and sends the planes :math:`(w, w')` of those rows through the whole run in scratch memory
of a few hundred kB: window sums along the :math:`(w, w')` diagonals of each plane from
zero- or periodically padded rows, then along the rows, then the ReLU duals on each output
plane while it is in L1. The diagonal layout ``(H, W)`` is the single offset 0, its planes the
rows :math:`w`. The input kernel of the first layer is computed from the images themselves
when the run starts the architecture (:attr:`ntklab.kernels.engine.Flow.images`), so the
``(n1, n2, H, H', W, W')`` input tensor is never written.

The variances (the per-input recursion, :math:`O(n |S|)` in the diagonal layout) stay in
torch. When ``x2`` is ``None`` only the pairs ``i <= j`` are computed and mirrored; when the
run is followed by ``GlobalAvgPool`` (full layout) or ``Flatten`` (diagonal layout), the
kernel sums the outputs instead of writing them, so the per-pair tensor never returns to
torch. OpenMP splits the items over ``torch.get_num_threads()`` threads; each item is
computed by one thread and its sums are added in a fixed order, so results do not depend on
the thread count. Window sums and ReLU duals are computed in the input's precision (float32
agrees with float64 to 5e-7 of the largest entry for 5 x [Conv 3x3, Relu] on 32 x 32 images),
the pooled sums in float64.

The C code is compiled with the dense kernel into one library (same cache, checksum,
fallback and ``NTKLAB_DISABLE_FUSED=1`` switch: :func:`ntklab.kernels._fused.available`).
``CIRCULAR`` padding with a stride that does not divide the size has no such offsets; those
layers, filters wider than 64, and runs with non-finite variances take the eager path (a run
that mixes circular and zero padding is split in two).
As in the dense kernel, correlations within 8 ulp of :math:`\\pm 1` are taken as
:math:`\\pm 1`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import _fused
from .covariance import next_diagonal, output_size, pads_for, self_variances, to_diagonal
from .kernel import KernelState

if TYPE_CHECKING:
    from .engine import Flow, Layer

__all__ = ["fused_conv_chain", "propagate_run", "run_length"]

_OPW = 12  # int64 entries per op (CONV_OPW in the C source)
_MAX_OPS = 256  # CONV_MAXOPS
_MAX_FILTER = 64  # CONV_MAXF
_INV_TWO_PI = 1.0 / (2.0 * math.pi)


def run_length(layers: Sequence[Layer], start: int) -> int:
    """Length of the fusable run of ``Conv``/``Relu`` layers at ``start`` (0: none).

    The run is the longest stretch of layers whose ``fused_kind`` is ``"conv"`` or
    ``"relu"``, holding at least one ``Conv``, whose convolutions are all ``CIRCULAR`` or all
    zero-padded, and at most 256 layers long."""
    wrap: bool | None = None
    stop = start
    while stop < len(layers) and stop - start < _MAX_OPS:
        kind = layers[stop].fused_kind
        if kind == "conv":
            circular = layers[stop].padding == "CIRCULAR"  # type: ignore[attr-defined]
            if wrap is not None and circular != wrap:
                break
            wrap = circular
        elif kind != "relu":
            break
        stop += 1
    return stop - start if wrap is not None else 0


@dataclasses.dataclass(frozen=True)
class _Run:
    """The ops of a run in the C layout, with the spatial sizes at each level."""

    ops: Tensor  # (nops, _OPW) int64
    scales: list[tuple[float, float]]  # (w^2 / |f|, b^2) per op (zeros for a Relu)
    sizes: list[tuple[int, int]]  # (H, W) at the input of each op, then the output
    wrap: bool
    ndim: int  # spatial dimensions (1-D runs have H = 1)
    scratch: int  # entries of one scratch buffer, diagonal layout (a level, or Hin x Wout)
    scratch_full: int  # the same for the full layout (H W^2 per level, or Hin Wout^2)


def _plan_run(layers: Sequence[Layer], shape: tuple[int, ...]) -> _Run | None:
    """Sizes and op codes of ``layers`` on spatial ``shape`` (1-D as ``H = 1``); ``None``
    when circular padding meets a stride that does not divide the size. Raises the eager
    path's error for a size too small for a window."""
    h, w = (1, shape[0]) if len(shape) == 1 else shape
    rows: list[list[int]] = []
    scales: list[tuple[float, float]] = []
    sizes = [(h, w)]
    wrap = False
    scratch, scratch_full = h * w, h * w * w
    for layer in layers:
        if layer.fused_kind == "relu":
            rows.append([1, 0, 0, 0, h, h, 0, 0, 0, w, w, 0])
            scales.append((0.0, 0.0))
            sizes.append((h, w))
            continue
        filt: tuple[int, ...] = layer.filter_shape  # type: ignore[attr-defined]
        strides: tuple[int, ...] = layer.strides  # type: ignore[attr-defined]
        padding = layer.padding  # type: ignore[attr-defined]
        wrap = padding == "CIRCULAR"
        axes = []
        dims = [h, w] if len(filt) == 2 else [w]
        for k, size in enumerate(dims):
            lo, hi = pads_for(padding, size, filt[k], strides[k], k)
            out = output_size(size, filt[k], strides[k], lo, hi, what="Conv")
            if (wrap and size % strides[k]) or filt[k] > _MAX_FILTER:
                return None
            axes.append((filt[k], strides[k], lo, size, out))
        if len(filt) == 1:
            axes.insert(0, (1, 1, 0, 1, 1))
        (fh, sh, ph, hin, hout), (fw, sw, pw, win, wout) = axes
        rows.append([0, fh, sh, ph, hin, hout, fw, sw, pw, win, wout, 0])
        w_std, b_std = layer.w_std, layer.b_std  # type: ignore[attr-defined]
        b2 = 0.0 if b_std is None else float(b_std) ** 2
        scales.append((float(w_std) ** 2 / (fh * fw), b2))
        scratch = max(scratch, hin * wout, hout * wout)
        scratch_full = max(scratch_full, hin * wout * wout, hout * wout * wout)
        h, w = hout, wout
        sizes.append((h, w))
    ops = torch.tensor(rows, dtype=torch.int64).reshape(-1, _OPW)
    return _Run(ops, scales, sizes, wrap, len(shape), scratch, scratch_full)


def fused_conv_chain(
    run: _Run,
    cov: Tensor,
    ntk: Tensor | None,
    pairs: Tensor,
    var_a: list[Tensor],
    var_b: list[Tensor],
    *,
    full: bool,
    out_shape: tuple[int, ...] | None,
    images: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, float] | None:
    """Run the C kernel over ``pairs`` (``(P, 5)`` int64: input offset (overwritten here from
    the strides of ``cov``), output offset, mirrored output offset or -1, first and second
    image index).

    ``cov``/``ntk``: the input tensors (CPU, ``(n1, n2, ...)`` or ``(n, ...)``, of equal
    strides); ``var_a``/``var_b``: per ReLU of
    the run, the variances ``(n_a, H, W)`` and ``(n_b, H, W)`` at its input. With
    ``out_shape=None`` returns the sums ``(P,)`` of each pair's output entries (NNGP, NTK);
    otherwise new tensors of ``out_shape``. With ``images`` (``(n_a, C, *S)`` and ``(n_b,
    C, *S)``) the input kernel is computed from them and ``cov``, ``ntk`` are not read.
    The last value is ``max(|c| - 1, 0)`` over the
    correlations. ``None`` when an input entry is not finite.
    """
    dtype = cov.dtype
    tiny = torch.finfo(dtype).tiny
    ops = run.ops.clone()
    if ntk is not None and ntk.stride() != cov.stride():
        cov, ntk = cov.contiguous(), ntk.contiguous()
    if min(cov.stride()) < 0:
        cov = cov.contiguous()
        ntk = None if ntk is None else ntk.contiguous()
    n_sp = run.ndim * (2 if full else 1)
    strides = list(cov.stride())
    sp = strides[cov.ndim - n_sp :]
    # the C kernel's strides along h, h', w, w' (1-D: h is a dummy axis of size 1)
    if full:
        c_strides = sp if run.ndim == 2 else [0, 0, *sp]
    else:
        c_strides = [sp[0], 0, sp[1], 0] if run.ndim == 2 else [0, 0, sp[0], 0]
    pairs = pairs.clone()
    pairs[:, 0] = pairs[:, 3] * strides[0]
    if cov.ndim - n_sp == 2:
        pairs[:, 0] += pairs[:, 4] * strides[1]
    st = torch.tensor(c_strides, dtype=torch.int64)

    def stacked(vs: list[Tensor], column: int, scale: float) -> tuple[Tensor, Tensor]:
        flat, offset = [], 0
        for r, v in zip((i for i, row in enumerate(ops) if row[0] == 1), vs, strict=True):
            ops[r, column] = offset
            flat.append(v.detach().to(dtype=dtype).reshape(-1))
            offset += flat[-1].numel()
        if not flat:
            one = torch.ones(1, dtype=dtype)
            return one, one
        s = torch.cat(flat).clamp_min_(tiny).sqrt_()
        return s * scale, s.reciprocal()

    sa, ra = stacked(var_a, 1, _INV_TWO_PI)
    sb, rb = stacked(var_b, 2, 1.0)
    opf = torch.tensor(run.scales, dtype=dtype).reshape(-1)
    n_pairs = int(pairs.shape[0])
    lib = _fused._library()
    if out_shape is None:
        red: Tensor | None = torch.zeros(n_pairs, 2, dtype=torch.float64)
        out_k = out_t = cov  # unused
    else:
        red = None
        out_k = torch.empty(out_shape, dtype=dtype)
        out_t = torch.empty(out_shape, dtype=dtype)
    maxn = max(max(hw) for hw in run.sizes)
    scratch = run.scratch_full if full else run.scratch
    cmax = torch.zeros((), dtype=dtype)
    ptr = _fused._ptr
    chain = getattr(lib, f"ntklab_conv_chain_{_fused._SUFFIX[dtype]}")
    xa = xb = None
    chans = 0
    if images is not None:
        xa = images[0].detach().to(dtype).contiguous()
        xb = xa if images[1] is images[0] else images[1].detach().to(dtype).contiguous()
        chans = int(xa.shape[1])
        ntk = None
    bad = chain(
        *(ptr(cov), ptr(cov if ntk is None else ntk), int(ntk is not None)),
        *(None if xa is None else ptr(xa), None if xb is None else ptr(xb), chans),
        *(ptr(out_k), ptr(out_t), None if red is None else ptr(red), n_pairs, ptr(pairs)),
        *(int(full), int(run.wrap), int(run.wrap), int(ops.shape[0]), ptr(ops), ptr(opf)),
        *(ptr(sa), ptr(ra), ptr(sb), ptr(rb), ptr(st), scratch, maxn),
        *(torch.get_num_threads(), ptr(cmax)),
    )
    if bad == 3:
        raise MemoryError("the fused convolution kernel could not allocate its scratch memory")
    if bad:
        return None
    excess = max(float(cmax) - 1.0, 0.0)
    if red is not None:
        return red[:, 0], red[:, 1], excess
    return out_k, out_t, excess


def _pair_table(n1: int, n2: int, size_in: int, size_out: int, symmetric: bool) -> Tensor:
    """Rows (input offset, output offset, mirror offset, i, j) for the pairs of an
    ``(n1, n2, ...)`` tensor whose pair blocks hold ``size_in``/``size_out`` entries."""
    if symmetric:
        i, j = torch.triu_indices(n1, n2)
    else:
        i = torch.arange(n1).repeat_interleave(n2)
        j = torch.arange(n2).repeat(n1)
    flat = i * n2 + j
    mirror = (
        torch.where(i < j, (j * n2 + i) * size_out, -1) if symmetric else torch.full_like(i, -1)
    )
    return torch.stack([flat * size_in, flat * size_out, mirror, i, j], dim=1).contiguous()


def _diagonal_pass(
    layers: Sequence[Layer], diag: KernelState
) -> tuple[KernelState, list[Tensor]] | None:
    """The per-input states through ``layers`` in the diagonal layout, and the variances
    ``(n, H, W)`` entering each ReLU (``None`` when one is not finite).

    Each input is perfectly correlated with itself at each position (:math:`\\theta = 0`),
    where the ReLU duals are :math:`K/2` and :math:`\\Theta/2`; the convolutions are the
    layers' own rules."""
    d = to_diagonal(diag)
    variances: list[Tensor] = []
    for layer in layers:
        if layer.fused_kind == "relu":
            if d.product:
                return None  # the eager path raises
            v = d.cov if d.cov.ndim == 3 else d.cov.unsqueeze(1)
            if not bool(torch.isfinite(v).all()):
                return None
            variances.append(v)
            half = d.cov * 0.5
            ntk = None if d.ntk is None else d.ntk * 0.5
            d = dataclasses.replace(d, cov=half, ntk=ntk, var1=half, var2=half, gaussian=False)
        else:
            d = self_variances(layer.propagate(d, inplace=True))
    if not bool(torch.isfinite(d.cov).all()):
        return None
    return d, variances


def propagate_run(
    layers: Sequence[Layer], flow: Flow, top: Layer | None
) -> tuple[Flow, bool] | None:
    """Propagate ``flow`` through a run from :func:`run_length`; with ``top`` (the layer
    after the run) a ``GlobalAvgPool`` on the full layout or a ``Flatten`` on the diagonal
    one, through it too (then the second value is True).

    Returns ``None``, with nothing modified, when the fused kernel is unavailable or cannot
    take the run (the eager path then reproduces its own errors and warnings)."""
    from .engine import Flow
    from .pooling import Flatten, GlobalAvgPool

    pair = flow.pair
    if not _fused.available() or not _fused.supports(pair.cov):
        return None
    if pair.product and layers[0].fused_kind == "relu":
        return None  # the eager path raises
    full = pair.full_spatial
    run = _plan_run(layers, pair.spatial_shape)
    if run is None:
        return None
    pass_a = _diagonal_pass(layers, flow.diag1)
    pass_b = pass_a if flow.diag2 is None else _diagonal_pass(layers, flow.diag2)
    if pass_a is None or pass_b is None:
        return None
    symmetric = flow.diag2 is None
    if not ((isinstance(top, GlobalAvgPool) and full) or (isinstance(top, Flatten) and not full)):
        top = None
    n1, n2 = int(pair.cov.shape[0]), int(pair.cov.shape[1])
    table = _pair_table(n1, n2, _entries(run, full, 0), _entries(run, full, -1), symmetric)
    images = None
    if flow.images is not None:
        x1, x2 = flow.images
        images = (x1, x1 if x2 is None else x2)
    done = _chain(
        run, pair, table, pass_a[1], pass_b[1], full=full, reduce=top is not None, images=images
    )
    if done is None:
        return None
    cov, ntk = done
    diag1 = _per_input_out(run, flow.diag1, pass_a, cov, ntk, top, symmetric)
    diag2 = None
    if flow.diag2 is not None:
        diag2 = _per_input_out(run, flow.diag2, pass_b, cov, ntk, top, False)
        if diag2 is None:
            return None
    if diag1 is None:
        return None
    fan_in, spatial_ndim, gaussian, product = _flags(pass_a[0], top)
    state = dataclasses.replace(
        pair,
        cov=cov,
        ntk=ntk,
        fan_in=fan_in,
        spatial_ndim=spatial_ndim,
        full_spatial=full and top is None,
        gaussian=gaussian,
        product=product,
    )
    return Flow(state, diag1, diag2).refreshed(), top is not None


def _entries(run: _Run, full: bool, level: int) -> int:
    """Entries of one pair's tensor at the input (``level=0``) or output (-1) of ``run``."""
    h, w = run.sizes[level]
    return (h * w) ** 2 if full else h * w


def _chain(
    run: _Run,
    state: KernelState,
    table: Tensor,
    var_a: list[Tensor],
    var_b: list[Tensor],
    *,
    full: bool,
    reduce: bool,
    images: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor] | None:
    """:func:`fused_conv_chain` on the pairs of ``table`` of ``state`` (a pair state
    ``(n1, n2, ...)`` or a per-input one ``(n, ...)``); with ``reduce`` the per-pair means
    (mirrored into a matrix for a pair state), else the output tensors. Checks the clamp."""
    batch = state.cov.shape[: state.batch_ndim]
    h, w = run.sizes[-1]
    out = (h, w) if state.spatial_ndim == 2 else (w,)
    layout = tuple(d for s in out for d in ((s, s) if full else (s,)))
    done = fused_conv_chain(
        run,
        state.cov,
        state.ntk,
        table,
        var_a,
        var_b,
        full=full,
        out_shape=None if reduce else (*batch, *layout),
        images=images,
    )
    if done is None:
        return None
    cov, ntk, excess = done
    _fused._check_excess(excess, state.cov.dtype)
    if not reduce:
        return cov, ntk
    count = _entries(run, full, -1)
    i, j = table[:, 3], table[:, 4]
    mats = []
    for sums in (cov, ntk):
        mat = torch.empty(*batch, dtype=torch.float64)
        if len(batch) == 1:
            mat[i] = sums
        else:
            mirrored = table[:, 2] >= 0
            mat[i, j] = sums
            mat[j[mirrored], i[mirrored]] = sums[mirrored]
        mats.append(mat.div_(count).to(state.cov.dtype))
    return mats[0], mats[1]


def _flags(diag_pass: KernelState, top: Layer | None) -> tuple[int | None, int, bool, bool]:
    """``fan_in``, ``spatial_ndim``, ``gaussian`` and ``product`` after the run and ``top``
    (read from the per-input states of the diagonal pass)."""
    from .pooling import Flatten

    d = diag_pass
    if top is None:
        return d.fan_in, d.spatial_ndim, d.gaussian, d.product
    if isinstance(top, Flatten):
        d = next_diagonal(top, d)
        return d.fan_in, d.spatial_ndim, d.gaussian, d.product
    return d.fan_in, 0, d.gaussian, d.product  # GlobalAvgPool keeps the flags


def _per_input_out(
    run: _Run,
    source: KernelState,
    diag_pass: tuple[KernelState, list[Tensor]],
    pair_cov: Tensor,
    pair_ntk: Tensor,
    top: Layer | None,
    symmetric: bool,
) -> KernelState | None:
    """The per-input state after the run (and ``top``): the diagonal pass itself for the
    diagonal layout; for the full layout each image's pair with itself, taken from the pair
    result when ``x2`` is ``x1`` (``symmetric``), else computed by the kernel."""
    if not source.full_spatial:
        return diag_pass[0] if top is None else next_diagonal(top, diag_pass[0])
    n = int(source.cov.shape[0])
    if symmetric:
        idx = torch.arange(n)
        cov, ntk = pair_cov[idx, idx], pair_ntk[idx, idx]
    else:
        i = torch.arange(n)
        per_in, per_out = _entries(run, True, 0), _entries(run, True, -1)
        table = torch.stack([i * per_in, i * per_out, torch.full_like(i, -1), i, i], 1)
        variances = diag_pass[1]
        done = _chain(
            run, source, table.contiguous(), variances, variances, full=True, reduce=top is not None
        )
        if done is None:
            return None
        cov, ntk = done
    fan_in, spatial_ndim, gaussian, product = _flags(diag_pass[0], top)
    state = KernelState(
        cov,
        ntk,
        cov,
        cov,
        fan_in,
        spatial_ndim=spatial_ndim,
        full_spatial=top is None,
        gaussian=gaussian,
        product=product,
    )
    return self_variances(state)
