r"""Structured empirical NTK: per-layer products of activations and output gradients.

For a layer ``y = s_w W u + s_b b`` applied at positions ``p`` of one example (one position
for a plain ``nn.Linear``, the output pixels of a convolution on unfolded patches, the tokens
of a ``Linear`` on a sequence, the calls of a module applied several times), the gradient of
output ``a`` in ``W`` is ``s_w sum_p g_iap u_ip^T``, with ``u_ip`` the layer's input (patch)
and ``g_iap = d f_a(x_i) / d y_ip`` the back-propagated output gradient (the cotangent). The
layer's share of the NTK is therefore

.. math::

    \Theta_{ijab} = \sum_{p,q} (s_w^2\, u_{ip} \cdot u'_{jq} + s_b^2)
                               (g_{iap} \cdot g'_{jbq}),

computed from one forward pass (saving ``u``) and ``k`` backward passes (``g``, one output at
a time, for the whole batch), without per-example Jacobians of the whole model. Three
contraction orders, chosen per layer by a cost model (:mod:`.structured_conv` has the
formulas):

- *pairwise*: the formula above, Gram products over positions; cheapest with few positions
  (dense layers);
- *per-example*: the per-example gradients ``w_ia = sum_p g_iap u_ip^T`` (``C x D``) and
  their inner products; cheapest with many positions (convolutions);
- *factored*: when the cotangents of every example factor per output channel,
  ``g_iapc = alpha_iac h_ipc`` (a layer followed by per-channel operations and global average
  pooling into a linear readout, as the last convolution of a CNN or ResNet), the inputs
  ``H_ic = sum_p h_ipc u_ip`` are formed once instead of ``k`` times and the share is
  ``sum_c alpha_iac alpha_jbc <H_ic, H'_jc>``.

Covered: ``nn.Linear``, ntklab's ``DenseLayer``, ``nn.Conv1d``/``nn.Conv2d``/``nn.Conv3d``
(strides, padding, dilation, groups), ntklab's ``ConvLayer`` (described to the same code as
an ``nn.Conv1d``/``nn.Conv2d`` without padding reading the padded, scaled input
``s_w pad(x)``, :func:`_conv_view`), and the affine parameters of BatchNorm (eval mode) and
LayerNorm, which are per-channel scales of the normalized input (a depthwise ``1 x 1``
convolution of ``x_hat``). Parameters that no covered module owns (custom parameters, tied
weights, ...) contribute through a per-example Jacobian of just those parameters
(``torch.func.jacrev`` + ``vmap``); the kernel is the sum of all shares.

This is the "structured derivatives" idea of Novak, Sohl-Dickstein & Schoenholz, *Fast Finite
Width Neural Tangent Kernel* (ICML 2022, arXiv:2206.08720), specialised to the layers that
dominate the cost in practice.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.overrides import TorchFunctionMode

from .._checks import check_positive_int
from ..errors import NtklabValueError
from ..kernels.conv import ConvLayer
from ..kernels.covariance import pads_for
from ..nets.modules import DenseLayer
from . import _compiled_cotangents as compiled_cotangents
from ._functional import FunctionalModel, Outputs, check_batch
from ._guards import check_modules
from .structured_conv import (
    CONVOLUTIONS,
    ELEMENTWISE_FLOPS,
    NORMALIZATIONS,
    add_factored,
    affine_gradients,
    channels_first,
    conv_patches,
    factor_cotangents,
    factored_flops,
    factored_inputs,
    input_cotangent_flops,
    input_cotangents,
    normalized_input,
    pairwise_flops,
    per_example_flops,
    per_example_gradients,
)

__all__ = [
    "ntk_structured",
    "reusing_rows",
    "structured_elements",
    "structured_flops",
    "structured_peak_bytes",
]

Path = Literal["pairwise", "per_example", "factored"]
Kind = Literal["dense", "conv", "norm"]
GroupPair = tuple[slice, slice]  # two groups of outputs: a block of a full kernel

#: Cost of one element of an elementwise pass (memory bound), in GEMM flops.
_ELEMENTWISE_FLOPS = ELEMENTWISE_FLOPS

#: Rows of the smallest Gram worth splitting by output groups to exploit symmetry.
_SLAB_ROWS = 512

#: Tensors the size of a layer's input plus output that a forward creates per covered layer,
#: when it cannot be measured (hooks' copies, activations, scaling; ntklab's NTK-parameterized
#: MLP creates 5).
_STATIC_ELEMENTS = 5

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class _Layer:
    """A covered module, ``y = s_w W u + s_b b``, and which parameters are differentiated.

    Attributes
    ----------
    name : str
        Qualified module name.
    module : nn.Module
        ``nn.Linear``, ntklab's ``DenseLayer``, ``nn.Conv1d/2d/3d``, ``nn.BatchNorm1d/2d/3d``
        or ``nn.LayerNorm`` (exact types: subclasses may override ``forward`` and are not
        covered). A normalization layer is a depthwise ``1 x 1`` convolution of its
        normalized input: ``groups = C``, ``D = 1``.
    weight, bias : str or None
        Qualified parameter names if differentiated, else None.
    weight_scale, bias_scale : float
        ``s_w`` and ``s_b`` (1 except for ``DenseLayer`` and ``ConvLayer`` in NTK
        parameterization: ``w_std / sqrt(fan_in)`` and ``b_std``).
    conv : nn.Conv1d or nn.Conv2d, optional
        For a ``ConvLayer``: the convolution it computes, as the contractions read it
        (:func:`_conv_view`); the hooks stay on ``module``.
    """

    name: str
    module: nn.Module
    weight: str | None
    bias: str | None
    weight_scale: float = 1.0
    bias_scale: float = 1.0
    conv: nn.Module | None = None

    @property
    def op(self) -> nn.Module:
        """The module the contractions read: ``conv`` if given, else ``module``."""
        return self.module if self.conv is None else self.conv

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(p for p in (self.weight, self.bias) if p is not None)

    @property
    def kind(self) -> Kind:
        if isinstance(self.op, NORMALIZATIONS):
            return "norm"
        if isinstance(self.op, CONVOLUTIONS):
            return "conv"
        return "dense"

    @property
    def groups(self) -> int:
        """``G``: independent groups of input and output channels."""
        if self.kind == "norm":
            return self.channels
        return self.op.groups if isinstance(self.op, CONVOLUTIONS) else 1

    @property
    def width(self) -> int:
        """``D``: the input (patch) length of one group; the weight is ``C x D``."""
        mod = self.op
        if isinstance(mod, CONVOLUTIONS):
            return mod.in_channels // mod.groups * math.prod(mod.kernel_size)
        if isinstance(mod, nn.Linear):
            return mod.in_features
        return 1

    @property
    def channels(self) -> int:
        """``C``: the output features or channels."""
        mod = self.op
        if isinstance(mod, nn.LayerNorm):
            return math.prod(mod.normalized_shape)
        if isinstance(mod, _BatchNorm):
            return mod.num_features
        if isinstance(mod, CONVOLUTIONS):
            return mod.out_channels
        if isinstance(mod, nn.Linear):
            return mod.out_features
        raise NtklabValueError(f"module: expected a covered layer, got {type(mod).__name__}")

    def without(self, names: set[str]) -> _Layer | None:
        """The layer with the parameters ``names`` no longer covered (None if none is left)."""
        weight = None if self.weight in names else self.weight
        bias = None if self.bias in names else self.bias
        if weight is None and bias is None:
            return None
        return replace(self, weight=weight, bias=bias)


def _layer_scales(mod: nn.Module) -> tuple[float, float] | None:
    """``(s_w, s_b)`` if ``mod`` computes ``y = s_w W u + s_b b`` in a way the hooks see,
    else None (the module's parameters then fall back)."""
    kind = type(mod)
    if kind is nn.Linear or kind in CONVOLUTIONS or kind in NORMALIZATIONS:
        return 1.0, 1.0
    if isinstance(mod, DenseLayer) and kind is DenseLayer and not mod.has_uninitialized_params():
        w_mult, _, b_mult, _ = mod.scales
        return w_mult, b_mult
    if (
        isinstance(mod, ConvLayer)
        and kind is ConvLayer
        and not mod.has_uninitialized_params()
        and len(mod.filter_shape) in (1, 2)
    ):
        if mod.parameterization == "standard":
            return 1.0, 1.0
        return mod.w_std / math.sqrt(mod.fan_in), float(mod.b_std or 0.0)
    return None


def _conv_view(mod: ConvLayer) -> nn.Module:
    """The convolution a :class:`~ntklab.kernels.conv.ConvLayer` applies to its padded
    input, as an ``nn.Conv1d``/``nn.Conv2d`` without padding (``padding=0``, its strides,
    effective weight ``s_w W``, no bias: the contractions read the bias from the layer),
    on the meta device but for the weight; the padding (``SAME``, ``VALID``, ``CIRCULAR``
    or explicit, which may depend on the input's size) is applied to the input kept by the
    hooks (:func:`_layer_input`)."""
    f, s = mod.filter_shape, mod.strides
    channels = (mod.in_channels, int(mod.weight.shape[0]))
    conv: nn.Conv1d | nn.Conv2d
    if len(f) == 1:
        conv = nn.Conv1d(*channels, f[0], stride=s[0], padding=0, bias=False, device="meta")
    else:
        conv = nn.Conv2d(
            *channels, (f[0], f[1]), stride=(s[0], s[1]), padding=0, bias=False, device="meta"
        )
    s_w = 1.0 if mod.parameterization == "standard" else mod.w_std / math.sqrt(mod.fan_in)
    conv.weight = nn.Parameter(mod.weight.detach() * s_w, requires_grad=False)
    return conv


def _pad_input(mod: ConvLayer, x: Tensor) -> Tensor:
    """A :class:`~ntklab.kernels.conv.ConvLayer`'s input padded as its forward pads it."""
    dims = len(mod.filter_shape)
    pads: list[int] = []
    for axis in reversed(range(dims)):  # F.pad lists the last axis first
        pads.extend(
            pads_for(
                mod.padding, int(x.shape[2 + axis]), mod.filter_shape[axis], mod.strides[axis], axis
            )
        )
    if not any(pads):
        return x
    mode = "circular" if mod.padding == "CIRCULAR" else "constant"
    return nn.functional.pad(x, pads, mode=mode)


def _covered_layers(fm: FunctionalModel) -> tuple[_Layer, ...]:
    """The covered modules (see :func:`_layer_scales`) owning a differentiated parameter
    that no other module shares (tied weights fall back)."""
    owners: dict[int, int] = {}
    for _, p in fm.module.named_parameters(remove_duplicate=False):
        owners[id(p)] = owners.get(id(p), 0) + 1
    layers = []
    for name, mod in fm.module.named_modules():
        scales = _layer_scales(mod)
        if scales is None:
            continue
        own = dict(mod.named_parameters(recurse=False))
        prefix = f"{name}." if name else ""
        found: list[str | None] = []
        for attr in ("weight", "bias"):
            qual, tensor = prefix + attr, own.get(attr)
            ok = tensor is not None and qual in fm.params and owners.get(id(tensor)) == 1
            found.append(qual if ok else None)
        if found[0] is not None or found[1] is not None:
            conv = _conv_view(mod) if isinstance(mod, ConvLayer) else None
            layers.append(_Layer(name, mod, found[0], found[1], *scales, conv=conv))
    return tuple(layers)


def _reject_batch_mixing(module: nn.Module) -> None:
    """Raise if a submodule mixes examples (batch statistics) or is random (Dropout in
    training mode), which per-example gradients cannot represent
    (:func:`._guards.check_modules`)."""
    check_modules(module)


# -------------------------------------------------------------------------- capturing


class _FallBackError(Exception):
    """Covered parameters that must fall back (used outside their module's forward, or a
    module whose input has no leading batch axis)."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(sorted(names))
        self.names = names


def _tensors(obj: object) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


class _Watch(TorchFunctionMode):
    """Notes each covered parameter used, with a tensor result, outside its module's forward
    (e.g. ``F.linear(h, self.lin.weight)`` in a custom forward): such uses are invisible to
    the hooks. Also counts the elements of the tensors the forward creates."""

    def __init__(self, owner: Mapping[int, tuple[str, str]]) -> None:
        super().__init__()
        self.owner = owner  # id(value) -> (parameter name, module name)
        self.inside: list[str] = []
        self.misused: set[str] = set()
        self.elements = 0  # of every tensor the forward creates

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = {} if kwargs is None else kwargs
        result = func(*args, **kwargs)
        made = [t.numel() for t in _tensors(result)]
        self.elements += sum(made)
        current = self.inside[-1] if self.inside else None
        for t in _tensors((args, dict(kwargs))):
            hit = self.owner.get(id(t))
            if hit is not None and hit[1] != current and made:
                self.misused.add(hit[0])
        return result


class _UnfactoredError(Exception):
    """A layer on the factored path whose cotangents do not factor for some examples."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _UnsplitError(Exception):
    """A layer whose input cotangents cannot be propagated channel by channel (called more
    than once, or below another such layer)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _layer_input(layer: _Layer, x: object, n: int) -> Tensor | None:
    """What one call of a layer needs kept from its input: a copy of a convolution's input
    (its patches are formed later, a few examples at a time: :func:`_rows`), the rows
    ``s_w u`` of shape ``(n, P, 1, D)`` of a dense layer, the normalized input ``x_hat`` of
    shape ``(n, P, C, 1)`` of a normalization layer; None if ``x`` has no leading batch axis
    or another layout than the module expects. Always copies (safe from in-place ops)."""
    if not isinstance(x, Tensor) or x.ndim < 2 or x.shape[0] != n:
        return None
    mod = layer.op
    if isinstance(mod, CONVOLUTIONS):
        if x.ndim != mod.weight.ndim:
            return None
        if isinstance(layer.module, ConvLayer):  # padded as its forward pads, scaled by s_w
            return _pad_input(layer.module, x.detach()).mul(layer.weight_scale)
        return x.detach().clone()
    if layer.kind == "norm":
        if isinstance(mod, nn.LayerNorm):
            tail = tuple(mod.normalized_shape)
            if x.ndim < 1 + len(tail) or tuple(x.shape[x.ndim - len(tail) :]) != tail:
                return None
        elif x.shape[1] != layer.channels:
            return None
        return normalized_input(mod, x).unsqueeze(-1)
    u = x.detach().reshape(n, -1, 1, x.shape[-1]).clone()
    return u if layer.weight_scale == 1.0 else u.mul_(layer.weight_scale)


def _rows(layer: _Layer, calls: Sequence[Tensor], sub: slice) -> Tensor:
    """The inputs (patches) ``s_w u`` of shape (s, P, G, D) of the examples ``sub``, calls
    concatenated along P, from what :func:`_layer_input` kept."""
    if layer.kind == "conv":
        parts = [conv_patches(layer.op, raw[sub]) for raw in calls]
    else:
        parts = [u[sub] for u in calls]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _positions(layer: _Layer, outputs: Sequence[Tensor]) -> int:
    """``P``: the positions of all calls of a layer, from their outputs."""
    return sum(channels_first(layer.op, y).shape[2] for y in outputs)


#: Elements of the inputs (patches) and stacked cotangents of the examples processed at
#: once when forming per-example gradients or factors: small enough for a CPU cache.
_CACHE_ELEMENTS = 2**18


@dataclass(frozen=True)
class _Forward:
    """One batch through the model, the covered layers' inputs and outputs saved.

    Attributes
    ----------
    f : Tensor of shape (n, k)
        The outputs, in the autograd graph of ``outputs``.
    inputs : list of list of Tensor
        Per layer, what :func:`_layer_input` keeps of each call's input.
    outputs : list of list of Tensor
        Per layer, the output of each call.
    elements : int
        Elements of all the tensors the forward created (a memory measure).
    split_inputs : list of (Tensor or None)
        Per layer whose input cotangents are propagated channel by channel
        (:func:`_cotangents`), its input in the autograd graph (its output is cut from it).
    needs_input : list of bool
        Per layer, whether its input depends on covered parameters (so that cotangents
        below it are needed).
    """

    f: Tensor
    inputs: list[list[Tensor]]
    outputs: list[list[Tensor]]
    elements: int
    split_inputs: list[Tensor | None]
    needs_input: list[bool]


def _forward(
    fm: FunctionalModel, layers: Sequence[_Layer], x: Tensor, split: frozenset[str] = frozenset()
) -> _Forward:
    """Run ``fm`` on ``x`` with hooks saving each covered layer's input and output; the
    outputs of the layers named in ``split`` are cut from the graph of their inputs.

    Raises :class:`_FallBackError` naming the covered parameters that must fall back instead,
    :class:`_UnsplitError` for a layer in ``split`` called more than once.
    """
    n = x.shape[0]
    split_in: list[Tensor | None] = [None] * len(layers)
    needs = [False] * len(layers)
    owner = {id(fm.params[p]): (p, layer.name) for layer in layers for p in layer.params}
    watch = _Watch(owner)
    thread = threading.get_ident()  # the hooks see every thread's calls of the modules
    ins: list[list[Tensor]] = [[] for _ in layers]
    outs: list[list[Tensor]] = [[] for _ in layers]
    bad: set[str] = set()

    def pre_hook(index: int) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            if threading.get_ident() == thread:  # not another thread's call of the module
                watch.inside.append(layers[index].name)

        return hook

    def post_hook(index: int) -> Callable[[nn.Module, tuple[Any, ...], Any], Any]:
        def hook(module: nn.Module, args: tuple[Any, ...], out: Any) -> Any:
            if threading.get_ident() != thread:
                return None
            watch.inside.pop()
            u = _layer_input(layers[index], args[0] if args else None, n)
            if u is None or not isinstance(out, Tensor):
                bad.update(layers[index].params)
                return None
            live = args[0]
            needs[index] = needs[index] or bool(live.requires_grad)
            if layers[index].name in split and live.requires_grad:
                if split_in[index] is not None:
                    raise _UnsplitError(layers[index].name)
                split_in[index] = live
                y = out.detach().requires_grad_()  # cut: its input cotangents come later
            else:
                y = out if out.requires_grad else out.detach().requires_grad_()
            ins[index].append(u)
            outs[index].append(y)
            return y.clone()  # downstream in-place ops must not touch the saved output

        return hook

    handles = []
    try:
        for i, layer in enumerate(layers):
            handles.append(layer.module.register_forward_pre_hook(pre_hook(i)))
            handles.append(layer.module.register_forward_hook(post_hook(i)))
        with torch.enable_grad(), watch:
            f = fm(fm.params, x)  # shape: (n, k)
    finally:
        for handle in handles:
            handle.remove()
    bad |= watch.misused
    if bad:
        raise _FallBackError(bad)
    return _Forward(f, ins, outs, watch.elements, split_in, needs)


Cotangents = list[Tensor | None]  # per output a: (n, C, P), None where a ignores the layer


Factorization = tuple[Tensor, Tensor]  # alpha (n, k, C), h (n, C, P)

#: Elements of the per-channel input cotangents of the examples propagated at once.
_SPLIT_ELEMENTS = 2**22


class _Scratch:
    """Large buffers of the capture passes of one call, each reused by the next pass.

    glibc returns freed blocks above 32 MiB (and large free regions at the top of the heap)
    to the system, and touching a new allocation costs a page fault per 4 KiB. On the peer
    benchmark's CNN in float64 the system time (page faults) fell from 0.8 of 1.3 s to 0.55 of
    1.23 s with these buffers and the sequential passes of :func:`_capture_spans` (ad-hoc
    measurement, 2 threads).

    Parameters
    ----------
    rows : int
        Examples of the largest pass: every buffer is allocated for that many.
    """

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._kept: dict[tuple[int, str], Tensor] = {}

    def take(self, key: tuple[int, str], shape: Sequence[int], like: Tensor) -> Tensor:
        """An uninitialized tensor of ``shape`` (``like``'s dtype and device): the first
        ``shape[0]`` rows of the buffer kept under ``key``, allocated on first use (or when it
        does not fit)."""
        kept = self._kept.get(key)
        if (
            kept is None
            or kept.shape[1:] != tuple(shape[1:])
            or kept.shape[0] < shape[0]
            or (kept.dtype, kept.device) != (like.dtype, like.device)
        ):
            kept = like.new_empty((max(self.rows, shape[0]), *shape[1:]))
            self._kept[key] = kept
        return kept[: shape[0]]


def _cotangents(
    fwd: _Forward, layers: Sequence[_Layer], scratch: _Scratch | None = None
) -> tuple[list[Cotangents | None], dict[int, Factorization]]:
    """Per layer and output the cotangents ``g_a`` of shape (n, C, P): the gradient of
    output ``a`` (of each example) in the layer's output, calls concatenated along P; None
    for an output that does not depend on the layer, and for a layer no output depends on.

    ``k`` backward passes of ``sum_i f_a(x_i)``, one per output ``a``: per-example gradients
    because the model treats examples independently. The gradients are kept as autograd
    returns them (no copy for a layer called once).

    Layers cut from their inputs in the forward pass (``fwd.split_inputs``) have factored
    cotangents: ``k`` first passes reach only their outputs, the cotangents at their inputs
    are propagated channel by channel (:func:`.structured_conv.input_cotangents`: one
    transposed convolution instead of ``k``), and ``k`` more backward passes, seeded both at
    the model's outputs and at the cut layers' inputs, give every other layer's cotangents,
    so that a residual connection around a cut layer is traversed once per output. Their
    factorizations are returned by layer index. No cut layer may lie below another
    (:func:`_split_conflicts` when the layers to cut are chosen, :func:`_check_cuts` here).

    The cut layers' factors and input cotangents are written into ``scratch``'s buffers, for
    the next pass to overwrite (the callers read them only until then).

    Raises :class:`_UnfactoredError` if a cut layer's cotangents do not factor,
    :class:`_UnsplitError` if a cut layer lies below another (:func:`_check_cuts`).
    """
    flat = [y for ys in fwd.outputs for y in ys]
    found: list[Cotangents | None] = [None] * len(layers)
    factorizations: dict[int, Factorization] = {}
    if not flat or not fwd.f.requires_grad:
        return found, factorizations
    k = fwd.f.shape[1]
    cut = {i for i, t in enumerate(fwd.split_inputs) if t is not None}
    owner = [i for i, ys in enumerate(fwd.outputs) for _ in ys]  # layer index per flat entry
    first = [j for j, i in enumerate(owner) if i in cut] if cut else list(range(len(flat)))
    for a in range(k):
        seed = torch.zeros_like(fwd.f)
        seed[:, a] = 1.0
        grads = torch.autograd.grad(
            fwd.f,
            [flat[j] for j in first],
            seed,
            retain_graph=a < k - 1 or bool(cut),
            allow_unused=True,
        )
        _collect(found, _spread(grads, first, len(flat)), fwd, layers, a, k)
    if not cut:
        return found, factorizations
    _check_cuts(fwd, layers, [flat[j] for j in first], [owner[j] for j in first])
    sources: list[Tensor] = []
    below: list[Tensor] = []
    for index in sorted(cut):
        cots = found[index]
        if cots is None:
            continue
        live = fwd.split_inputs[index]
        assert live is not None
        factorizations[index], propagated = _split(layers[index], cots, live.shape, scratch, index)
        sources.append(live)
        below.append(propagated)
    rest = [j for j, i in enumerate(owner) if i not in cut]
    for a in range(k if rest else 0):
        seed = torch.zeros_like(fwd.f)
        seed[:, a] = 1.0
        grads = torch.autograd.grad(
            [fwd.f, *sources],
            [flat[j] for j in rest],
            [seed, *(g[:, a] for g in below)],
            retain_graph=a < k - 1,
            allow_unused=True,
        )
        _collect(found, _spread(grads, rest, len(flat)), fwd, layers, a, k)
    return found, factorizations


def _check_cuts(
    fwd: _Forward, layers: Sequence[_Layer], cut_outputs: Sequence[Tensor], owners: Sequence[int]
) -> None:
    """Raise :class:`_UnsplitError` naming a cut layer that lies below another: its output
    is reached by the backward pass from a cut layer's input, so the first passes saw only
    part of its cotangents. Autograd runs only the nodes on a path from the cut inputs to
    the cut outputs: none where the cuts are independent."""
    lives = [t for t in fwd.split_inputs if t is not None]
    reached = torch.autograd.grad(
        lives,
        list(cut_outputs),
        [torch.ones_like(t) for t in lives],
        retain_graph=True,
        allow_unused=True,
    )
    for index, g in zip(owners, reached, strict=True):
        if g is not None:
            raise _UnsplitError(layers[index].name)


def _spread(grads: Sequence[Tensor | None], where: Sequence[int], size: int) -> list[Tensor | None]:
    """``grads`` placed at positions ``where`` of a list of ``size`` (None elsewhere)."""
    out: list[Tensor | None] = [None] * size
    for j, g in zip(where, grads, strict=True):
        out[j] = g
    return out


def _collect(
    found: list[Cotangents | None],
    grads: Sequence[Tensor | None],
    fwd: _Forward,
    layers: Sequence[_Layer],
    a: int,
    k: int,
) -> None:
    """Add one backward pass's gradients (of output ``a``, one per saved layer output, None
    where not computed) to ``found``."""
    start = 0
    for index, (layer, ys) in enumerate(zip(layers, fwd.outputs, strict=True)):
        calls = grads[start : start + len(ys)]
        start += len(ys)
        if all(g is None for g in calls):
            continue
        columns = [
            channels_first(layer.op, torch.zeros_like(y) if g is None else g)
            for y, g in zip(ys, calls, strict=True)
        ]
        g = columns[0] if len(columns) == 1 else torch.cat(columns, dim=2)
        per_output = found[index]
        if per_output is None:
            per_output = found[index] = [None] * k
        previous = per_output[a]
        per_output[a] = g if previous is None else previous + g


def _split(
    layer: _Layer,
    cots: Cotangents,
    shape: Sequence[int],
    scratch: _Scratch | None = None,
    index: int = 0,
) -> tuple[Factorization, Tensor]:
    """Factor a cut layer's cotangents (every example) and propagate them to its input,
    a few examples at a time: ``(alpha, h)`` and the input cotangents (n, k, *shape[1:]),
    in ``scratch``'s buffers for the layer of this ``index`` if given."""
    like = next(g for g in cots if g is not None)
    n, c, p = like.shape
    k = len(cots)
    mod = layer.module
    assert isinstance(mod, CONVOLUTIONS)
    cin = mod.in_channels // mod.groups
    p_in = math.prod(shape[2:])
    step = max(1, _SPLIT_ELEMENTS // (c * cin * p_in + k * (c * p + shape[1] * p_in)))
    if scratch is None:
        scratch = _Scratch(n)
    alpha = scratch.take((index, "alpha"), (n, k, c), like)
    h = scratch.take((index, "h"), (n, c, p), like)
    out = scratch.take((index, "input"), (n, k, *shape[1:]), like)
    for start in range(0, n, step):
        sub = slice(start, min(start + step, n))
        found = factor_cotangents([None if g is None else g[sub] for g in cots])
        if found is None:
            raise _UnfactoredError(layer.name)
        alpha[sub], h[sub] = found
        m = sub.stop - sub.start
        input_cotangents(mod, found[0], found[1], (m, *shape[1:]), out=out[sub])
    return (alpha, h), out


def _factorable(cots: Cotangents) -> bool:
    """Whether the cotangents of the first example factor per channel (the test that decides
    the path; every example is checked when its factors are formed)."""
    return factor_cotangents([None if g is None else g[:1] for g in cots]) is not None


def _fallback_jacobian(
    fm: FunctionalModel, names: Sequence[str], x: Tensor, chunk_size: int | None
) -> Tensor:
    """Per-example Jacobian of the outputs in the parameters ``names``, shape (n, k, F)."""
    fixed = {p: v for p, v in fm.params.items() if p not in names}
    sub = {p: fm.params[p] for p in names}

    def single(values: dict[str, Tensor], xi: Tensor) -> Tensor:
        return fm.single({**fixed, **values}, xi)

    jac = torch.func.vmap(torch.func.jacrev(single), in_dims=(None, 0), chunk_size=chunk_size)(
        sub, x
    )
    n, k = x.shape[0], jac[names[0]].shape[1]
    return torch.cat([jac[p].reshape(n, k, -1) for p in names], dim=2)


# ------------------------------------------------------------------------- cost model


def _multiplicity(k: int, outputs: Outputs) -> int:
    """Output pairs per example pair: 1 (trace), k (diagonal), k^2 (full)."""
    return {"trace": 1, "diagonal": k, "full": k * k}[outputs]


def _path_flops(
    layer: _Layer, n1: int, n2: int, p: int, k: int, outputs: Outputs, same: bool
) -> dict[Path, float]:
    """GEMM-equivalent flops of each contraction of one layer with ``p`` positions per
    example (see :mod:`.structured_conv`): pairwise per group, per-example and factored
    (the last two with a bias column)."""
    weight = layer.width if layer.weight is not None else 0
    bias = int(layer.bias is not None)
    groups, c = layer.groups, layer.channels
    return {
        "pairwise": groups * pairwise_flops(n1, n2, p, p, k, c // groups, weight, outputs),
        "per_example": per_example_flops(n1, n2, p, p, k, c, weight + bias, outputs, same),
        "factored": factored_flops(n1, n2, p, p, k, c, weight + bias, outputs, same),
    }


def _choose_path(
    layer: _Layer,
    n1: int,
    n2: int,
    p: int,
    k: int,
    outputs: Outputs,
    same: bool,
    factorable: bool = False,
) -> Path:
    """The cheapest contraction for a layer with ``p`` positions per example; the factored
    one only if the layer's cotangents factor (``factorable``)."""
    costs = _path_flops(layer, n1, n2, p, k, outputs, same)
    if not factorable:
        del costs["factored"]
    return min(costs, key=lambda path: costs[path])


# ---------------------------------------------------------------------------- factors


class _Store:
    """Factors of one covered layer for every example of a batch, filled chunk by chunk
    into preallocated arrays (zeros for the examples that do not reach the layer).

    ``pairwise``: ``u`` (n, P, G, D) (None for a bias alone) and ``g``, laid out as the Gram
    reads it: (n, P, k, C) for trace, (k, n, P, C) for full and diagonal.
    ``per_example``: ``w`` (k, n, C*D) per-example weight gradients ``sum_p g_iap u_ip^T``
    (for a normalization layer the scale's, ``sum_p g_iap x_hat_ip``; None without weight)
    and ``b`` (k, n, C) bias gradients ``s_b sum_p g_iap`` (None without).
    ``factored``: ``h`` (n, C, D + bias) and ``alpha`` (n, k, C).
    """

    def __init__(self, layer: _Layer, path: Path, outputs: Outputs, n: int, k: int) -> None:
        self.layer, self.path, self.outputs, self.n, self.k = layer, path, outputs, n, k
        self.u: Tensor | None = None
        self.g: Tensor | None = None
        self.w: Tensor | None = None
        self.b: Tensor | None = None
        self.h: Tensor | None = None
        self.alpha: Tensor | None = None

    def _zeros(self, name: str, shape: Sequence[int], like: Tensor) -> Tensor:
        """The array ``name``, allocated (zeros of ``shape``, ``like``'s dtype and device) at
        its first use."""
        array: Tensor | None = getattr(self, name)
        if array is None:
            array = like.new_zeros(tuple(shape))
            setattr(self, name, array)
        return array

    def put(
        self,
        rows: slice,
        calls: Sequence[Tensor],
        cots: Cotangents,
        factored: Factorization | None = None,
    ) -> None:
        """Store the factors of the examples ``rows`` from what :func:`_layer_input` kept of
        their inputs (``calls``) and their cotangents ``cots`` (per output (c, C, P)), or
        their factorization ``factored`` if known.

        Raises :class:`_UnfactoredError` on the factored path if some example's cotangents
        do not factor.
        """
        layer, n, k = self.layer, self.n, self.k
        if self.path == "pairwise":
            if layer.weight is not None:
                u = _rows(layer, calls, slice(None))
                self._zeros("u", (n, *u.shape[1:]), u)[rows] = u
            like = next(g for g in cots if g is not None)
            c, p = like.shape[1], like.shape[2]
            shape = (n, p, k, c) if self.outputs == "trace" else (k, n, p, c)
            store = self._zeros("g", shape, like)
            for a, g in enumerate(cots):
                if g is not None and self.outputs == "trace":
                    store[rows, :, a] = g.transpose(1, 2)
                elif g is not None:
                    store[a, rows] = g.transpose(1, 2)
            return
        like = next(g for g in cots if g is not None)
        c, channels, p = like.shape
        if self.path != "factored" and layer.bias is not None:
            self._put_bias(rows, cots)
        if self.path != "factored" and layer.weight is None:
            return
        width = layer.groups * layer.width
        step = max(1, _CACHE_ELEMENTS // (p * (k * channels + width)))
        if layer.kind != "conv":  # no patches to form: all examples at once
            step = c
        for start in range(0, c, step):  # a few examples at a time, their factors in cache
            sub = slice(start, min(start + step, c))
            dest = slice(rows.start + sub.start, rows.start + sub.stop)
            u = _rows(layer, calls, sub)
            part = [None if g is None else g[sub] for g in cots]
            if self.path == "factored":
                known = None if factored is None else (factored[0][sub], factored[1][sub])
                self._put_factored(dest, u, part, known)
            elif layer.kind == "norm":
                self._put_affine(dest, u[..., 0].transpose(1, 2), part)
            else:
                self._put_per_example(dest, u, part)

    def _put_factored(
        self, rows: slice, u: Tensor, cots: Cotangents, known: Factorization | None
    ) -> None:
        layer = self.layer
        found = known if known is not None else factor_cotangents(cots)
        if found is None:
            raise _UnfactoredError(layer.name)
        alpha, h = found
        scale = layer.bias_scale if layer.bias is not None else None
        factors = factored_inputs(h, u if layer.weight is not None else u[..., :0], scale)
        self._zeros("h", (self.n, *factors.shape[1:]), factors)[rows] = factors
        self._zeros("alpha", (self.n, *alpha.shape[1:]), alpha)[rows] = alpha

    def _put_bias(self, rows: slice, cots: Cotangents) -> None:
        """Bias (shift) gradients ``s_b sum_p g_iap`` of the examples ``rows``, every output:
        one reduction per output over the whole pass."""
        layer = self.layer
        like = next(g for g in cots if g is not None)
        b = self._zeros("b", (self.k, self.n, layer.channels), like)
        for a, g in enumerate(cots):
            if g is not None:
                torch.sum(g, dim=2, out=b[a, rows])
        if layer.bias_scale != 1.0:
            b[:, rows].mul_(layer.bias_scale)

    def _put_per_example(self, rows: slice, u: Tensor, cots: Cotangents) -> None:
        """Weight gradients ``sum_p g_iap u_ip^T`` of the examples ``rows``, every output."""
        layer, n, k = self.layer, self.n, self.k
        c, channels = u.shape[0], layer.channels
        w = self._zeros("w", (k, n, channels * layer.width), u)
        every = [g for g in cots if g is not None]
        if len(every) == k and u.shape[2] == 1:
            # every output in one product per example: (k C x P) @ (P x D), the patches
            # packed once instead of k times
            grads = per_example_gradients(torch.stack(every, dim=1), u)  # (c, k, C, D)
            w[:, rows] = grads.view(c, k, -1).transpose(0, 1)
            return
        for a, g in enumerate(cots):
            if g is not None:
                per_example_gradients(g.unsqueeze(1), u, out=w[a, rows].view(c, 1, channels, -1))

    def _put_affine(self, rows: slice, xhat: Tensor, cots: Cotangents) -> None:
        """Scale gradients ``sum_p g_iacp x_hat_icp`` of a normalization layer (``xhat``
        (c, C, P)) of the examples ``rows``, every output."""
        layer, n, k = self.layer, self.n, self.k
        w = self._zeros("w", (k, n, layer.channels), xhat)
        for a, g in enumerate(cots):
            if g is not None:
                w[a, rows] = affine_gradients(g, xhat)


@dataclass(frozen=True)
class _Pairwise:
    """A pairwise layer's factors for a batch (or a block of rows of it), one group.

    Attributes
    ----------
    u : Tensor of shape (n, P, D) or None
        Scaled inputs ``s_w u``; None when the weight is not differentiated.
    g : Tensor
        Output gradients, (n, P, k, C) for trace, else (k, n, P, C).
    const : float
        ``s_b^2`` when the bias is differentiated, else 0.
    """

    u: Tensor | None
    g: Tensor
    const: float

    def rows(self, index: slice, outputs: Outputs) -> _Pairwise:
        u = None if self.u is None else self.u[index]
        g = self.g[index] if outputs == "trace" else self.g[:, index]
        return _Pairwise(u, g, self.const)


@dataclass(frozen=True)
class _Factored:
    """A factored layer's factors for a batch: ``h`` (n, C, D') and ``alpha`` (n, k, C)."""

    h: Tensor
    alpha: Tensor


@dataclass(frozen=True)
class _Batch:
    """Every share of one input batch: pairwise layers, per-example gradients
    ``(k, n, F)`` (per-example layers and the fallback Jacobian) and factored layers."""

    k: int
    pairwise: list[_Pairwise | None]
    per_example: list[Tensor | None]
    factored: list[_Factored | None]


def _pairwise_shares(store: _Store) -> list[_Pairwise | None]:
    """One share per group of a pairwise layer (None for each if it was never reached)."""
    layer = store.layer
    groups = layer.groups
    const = layer.bias_scale**2 if layer.bias is not None else 0.0
    g = store.g
    if g is None or (layer.weight is not None and store.u is None):
        return [None] * groups
    if groups == 1:
        return [_Pairwise(None if store.u is None else store.u[:, :, 0], g, const)]
    cg = layer.channels // groups
    shares: list[_Pairwise | None] = []
    for group in range(groups):
        u = None if store.u is None else store.u[:, :, group]
        shares.append(_Pairwise(u, g[..., group * cg : (group + 1) * cg], const))
    return shares


def _capture_spans(n: int, chunk: int) -> list[slice]:
    """Consecutive spans of the ``n`` examples, one capture pass each: as few as keep each
    within ``chunk`` examples, of sizes that differ by one at most (no small last pass, whose
    per-output backward passes would run on a batch too small to use the threads).

    The passes run one after another, each on torch's intra-op threads. Running them side by
    side in Python threads instead (each on its own span) was slower or no faster on every
    model of the peer benchmark on a 2-core CPU (ad hoc, median of 5: ResNet block float32
    0.63 -> 0.58 s, CNN float64 1.29 -> 1.07 s when removed): the passes' convolutions and
    backward passes are already threaded, and two passes at once share the caches."""
    count = -(-n // chunk)
    cuts = [n * i // count for i in range(count + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(cuts)]


def _batch_factors(
    fm: FunctionalModel,
    layers: Sequence[_Layer],
    fallback: Sequence[str],
    x: Tensor,
    chunk: int,
    outputs: Outputs,
    paths: list[Path] | None,
    n_other: int,
    same: bool,
    unfactored: set[str],
    split: frozenset[str] = frozenset(),
) -> tuple[_Batch, list[Path]]:
    """Capture ``x`` in chunks of ``chunk`` examples and keep every share's factors; the
    paths are chosen on the first chunk unless given (the factored one only for layers not
    in ``unfactored`` whose cotangents factor on the chunk's first example).

    The layers in ``split`` have their input cotangents propagated channel by channel
    (:func:`_cotangents`) and take the factored path.

    Raises :class:`_UnfactoredError` if a layer on the factored path meets examples whose
    cotangents do not factor, :class:`_UnsplitError` (see :func:`_forward`)."""
    n = x.shape[0]
    stores: list[_Store] = []
    jac: list[Tensor] = []  # the fallback Jacobian (k, n, F), once allocated
    k = 0
    spans = _capture_spans(n, chunk)
    scratch = _Scratch(max(s.stop - s.start for s in spans))

    def capture(rows: slice) -> None:
        nonlocal paths, stores, k
        fwd = _forward(fm, layers, x[rows], split)
        k = fwd.f.shape[1]
        cots, factorizations = _cotangents(fwd, layers, scratch)
        if paths is None:
            paths = []
            for layer, ys, cot in zip(layers, fwd.outputs, cots, strict=True):
                p = _positions(layer, ys) if ys else 1
                # check the factorization only where it would be the chosen contraction
                wanted = _choose_path(layer, n, n_other, p, k, outputs, same, True) == "factored"
                factorable = (
                    wanted and cot is not None and layer.name not in unfactored and _factorable(cot)
                )
                if layer.name in split:
                    paths.append("factored")
                else:
                    paths.append(_choose_path(layer, n, n_other, p, k, outputs, same, factorable))
        if not stores:
            stores = [
                _Store(layer, path, outputs, n, k)
                for layer, path in zip(layers, paths, strict=True)
            ]
        for index, (store, calls, cot) in enumerate(zip(stores, fwd.inputs, cots, strict=True)):
            if calls and cot is not None:
                store.put(rows, calls, cot, factorizations.get(index))
        del fwd, cots
        if fallback:
            part = _fallback_jacobian(fm, fallback, x[rows], chunk).transpose(0, 1)
            if not jac:
                jac.append(part.new_empty((k, n, part.shape[2])))
            jac[0][:, rows] = part

    for rows in spans:  # the first chooses the paths, allocates the stores
        capture(rows)
    pairwise: list[_Pairwise | None] = []
    per_example: list[Tensor | None] = [jac[0] if jac else None]
    factored: list[_Factored | None] = []
    for store in stores:
        if store.path == "pairwise":
            pairwise += _pairwise_shares(store)
        elif store.path == "factored":
            factored.append(
                _Factored(store.h, store.alpha)
                if store.h is not None and store.alpha is not None
                else None
            )
        else:
            per_example += [store.w, store.b]
    return _Batch(k, pairwise, per_example, factored), paths or []


# ------------------------------------------------------------------------------ Grams


def _groups(k: int, rows: int) -> list[slice]:
    """Consecutive groups of outputs, each giving at least :data:`_SLAB_ROWS` Gram rows
    (``rows`` examples per output) so that the GEMMs stay efficient."""
    size = min(k, max(1, -(-_SLAB_ROWS // max(rows, 1))))
    return [slice(a, min(a + size, k)) for a in range(0, k, size)]


def _group_pairs(k: int, rows: int, upper: bool) -> list[GroupPair]:
    """Pairs of output groups of a full tile; only ``b >= a`` when ``upper`` (a symmetric
    tile: the others are mirrored by :func:`_mirror_groups`). One partition per tile, shared
    by every layer's share."""
    groups = _groups(k, rows)
    return [(a, b) for a in groups for b in groups if not upper or b.start >= a.start]


def _add_into(out: Tensor, x1: Tensor, x2: Tensor) -> None:
    """``out += x1 @ x2.T`` for a 4-D block ``out`` (a, i, b, j) of a full kernel."""
    sa, c1, sb, c2 = out.shape
    st = out.stride()
    if st[3] == 1 and st[2] == c2 * st[3] and st[0] == c1 * st[1]:
        out.view(sa * c1, sb * c2).addmm_(x1, x2.T)  # an in-place GEMM into the block
    else:
        out.add_((x1 @ x2.T).view(sa, c1, sb, c2))


def _mirror_groups(tile: Tensor, groups: Sequence[GroupPair]) -> None:
    """Fill the lower output groups of a symmetric full tile (a, i, b, j) from the upper."""
    for a, b in groups:
        if b.start > a.start:
            tile[b, :, a, :] = tile[a, :, b, :].permute(2, 3, 0, 1)


def _add_per_example(
    acc: Tensor, w1: Tensor, w2: Tensor, outputs: Outputs, groups: Sequence[GroupPair]
) -> None:
    """``acc += sum_f w1[a, i, f] w2[b, j, f]`` reduced as ``outputs`` asks.

    ``w1`` (k, c1, F), ``w2`` (k, c2, F); ``acc`` trace (c1, c2), full (k, c1, k, c2),
    diagonal (k, c1, c2), possibly a strided block of a larger tensor. ``groups``: the
    pairs of output groups to compute for full (see :func:`_group_pairs`).
    """
    k, f = w1.shape[0], w1.shape[2]
    if outputs == "trace":
        for a in range(k):
            acc.addmm_(w1[a], w2[a].T)
    elif outputs == "diagonal":
        acc.baddbmm_(w1, w2.transpose(1, 2))
    else:
        for oa, ob in groups:
            _add_into(acc[oa, :, ob, :], w1[oa].reshape(-1, f), w2[ob].reshape(-1, f))


def _add_pairwise(
    acc: Tensor,
    s1: _Pairwise,
    s2: _Pairwise,
    outputs: Outputs,
    groups: Sequence[GroupPair],
) -> None:
    """``acc += sum_{p,q} (u_ip . u'_jq + s_b^2) (g_iap . g'_jbq)`` reduced as ``outputs``
    asks (``acc`` and ``groups`` as in :func:`_add_per_example`); without ``u`` the first
    factor is ``s_b^2``.
    """
    trace = outputs == "trace"
    g1, g2 = s1.g, s2.g
    c1, p1 = (g1.shape[0], g1.shape[1]) if trace else (g1.shape[1], g1.shape[2])
    c2, p2 = (g2.shape[0], g2.shape[1]) if trace else (g2.shape[1], g2.shape[2])
    k, c = g1.shape[-2] if trace else g1.shape[0], g1.shape[-1]
    ku: Tensor | None = None  # shape: (c1*P1, c2*P2)
    if s1.u is not None and s2.u is not None:
        ku = s1.u.reshape(c1 * p1, -1) @ s2.u.reshape(c2 * p2, -1).T
        if s1.const:
            ku.add_(s1.const)

    def weigh(kg: Tensor, view: tuple[int, ...]) -> Tensor:  # kg * ku, in place
        return kg.mul_(s1.const) if ku is None else kg.mul_(ku.view(view))

    single = p1 == 1 and p2 == 1
    if trace:
        kg = g1.reshape(c1 * p1, k * c) @ g2.reshape(c2 * p2, k * c).T
        if single:
            acc.add_(kg, alpha=s1.const) if ku is None else acc.addcmul_(kg, ku)
        else:
            acc.add_(weigh(kg, (c1 * p1, c2 * p2)).view(c1, p1, c2, p2).sum((1, 3)))
    elif outputs == "full":
        for a, b in groups:
            out = acc[a, :, b, :]
            sa, sb = out.shape[0], out.shape[2]
            kg = (g1[a].reshape(-1, c) @ g2[b].reshape(-1, c).T).view(sa, c1, p1, sb, c2, p2)
            if single and ku is not None:
                out.addcmul_(kg.view(sa, c1, sb, c2), ku.view(1, c1, 1, c2))
            else:
                out.add_(weigh(kg, (1, c1, p1, 1, c2, p2)).sum((2, 5)))
    else:
        kg = torch.bmm(g1.reshape(k, c1 * p1, c), g2.reshape(k, c2 * p2, c).transpose(1, 2))
        if single:
            acc.add_(kg, alpha=s1.const) if ku is None else acc.addcmul_(kg, ku)
        else:
            acc.add_(weigh(kg, (1, c1 * p1, c2 * p2)).view(k, c1, p1, c2, p2).sum((2, 4)))


def _block(acc: Tensor, rows: slice, cols: slice, outputs: Outputs) -> Tensor:
    """The view of the accumulator for x1 rows ``rows`` and x2 rows ``cols``."""
    if outputs == "trace":
        return acc[rows, cols]
    if outputs == "full":
        return acc[:, rows, :, cols]
    return acc[:, rows, cols]


def _mirror(acc: Tensor, rows: slice, cols: slice, outputs: Outputs) -> None:
    """Fill block (cols, rows) from block (rows, cols) of a symmetric kernel."""
    src = _block(acc, rows, cols, outputs)
    dst = _block(acc, cols, rows, outputs)
    if outputs == "trace":
        dst.copy_(src.T)
    elif outputs == "full":
        dst.copy_(src.permute(2, 3, 0, 1))
    else:
        dst.copy_(src.transpose(1, 2))


#: Elements of the per-channel Gram (and, for full, its weighted copy) of a factored share
#: computed at once: rows of a tile are split to stay within it.
_FACTORED_ELEMENTS = 2**22


def _add_factored_tile(
    tile: Tensor, f1: _Factored, f2: _Factored, rows: slice, cols: slice, outputs: Outputs
) -> None:
    """Add a factored share to the tile ``(rows, cols)``, in row blocks whose per-channel
    Gram has at most :data:`_FACTORED_ELEMENTS` elements."""
    c, k = f1.h.shape[1], f1.alpha.shape[1]
    width = (cols.stop - cols.start) * c * (k if outputs == "full" else 1)
    step = max(1, _FACTORED_ELEMENTS // max(width, 1))
    for r in range(rows.start, rows.stop, step):
        sub = slice(r, min(r + step, rows.stop))
        local = slice(sub.start - rows.start, sub.stop - rows.start)
        add_factored(
            _block(tile, local, slice(None), outputs),
            f1.h[sub],
            f1.alpha[sub],
            f2.h[cols],
            f2.alpha[cols],
            outputs,
        )


def _accumulate(
    b1: _Batch,
    b2: _Batch,
    n1: int,
    n2: int,
    block: int,
    outputs: Outputs,
    same: bool,
    like: FunctionalModel,
) -> Tensor:
    """Sum every share into the kernel, in ``block x block`` tiles (upper tiles only, then
    mirrored, when ``x2`` is ``x1``), and return it in the public layout."""
    k = b1.k
    shape = {"trace": (n1, n2), "full": (k, n1, k, n2), "diagonal": (k, n1, n2)}[outputs]
    acc = torch.zeros(shape, dtype=like.dtype, device=like.device)
    pairwise = [
        (s1, s2)
        for s1, s2 in zip(b1.pairwise, b2.pairwise, strict=True)
        if s1 is not None and s2 is not None
    ]
    per_example = [
        (w1, w2)
        for w1, w2 in zip(b1.per_example, b2.per_example, strict=True)
        if w1 is not None and w2 is not None
    ]
    factored = [
        (f1, f2)
        for f1, f2 in zip(b1.factored, b2.factored, strict=True)
        if f1 is not None and f2 is not None
    ]
    for r in range(0, n1, block):
        rows = slice(r, min(r + block, n1))
        for c in range(r if same else 0, n2, block):
            cols = slice(c, min(c + block, n2))
            tile = _block(acc, rows, cols, outputs)
            upper = same and c == r and outputs == "full"
            groups = _group_pairs(k, rows.stop - rows.start, upper)
            for s1, s2 in pairwise:
                _add_pairwise(tile, s1.rows(rows, outputs), s2.rows(cols, outputs), outputs, groups)
            for w1, w2 in per_example:
                _add_per_example(tile, w1[:, rows], w2[:, cols], outputs, groups)
            for f1, f2 in factored:
                _add_factored_tile(tile, f1, f2, rows, cols, outputs)
            if upper:
                _mirror_groups(tile, groups)
            if same and c != r:
                _mirror(acc, rows, cols, outputs)
    if outputs == "trace":
        return acc.div_(k)
    if outputs == "full":
        return acc.permute(1, 3, 0, 2).contiguous()
    return acc.permute(1, 2, 0).contiguous()


def _check_outputs(outputs: object) -> Outputs:
    if outputs == "trace" or outputs == "full" or outputs == "diagonal":
        return outputs
    raise NtklabValueError(f"outputs: expected 'trace', 'full' or 'diagonal', got {outputs!r}")


def ntk_structured(
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None,
    outputs: Outputs,
    *,
    chunk_size: int | None = None,
) -> Tensor:
    """Empirical NTK from the layer structure of dense, convolution and normalization layers.

    .. math::

        \\Theta_{ijab} = \\sum_{\\text{layers}} \\sum_{p,q}
            (u_{ip} \\cdot u'_{jq} + [\\text{bias}])\\,(g_{iap} \\cdot g'_{jbq})
        + \\sum_{\\text{other } \\theta}
            \\frac{\\partial f_a(x_i)}{\\partial \\theta} \\cdot
            \\frac{\\partial f_b(x'_j)}{\\partial \\theta}

    with ``u`` a covered layer's input (patches for a convolution, the normalized input for
    a normalization layer) and ``g`` the gradient of output ``a`` in that layer's output.
    Per layer a cost model chooses the contraction order: the pairwise-position form above
    (cheap for few positions: ``nn.Linear``), forming the per-example gradients
    ``sum_p g_iap u_ip^T`` and taking their inner products (cheap for many positions:
    convolutions), or, when the cotangents factor per channel (layers followed only by
    per-channel operations, global average pooling and a linear readout),
    ``sum_c alpha_iac alpha_jbc <H_ic, H'_jc>`` with ``H_ic = sum_p h_ipc u_ip`` formed once
    for all outputs. See Novak, Sohl-Dickstein & Schoenholz (2022, arXiv:2206.08720) and
    :mod:`.structured_conv`.

    Parameters
    ----------
    fm : FunctionalModel
        The model and the parameters to differentiate (only ``fm.params``; their values
        override the module's). The model must treat examples independently (BatchNorm in
        eval mode is fine) and feed each covered module a tensor whose first axis is the batch.
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...) or None
        None means ``x1`` (activations and gradients are reused, symmetric blocks mirrored).
    outputs : {"trace", "full", "diagonal"}
        neural-tangents' conventions: the mean over outputs of ``Theta[:, :, a, a]``,
        the whole ``Theta``, or its diagonal in the outputs.
    chunk_size : int, optional
        Examples per capture pass and per kernel block. ``None``: kernel blocks of all the
        inputs (of 512 for a symmetric kernel, whose lower blocks are mirrored), capture
        passes of as many examples as keep their tensors within about
        ``2**27`` elements (measured on ``x1[:1]``). Bounds the memory of the intermediate
        products; the result is the same. The examples are split into as few passes of
        equal size (within one) as keep each within this size.

    Returns
    -------
    Tensor
        ``(n1, n2)`` for trace, ``(n1, n2, k, k)`` for full, ``(n1, n2, k)`` for diagonal; in
        the parameters' dtype and device. Not differentiable (computed from detached
        factors).

    Raises
    ------
    NtklabValueError
        Bad ``outputs`` or ``chunk_size``, inputs the model rejects, or a module that mixes
        examples (BatchNorm using batch statistics).

    Notes
    -----
    Covered: modules of exact type ``nn.Linear`` (any number of axes between the batch and
    the features, e.g. tokens), ntklab's ``DenseLayer`` (both parameterizations),
    ``nn.Conv1d``, ``nn.Conv2d`` and ``nn.Conv3d`` (any stride, dilation, padding, padding
    mode and groups), ntklab's 1-D and 2-D ``ConvLayer`` (both parameterizations, any
    strides and padding; never split, see :func:`_split_saving`), and the affine parameters
    of ``nn.BatchNorm1d/2d/3d`` (eval mode) and ``nn.LayerNorm``, each called any number of
    times. Everything else falls back to a
    per-example Jacobian of just those parameters: other parameters, subclasses with their
    own ``forward``, tied weights, a covered parameter also used outside its module's
    forward (detected while running), a module whose input has no leading batch axis.

    Cost model, per layer with ``P`` positions, ``G`` groups, input length ``D`` per group,
    ``C`` output channels and ``k`` model outputs: pairwise ``2 n1 n2 P^2 (D + k C / G)``
    flops per group (``D + k^2 C / G`` for full) plus ``n1 n2 P^2`` elementwise products
    (times ``k`` for diagonal, ``k^2`` for full, each weighted as 30 flops); per-example
    ``2 (n1 + n2) k P C D`` flops to form the gradients plus ``2 n1 n2 k C D`` (times ``k``
    for full) for their Gram; factored ``2 (n1 + n2) P C D`` to form ``H`` plus
    ``2 n1 n2 C (D + k)`` (``D + k^2`` for full) and the check of the factorization; the
    cheapest is used. Pairwise wins for ``P = 1`` (dense layers: no ``n k x n_params``
    Jacobian is ever formed); per-example for convolutions with many output pixels;
    factored for the layers before global average pooling. Symmetric kernels (``x2`` None)
    compute only the upper tiles (output groups for full) and mirror them.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from ntklab.empirical._functional import functional_model
    >>> net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> ntk_structured(functional_model(net), torch.randn(4, 3), None, "full").shape
    torch.Size([4, 4, 2, 2])
    """
    outputs = _check_outputs(outputs)
    if chunk_size is not None:
        check_positive_int("chunk_size", chunk_size)
    _reject_batch_mixing(fm.module)
    x1 = check_batch("x1", x1, fm)
    same = x2 is None or x2 is x1
    x2 = x1 if x2 is None else check_batch("x2", x2, fm)
    n1, n2 = x1.shape[0], x2.shape[0]
    block = _tile(n1, n2, chunk_size, same)  # Gram tiles
    layers = list(_covered_layers(fm))
    covered = {p for layer in layers for p in layer.params}
    fallback = [p for p in fm.params if p not in covered]
    unfactored: set[str] = set()
    unsplit: set[str] = set()
    prof = _profile(fm, x1)
    planned = prof.split
    chunk = block  # examples captured at once
    if chunk_size is None and prof.outputs:
        chunk = _capture_chunk(prof, n1, n2, prof.outputs, outputs, same)
    while True:  # each retry covers fewer parameters or factors or splits fewer layers
        split = frozenset(planned) - unsplit - unfactored
        try:
            key = (
                tuple((layer.name, layer.params) for layer in layers),
                tuple(fallback),
                frozenset(unfactored),
                split,
                outputs,
            )
            kept = _ROWS.get(fm, x1, key)
            if kept is None:
                b1, paths = _batch_factors(
                    fm, layers, fallback, x1, chunk, outputs, None, n2, same, unfactored, split
                )
                _ROWS.put(fm, x1, key, (b1, paths))
            else:
                b1, paths = kept
            b2 = (
                b1
                if same
                else _batch_factors(
                    fm, layers, fallback, x2, chunk, outputs, paths, n1, same, unfactored, split
                )[0]
            )
        except _FallBackError as err:
            reduced = [layer.without(err.names) for layer in layers]
            layers = [layer for layer in reduced if layer is not None]
            fallback += [p for p in fm.params if p in err.names and p not in fallback]
            continue
        except _UnfactoredError as err:
            unfactored.add(err.name)
            continue
        except _UnsplitError as err:
            unsplit.add(err.name)
            continue
        if b1.k != b2.k:
            raise NtklabValueError(
                f"x2: expected the model to give {b1.k} outputs as for x1, got {b2.k}"
            )
        return _accumulate(b1, b2, n1, n2, block, outputs, same, fm)


# ------------------------------------------------------------------ rows kept


def _versions(fm: FunctionalModel, x: Tensor) -> tuple[int, ...]:
    """In-place modification counters of ``x`` and of the parameters."""
    return (x._version, *(v._version for v in fm.params.values()))


class _RowFactors(threading.local):
    """The factors of the last first batch ``x1`` of :func:`ntk_structured`, kept while
    :func:`reusing_rows` is active, for the next call with the same ``x1`` tensor (same
    object, unmodified), model (parameters unmodified) and coverage. One per thread (Dask's
    threaded scheduler computes tiles in parallel threads)."""

    def __init__(self) -> None:
        self.active = 0
        self.entry: tuple[Any, ...] | None = None

    def get(self, fm: FunctionalModel, x: Tensor, key: object) -> tuple[_Batch, list[Path]] | None:
        entry, self.entry = self.entry, None  # a miss drops it before new factors are formed
        if entry is None or not self.active:
            return None
        ref_x, ref_fm, versions, old_key, kept = entry
        if ref_x() is not x or ref_fm() is not fm or old_key != key or versions != _versions(fm, x):
            return None
        self.entry = entry
        return kept  # type: ignore[no-any-return]

    def put(
        self, fm: FunctionalModel, x: Tensor, key: object, kept: tuple[_Batch, list[Path]]
    ) -> None:
        if self.active:
            self.entry = (weakref.ref(x), weakref.ref(fm), _versions(fm, x), key, kept)


_ROWS = _RowFactors()


@contextmanager
def reusing_rows() -> Iterator[None]:
    """Within this context, :func:`ntk_structured` keeps the factors of its first batch
    ``x1`` (per-layer inputs and cotangents, per-example gradients, fallback Jacobian) for
    the next call with the same ``x1`` tensor: a blocked kernel computed row block by row
    block (:func:`.streaming.fill_blocks`) then captures each row block once instead of once
    per block. Kept factors are dropped at the first call with another ``x1``, model or
    coverage, when ``x1`` or a parameter was modified in place, and on leaving the
    context; they cost the memory of one more batch's factors between calls, which the
    blocks of :func:`.ntk.plan` (sized for ``x2`` given) already count."""
    _ROWS.active += 1
    try:
        yield
    finally:
        _ROWS.active -= 1
        if not _ROWS.active:
            _ROWS.entry = None


# ------------------------------------------------------------------ profile and costs


@dataclass(frozen=True)
class _Profile:
    """Per-example sizes of a model: covered layers with their positions and whether their
    cotangents factor, the fallback size and the forward's tensors."""

    layers: tuple[tuple[_Layer, int, bool], ...]  # (layer, P, factorable)
    fallback: int  # F: number of fallback scalar parameters
    activations: int  # elements of the forward's intermediate tensors, per example
    split: dict[str, float] = dataclasses.field(default_factory=dict)  # name: flops saved
    outputs: int = 0  # k, measured on the sample (0 without one)


#: The last profiles measured on a sample: (sample tensor, model, profile), compared by
#: identity (tensors are neither hashable by value nor comparable with ``==``).
_PROFILES: list[tuple[weakref.ref[Tensor], weakref.ref[FunctionalModel], _Profile]] = []
_PROFILES_KEPT = 4


def _profile(fm: FunctionalModel, x: Tensor | None) -> _Profile:
    """Measure positions per layer, whether their cotangents factor (one forward and ``k``
    backward passes) and the forward's tensors on ``x[:1]``; without a sample, assume one
    position per layer (exact for dense layers on vectors, a lower bound for convolutions
    and sequences), no factorization and :data:`_STATIC_ELEMENTS` tensors the size of each
    layer's input and output. Cached per sample tensor and model."""
    layers = list(_covered_layers(fm))
    if x is None:
        sized = tuple((layer, 1, False) for layer in layers)
        acts = _STATIC_ELEMENTS * sum(layer.width + layer.channels for layer in layers)
    else:
        for ref, model, cached in _PROFILES:
            if ref() is x and model() is fm:
                return cached
        one = check_batch("x", x[:1], fm)
        while True:
            try:
                fwd = _forward(fm, layers, one)
                break
            except _FallBackError as err:
                reduced = [layer.without(err.names) for layer in layers]
                layers = [layer for layer in reduced if layer is not None]
        cots = _cotangents(fwd, layers)[0]
        sized = tuple(
            (layer, _positions(layer, ys), cot is not None and _factorable(cot))
            for layer, ys, cot in zip(layers, fwd.outputs, cots, strict=True)
            if ys
        )
        acts = fwd.elements
        k = int(fwd.f.shape[1])
        split = {}
        for (layer, p, factorable), calls, needs in zip(
            sized,
            [c for c in fwd.inputs if c],
            [d for c, d in zip(fwd.inputs, fwd.needs_input, strict=True) if c],
            strict=True,
        ):
            saved = _split_saving(layer, p, calls, k) if factorable and needs else 0.0
            if saved > 0:
                split[layer.name] = saved
        split = _split_conflicts(fm, layers, one, split)
    covered = {p for layer, _, _ in sized for p in layer.params}
    fallback = sum(v.numel() for p, v in fm.params.items() if p not in covered)
    if x is None:
        prof = _Profile(sized, fallback, acts)
    else:
        prof = _Profile(sized, fallback, acts, split, k)
    if x is not None:
        _PROFILES.insert(0, (weakref.ref(x), weakref.ref(fm), prof))
        del _PROFILES[_PROFILES_KEPT:]
    return prof


def _split_saving(layer: _Layer, p: int, calls: Sequence[Tensor], k: int) -> float:
    """Flops per example saved by propagating a factored layer's input cotangents channel by
    channel (:func:`.structured_conv.input_cotangents`) instead of ``k`` backward passes
    through it; 0 where not possible (not a convolution, padding other than zeros, called
    more than once). A backward pass through a convolution costs its forward flops, plus,
    in float64 (where PyTorch's CPU convolutions unfold their input), the traffic of the
    unfolded input gradient ``C_in taps P_in``."""
    mod = layer.module
    if not isinstance(mod, CONVOLUTIONS) or mod.padding_mode != "zeros" or len(calls) != 1:
        return 0.0  # a ConvLayer's kept input is padded: its cotangents would need cropping
    raw = calls[0]
    p_in = math.prod(raw.shape[2:])
    direct = _layer_flops(layer, p)
    if raw.dtype == torch.float64:
        direct += _ELEMENTWISE_FLOPS * raw.shape[1] * math.prod(mod.kernel_size) * p_in
    compiled = compiled_cotangents.available(raw, mod.groups, raw.ndim - 2)
    return k * direct - input_cotangent_flops(mod, p, p_in, k, compiled)


def _split_conflicts(
    fm: FunctionalModel, layers: Sequence[_Layer], one: Tensor, saving: dict[str, float]
) -> dict[str, float]:
    """The layers to cut, from candidates with their savings, none below another: a layer
    lies below a cut one if the backward pass from the cut layer's input reaches its output
    (its cotangents would then be needed before the cut layer's input cotangents exist), and
    a layer called more than once is never cut. Greedy by saving; one forward and one
    backward pass on the example ``one`` per candidate."""
    reach: dict[str, set[str]] = {}
    for name in saving:
        try:
            fwd = _forward(fm, layers, one, frozenset({name}))
        except _UnsplitError:  # called more than once: cannot be cut
            continue
        index = next(i for i, layer in enumerate(layers) if layer.name == name)
        live = fwd.split_inputs[index]
        flat = [y for ys in fwd.outputs for y in ys]
        owner = [layer.name for layer, ys in zip(layers, fwd.outputs, strict=True) for _ in ys]
        reach[name] = set()
        if live is not None and flat:
            grads = torch.autograd.grad(live, flat, torch.ones_like(live), allow_unused=True)
            reach[name] = {o for o, g in zip(owner, grads, strict=True) if g is not None}
    chosen: dict[str, float] = {}
    for name in sorted(reach, key=lambda m: -saving[m]):
        if all(name not in reach[c] and c not in reach[name] for c in chosen):
            chosen[name] = saving[name]
    return chosen


def _layer_flops(layer: _Layer, p: int) -> float:
    """Flops of one forward call of a covered layer at ``p`` positions: ``2 P C D``."""
    return 2.0 * p * layer.channels * layer.width


def structured_flops(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    x: Tensor | None = None,
    symmetric: bool = False,
    forward_flops: float | None = None,
) -> float:
    """Approximate flops of :func:`ntk_structured` (GEMM-equivalent).

    Capture: one forward and ``k`` backward passes over the covered layers,
    ``(1 + k) sum 2 P C D`` per example, less what propagating the input cotangents of
    factored convolutions channel by channel saves; per layer the cheapest contraction
    (pairwise,
    per-example, or factored when the cotangents factor on ``x[:1]``; see
    :func:`ntk_structured`); fallback: a forward and ``k`` backward passes with parameter
    gradients per example, ``(1 + 2k) sum 2 P C D``, plus the Gram ``2 n1 n2 k F`` (times
    ``k`` for full). Memory-bound passes are counted by :func:`structured_elements`.

    Parameters
    ----------
    fm : FunctionalModel
    n1, n2 : int
        Numbers of inputs.
    k : int
        Number of outputs.
    outputs : {"trace", "full", "diagonal"}
    x : Tensor, optional
        A sample input (only ``x[:1]`` is run, forward and backward) to measure the positions
        per layer, whether cotangents factor, and the forward's memory. Without it every
        layer is taken to have one position: exact for dense layers on vectors, an
        underestimate for convolutions and sequences.
    symmetric : bool
        ``x2`` is None (factors computed once, symmetric tiles mirrored).
    forward_flops : float, optional
        The model's forward flops per example (:func:`.jacobian.probe`), which bound the
        covered layers' from below (the backward passes also go through the others).
    """
    outputs = _check_outputs(outputs)
    prof = _profile(fm, x)
    inputs = n1 if symmetric else n1 + n2
    forward = sum(_layer_flops(layer, p) for layer, p, _ in prof.layers)
    forward = max(forward, float(prof.activations))  # a floor for models with no covered layer
    if forward_flops is not None:
        forward = max(forward, forward_flops)
    total = ((1 + k) * forward - sum(prof.split.values())) * inputs
    for layer, p, factorable in prof.layers:
        costs = _path_flops(layer, n1, n2, p, k, outputs, symmetric)
        if layer.name in prof.split:
            total += costs["factored"]
            continue
        if not factorable:
            del costs["factored"]
        total += min(costs.values())
    if prof.fallback:
        total += (1 + 2 * k) * forward * inputs
        total += 2.0 * n1 * n2 * k * prof.fallback * (k if outputs == "full" else 1)
    return total


def structured_elements(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    x: Tensor | None = None,
    symmetric: bool = False,
    activations: int | None = None,
) -> float:
    """Elements moved by the memory-bound passes of :func:`ntk_structured`.

    Per example: the ``k`` backward passes read and write the tensors saved for them
    (``2 k A``); per covered layer the hooks copy its output (``P C``) and its input into
    patches (``P G D``; the normalized input for a normalization layer); a pairwise layer
    stores its cotangents (``k P C``); the fallback Jacobian adds a forward and ``k``
    backward passes and its ``k F`` rows. The elementwise parts of each layer's contraction
    (the factorization check) are in :func:`structured_flops`. Parameters as for
    :func:`structured_flops`; ``activations``: ``A``, the elements autograd saves per
    example (:func:`.jacobian.probe`; default: every tensor the forward creates, measured on
    ``x[:1]``, an overestimate).
    """
    outputs = _check_outputs(outputs)
    prof = _profile(fm, x)
    inputs = n1 if symmetric else n1 + n2
    saved = float(prof.activations if activations is None else activations)
    per_example = 2.0 * k * saved
    for layer, p, factorable in prof.layers:
        per_example += p * layer.channels + p * layer.groups * layer.width
        if _choose_path(layer, n1, n2, p, k, outputs, symmetric, factorable) == "pairwise":
            per_example += k * p * layer.channels
    if prof.fallback:
        per_example += 2.0 * k * saved + k * prof.fallback
    return per_example * inputs


def structured_peak_bytes(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    x: Tensor | None = None,
    chunk_size: int | None = None,
    symmetric: bool = False,
) -> int:
    """Approximate peak memory of :func:`ntk_structured`, in bytes.

    The sum of

    - the kernel, twice for full and diagonal (the final transpose);
    - the factors kept for both batches (once when ``symmetric``): pairwise layers
      ``n P (G D + k C)``, per-example layers ``n k C (D + 1)``, factored layers
      ``n C (D + 1 + k)``, the fallback Jacobian ``n k F``;
    - the larger of one capture chunk of ``c`` examples (the forward's tensors, measured on
      ``x[:1]``, twice for the backward passes; the saved inputs, ``c P G D`` (patches) for
      a pairwise layer, a copy of the input (``c P G D / taps``) for a convolution otherwise;
      the cotangents of every output ``c k P C``; the input cotangents ``c k C_in P_in`` of
      a convolution propagated channel by channel; the patches and factors of the few
      examples processed at once; for the fallback ``k`` backward passes under ``vmap``)
      and one kernel tile (pairwise: ``(c P)^2`` for the input Gram plus
      ``(c P)^2`` times 1 (trace), ``k`` (diagonal), or the output group size squared (full)
      for the gradient Gram; factored: twice the per-channel Gram, at most
      ``2 * 2**22`` elements).

    Parameters are those of :func:`structured_flops`; ``chunk_size`` as in
    :func:`ntk_structured` (``c = chunk_size``, or ``max(n1, n2)`` for the tiles and the
    default capture chunk of :func:`ntk_structured` for the capture).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from ntklab.empirical._functional import functional_model
    >>> fm = functional_model(nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10)))
    >>> structured_peak_bytes(fm, 256, 256, 10, "full", symmetric=True) < 2**30
    True
    """
    outputs = _check_outputs(outputs)
    prof = _profile(fm, x)
    item = fm.params[fm.names[0]].element_size()
    kernel = n1 * n2 * _multiplicity(k, outputs) * (1 if outputs == "trace" else 2)
    c = _tile(n1, n2, chunk_size, symmetric)
    batches = n1 if symmetric else n1 + n2
    kept = batches * k * prof.fallback
    inputs = 0
    cotangents = 0
    scratch = 0
    tile = 0
    cc = c if chunk_size else _capture_chunk(prof, n1, n2, k, outputs, symmetric)
    for layer, p, factorable in prof.layers:
        weight = layer.width if layer.weight is not None else 0
        bias = int(layer.bias is not None)
        channels, groups = layer.channels, layer.groups
        patches = cc * p * groups * layer.width
        taps = math.prod(layer.op.kernel_size) if isinstance(layer.op, CONVOLUTIONS) else 1
        cotangents += cc * k * p * channels
        if layer.name in prof.split:  # input cotangents of every output, about P C_in each
            cotangents += k * patches // taps
            scratch = max(scratch, _SPLIT_ELEMENTS + 2 * cc * k * p * channels)
        path = _choose_path(layer, n1, n2, p, k, outputs, symmetric, factorable)
        if layer.name in prof.split:
            path = "factored"
        inputs += patches if path == "pairwise" else patches // taps
        scratch = max(scratch, min(2 * _CACHE_ELEMENTS, cc * p * (k * channels + patches // cc)))
        if path == "pairwise":
            kept += batches * p * (groups * weight + k * channels)
            rows = c * p
            group = _groups(k, c)[0].stop
            grams = {"trace": 1, "diagonal": k, "full": group * group}[outputs]
            tile = max(tile, rows * rows * (1 + grams) + 2 * k * rows * channels)
        elif path == "per_example":
            kept += batches * k * channels * (weight + bias)
            group = _groups(k, c)[0].stop
            tile = max(tile, (group * c) ** 2 if outputs == "full" else 0)
        else:
            kept += batches * channels * (weight + bias + k)
            gram = c * c * channels * (k if outputs == "full" else 1)
            tile = max(tile, 2 * min(gram, _FACTORED_ELEMENTS + c * channels * k))
    capture = inputs + cotangents + scratch + 2 * cc * prof.activations
    if prof.fallback:
        capture = max(capture, cc * k * (prof.activations + 2 * prof.fallback))
    return int(item * (kernel + kept + max(capture, tile)))


#: Rows of the Gram tiles of a symmetric kernel by default: the tiles below the diagonal
#: are mirrored, not computed (a single tile would be computed whole).
_SYMMETRIC_TILE = 512


def _tile(n1: int, n2: int, chunk_size: int | None, symmetric: bool) -> int:
    """Rows and columns of a Gram tile: ``chunk_size``, else all the inputs, at most
    :data:`_SYMMETRIC_TILE` for a symmetric kernel."""
    if chunk_size is None and symmetric:
        return min(n1, _SYMMETRIC_TILE)
    return min(chunk_size or max(n1, n2), max(n1, n2))


#: Elements of the tensors of one capture chunk (forward, cotangents, saved inputs) that
#: :func:`ntk_structured` aims at by default (1 GiB in float64): beyond a few dozen examples
#: larger chunks are not faster, and the memory is better spent on larger blocks.
_CAPTURE_ELEMENTS = 2**27


def _capture_chunk(
    prof: _Profile, n1: int, n2: int, k: int, outputs: Outputs, symmetric: bool
) -> int:
    """Examples captured at once by default: as many as keep the chunk's forward tensors
    (twice, for the backward passes), cotangents of every output and saved inputs (patches
    for a pairwise layer, a copy of the input otherwise) within :data:`_CAPTURE_ELEMENTS`,
    at least 1, at most ``max(n1, n2)``."""
    per_example = 2 * prof.activations
    for layer, p, factorable in prof.layers:
        patches = p * layer.groups * layer.width
        taps = math.prod(layer.op.kernel_size) if isinstance(layer.op, CONVOLUTIONS) else 1
        per_example += k * p * layer.channels
        path = _choose_path(layer, n1, n2, p, k, outputs, symmetric, factorable)
        if layer.name in prof.split:
            per_example += k * patches // taps
            path = "factored"
        per_example += patches if path == "pairwise" else patches // taps
    if prof.fallback:
        per_example = max(per_example, k * (prof.activations + 2 * prof.fallback))
    return max(1, min(max(n1, n2), _CAPTURE_ELEMENTS // max(1, per_example)))
