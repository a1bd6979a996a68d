"""Graph neural network layers and multiplication by constants: :class:`Aggregate` and
:class:`DotGeneral`, with their finite modules :class:`AggregateLayer` and
:class:`DotGeneralLayer`.

Both are parameter-free linear maps of the positions of a representation ``(n, C, *S)``,
the same for every channel, :math:`y_{c,t} = \\sum_s M_{ts} x_{c,s}`, so they map the
covariance of a pair of positions by the bilinear form

.. math:: K'_{tt'} = \\sum_{s, s'} M^{(1)}_{ts} K_{ss'} M^{(2)}_{t's'},

the same for :math:`\\Theta` (neural-tangents' ``stax.Aggregate`` and ``stax.DotGeneral``,
arXiv:1912.02803). For :class:`Aggregate`, :math:`M^{(1)}` and :math:`M^{(2)}` are the
adjacencies of the two input graphs (Du, Hou, Salakhutdinov, Poczos, Wang & Xu, 2019,
"Graph Neural Tangent Kernel", arXiv:1905.13192); for :class:`DotGeneral` both are the one
map of a constant tensor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import NtklabTypeError, NtklabValueError
from .covariance import require_full, require_spatial, self_variances
from .engine import Flow, Flows, Layer, Plan, single_flow
from .kernel import KernelState

__all__ = ["Aggregate", "AggregateLayer", "DotGeneral", "DotGeneralLayer"]


def _positions_last(x: Tensor, batch_ndim: int, spatial_ndim: int) -> Tensor:
    """A full covariance ``(batch..., H, H', W, W')`` as ``(batch..., P, P')``."""
    firsts = [batch_ndim + 2 * k for k in range(spatial_ndim)]
    seconds = [batch_ndim + 2 * k + 1 for k in range(spatial_ndim)]
    x = x.permute(*range(batch_ndim), *firsts, *seconds)
    p = math.prod(x.shape[batch_ndim : batch_ndim + spatial_ndim])
    return x.reshape(*x.shape[:batch_ndim], p, p)


def _interleaved(x: Tensor, batch_ndim: int, shape: tuple[int, ...]) -> Tensor:
    """``(batch..., P, P')`` back as the full layout ``(batch..., H, H', W, W')``."""
    s = len(shape)
    x = x.reshape(*x.shape[:batch_ndim], *shape, *shape)
    order = [a for k in range(s) for a in (batch_ndim + k, batch_ndim + s + k)]
    return x.permute(*range(batch_ndim), *order)


# --------------------------------------------------------------------------------------------
# aggregation over graphs


def _aggregate(x: Tensor, a1: Tensor, a2: Tensor, batch_ndim: int) -> Tensor:
    """:math:`A_1^T K A_2` per pair of graphs: ``x`` of shape ``(n1, n2, N, N')`` with
    ``a1`` ``(n1, N, N)`` and ``a2`` ``(n2, N, N)``, or ``(n, N, N')`` with ``a1 = a2``."""
    if batch_ndim == 1:
        return a1.mT @ x @ a2
    return a1.mT[:, None] @ x @ a2[None]


@dataclass(frozen=True)
class Aggregate(Layer):
    """Aggregation by each graph's adjacency (a graph neural network layer;
    neural-tangents' ``stax.Aggregate``).

    Each node is replaced by the weighted sum of its predecessors, channel by channel:

    .. math:: y_{c j} = \\sum_i A_{ij} x_{c i}, \\qquad K'(G_1, G_2) = A_1^T K A_2,
        \\qquad \\Theta' = A_1^T \\Theta A_2,

    on the full node covariance :math:`K(G_1, G_2)_{ii'}` of each pair of graphs (Du et al.,
    2019, arXiv:1905.13192). The architecture then takes :class:`GraphBatch` inputs,
    features ``(n, C, N)`` with the adjacency ``(n, N, N)`` of each graph, in
    ``arch.kernel(g1, g2)`` and in the finite network of ``arch.to_torch`` alike.

    Notes
    -----
    Mapping from neural-tangents: features ``(n, N, C)`` (channels last) are
    ``features.permute(0, 2, 1)`` here; the dense ``pattern`` ``(n, N, N)`` is the
    ``adjacency`` as is (``pattern[g, i, j]``: an edge from ``i`` to ``j``), and
    ``kernel_fn(x1, x2, pattern=(p1, p2))`` is ``arch.kernel(GraphBatch(x1, p1),
    GraphBatch(x2, p2))``. The ``"SPARSE"`` pattern (edge lists ``(n, E, 2)``) becomes a
    dense adjacency with :func:`~ntklab.kernels.graph_batch.edges_to_adjacency`; the kernel
    is computed densely (:math:`O(N^3)` per pair of graphs). The nodes are the one spatial
    axis (stax's ``aggregate_axis`` over several axes is not supported).

    Graphs of different node counts are batched by padding them to a common ``N``. With
    ``arch.kernel(g1, g2, mask_constant=c)`` (NT's ``kernel_fn(x1, x2, pattern=(p1, p2),
    mask_constant=c)``) a node whose features all equal ``c`` (NaN: are NaN) is masked: the
    covariances with it are zero after every layer, so aggregation reads nothing from it
    and writes nothing to it whatever the adjacency holds in its row and column, and
    ``GlobalAvgPool`` averages over the unmasked nodes only: the kernel of the padded graphs
    is that of the graphs without padding. ``arch.to_torch(..., mask_constant=c)`` builds
    the finite network that does the same (masked nodes zeroed after every module). Without
    ``mask_constant``, padding nodes are ordinary nodes: isolated zero nodes still count in
    the pooling layers' averages.

    One difference from NT 0.6.5: NT zeroes the covariances of masked nodes only after
    layers declared ``remask_kernel=True``, not after activations whose value at 0 is not 0
    (``Polynomial`` with a constant term, ``Monomial(0)``), so its ``Aggregate`` after such
    an activation reads masked nodes at covariance :math:`\\phi(0)^2` although NT's own
    finite network (``apply_fn``, which zeroes every layer's masked inputs) does not; here
    every layer's output is remasked, as the finite network is.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Aggregate, Conv, GlobalAvgPool, GraphBatch
    >>> gnn = nl.serial(Conv(8, (1,)), nl.Relu(), Aggregate(), GlobalAvgPool(), nl.Dense(1))
    >>> g = GraphBatch(torch.randn(3, 2, 5, dtype=torch.float64), torch.ones(3, 5, 5))
    >>> gnn.kernel(g).ntk.shape
    torch.Size([3, 3])
    """

    @property
    def moves_positions(self) -> bool:
        return True

    @property
    def spatial_ndim(self) -> int | None:
        return 1

    @property
    def mixes_space(self) -> bool:
        return True

    @property
    def reads_adjacency(self) -> bool:
        return True

    @property
    def passes_through(self) -> bool:
        return True

    def mask_after(self, mask: Tensor) -> Tensor:
        """The mask of the output: that of the input (a masked node stays masked, as in
        neural-tangents' ``Aggregate``; its covariances are zeroed after the layer)."""
        return mask

    def _check(self, state: KernelState) -> tuple[Tensor, Tensor]:
        require_spatial("Aggregate", state, 1)
        require_full("Aggregate", state)
        if state.adjacency is None:
            raise NtklabValueError(
                "Aggregate: expected graph inputs, GraphBatch(features, adjacency), to "
                "aggregate over, got plain tensors without an adjacency"
            )
        a1, a2 = state.adjacency
        nodes = state.spatial_shape[0]
        if a1.shape[-1] != nodes:
            raise NtklabValueError(
                f"Aggregate: expected {a1.shape[-1]} nodes (the adjacency's), got a "
                f"representation of {nodes} positions (a layer before it changed them)"
            )
        return a1, a2

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        """:math:`A_1^T K A_2` with the adjacencies carried in ``state``."""
        a1, a2 = self._check(state)
        b = state.batch_ndim
        cov = _aggregate(state.cov, a1, a2, b)
        ntk = None if state.ntk is None else _aggregate(state.ntk, a1, a2, b)
        return dataclasses.replace(state, cov=cov, ntk=ntk)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        """Aggregate the pair state by both graphs' adjacencies, each input's own state by
        its own."""
        one = single_flow(self, flow)
        pair = self.propagate(one.pair, inplace=inplace)
        diag1 = self_variances(self.propagate(one.diag1, inplace=False))
        diag2 = None
        if one.diag2 is not None:
            diag2 = self_variances(self.propagate(one.diag2, inplace=False))
        return Flow(pair, diag1, diag2).refreshed()

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return AggregateLayer()


class AggregateLayer(nn.Module):
    """:math:`y_{g c j} = \\sum_i A_{g i j} x_{g c i}`: ``input @ adjacency`` for node
    features ``(n, C, N)`` and adjacency ``(n, N, N)``.

    The adjacency is set for the call by :class:`~ntklab.kernels.graph_batch.GraphNetwork`
    (the network ``Architecture.to_torch`` builds), or passed as ``forward``'s second
    argument when the module is used alone.
    """

    reads_adjacency = True

    def __init__(self) -> None:
        super().__init__()
        self.adjacency: Tensor | None = None

    def forward(self, input: Tensor, adjacency: Tensor | None = None) -> Tensor:
        a = self.adjacency if adjacency is None else adjacency
        if a is None:
            raise NtklabValueError(
                "adjacency: expected the adjacency of the graphs, got none; call the network "
                "of Architecture.to_torch with GraphBatch(features, adjacency)"
            )
        if input.ndim != 3 or a.shape != (input.shape[0], input.shape[2], input.shape[2]):
            raise NtklabValueError(
                f"adjacency: expected shape (n, N, N) for node features (n, C, N) of shape "
                f"{tuple(input.shape)}, got {tuple(a.shape)}"
            )
        return input @ a.to(input.dtype)


# --------------------------------------------------------------------------------------------
# multiplication by a constant

DimensionNumbers = tuple[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]
]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _dot_spec(x_ndim: int, const_ndim: int, dims: Any, is_lhs: bool) -> str:
    """The einsum of ``lax.dot_general`` of ``x`` and the constant (``x`` first in the
    spec), its output reordered so that ``x``'s axes 0 and 1 (batch, channels) lead."""
    (c_l, c_r), (b_l, b_r) = dims
    lhs_ndim, rhs_ndim = (const_ndim, x_ndim) if is_lhs else (x_ndim, const_ndim)
    lhs = list(_LETTERS[:lhs_ndim])
    rhs = list(_LETTERS[lhs_ndim : lhs_ndim + rhs_ndim])
    for a, b in (*zip(c_l, c_r, strict=True), *zip(b_l, b_r, strict=True)):
        rhs[b] = lhs[a]
    free_l = [lhs[i] for i in range(lhs_ndim) if i not in c_l and i not in b_l]
    free_r = [rhs[i] for i in range(rhs_ndim) if i not in c_r and i not in b_r]
    out = [lhs[i] for i in b_l] + free_l + free_r
    x_letters, const_letters = (rhs, lhs) if is_lhs else (lhs, rhs)
    lead = x_letters[:2]
    out = lead + [s for s in out if s not in lead]
    return f"{''.join(x_letters)},{''.join(const_letters)}->{''.join(out)}"


