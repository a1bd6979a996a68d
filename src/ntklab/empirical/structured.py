r"""Structured empirical NTK: per-layer products of activations and output gradients.

For a layer ``y = s_w W u + s_b b`` applied at positions ``p`` of one example (one position
for a plain ``nn.Linear``, the output pixels of an ``nn.Conv2d`` on unfolded patches, the
tokens of a ``Linear`` on a sequence, the calls of a module applied several times), the
gradient of output ``a`` in ``W`` is ``s_w sum_p g_iap u_ip^T``, with ``u_ip`` the layer's
input (patch) and ``g_iap = d f_a(x_i) / d y_ip`` the back-propagated output gradient. The
layer's share of the NTK is therefore

.. math::

    \Theta_{ijab} = \sum_{p,q} (s_w^2\, u_{ip} \cdot u'_{jq} + s_b^2)
                               (g_{iap} \cdot g'_{jbq}),

computed from one forward pass (saving ``u``) and ``k`` backward passes (``g``, one output at
a time, for the whole batch), without per-example weight Jacobians. With few positions (dense
layers) the pairwise form above is cheapest; with many (convolutions) forming the per-example
gradients ``w_ia = sum_p g_iap u_ip^T`` (``C x D``) and taking their inner products is; a cost
model chooses per layer. Parameters that no covered module owns (LayerNorm and BatchNorm affine
weights, custom parameters, grouped convolutions) contribute through a per-example Jacobian of
just those parameters (``torch.func.jacrev`` + ``vmap``); the kernel is the sum of all shares.

This is the "structured derivatives" idea of Novak et al., *Fast Finite Width Neural Tangent
Kernel* (arXiv:2206.08720), specialised to the layers that dominate the cost in practice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.functional import pad
from torch.overrides import TorchFunctionMode

from .._checks import check_positive_int
from ..errors import NtklabValueError
from ..nets.modules import DenseLayer
from ._functional import FunctionalModel, Outputs, check_batch

__all__ = ["ntk_structured", "structured_flops", "structured_peak_bytes"]

Path = Literal["pairwise", "per_example"]
GroupPair = tuple[slice, slice]  # two groups of outputs: a block of a full kernel

#: Cost of one element of an elementwise pass (memory bound), in GEMM flops.
_ELEMENTWISE_FLOPS = 30.0

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
    module : nn.Linear or nn.Conv2d
        The module (``nn.Linear``, ``nn.Conv2d`` or ntklab's ``DenseLayer``; other subclasses
        may override ``forward`` and are not covered).
    weight, bias : str or None
        Qualified parameter names if differentiated, else None.
    weight_scale, bias_scale : float
        ``s_w`` and ``s_b`` (1 except for ``DenseLayer`` in NTK parameterization:
        ``w_std / sqrt(in_features)`` and ``b_std``).
    """

    name: str
    module: nn.Linear | nn.Conv2d
    weight: str | None
    bias: str | None
    weight_scale: float = 1.0
    bias_scale: float = 1.0

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(p for p in (self.weight, self.bias) if p is not None)

    @property
    def width(self) -> int:
        """``D``: the input (patch) length; the weight is ``C x D``."""
        if isinstance(self.module, nn.Linear):
            return self.module.in_features
        kh, kw = self.module.kernel_size
        return self.module.in_channels * kh * kw

    @property
    def channels(self) -> int:
        """``C``: the output features or channels."""
        if isinstance(self.module, nn.Linear):
            return self.module.out_features
        return self.module.out_channels

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
    if type(mod) is nn.Linear or (type(mod) is nn.Conv2d and mod.groups == 1):
        return 1.0, 1.0
    if type(mod) is DenseLayer and not mod.has_uninitialized_params():
        w_mult, _, b_mult, _ = mod.scales
        return w_mult, b_mult
    return None


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
            layers.append(_Layer(name, mod, found[0], found[1], *scales))
    return tuple(layers)


def _reject_batch_mixing(module: nn.Module) -> None:
    """Raise if a submodule mixes examples (batch statistics), which per-example gradients
    from one batched backward pass cannot represent."""
    for name, mod in module.named_modules():
        if isinstance(mod, _BATCH_NORMS) and (mod.training or mod.running_mean is None):
            raise NtklabValueError(
                f"model: expected a model that treats examples independently, got "
                f"{type(mod).__name__} {name or '<root>'!r} using batch statistics (call "
                f"model.eval(), or use method='jacobian')"
            )


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


