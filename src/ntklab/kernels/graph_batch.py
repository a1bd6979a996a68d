"""Inputs of graph neural networks: node features with the adjacency of each graph.

A graph neural network reads, for each input graph, its node features and its adjacency
(which nodes pass messages to which). :class:`GraphBatch` carries both through
``Architecture.kernel`` (into the kernel state that :class:`~ntklab.kernels.Aggregate`
reads) and through the finite network of ``Architecture.to_torch``
(:class:`GraphNetwork`). This module imports no layer, so that the engine can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_precision
from ..errors import NtklabTypeError, NtklabValueError

__all__ = ["GraphBatch", "GraphNetwork", "edges_to_adjacency"]


@dataclass(frozen=True)
class GraphBatch:
    """A batch of graphs: node features and one adjacency per graph.

    Parameters
    ----------
    features : Tensor of shape (n, C, N)
        The features of the ``N`` nodes of each graph, channels first (the nodes are the one
        spatial axis; neural-tangents' ``(n, N, C)`` is ``features.permute(0, 2, 1)``).
        float32 or float64. Finite, except for padding: the kernel and the finite network
        accept entries equal to their ``mask_constant`` (NaN, inf or a number) and refuse
        other NaN or inf entries.
    adjacency : Tensor of shape (n, N, N)
        ``adjacency[g, i, j]``: the weight of the edge (arc) from node ``i`` to node ``j`` of
        graph ``g`` (0: none), neural-tangents' dense ``pattern`` as is. Aggregation replaces
        each node by the weighted sum of its predecessors, :math:`y_j = \\sum_i A_{ij} x_i`.
        Any real or boolean dtype, finite; it is converted to the features' dtype and
        device.

    Notes
    -----
    Graphs of different node counts share one ``N`` by padding. Padding nodes whose features
    all equal a ``mask_constant`` (``arch.kernel(g1, g2, mask_constant=c)``,
    ``arch.to_torch(..., mask_constant=c)``) are masked: neither read by aggregation nor
    counted by pooling, whatever their adjacency rows and columns hold, as in
    neural-tangents. Without ``mask_constant`` padding nodes of zero features are ordinary
    (isolated) nodes, which pooling layers average over.

    Examples
    --------
    >>> import torch
    >>> from ntklab.kernels import GraphBatch
    >>> g = GraphBatch(torch.randn(2, 3, 4), torch.ones(2, 4, 4))
    >>> g.shape
    torch.Size([2, 3, 4])
    """

    features: Tensor
    adjacency: Tensor

    def __post_init__(self) -> None:
        x, a = self.features, self.adjacency
        if not isinstance(x, Tensor):
            raise NtklabTypeError(
                f"features: expected a torch.Tensor of shape (n, C, N), got {type(x).__name__}"
            )
        if not isinstance(a, Tensor):
            raise NtklabTypeError(
                f"adjacency: expected a torch.Tensor of shape (n, N, N), got {type(a).__name__}"
            )
        if x.ndim != 3:
            raise NtklabValueError(
                f"features: expected a 3-D tensor of shape (n, C, N) (channels, then nodes), got "
                f"{x.ndim}-D shape {tuple(x.shape)}"
            )
        check_precision("features", x)
        if a.ndim != 3 or a.shape[1] != a.shape[2]:
            raise NtklabValueError(
                f"adjacency: expected a 3-D tensor of shape (n, N, N) (one square adjacency per "
                f"graph), got shape {tuple(a.shape)}"
            )
        n, c, nodes = x.shape
        if a.shape[0] != n:
            raise NtklabValueError(
                f"adjacency: expected one adjacency per graph, {n} (the rows of features), got "
                f"{a.shape[0]}"
            )
        if a.shape[1] != nodes:
            hint = (
                "; features look channels-last (n, N, C): pass features.permute(0, 2, 1)"
                if c == a.shape[1]
                else ""
            )
            raise NtklabValueError(
                f"adjacency: expected {nodes} nodes (the last axis of features {tuple(x.shape)}), "
                f"got shape {tuple(a.shape)}{hint}"
            )
        if min(c, nodes) == 0:
            raise NtklabValueError(
                f"features: expected channels and nodes, got shape {tuple(x.shape)}"
            )
        if a.is_complex():
            raise NtklabTypeError(f"adjacency: expected a real or boolean dtype, got {a.dtype}")
        a = a.to(dtype=x.dtype, device=x.device)
        check_finite("adjacency", a)
        object.__setattr__(self, "adjacency", a)

    @property
    def shape(self) -> torch.Size:
        """The shape ``(n, C, N)`` of the features."""
        return self.features.shape

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def __getitem__(self, rows: slice | Tensor) -> GraphBatch:
        """The graphs ``rows`` (a slice or an index tensor), features and adjacency."""
        return GraphBatch(self.features[rows], self.adjacency[rows])


def check_finite(name: str, x: Tensor) -> None:
    """Raise unless every entry of ``x`` is finite."""
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NtklabValueError(
            f"{name}: expected finite values, got {bad} NaN or inf entries"
            + (" (padding needs mask_constant)" if name.endswith("features") else "")
        )


def edges_to_adjacency(edges: Tensor, num_nodes: int) -> Tensor:
    """The dense adjacency of graphs given as edge lists (neural-tangents' ``"SPARSE"``
    pattern).

    Parameters
    ----------
    edges : Tensor of shape (n, E, 2), integer
        ``edges[g, e] = (i, j)``: an edge from node ``i`` to node ``j`` of graph ``g``. A
        repeated edge counts as many times; an edge with a negative end is padding (ignored),
        as neural-tangents reads it.
    num_nodes : int
        ``N``.

    Returns
    -------
    Tensor of shape (n, N, N), float64
        ``A[g, i, j]``: the number of edges from ``i`` to ``j`` in graph ``g``.
    """
    if not isinstance(edges, Tensor) or edges.is_floating_point() or edges.is_complex():
        raise NtklabTypeError(
            f"edges: expected an integer torch.Tensor of shape (n, E, 2), got {edges!r}"
        )
    if edges.ndim != 3 or edges.shape[2] != 2:
        raise NtklabValueError(
            f"edges: expected shape (n, E, 2) (tail and head of each edge), got "
            f"{tuple(edges.shape)}"
        )
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise NtklabValueError(f"num_nodes: expected a positive int, got {num_nodes!r}")
    edges = edges.long()
    if bool((edges >= num_nodes).any()):
        raise NtklabValueError(
            f"edges: expected node indices below num_nodes = {num_nodes}, got {int(edges.max())}"
        )
    n = edges.shape[0]
    keep = (edges >= 0).all(dim=2)  # shape: (n, E)
    graph = torch.arange(n, device=edges.device)[:, None].expand_as(keep)
    flat = (graph * num_nodes + edges[..., 0]) * num_nodes + edges[..., 1]
    out = torch.zeros(n * num_nodes * num_nodes, dtype=torch.float64, device=edges.device)
    out.index_add_(0, flat[keep], torch.ones(int(keep.sum()), dtype=torch.float64))
    return out.reshape(n, num_nodes, num_nodes)


class GraphNetwork(nn.Module):
    """A finite graph neural network: it takes a :class:`GraphBatch`, hands its adjacency
    to the aggregation modules inside ``net`` for the call, and runs ``net`` on the
    features (``Architecture.to_torch`` builds it for architectures with ``Aggregate``).

    Features must be finite unless ``net`` takes padded inputs (a
    :class:`~ntklab.kernels.masking.MaskedNetwork`, whose ``takes_padding`` is true)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, input: GraphBatch) -> Tensor:
        if not isinstance(input, GraphBatch):
            raise NtklabTypeError(
                "input: expected a GraphBatch(features, adjacency) (the network aggregates "
                f"over each graph's adjacency), got {type(input).__name__}"
            )
        if not getattr(self.net, "takes_padding", False):
            check_finite("input.features", input.features)
        readers: list[Any] = [m for m in self.net.modules() if getattr(m, "reads_adjacency", False)]
        for m in readers:
            m.adjacency = input.adjacency
        try:
            return self.net(input.features)  # type: ignore[no-any-return]
        finally:
            for m in readers:
                m.adjacency = None