def _as_dims(value: object) -> DimensionNumbers:
    """``value`` as ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``."""
    parts: list[tuple[int, ...]] = []
    try:
        for pair in value:  # type: ignore[attr-defined]
            a, b = pair
            parts.extend((tuple(a), tuple(b)))
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 4 or any(
        isinstance(a, bool) or not isinstance(a, int) for part in parts for a in part
    ):
        raise NtklabTypeError(
            "dimension_numbers: expected ((lhs_contracting, rhs_contracting), (lhs_batch, "
            f"rhs_batch)), tuples of ints, got {value!r}"
        )
    return ((parts[0], parts[1]), (parts[2], parts[3]))


@dataclass(frozen=True, eq=False)
class DotGeneral(Layer):
    """Multiplication by a constant tensor along spatial axes (neural-tangents'
    ``stax.DotGeneral``): ``lax.dot_general(x, rhs, dimension_numbers)`` or
    ``lax.dot_general(lhs, x, dimension_numbers)``.

    Parameters
    ----------
    lhs, rhs : Tensor or float, optional
        The constant, on the left or on the right of the layer's input ``x`` (at most one;
        neither: the identity).
    dimension_numbers : ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))
        As ``lax.dot_general``'s, the axes of ``x`` counted in ntklab's channels-first
        layout ``(n, C, *S)``. Only spatial axes of ``x`` (``>= 2``) may be contracted or
        batched: contracting the channels is refused by stax too (they are the
        infinite-width axis), contracting the batch (which stax allows as a last layer) is
        refused here.

    Notes
    -----
    The output of ``lax.dot_general`` lists the batch axes, then the free axes of the left,
    then those of the right factor; here ``x``'s batch and channel axes are moved to the
    front, so the output is again ``(n, C, *T)``, ``T`` the other axes in
    ``lax.dot_general``'s order. With stax's ``channel_axis=1`` the axis numbers are the
    same as here. The layer is a linear map :math:`M` of positions, so :math:`K' = M K M^T`
    on the full covariance; without contracted axes every output position reads one input
    position and the spatial diagonal maps to itself, :math:`K'_{tt} = M_{ts(t)}^2
    K_{s(t)s(t)}`.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Conv, DotGeneral, GlobalAvgPool
    >>> diff = DotGeneral(rhs=torch.tensor([1.0, -1.0]), dimension_numbers=(((2,), (0,)), ((), ())))
    >>> net = nl.serial(Conv(8, (1, 3)), nl.Relu(), diff, GlobalAvgPool(), nl.Dense(1))
    >>> net.kernel(torch.randn(3, 2, 2, 7, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    lhs: Tensor | float | None = None
    rhs: Tensor | float | None = None
    dimension_numbers: Any = (((), ()), ((), ()))

    @property
    def moves_positions(self) -> bool:
        return True

    def __post_init__(self) -> None:
        if self.lhs is not None and self.rhs is not None:
            raise NtklabValueError(
                "lhs, rhs: expected at most one constant (the other factor is the layer's "
                "input), got both"
            )
        dims = _as_dims(self.dimension_numbers)
        object.__setattr__(self, "dimension_numbers", dims)
        const = self.lhs if self.lhs is not None else self.rhs
        if const is None:
            if dims != (((), ()), ((), ())):
                raise NtklabValueError(
                    "dimension_numbers: expected none without a constant (the identity), got "
                    f"{dims!r}"
                )
            return
        if isinstance(const, bool) or not isinstance(const, Tensor | int | float):
            raise NtklabTypeError(
                f"{'lhs' if self.is_lhs else 'rhs'}: expected a Tensor or a number, got "
                f"{type(const).__name__}"
            )
        (c_l, c_r), (b_l, b_r) = dims
        x_axes = (c_r + b_r) if self.is_lhs else (c_l + b_l)
        bad = [a for a in x_axes if a in (0, 1) or a < 0]
        if bad:
            raise NtklabValueError(
                "dimension_numbers: expected only spatial axes (>= 2) of the input (n, C, *S) "
                "to be contracted or batched: the channels are the infinite-width axis (stax "
                f"refuses them too) and the batch holds the inputs, got axis {bad[0]} in "
                f"{dims!r}"
            )
        t = torch.as_tensor(const)
        if t.is_complex():
            raise NtklabTypeError(f"constant: expected a real tensor, got {t.dtype}")
        c_axes = c_l if self.is_lhs else c_r
        b_axes = b_l if self.is_lhs else b_r
        if any(a < 0 or a >= t.ndim for a in c_axes + b_axes):
            raise NtklabValueError(
                f"dimension_numbers: expected axes of the constant below its {t.ndim} "
                f"dimension(s), got {dims!r}"
            )

    @property
    def is_lhs(self) -> bool:
        """Whether the constant is the left factor."""
        return self.lhs is not None

    @property
    def constant(self) -> Tensor | None:
        """The constant as a tensor (``None``: the identity)."""
        const = self.lhs if self.lhs is not None else self.rhs
        return None if const is None else torch.as_tensor(const)

    def apply(self, x: Tensor) -> Tensor:
        """The finite map: ``x`` ``(n, C, *S)`` to ``(n, C, *T)``."""
        const = self.constant
        if const is None:
            return x
        const = const.to(dtype=x.dtype, device=x.device)
        dims = self.dimension_numbers
        (c_l, c_r), (b_l, b_r) = dims
        x_axes = (c_r + b_r) if self.is_lhs else (c_l + b_l)
        c_axes = (c_l + b_l) if self.is_lhs else (c_r + b_r)
        if any(a >= x.ndim for a in x_axes):
            raise NtklabValueError(
                f"DotGeneral: expected inputs with axes {sorted(x_axes)}, got a representation "
                f"of shape {tuple(x.shape)}"
            )
        for a, c in zip(x_axes, c_axes, strict=True):
            if x.shape[a] != const.shape[c]:
                raise NtklabValueError(
                    f"DotGeneral: expected axis {a} of the input (shape {tuple(x.shape)}) to "
                    f"match axis {c} of the constant (shape {tuple(const.shape)}), got "
                    f"{x.shape[a]} and {const.shape[c]}"
                )
        return torch.einsum(_dot_spec(x.ndim, const.ndim, dims, self.is_lhs), x, const)

    def _contracts(self) -> bool:
        (c_l, c_r), _ = self.dimension_numbers
        return bool(c_r if self.is_lhs else c_l)

    @property
    def spatial_layer(self) -> bool:
        return True

    @property
    def mixes_space(self) -> bool:
        return self._contracts()

    @property
    def passes_through(self) -> bool:
        return True

    @property
    def drops_spatial_axes(self) -> bool:
        const = self.constant
        if const is None:
            return False
        (c_l, _), (b_l, _) = self.dimension_numbers
        return const.ndim != 2 * len(c_l) + len(b_l)

    def spatial_shape_after(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        try:
            out = self.apply(torch.empty((1, 1, *shape), device="meta"))
        except (NtklabValueError, RuntimeError):
            return shape
        return tuple(out.shape[2:])

    def matrix(self, shape: tuple[int, ...], like: Tensor) -> tuple[Tensor, tuple[int, ...]]:
        """The map :math:`M` of shape ``(|T|, |S|)`` for inputs of spatial shape ``shape``,
        and ``T``: the layer applied to the basis of positions."""
        p = math.prod(shape)
        basis = torch.eye(p, dtype=like.dtype, device=like.device).reshape(p, 1, *shape)
        out = self.apply(basis)  # shape: (P, 1, *T)
        return out.reshape(p, -1).T, tuple(out.shape[2:])

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if self.constant is None:
            return state
        if state.spatial_ndim == 0:
            raise NtklabValueError(
                "DotGeneral: expected a representation with spatial axes (n, C, *S) to "
                "multiply, got a flat (n, d) one"
            )
        if self._contracts():
            require_full("DotGeneral", state)
        m, shape = self.matrix(state.spatial_shape, state.cov)
        b, s = state.batch_ndim, state.spatial_ndim

        def apply(k: Tensor) -> Tensor:
            if not state.full_spatial:
                flat = k.reshape(*k.shape[:b], -1)
                return (flat @ (m * m).T).reshape(*k.shape[:b], *shape)
            out = m @ _positions_last(k, b, s) @ m.T
            return _interleaved(out, b, shape)

        cov = apply(state.cov)
        ntk = None if state.ntk is None else apply(state.ntk)
        return dataclasses.replace(
            state,
            cov=cov,
            ntk=ntk,
            spatial_ndim=len(shape),
            full_spatial=state.full_spatial and len(shape) > 0,
        )

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return DotGeneralLayer(self)


class DotGeneralLayer(nn.Module):
    """The map of :class:`DotGeneral` applied to a batch ``(n, C, *S)``."""

    def __init__(self, layer: DotGeneral) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, input: Tensor) -> Tensor:
        return self.layer.apply(input)

    def extra_repr(self) -> str:
        side = "lhs" if self.layer.is_lhs else "rhs"
        const = self.layer.constant
        shape = None if const is None else tuple(const.shape)
        return f"{side} of shape {shape}, dimension_numbers={self.layer.dimension_numbers}"
