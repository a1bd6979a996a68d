"""The empirical NTK of a torch module: one front door over several algorithms.

.. math::

    \\Theta(x, x')_{ab} = \\sum_p \\frac{\\partial f_a(x)}{\\partial \\theta_p}
                          \\frac{\\partial f_b(x')}{\\partial \\theta_p}

Methods (all agree to rounding; ``"auto"`` picks the cheapest by the cost model of
:mod:`.cost`, flops and memory traffic measured on one example):

- ``"structured"`` (:mod:`.structured`, :mod:`.structured_conv`): uses the layer structure
  of ``nn.Linear``, ``nn.Conv1d/2d/3d`` (strides, padding, dilation, groups) and the affine
  parameters of BatchNorm (eval) and LayerNorm (products of input activations and
  back-propagated output gradients, contracted in the cheapest order per layer, factored
  per channel before global average pooling), never forming the per-example Jacobian of
  the whole model; other parameters through their own Jacobian. Wins for MLPs, CNNs and
  ResNets, the usual case.
- ``"jacobian"`` (:mod:`.jacobian`): per-example Jacobians (``jacrev`` + ``vmap``, chunked) and
  their contraction. Wins when the parameter count is moderate and the model has little
  structure to exploit.
- ``"ntk_vp"`` (:mod:`.jacobian`): NTK-vector products, a vjp then a jvp per column, never
  forming a Jacobian. Wins for huge parameter counts with few inputs and outputs.

Outputs: ``"trace"`` (the mean of the ``k`` diagonal output blocks, ``(n1, n2)``), ``"full"``
(``(n1, n2, k, k)``), ``"diagonal"`` (``(n1, n2, k)``) and ``"pseudo"``, the pseudo-NTK of
Mohamadi, Bae & Sutherland (2023, arXiv:2206.12543): the NTK of the sum of the logits scaled
by :math:`1/\\sqrt{k}`, :math:`\\frac{1}{k} \\sum_{a,b} \\Theta_{ab}`, ``(n1, n2)``, at the
cost of a single-output model (:mod:`.pseudo`).

Memory: ``max_memory`` (bytes; default ``None``, the policy of :mod:`ntklab.memory`: half of
the memory this process may still use) bounds the result plus one block's scratch memory. A
result that does not fit alone is refused before anything is allocated, with an error that
names the sizes and the bytes needed; otherwise the (n1, n2) result is computed in row and
column blocks (the last ones ragged) sized so that the result plus one block's scratch stays
within the budget. Blocks are streamed into one preallocated result (or the caller's ``out``),
the symmetric kernel computing only the blocks on and above the diagonal, with an optional
``progress(fraction, message)`` callback (:mod:`.streaming`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

from ..errors import NtklabValueError
from ..memory import format_bytes, resolve_max_memory
from ._functional import FunctionalModel, Outputs, ParamSelection, check_batch, functional_model
from ._guards import check_modules, check_per_example
from .pseudo import pseudo_model
from .streaming import (
    Progress,
    check_block_size,
    check_out,
    check_progress,
    fill_blocks,
    result_shape,
)

if TYPE_CHECKING:
    from .jacobian import Probe

__all__ = ["METHODS", "KernelOutputs", "Method", "ntk", "plan"]

#: How :func:`ntk` computes: structured derivatives of known layers, Jacobian contraction,
#: NTK-vector products, or ``"auto"``, the least predicted cost (:func:`plan`).
Method = Literal["auto", "structured", "jacobian", "ntk_vp"]
#: What :func:`ntk` returns per pair of inputs; ``"pseudo"`` is computed as the ``"trace"``
#: kernel of the single-output :class:`~.pseudo.PseudoModel`.
KernelOutputs = Literal["trace", "full", "diagonal", "pseudo"]
_OUTPUTS = ("trace", "full", "diagonal", "pseudo")


def _as_method_outputs(
    fm: FunctionalModel, outputs: KernelOutputs
) -> tuple[FunctionalModel, Outputs]:
    """The model and outputs a method computes: the pseudo-NTK is the (k = 1) NTK of the
    model whose output is the sum of the logits over sqrt(k), one cotangent per example."""
    if outputs == "pseudo":
        return pseudo_model(fm), "trace"
    return fm, outputs


@dataclass(frozen=True)
class Sample:
    """What the cost models may measure: a batch (only ``x[:1]`` is run), whether the kernel
    is symmetric (``x2`` None), and the per-example probe of :func:`.jacobian.probe`."""

    x: Tensor
    symmetric: bool
    probe: Probe


@dataclass(frozen=True)
class MethodSpec:
    """An algorithm for one block of the empirical NTK and its cost model (``flops``: the
    predicted cost in matrix-product-equivalent flops, :attr:`.cost.Cost.equivalent`)."""

    compute: Callable[..., Tensor]
    peak_bytes: Callable[[FunctionalModel, int, int, int, Outputs, Sample], int]
    flops: Callable[[FunctionalModel, int, int, int, Outputs, Sample], float]


def _methods() -> dict[str, MethodSpec]:
    from . import cost
    from . import jacobian as jc
    from . import structured as st

    return {
        "structured": MethodSpec(
            st.ntk_structured,
            lambda fm, n1, n2, k, o, s: st.structured_peak_bytes(
                fm, n1, n2, k, o, x=s.x, symmetric=s.symmetric
            ),
            lambda fm, n1, n2, k, o, s: (
                cost.structured_cost(
                    fm, n1, n2, k, o, s.x, s.probe, symmetric=s.symmetric
                ).equivalent
            ),
        ),
        "jacobian": MethodSpec(
            jc.ntk_jacobian,
            lambda fm, n1, n2, k, o, s: jc.jacobian_peak_bytes(
                fm, n1, n2, k, o, activations=s.probe.activations
            ),
            lambda fm, n1, n2, k, o, s: (
                cost.jacobian_cost(fm, n1, n2, k, o, s.probe, symmetric=s.symmetric).equivalent
            ),
        ),
        "ntk_vp": MethodSpec(
            jc.ntk_vp,
            lambda fm, n1, n2, k, o, s: jc.ntk_vp_peak_bytes(
                fm, n1, n2, k, o, activations=s.probe.activations
            ),
            lambda fm, n1, n2, k, o, s: (
                cost.ntk_vp_cost(fm, n1, n2, k, o, s.probe, symmetric=s.symmetric).equivalent
            ),
        ),
    }


#: The methods ``"auto"`` chooses from.
METHODS: tuple[str, ...] = ("structured", "jacobian", "ntk_vp")

#: Column blocks of a symmetric structured kernel computed in blocks: narrow, so that its
#: row blocks, whose factors are formed once per row (:func:`.structured.reusing_rows`),
#: are wide.
NARROW_COLUMNS = 256


@dataclass(frozen=True)
class Plan:
    """How :func:`ntk` will evaluate: the method and the block sizes."""

    method: str
    block1: int
    block2: int
    n_outputs: int
    result_bytes: int
    block_bytes: int


def _result_entries(n1: int, n2: int, k: int, outputs: Outputs) -> int:
    return n1 * n2 * {"trace": 1, "full": k * k, "diagonal": k}[outputs]


def plan(
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None,
    outputs: KernelOutputs,
    method: Method = "auto",
    max_memory: int | None = None,
) -> Plan:
    """Choose the method and the largest blocks whose scratch fits in ``max_memory``.

    ``"auto"`` takes the method of least predicted cost (:mod:`.cost`: flops plus memory
    traffic, in matrix-product-equivalent flops) among those whose smallest block fits the
    budget. One forward pass on ``x1[:1]`` (and ``k`` backward passes for the structured
    method) measure the model.
    ``max_memory=None`` is the policy of :mod:`ntklab.memory` on the model's device.
    ``outputs="pseudo"`` plans the single-output model of :mod:`.pseudo` (``n_outputs`` 1).

    Raises
    ------
    NtklabValueError
        The result alone does not fit ``max_memory`` (nothing is allocated), or not even the
        smallest block of any method fits beside it.
    """
    from .jacobian import probe

    asked = outputs
    fm, outputs = _as_method_outputs(fm, outputs)
    total = resolve_max_memory(max_memory, fm.device)
    specs = _methods()
    sample = Sample(x1, x2 is None, probe(fm, x1))
    k = sample.probe.n_outputs
    n1, n2 = x1.shape[0], (x1 if x2 is None else x2).shape[0]
    itemsize = torch.empty((), dtype=fm.dtype).element_size()
    result = _result_entries(n1, n2, k, outputs) * itemsize
    budget = total - result
    if budget <= 0:
        tail = {"trace": "", "full": f" x {k} x {k}", "diagonal": f" x {k}"}[outputs]
        policy = " (the default, max_memory=None: see ntklab.memory)" if max_memory is None else ""
        per_pair = "" if asked == "pseudo" else f" with k = {k} outputs"
        raise NtklabValueError(
            f"max_memory: expected more than the {result:,} bytes ({format_bytes(result)}) of "
            f"the result ({n1} x {n2}{tail}, the {asked!r} kernel in {fm.dtype} for n1 = "
            f"{n1} and n2 = {n2} inputs{per_pair}) plus one block; got max_memory = "
            f"{total:,} bytes ({format_bytes(total)}){policy}. Pass a larger max_memory, fewer "
            "inputs, outputs='trace', or use ntk_operator (products without the matrix)"
        )
    names = list(specs) if method == "auto" else [method]
    best: tuple[float, Plan] | None = None
    for name in names:
        spec = specs[name]
        narrow = name == "structured" and x2 is None
        b1, b2 = _largest_block(spec, fm, n1, n2, k, outputs, budget, sample, narrow)
        if b1 == 0:
            continue
        cost = spec.flops(fm, n1, n2, k, outputs, sample)
        candidate = Plan(name, b1, b2, k, result, spec.peak_bytes(fm, b1, b2, k, outputs, sample))
        if best is None or cost < best[0]:
            best = (cost, candidate)
    if best is None:
        smallest = min(specs[n].peak_bytes(fm, 1, 1, k, outputs, sample) for n in names)
        raise NtklabValueError(
            f"max_memory: expected at least {result + smallest:,} bytes (the result plus the "
            f"smallest block of method {names[0] if len(names) == 1 else 'any'}), "
            f"got {total:,}"
        )
    return best[1]


def _largest_block(
    spec: MethodSpec,
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    budget: float,
    sample: Sample,
    narrow: bool = False,
) -> tuple[int, int]:
    """Largest (b1, b2), b1 <= n1, b2 <= n2, halving the larger side until the block fits.

    The scratch of a block excludes the result (which the caller holds once): a block's
    own output tile is counted by the method's model. ``narrow`` (a symmetric kernel whose
    method keeps each row block's work, filled with ``rectangular=True``): the widest row
    blocks ``b1`` beside column blocks of ``b2 = min(b1, NARROW_COLUMNS)``.
    """
    if spec.peak_bytes(fm, n1, n2, k, outputs, sample) <= budget:
        return n1, n2
    # blocks off the diagonal are computed with x2 given: size them as such
    sample = dataclasses.replace(sample, symmetric=False)
    if narrow:
        lo, hi = 0, n1  # the largest fitting b1 in (lo, hi]: bisection, the peak grows with b1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            fits = spec.peak_bytes(fm, mid, min(mid, NARROW_COLUMNS), k, outputs, sample)
            lo, hi = (mid, hi) if fits <= budget else (lo, mid - 1)
        return lo, min(lo, NARROW_COLUMNS)
    b1, b2 = n1, n2
    while spec.peak_bytes(fm, b1, b2, k, outputs, sample) > budget:
        if b1 == 1 and b2 == 1:
            return 0, 0
        if b1 >= b2:
            b1 = max(1, b1 // 2)
        else:
            b2 = max(1, b2 // 2)
    return b1, b2


def ntk(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    outputs: KernelOutputs = "trace",
    params: ParamSelection = None,
    method: Method = "auto",
    max_memory: int | None = None,
    block_size: int | None = None,
    out: Tensor | None = None,
    progress: Progress | None = None,
) -> Tensor:
    """Empirical neural tangent kernel of ``model`` between two batches.

    Parameters
    ----------
    model : nn.Module
        Any module whose forward is a function of its parameters and buffers (MLPs, CNNs,
        residual blocks, LayerNorm, BatchNorm in eval mode, multi-output heads). Not modified.
        It must evaluate each example deterministically and on its own (the rule of
        :mod:`._guards`): Dropout-like modules in training mode and BatchNorm using batch
        statistics are refused (call ``model.eval()``), and a probe of four forward passes
        of one or two examples refuses a random forward or one that mixes examples across
        the batch axis.
    x1 : Tensor of shape (n1, ...)
        ``n1 = 0`` (or ``n2 = 0``) gives an empty kernel of the result's shape, as
        :meth:`ntklab.Architecture.kernel`.
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1`` (the symmetric kernel, computed once per block pair); passing
        ``x1`` itself is the same.
    outputs : {"trace", "full", "diagonal", "pseudo"}
        ``"trace"``, ``"full"``, ``"diagonal"``: neural-tangents' conventions;
        ``"trace"`` is the mean over the k outputs of :math:`\\Theta_{aa}`, shape (n1, n2);
        ``"full"`` has shape (n1, n2, k, k); ``"diagonal"`` (n1, n2, k). ``"pseudo"``: the
        pseudo-NTK of Mohamadi, Bae & Sutherland (2023, arXiv:2206.12543), the NTK of
        :math:`\\sum_a f_a / \\sqrt{k}`,

        .. math:: \\hat\\Theta(x, x') = \\frac{1}{k} \\sum_{a, b} \\Theta_{ab}(x, x'),

        shape (n1, n2): the sum of *all* ``k x k`` output blocks over ``k``, where the trace
        averages only the diagonal ones (they agree when the cross-output blocks vanish, as
        for a wide readout at initialization). It costs one backward pass per input instead
        of ``k``.
    params : iterable of names, mapping of names to tensors, or None
        The parameters to differentiate (default: all with ``requires_grad``), e.g. only
        the last layer's; a mapping also supplies their values.
    method : {"auto", "structured", "jacobian", "ntk_vp"}
        The algorithm (see the module docstring); ``"auto"`` picks by a cost model.
    max_memory : int, optional
        Budget in bytes for the result plus one block's scratch memory; the kernel is then
        computed in row/column blocks. Default ``None``: the policy of :mod:`ntklab.memory`
        (half of the memory this process may still use on the model's device). With
        ``out`` given the result is already allocated and the whole budget goes to the
        blocks' scratch memory.
    block_size : int, optional
        At most this many inputs of each side per block of input pairs (more blocks: finer
        ``progress``, less scratch memory, per-block work such as a block's forward passes
        repeated more often). Default: the largest blocks that fit ``max_memory``.
    out : Tensor, optional
        A preallocated result of the returned shape, dtype and device (e.g. a slice of a
        larger array or a memory-mapped tensor), filled block by block and returned.
    progress : callable, optional
        ``progress(fraction, message)``, called after each block of input pairs with the
        fraction of the result written so far (increasing, exactly 1.0 after the last
        block) and a line naming the block. For ``x2=None`` only the blocks on and above the
        diagonal are computed (square blocks, mirrored below).

    Returns
    -------
    Tensor
        On the model's dtype and device (``out`` when given).

    Raises
    ------
    NtklabValueError
        The result alone (``n1 n2 e`` numbers, ``e`` = 1, ``k`` or ``k^2``) does not fit
        ``max_memory``: raised before anything is allocated, naming the sizes and bytes.
        The model is random, mixes examples across the batch, or returns an output batch
        size other than its input's (naming both); the kernel has NaN or inf entries.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> nl.empirical.ntk(net, torch.randn(4, 3)).shape
    torch.Size([4, 4])
    >>> nl.empirical.ntk(net, torch.randn(4, 3), torch.randn(5, 3), outputs="full").shape
    torch.Size([4, 5, 2, 2])
    >>> nl.empirical.ntk(net, torch.randn(4, 3), outputs="pseudo").shape
    torch.Size([4, 4])
    """
    if outputs not in _OUTPUTS:
        raise NtklabValueError(f"outputs: expected one of {_OUTPUTS}, got {outputs!r}")
    if method != "auto" and method not in METHODS:
        raise NtklabValueError(f"method: expected 'auto' or one of {METHODS}, got {method!r}")
    if max_memory is not None:
        resolve_max_memory(max_memory)  # the type and sign, before any work
    block_size = check_block_size(block_size)
    progress = check_progress(progress)
    fm = functional_model(model, params)
    check_modules(fm.module)  # Dropout in training mode, batch statistics: before any forward
    a = check_batch("x1", x1, fm, allow_empty=True)
    if isinstance(x2, Tensor) and a.shape[1:] != x2.shape[1:]:
        raise NtklabValueError(
            f"x2: expected inputs of the shape of x1's, {tuple(a.shape[1:])}, got "
            f"{tuple(x2.shape[1:])}"
        )
    b = None if x2 is None or x2 is x1 else check_batch("x2", x2, fm, allow_empty=True)
    n1, n2 = a.shape[0], (a if b is None else b).shape[0]
    if n1 == 0 or n2 == 0:  # as Architecture.kernel: an empty kernel of the right shape
        return _empty_kernel(fm, a, b, outputs, out, progress)
    check_per_example(fm, a, b)  # random or batch-mixing forwards, output batch size
    fm, inner = _as_method_outputs(fm, outputs)
    budget = max_memory
    if out is not None:  # the result exists already: the budget is all scratch
        with torch.no_grad():
            k = int(fm(fm.params, a[:1]).shape[1])
        check_out(out, result_shape(n1, n2, k, inner), fm.dtype, fm.device)
        result = _result_entries(n1, n2, k, inner) * out.element_size()
        budget = resolve_max_memory(max_memory, fm.device) + result
    chosen = plan(fm, a, b, outputs, method, budget)
    compute = _methods()[chosen.method].compute
    block1 = min(chosen.block1, block_size or n1)
    block2 = min(chosen.block2, block_size or n2)
    if out is None and block1 >= n1 and block2 >= n2:
        whole = _finite(compute(fm, a, b, inner), chosen.method)
        if progress is not None:
            progress(1.0, f"block 1/1: inputs 0-{n1} x 0-{n2}")
        return whole
    if out is None:
        k = chosen.n_outputs
        out = torch.empty(result_shape(n1, n2, k, inner), dtype=fm.dtype, device=fm.device)
    if chosen.method != "structured":
        filled = fill_blocks(compute, fm, a, b, inner, out, block1, block2, progress)
        return _finite(filled, chosen.method)
    from .structured import reusing_rows

    with reusing_rows():  # each row block's factors formed once, not once per block
        wide = b is None  # plan sized wide row blocks and narrow columns
        filled = fill_blocks(
            compute, fm, a, b, inner, out, block1, block2, progress, rectangular=wide
        )
    return _finite(filled, chosen.method)


#: Entries of the result checked for NaN and inf at a time (scratch: one bool per entry).
_FINITE_CHUNK = 2**20


def _finite(kernel: Tensor, method: str) -> Tensor:
    """``kernel``, or an error when some entries are NaN or inf (no silent NaN): the model's
    derivatives overflow the dtype or are undefined at these inputs."""
    n1 = kernel.shape[0]
    rows = max(1, _FINITE_CHUNK // max(1, kernel[:1].numel()))  # O(1 MiB) scratch, not O(n^2)
    bad = 0
    for start in range(0, n1, rows):
        part = kernel[start : start + rows]
        if not bool(torch.isfinite(part).all()):
            bad += int(part.numel() - torch.isfinite(part).sum())
    if bad:
        raise NtklabValueError(
            f"model: expected finite derivatives at the inputs, got {bad:,} of "
            f"{kernel.numel():,} kernel entries NaN or inf (method {method!r}, "
            f"dtype {kernel.dtype}): the model's derivatives overflow the dtype or are "
            "undefined there (try float64, or inputs of smaller magnitude)"
        )
    return kernel


def _empty_kernel(
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None,
    outputs: KernelOutputs,
    out: Tensor | None,
    progress: Progress | None,
) -> Tensor:
    """The kernel of an empty batch: ``(n1, n2, ...)`` with ``n1 n2 = 0``, in the model's
    dtype, as :meth:`ntklab.Architecture.kernel` returns (``k`` read from one forward pass
    of a nonempty side's first input, else of an input of zeros)."""
    n1, n2 = x1.shape[0], (x1 if x2 is None else x2).shape[0]
    fm, inner = _as_method_outputs(fm, outputs)
    source = x1 if n1 else (x2 if x2 is not None and n2 else x1)
    example = source[:1] if source.shape[0] else source.new_zeros((1, *source.shape[1:]))
    with torch.no_grad():
        k = int(fm(fm.params, example).shape[1])
    shape = result_shape(n1, n2, k, inner)
    if out is not None:
        result = check_out(out, shape, fm.dtype, fm.device)
    else:
        result = torch.empty(shape, dtype=fm.dtype, device=fm.device)
    if progress is not None:
        progress(1.0, f"block 0/0: no inputs ({n1} x {n2})")
    return result
