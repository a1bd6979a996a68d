"""The empirical NTK of a torch module: one front door over several algorithms.

.. math::

    \\Theta(x, x')_{ab} = \\sum_p \\frac{\\partial f_a(x)}{\\partial \\theta_p}
                          \\frac{\\partial f_b(x')}{\\partial \\theta_p}

Methods (all agree to rounding; ``"auto"`` picks the cheapest by a cost model):

- ``"structured"`` (:mod:`.structured`): uses the layer structure of ``nn.Linear`` and
  ``nn.Conv2d`` (products of input activations and back-propagated output gradients), never
  forming per-example weight Jacobians; other parameters through their own Jacobian. Wins for
  MLPs and CNNs, the usual case.
- ``"jacobian"`` (:mod:`.jacobian`): per-example Jacobians (``jacrev`` + ``vmap``, chunked) and
  their contraction. Wins when the parameter count is moderate and the model has little
  structure to exploit.
- ``"ntk_vp"`` (:mod:`.jacobian`): NTK-vector products, a vjp then a jvp per column, never
  forming a Jacobian. Wins for huge parameter counts with few inputs and outputs.

Memory: ``max_memory`` (bytes; default ``None``, the policy of :mod:`ntklab.memory`: half of
the memory this process may still use) bounds the result plus one block's scratch memory. A
result that does not fit alone is refused before anything is allocated, with an error that
names the sizes and the bytes needed; otherwise the (n1, n2) result is computed in row and
column blocks (the last ones ragged) sized so that the result plus one block's scratch stays
within the budget.
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

if TYPE_CHECKING:
    from .jacobian import Probe

__all__ = ["METHODS", "Method", "ntk", "plan"]

Method = Literal["auto", "structured", "jacobian", "ntk_vp"]
_OUTPUTS = ("trace", "full", "diagonal")


@dataclass(frozen=True)
class Sample:
    """What the cost models may measure: a batch (only ``x[:1]`` is run), whether the kernel
    is symmetric (``x2`` None), and the per-example probe of :func:`.jacobian.probe`."""

    x: Tensor
    symmetric: bool
    probe: Probe


@dataclass(frozen=True)
class MethodSpec:
    """An algorithm for one block of the empirical NTK and its cost model."""

    compute: Callable[..., Tensor]
    peak_bytes: Callable[[FunctionalModel, int, int, int, Outputs, Sample], int]
    flops: Callable[[FunctionalModel, int, int, int, Outputs, Sample], float]


def _methods() -> dict[str, MethodSpec]:
    from . import jacobian as jc
    from . import structured as st

    return {
        "structured": MethodSpec(
            st.ntk_structured,
            lambda fm, n1, n2, k, o, s: st.structured_peak_bytes(
                fm, n1, n2, k, o, x=s.x, symmetric=s.symmetric
            ),
            lambda fm, n1, n2, k, o, s: st.structured_flops(
                fm, n1, n2, k, o, x=s.x, symmetric=s.symmetric
            ),
        ),
        "jacobian": MethodSpec(
            jc.ntk_jacobian,
            lambda fm, n1, n2, k, o, s: jc.jacobian_peak_bytes(
                fm, n1, n2, k, o, activations=s.probe.activations
            ),
            lambda fm, n1, n2, k, o, s: jc.jacobian_flops(
                fm, n1, n2, k, o, forward_flops=s.probe.forward_flops
            ),
        ),
        "ntk_vp": MethodSpec(
            jc.ntk_vp,
            lambda fm, n1, n2, k, o, s: jc.ntk_vp_peak_bytes(
                fm, n1, n2, k, o, activations=s.probe.activations
            ),
            lambda fm, n1, n2, k, o, s: jc.ntk_vp_flops(
                fm, n1, n2, k, o, forward_flops=s.probe.forward_flops
            ),
        ),
    }


METHODS: tuple[str, ...] = ("structured", "jacobian", "ntk_vp")


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
    outputs: Outputs,
    method: Method = "auto",
    max_memory: int | None = None,
) -> Plan:
    """Choose the method and the largest blocks whose scratch fits in ``max_memory``.

    ``"auto"`` takes the method of least estimated floating-point work among those whose
    smallest block fits the budget. One forward pass on ``x1[:1]`` measures the model.
    ``max_memory=None`` is the policy of :mod:`ntklab.memory` on the model's device.

    Raises
    ------
    NtklabValueError
        The result alone does not fit ``max_memory`` (nothing is allocated), or not even the
        smallest block of any method fits beside it.
    """
    from .jacobian import probe

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
        raise NtklabValueError(
            f"max_memory: expected more than the {result:,} bytes ({format_bytes(result)}) of "
            f"the result ({n1} x {n2}{tail}, the {outputs!r} kernel in {fm.dtype} for n1 = "
            f"{n1} and n2 = {n2} inputs with k = {k} outputs) plus one block; got max_memory = "
            f"{total:,} bytes ({format_bytes(total)}){policy}. Pass a larger max_memory, fewer "
            "inputs, outputs='trace', or use ntk_operator (products without the matrix)"
        )
    names = list(specs) if method == "auto" else [method]
    best: tuple[float, Plan] | None = None
    for name in names:
        spec = specs[name]
        b1, b2 = _largest_block(spec, fm, n1, n2, k, outputs, budget, sample)
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
) -> tuple[int, int]:
    """Largest (b1, b2), b1 <= n1, b2 <= n2, halving the larger side until the block fits.

    The scratch of a block excludes the result (which the caller holds once): a block's
    own output tile is counted by the method's model.
    """
    if spec.peak_bytes(fm, n1, n2, k, outputs, sample) <= budget:
        return n1, n2
    # blocks off the diagonal are computed with x2 given: size them as such
    sample = dataclasses.replace(sample, symmetric=False)
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
    outputs: Outputs = "trace",
    params: ParamSelection = None,
    method: Method = "auto",
    max_memory: int | None = None,
) -> Tensor:
    """Empirical neural tangent kernel of ``model`` between two batches.

    Parameters
    ----------
    model : nn.Module
        Any module whose forward is a function of its parameters and buffers (MLPs, CNNs,
        residual blocks, LayerNorm, BatchNorm in eval mode, multi-output heads). Not modified.
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1`` (the symmetric kernel, computed once per block pair).
    outputs : {"trace", "full", "diagonal"}
        neural-tangents' conventions: ``"trace"`` is the mean over the k outputs of
        :math:`\\Theta_{aa}`, shape (n1, n2); ``"full"`` has shape (n1, n2, k, k);
        ``"diagonal"`` (n1, n2, k).
    params : iterable of names, mapping of names to tensors, or None
        The parameters to differentiate (default: all with ``requires_grad``), e.g. only
        the last layer's; a mapping also supplies their values.
    method : {"auto", "structured", "jacobian", "ntk_vp"}
        The algorithm (see the module docstring); ``"auto"`` picks by a cost model.
    max_memory : int, optional
        Budget in bytes for the result plus one block's scratch memory; the kernel is then
        computed in row/column blocks. Default ``None``: the policy of :mod:`ntklab.memory`
        (half of the memory this process may still use on the model's device).

    Returns
    -------
    Tensor
        On the model's dtype and device.

    Raises
    ------
    NtklabValueError
        The result alone (``n1 n2 e`` numbers, ``e`` = 1, ``k`` or ``k^2``) does not fit
        ``max_memory``: raised before anything is allocated, naming the sizes and bytes.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> nl.empirical.ntk(net, torch.randn(4, 3)).shape
    torch.Size([4, 4])
    >>> nl.empirical.ntk(net, torch.randn(4, 3), torch.randn(5, 3), outputs="full").shape
    torch.Size([4, 5, 2, 2])
    """
    if outputs not in _OUTPUTS:
        raise NtklabValueError(f"outputs: expected one of {_OUTPUTS}, got {outputs!r}")
    if method != "auto" and method not in METHODS:
        raise NtklabValueError(f"method: expected 'auto' or one of {METHODS}, got {method!r}")
    if max_memory is not None:
        resolve_max_memory(max_memory)  # the type and sign, before any work
    fm = functional_model(model, params)
    a = check_batch("x1", x1, fm)
    if isinstance(x2, Tensor) and a.shape[1:] != x2.shape[1:]:
        raise NtklabValueError(
            f"x2: expected inputs of the shape of x1's, {tuple(a.shape[1:])}, got "
            f"{tuple(x2.shape[1:])}"
        )
    b = None if x2 is None else check_batch("x2", x2, fm)
    n1, n2 = a.shape[0], (a if b is None else b).shape[0]
    chosen = plan(fm, a, b, outputs, method, max_memory)
    compute = _methods()[chosen.method].compute
    if chosen.block1 >= n1 and chosen.block2 >= n2:
        return compute(fm, a, b, outputs)
    return _blocked(compute, fm, a, b, outputs, chosen)


def _blocked(
    compute: Callable[..., Tensor],
    fm: FunctionalModel,
    a: Tensor,
    b: Tensor | None,
    outputs: Outputs,
    chosen: Plan,
) -> Tensor:
    """Fill the result block by block; for ``b is None`` only blocks on or above the
    diagonal are computed and the others mirrored (:math:`\\Theta_{ji,ba} = \\Theta_{ij,ab}`)."""
    n1 = a.shape[0]
    n2 = n1 if b is None else b.shape[0]
    k = chosen.n_outputs
    tail = {"trace": (), "full": (k, k), "diagonal": (k,)}[outputs]
    out = torch.empty((n1, n2, *tail), dtype=fm.dtype, device=fm.device)
    if b is None:  # square blocks so that the diagonal ones are symmetric
        step = min(chosen.block1, chosen.block2)
        for i in range(0, n1, step):
            xi = a[i : i + step]
            out[i : i + step, i : i + step] = compute(fm, xi, None, outputs)
            for j in range(i + step, n1, step):
                block = compute(fm, xi, a[j : j + step], outputs)
                out[i : i + step, j : j + step] = block
                mirrored = block.transpose(0, 1)
                out[j : j + step, i : i + step] = (
                    mirrored.transpose(2, 3) if outputs == "full" else mirrored
                )
        return out
    for i in range(0, n1, chosen.block1):
        for j in range(0, n2, chosen.block2):
            out[i : i + chosen.block1, j : j + chosen.block2] = compute(
                fm, a[i : i + chosen.block1], b[j : j + chosen.block2], outputs
            )
    return out
