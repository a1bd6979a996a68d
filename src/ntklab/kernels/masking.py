"""Finite networks on padded inputs: the forward pass that matches
``Architecture.kernel(..., mask_constant=c)``.

neural-tangents' ``apply_fn(..., mask_constant=c)`` (arXiv:1912.02803) zeroes the masked
positions of every layer's input, carries the masks through the layers (``Conv`` and
``AvgPool`` mask an output position when the input position at the centre of its window is
masked; ``Aggregate`` keeps the mask of its input, so it reads no masked node), averages
``GlobalAvgPool`` (and ``LayerNorm(axes="all")``) over the unmasked positions and gives
padded keys no attention weight. :class:`MaskedNetwork` does the same
around the modules that ``Architecture.to_torch(..., mask_constant=c)`` builds, inside
branches too: as on the kernel side (``run_chain``), each branch of
``FanOut``/``parallel``/``Residual`` carries its own mask, and a ``FanIn`` layer keeps the
first branch's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from torch import Tensor, nn

from ..errors import NtklabValueError
from .attention import SelfAttentionLayer
from .engine import Layer, masked_input
from .graphs import FanInConcat, FanInProd, FanInSum, FanOut, Parallel, Residual
from .normalization import LayerNormLayer
from .pooling import GlobalAvgPoolLayer

__all__ = ["MaskedNetwork", "check_maskable"]

# a representation and its mask, or one of each per branch (after FanOut)
Values: TypeAlias = Tensor | tuple[Tensor, ...]
Masks: TypeAlias = Tensor | tuple[Tensor | None, ...] | None
_FAN_IN = (FanInSum, FanInProd, FanInConcat)


def check_maskable(layers: Sequence[Layer], where: str = "layers") -> None:
    """Raise unless a finite network of ``layers`` can take masked inputs: a chain whose
    branches are ``FanOut``/``parallel``/``FanIn*``/``Residual`` (their modules carry one
    mask per branch)."""
    for i, layer in enumerate(layers):
        here = f"{where}[{i}]"
        if layer.sublayers and not isinstance(layer, Parallel | Residual):
            raise NtklabValueError(
                f"mask_constant: expected a chain whose branches are FanOut/parallel/"
                f"Residual for a finite network on masked inputs, got {type(layer).__name__} "
                f"at {here}"
            )
        if isinstance(layer, Parallel):
            for j, branch in enumerate(layer.branches):
                check_maskable(branch, f"{here}.branches[{j}]")
        elif isinstance(layer, Residual):
            check_maskable(layer.layers, f"{here}.branch")


class MaskedNetwork(nn.Module):
    """The modules of ``layers`` run in sequence on inputs padded with ``mask_constant``.

    ``forward(x)``: ``x`` ``(n, C, *S)``; its entries equal to ``mask_constant`` (NaN: its
    NaN entries) count as zero and a position whose channels all equal it is masked. After
    each module the masked positions of the output are zeroed (the mask follows
    :meth:`~ntklab.kernels.Layer.mask_after` when the spatial shape changes, and ends once
    the representation is flat); ``GlobalAvgPool`` and ``LayerNorm(axes="all")`` average over
    the unmasked positions and self-attention gives masked keys no weight. For graph
    networks ``Architecture.to_torch`` wraps it in
    :class:`~ntklab.kernels.graph_batch.GraphNetwork`, which hands the adjacency to the
    ``Aggregate`` modules and the features (padded nodes included) to this network.
    """

    takes_padding = True  # GraphNetwork lets the padding (NaN, inf) of its features through

    def __init__(self, net: nn.Sequential, layers: Sequence[Layer], mask_constant: float) -> None:
        super().__init__()
        check_maskable(layers)
        if len(net) != len(layers):  # pragma: no cover - built together by to_torch
            raise NtklabValueError(
                f"net: expected one module per layer ({len(layers)}), got {len(net)}"
            )
        self.net = net
        self.layers = tuple(layers)
        self.mask_constant = float(mask_constant)

    def forward(self, input: Tensor) -> Tensor:
        x, mask = masked_input("input", input, self.mask_constant)
        out, _ = run_masked(self.layers, self.net, x, mask)
        if not isinstance(out, Tensor):
            raise NtklabValueError(
                f"layers: expected a network with one output, got {len(out)} branches; close "
                "the FanOut with a FanIn layer"
            )
        return out

    def extra_repr(self) -> str:
        return f"mask_constant={self.mask_constant}"


def run_masked(
    layers: Sequence[Layer], modules: Iterable[nn.Module], x: Values, mask: Masks
) -> tuple[Values, Masks]:
    """The chain ``modules`` (one per layer of ``layers``) on ``x`` masked as ``mask``
    ``(n, *S)`` (``None`` once flat; a tuple of both per branch after ``FanOut``): the
    output and its mask."""
    for layer, module in zip(layers, modules, strict=True):
        x, mask = _masked_layer(layer, module, x, mask)
    return x, mask


def _masked_layer(layer: Layer, module: Any, x: Values, mask: Masks) -> tuple[Values, Masks]:
    """One layer of :func:`run_masked`: graph layers run their branches with their own
    masks (as ``Parallel.step`` and ``Residual.step`` do on the kernel side)."""
    if isinstance(layer, FanOut) and not isinstance(mask, tuple):
        return module(x), (mask,) * layer.n
    if isinstance(x, tuple) and isinstance(mask, tuple):
        if isinstance(layer, Parallel) and len(x) == len(layer.branches) == len(mask):
            outs = [
                run_masked(chain, seq, xi, mi)
                for chain, seq, xi, mi in zip(layer.branches, module.branches, x, mask, strict=True)
            ]
            return tuple(o[0] for o in outs), tuple(o[1] for o in outs)  # type: ignore[misc]
        if isinstance(layer, _FAN_IN):
            return _remask(layer, module(x), mask[0])  # the kernel keeps the first branch's
    if not isinstance(x, Tensor) or isinstance(mask, tuple):
        return module(x), mask  # the module raises on a tuple of the wrong length
    if isinstance(layer, Residual):
        branch, _ = run_masked(layer.layers, module.branch, x, mask)
        return _remask(layer, x + module.scale * branch, mask)
    return _remask(layer, _step(module, x, mask), mask)


def _remask(layer: Layer, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``x``, the output of ``layer`` on inputs masked as ``mask``, with its masked
    positions zeroed, and its mask (:meth:`Layer.mask_after` when the spatial shape changed
    or the layer moves positions, ``None`` once flat; a ``Residual`` keeps its input's, as
    on the kernel side)."""
    if mask is None or x.ndim == 2:
        return x, None
    moves = layer.moves_positions and not layer.sublayers
    if moves or tuple(x.shape[2:]) != tuple(mask.shape[1:]):
        mask = layer.mask_after(mask)
    return x.masked_fill(mask.unsqueeze(1), 0.0), mask


def _step(module: nn.Module, x: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return module(x)  # type: ignore[no-any-return]
    if isinstance(module, GlobalAvgPoolLayer) and x.ndim > 2:
        count = (~mask).flatten(1).sum(dim=1).to(x.dtype)  # shape: (n,)
        return x.flatten(2).sum(dim=2) / count[:, None]
    if isinstance(module, SelfAttentionLayer):
        module.key_mask = mask
        try:
            return module(x)  # type: ignore[no-any-return]
        finally:
            module.key_mask = None
    if isinstance(module, LayerNormLayer) and x.ndim > 2:
        module.mask = mask
        try:
            return module(x)  # type: ignore[no-any-return]
        finally:
            module.mask = None
    return module(x)  # type: ignore[no-any-return]