def _conv_patches(conv: nn.Conv2d, x: Tensor) -> Tensor:
    """Unfolded input patches of a ``Conv2d``.

    Parameters
    ----------
    conv : nn.Conv2d
        Any stride, dilation, padding (ints, tuple, ``"same"``, ``"valid"``) and padding mode.
    x : Tensor of shape (n, C_in, H, W)

    Returns
    -------
    Tensor of shape (n, P, C_in * kh * kw)
        ``P = H_out * W_out`` patches, ordered like ``conv.weight.reshape(C_out, -1)``.
    """
    (kh, kw), (dh, dw) = conv.kernel_size, conv.dilation
    if isinstance(conv.padding, str):
        th, tw = (dh * (kh - 1), dw * (kw - 1)) if conv.padding == "same" else (0, 0)
        pads = (tw // 2, tw - tw // 2, th // 2, th - th // 2)
    else:
        ph, pw = conv.padding
        pads = (pw, pw, ph, ph)
    if any(pads):
        mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
        x = pad(x, pads, mode=mode)
    n, c, h, w = x.shape
    (sh, sw), (sn, sc, sy, sx) = conv.stride, x.stride()
    ho, wo = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    view = x.as_strided((n, ho, wo, c, kh, kw), (sn, sy * sh, sx * sw, sc, sy * dh, sx * dw))
    patches = x.new_empty(view.shape).copy_(view)  # always a copy: safe from in-place ops
    return patches.view(n, ho * wo, c * kh * kw)


def _layer_input(layer: _Layer, x: object, n: int) -> Tensor | None:
    """Input rows ``s_w u`` of shape ``(n, P, D)`` of one call, or None if ``x`` has no
    leading batch axis."""
    if not isinstance(x, Tensor) or x.ndim < 2 or x.shape[0] != n:
        return None
    if isinstance(layer.module, nn.Conv2d):
        if x.ndim != 4:
            return None
        u = _conv_patches(layer.module, x.detach())
    else:
        u = x.detach().reshape(n, -1, x.shape[-1]).clone()  # clone: safe from in-place ops
    return u if layer.weight_scale == 1.0 else u.mul_(layer.weight_scale)


@dataclass(frozen=True)
class _Forward:
    """One batch through the model, the covered layers' inputs and outputs saved.

    Attributes
    ----------
    f : Tensor of shape (n, k)
        The outputs, in the autograd graph of ``outputs``.
    inputs : list of (Tensor of shape (n, P, D)) or None
        Per layer, its inputs (patches), calls concatenated along P; None if not called.
    outputs : list of list of Tensor
        Per layer, the output of each call.
    elements : int
        Elements of all the tensors the forward created (a memory measure).
    """

    f: Tensor
    inputs: list[Tensor | None]
    outputs: list[list[Tensor]]
    elements: int


def _forward(fm: FunctionalModel, layers: Sequence[_Layer], x: Tensor) -> _Forward:
    """Run ``fm`` on ``x`` with hooks saving each covered layer's input and output.

    Raises :class:`_FallBackError` naming the covered parameters that must fall back instead.
    """
    n = x.shape[0]
    owner = {id(fm.params[p]): (p, layer.name) for layer in layers for p in layer.params}
    watch = _Watch(owner)
    ins: list[list[Tensor]] = [[] for _ in layers]
    outs: list[list[Tensor]] = [[] for _ in layers]
    bad: set[str] = set()

    def pre_hook(index: int) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            watch.inside.append(layers[index].name)

        return hook

    def post_hook(index: int) -> Callable[[nn.Module, tuple[Any, ...], Any], Any]:
        def hook(module: nn.Module, args: tuple[Any, ...], out: Any) -> Any:
            watch.inside.pop()
            u = _layer_input(layers[index], args[0] if args else None, n)
            if u is None or not isinstance(out, Tensor):
                bad.update(layers[index].params)
                return None
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
    inputs = [(torch.cat(us, dim=1) if len(us) > 1 else us[0]) if us else None for us in ins]
    return _Forward(f, inputs, outs, watch.elements)


def _output_gradients(
    fwd: _Forward, layers: Sequence[_Layer], a: int, last: bool
) -> list[Tensor | None]:
    """Per layer ``g_a`` of shape (n, P, C): the gradient of output ``a`` (of each example)
    in the layer's output, calls concatenated along P; None if output ``a`` ignores it.

    One backward pass of ``sum_i f_a(x_i)``: per-example gradients because the model treats
    examples independently.
    """
    flat = [y for ys in fwd.outputs for y in ys]
    if not flat or not fwd.f.requires_grad:
        return [None] * len(layers)
    seed = torch.zeros_like(fwd.f)
    seed[:, a] = 1.0
    grads = torch.autograd.grad(fwd.f, flat, seed, retain_graph=not last, allow_unused=True)
    result: list[Tensor | None] = []
    start = 0
    for layer, ys in zip(layers, fwd.outputs, strict=True):
        calls = grads[start : start + len(ys)]
        start += len(ys)
        if all(g is None for g in calls):
            result.append(None)
            continue
        rows = []
        for y, g in zip(ys, calls, strict=True):
            g = torch.zeros_like(y) if g is None else g
            n = g.shape[0]
            if isinstance(layer.module, nn.Conv2d):  # shape: (n, C, H, W) -> (n, P, C)
                rows.append(g.reshape(n, layer.channels, -1).transpose(1, 2))
            else:
                rows.append(g.reshape(n, -1, layer.channels))
        result.append(torch.cat(rows, dim=1) if len(rows) > 1 else rows[0])
    return result


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


def _pairwise_flops(
    layer: _Layer, n1: int, n2: int, p1: int, p2: int, k: int, outputs: Outputs
) -> float:
    """GEMM-equivalent flops of the pairwise-position contraction of one layer:
    ``n1 n2 P1 P2 (2 D + 2 k C [x k for full])`` plus the elementwise products and sums."""
    pairs = float(n1 * n2 * p1 * p2)
    mult = _multiplicity(k, outputs)
    gemm = 2 * pairs * layer.channels * (k * k if outputs == "full" else k)
    if layer.weight is not None:
        gemm += 2 * pairs * layer.width
    return gemm + _ELEMENTWISE_FLOPS * pairs * mult * (2.0 if p1 * p2 > 1 else 1.0)


def _per_example_flops(
    layer: _Layer, n1: int, n2: int, p1: int, p2: int, k: int, outputs: Outputs, same: bool
) -> float:
    """Flops of forming per-example gradients ``(k, n, C*D')`` (``2 n k P C D``) and of
    their Gram (``2 n1 n2 k C D'``, times ``k`` for full); ``D' = D + 1`` with a bias."""
    d = (layer.width if layer.weight is not None else 0) + (layer.bias is not None)
    formed = 2.0 * k * layer.channels * d * (n1 * p1 + (0 if same else n2 * p2))
    gram = 2.0 * n1 * n2 * k * layer.channels * d * (k if outputs == "full" else 1)
    return formed + gram


def _choose_path(
    layer: _Layer, n1: int, n2: int, p: int, k: int, outputs: Outputs, same: bool
) -> Path:
    """The cheaper contraction for a layer with ``p`` positions per example."""
    pairwise = _pairwise_flops(layer, n1, n2, p, p, k, outputs)
    per_example = _per_example_flops(layer, n1, n2, p, p, k, outputs, same)
    return "pairwise" if pairwise <= per_example else "per_example"


# ---------------------------------------------------------------------------- factors


class _Store:
    """Factors of one covered layer for every example of a batch, filled chunk by chunk
    and output by output into preallocated arrays.

    ``pairwise``: ``u`` (n, P, D) (None for a bias alone) and ``g``, laid out as the Gram
    reads it: (n, P, k, C) for trace, (k, n, P, C) for full and diagonal.
    ``per_example``: ``w`` (k, n, C*D) per-example weight gradients ``sum_p g_iap u_ip^T``
    (None without weight) and ``b`` (k, n, C) bias gradients ``sum_p g_iap`` (None without).
    """

    def __init__(self, layer: _Layer, path: Path, outputs: Outputs, n: int, k: int) -> None:
        self.layer, self.path, self.outputs, self.n, self.k = layer, path, outputs, n, k
        self.u: Tensor | None = None
        self.g: Tensor | None = None
        self.w: Tensor | None = None
        self.b: Tensor | None = None
        self.missing: list[tuple[slice, int | None]] = []  # (rows, output or all) to zero

    def put_missing(self, rows: slice, a: int | None) -> None:
        """The examples ``rows`` do not reach output ``a`` (None: any) through this layer."""
        self.missing.append((rows, a))

    def finish(self) -> None:
        """Zero the shares recorded by :meth:`put_missing`."""
        for rows, a in self.missing:
            outs = slice(None) if a is None else slice(a, a + 1)
            if self.u is not None and a is None:
                self.u[rows] = 0.0
            if self.g is not None and self.outputs == "trace":
                self.g[rows, :, outs] = 0.0
            elif self.g is not None:
                self.g[outs, rows] = 0.0
            for t in (self.w, self.b):
                if t is not None:
                    t[outs, rows] = 0.0

    def put_input(self, rows: slice, u: Tensor) -> None:
        if self.path == "pairwise" and self.layer.weight is not None:
            if self.u is None:
                self.u = u.new_empty((self.n, *u.shape[1:]))
            self.u[rows] = u

    def put_gradient(self, rows: slice, a: int, g: Tensor, u: Tensor) -> None:
        """Store ``g_a`` (c, P, C) of the examples ``rows`` (with their inputs ``u``)."""
        n, k, c = self.n, self.k, self.layer.channels
        if self.path == "pairwise":
            if self.g is None:
                p = g.shape[1]
                shape = (n, p, k, c) if self.outputs == "trace" else (k, n, p, c)
                self.g = g.new_empty(shape)
            if self.outputs == "trace":
                self.g[rows, :, a] = g
            else:
                self.g[a, rows] = g
            return
        if self.layer.weight is not None:
            if self.w is None:
                self.w = g.new_empty((k, n, c * self.layer.width))
            out = self.w[a, rows].view(-1, c, self.layer.width)
            torch.bmm(g.transpose(1, 2), u, out=out)  # shape: (c, C, P) @ (c, P, D)
        if self.layer.bias is not None:
            if self.b is None:
                self.b = g.new_empty((k, n, c))
            torch.sum(g, dim=1, out=self.b[a, rows])
            if self.layer.bias_scale != 1.0:
                self.b[a, rows].mul_(self.layer.bias_scale)


@dataclass(frozen=True)
class _Pairwise:
    """A pairwise layer's factors for a batch (or a block of rows of it).

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
class _Batch:
    """Every share of one input batch: pairwise layers and per-example gradients
    ``(k, n, F)`` (per-example layers and the fallback Jacobian)."""

    k: int
    pairwise: list[_Pairwise | None]
    per_example: list[Tensor | None]


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
) -> tuple[_Batch, list[Path]]:
    """Capture ``x`` in chunks of ``chunk`` examples and keep every share's factors; the
    paths are chosen on the first chunk unless given."""
    n = x.shape[0]
    stores: list[_Store] = []
    jac: Tensor | None = None
    k = 0
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        fwd = _forward(fm, layers, x[rows])
        k = fwd.f.shape[1]
        if paths is None:
            paths = [
                _choose_path(layer, n, n_other, 1 if u is None else u.shape[1], k, outputs, same)
                for layer, u in zip(layers, fwd.inputs, strict=True)
            ]
        if not stores:
            stores = [
                _Store(layer, path, outputs, n, k)
                for layer, path in zip(layers, paths, strict=True)
            ]
        for store, u in zip(stores, fwd.inputs, strict=True):
            if u is None:
                store.put_missing(rows, None)
            else:
                store.put_input(rows, u)
        for a in range(k):
            grads = _output_gradients(fwd, layers, a, last=a == k - 1)
            for store, u, g in zip(stores, fwd.inputs, grads, strict=True):
                if u is not None and g is not None:
                    store.put_gradient(rows, a, g, u)
                elif u is not None:
                    store.put_missing(rows, a)
        del fwd
        if fallback:
            part = _fallback_jacobian(fm, fallback, x[rows], chunk).transpose(0, 1)
            if jac is None:
                jac = part.new_empty((k, n, part.shape[2]))
            jac[:, rows] = part
    pairwise: list[_Pairwise | None] = []
    per_example: list[Tensor | None] = [jac]
    for store in stores:
        store.finish()
        if store.path == "pairwise":
            const = store.layer.bias_scale**2 if store.layer.bias is not None else 0.0
            has_u = store.u is not None or store.layer.weight is None
            ok = store.g is not None and has_u
            pairwise.append(
                _Pairwise(store.u, store.g, const) if ok and store.g is not None else None
            )
        else:
            per_example += [store.w, store.b]
    return _Batch(k, pairwise, per_example), paths or []


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
    """Empirical NTK from the layer structure of ``nn.Linear`` and ``nn.Conv2d``.

    .. math::

        \\Theta_{ijab} = \\sum_{\\text{layers}} \\sum_{p,q}
            (u_{ip} \\cdot u'_{jq} + [\\text{bias}])\\,(g_{iap} \\cdot g'_{jbq})
        + \\sum_{\\text{other } \\theta}
            \\frac{\\partial f_a(x_i)}{\\partial \\theta} \\cdot
            \\frac{\\partial f_b(x'_j)}{\\partial \\theta}

    with ``u`` a covered layer's input (patches for a convolution) and ``g`` the gradient of
    output ``a`` in that layer's output. Per layer a cost model chooses between the
    pairwise-position contraction above (cheap for few positions: ``nn.Linear``) and forming
    the per-example gradients ``sum_p g_iap u_ip^T`` and taking their inner products (cheap
    for many positions: convolutions). See Novak et al., arXiv:2206.08720.

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
        Examples per capture pass and per kernel block (``None``: all at once). Bounds the
        memory of the intermediate products; the result is the same.

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
    the features, e.g. tokens), ntklab's ``DenseLayer`` (both parameterizations) and
    ``nn.Conv2d`` with ``groups=1`` (any stride, dilation, padding, padding mode), each
    called any number of times. Everything else falls back to a per-example Jacobian of just
    those parameters: other parameters, grouped convolutions, subclasses with their own
    ``forward``, tied weights, a covered parameter also used outside its module's forward
    (detected while running), a module whose input has no leading batch axis.

    Cost model, per layer with ``P`` positions, input length ``D``, ``C`` output features and
    ``k`` model outputs: pairwise ``2 n1 n2 P^2 (D + k C)`` flops (``D + k^2 C`` for full)
    plus ``n1 n2 P^2`` elementwise products (times ``k`` for diagonal, ``k^2`` for full, each
    weighted as 30 flops); per-example ``2 (n1 + n2) k P C D`` flops to form the gradients
    plus ``2 n1 n2 k C D`` (times ``k`` for full) for their Gram; the cheaper is used.
    Pairwise wins for ``P = 1`` (dense layers: no ``n k x n_params`` Jacobian is ever formed,
    which is where this method beats Jacobian contraction by the largest factor);
    per-example wins for convolutions with many output pixels. Symmetric kernels (``x2``
    None) compute only the upper tiles (output groups for full) and mirror them.

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
    chunk = min(chunk_size or max(n1, n2), max(n1, n2))
    layers = list(_covered_layers(fm))
    covered = {p for layer in layers for p in layer.params}
    fallback = [p for p in fm.params if p not in covered]
    while True:  # each retry covers fewer parameters
        try:
            b1, paths = _batch_factors(fm, layers, fallback, x1, chunk, outputs, None, n2, same)
            b2 = (
                b1
                if same
                else _batch_factors(fm, layers, fallback, x2, chunk, outputs, paths, n1, same)[0]
            )
        except _FallBackError as err:
            reduced = [layer.without(err.names) for layer in layers]
            layers = [layer for layer in reduced if layer is not None]
            fallback += [p for p in fm.params if p in err.names and p not in fallback]
            continue
        if b1.k != b2.k:
            raise NtklabValueError(
                f"x2: expected the model to give {b1.k} outputs as for x1, got {b2.k}"
            )
        return _accumulate(b1, b2, n1, n2, chunk, outputs, same, fm)


# ------------------------------------------------------------------ profile and costs


@dataclass(frozen=True)
class _Profile:
    """Per-example sizes of a model: covered layers with their positions, fallback size."""

    layers: tuple[tuple[_Layer, int], ...]  # (layer, P)
    fallback: int  # F: number of fallback scalar parameters
    activations: int  # elements of the forward's intermediate tensors, per example


def _profile(fm: FunctionalModel, x: Tensor | None) -> _Profile:
    """Measure positions per layer and the forward's tensors on ``x[:1]``; without a sample,
    assume one position per layer (exact for dense layers on vectors, a lower bound for
    convolutions and sequences) and :data:`_STATIC_ELEMENTS` tensors the size of each layer's
    input and output."""
    layers = list(_covered_layers(fm))
    if x is None:
        sized = tuple((layer, 1) for layer in layers)
        acts = _STATIC_ELEMENTS * sum(layer.width + layer.channels for layer in layers)
    else:
        x = check_batch("x", x[:1], fm)
        while True:
            try:
                fwd = _forward(fm, layers, x)
                break
            except _FallBackError as err:
                reduced = [layer.without(err.names) for layer in layers]
                layers = [layer for layer in reduced if layer is not None]
        sized = tuple(
            (layer, u.shape[1])
            for layer, u in zip(layers, fwd.inputs, strict=True)
            if u is not None
        )
        acts = fwd.elements
    covered = {p for layer, _ in sized for p in layer.params}
    fallback = sum(v.numel() for p, v in fm.params.items() if p not in covered)
    return _Profile(sized, fallback, acts)


def structured_flops(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    x: Tensor | None = None,
    symmetric: bool = False,
) -> float:
    """Approximate flops of :func:`ntk_structured` (GEMM-equivalent).

    Capture: one forward and ``k`` backward passes over the covered layers,
    ``(1 + k) sum 2 P C D`` per example; per layer the cheaper of the pairwise and
    per-example contractions (see :func:`ntk_structured`); fallback: a forward and ``k``
    backward passes with parameter gradients per example, ``(1 + 2k) sum 2 P C D``, plus the
    Gram ``2 n1 n2 k F`` (times ``k`` for full).

    Parameters
    ----------
    fm : FunctionalModel
    n1, n2 : int
        Numbers of inputs.
    k : int
        Number of outputs.
    outputs : {"trace", "full", "diagonal"}
    x : Tensor, optional
        A sample input (only ``x[:1]`` is run) to measure the positions per layer and the
        forward's memory. Without it every layer is taken to have one position: exact for
        dense layers on vectors, an underestimate for convolutions and sequences.
    symmetric : bool
        ``x2`` is None (factors computed once, symmetric tiles mirrored).
    """
    outputs = _check_outputs(outputs)
    prof = _profile(fm, x)
    inputs = n1 if symmetric else n1 + n2
    forward = sum(2.0 * p * layer.channels * layer.width for layer, p in prof.layers)
    forward = max(forward, float(prof.activations))  # a floor for models with no covered layer
    total = (1 + k) * forward * inputs
    for layer, p in prof.layers:
        total += min(
            _pairwise_flops(layer, n1, n2, p, p, k, outputs),
            _per_example_flops(layer, n1, n2, p, p, k, outputs, symmetric),
        )
    if prof.fallback:
        total += (1 + 2 * k) * forward * inputs
        total += 2.0 * n1 * n2 * k * prof.fallback * (k if outputs == "full" else 1)
    return total


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
      ``n P (D + k C)``, per-example layers ``n k C D'``, the fallback Jacobian ``n k F``;
    - the larger of one capture chunk of ``c`` examples (the forward's tensors, measured on
      ``x[:1]``, twice for one backward pass; the saved inputs ``c P D``; for the fallback
      ``k`` backward passes under ``vmap``) and one kernel tile (pairwise: ``(c P)^2`` for
      the input Gram plus ``(c P)^2`` times 1 (trace), ``k`` (diagonal), or the output group
      size squared (full) for the gradient Gram).

    Parameters are those of :func:`structured_flops`; ``chunk_size`` as in
    :func:`ntk_structured` (``c = chunk_size`` or ``max(n1, n2)``).

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
    c = min(chunk_size or max(n1, n2), max(n1, n2))
    batches = n1 if symmetric else n1 + n2
    kept = batches * k * prof.fallback
    inputs = 0
    tile = 0
    for layer, p in prof.layers:
        weight = layer.width if layer.weight is not None else 0
        inputs += c * p * layer.width
        if _choose_path(layer, n1, n2, p, k, outputs, symmetric) == "pairwise":
            kept += batches * p * (weight + k * layer.channels)
            rows = c * p
            group = _groups(k, c)[0].stop
            grams = {"trace": 1, "diagonal": k, "full": group * group}[outputs]
            tile = max(tile, rows * rows * (1 + grams) + 2 * k * rows * layer.channels)
        else:
            kept += batches * k * layer.channels * (weight + (layer.bias is not None))
            group = _groups(k, c)[0].stop
            tile = max(tile, (group * c) ** 2 if outputs == "full" else 0)
    capture = inputs + 2 * c * prof.activations
    if prof.fallback:
        capture = max(capture, c * k * (prof.activations + 2 * prof.fallback))
    return int(item * (kernel + kept + max(capture, tile)))
