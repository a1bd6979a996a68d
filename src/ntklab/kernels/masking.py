"""Finite networks on padded inputs: the forward pass that matches
``Architecture.kernel(..., mask_constant=c)``.

neural-tangents' ``apply_fn(..., mask_constant=c)`` (arXiv:1912.02803) zeroes the masked
positions of every layer's input, carries the masks through the layers (``Conv`` and
``AvgPool`` mask an output position when the input position at the centre of its window is
masked), averages ``GlobalAvgPool`` over the unmasked positions and gives padded keys no
attention weight. :class:`MaskedNetwork` does the same around the modules that
``Architecture.to_torch(..., mask_constant=c)`` builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from ..errors import NtklabValueError
from .attention import SelfAttentionLayer
from .engine import Layer, masked_input
from .normalization import LayerNorm
from .pooling import GlobalAvgPoolLayer

__all__ = ["MaskedNetwork", "check_maskable"]


def check_maskable(layers: Sequence[Layer]) -> None:
    """Raise unless a finite network of ``layers`` can take masked inputs: a chain without
    branches (the masks are carried between top-level modules) and no ``LayerNorm`` over
    positions."""
    for i, layer in enumerate(layers):
        if layer.sublayers or layer.reads_adjacency:
            raise NtklabValueError(
                f"mask_constant: expected a chain without branches or graphs for a finite "
                f"network on masked inputs, got {type(layer).__name__} at layers[{i}]"
            )
        if isinstance(layer, LayerNorm) and layer.axes == "all":
            raise NtklabValueError(
                "mask_constant: expected LayerNorm(axes='channel') on masked inputs (the "
                f"mean over positions would include the padding), got axes='all' at layers[{i}]"
            )


class MaskedNetwork(nn.Module):
    """The modules of ``layers`` run in sequence on inputs padded with ``mask_constant``.

    ``forward(x)``: ``x`` ``(n, C, *S)``; its entries equal to ``mask_constant`` (NaN: its
    NaN entries) count as zero and a position whose channels all equal it is masked. After
    each module the masked positions of the output are zeroed (the mask follows
    :meth:`~ntklab.kernels.Layer.mask_after` when the spatial shape changes, and ends once
    the representation is flat); ``GlobalAvgPool`` averages over the unmasked positions and
    self-attention gives masked keys no weight.
    """

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
        current: Tensor | None = mask
        for layer, module in zip(self.layers, self.net, strict=True):
            x = self._step(module, x, current)
            if current is None:
                continue
            if x.ndim == 2:
                current = None
                continue
            if tuple(x.shape[2:]) != tuple(current.shape[1:]):
                current = layer.mask_after(current)
            x = x.masked_fill(current.unsqueeze(1), 0.0)
        return x

    @staticmethod
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
        return module(x)  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"mask_constant={self.mask_constant}"
