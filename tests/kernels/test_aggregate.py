"""Graph neural network aggregation (``Aggregate``, ``GraphBatch``) and multiplication by a
constant (``DotGeneral``): parity with neural-tangents, dense naive references, Monte Carlo
of the finite network, and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    Aggregate,
    Conv,
    DotGeneral,
    FanInConcat,
    FanInSum,
    FanOut,
    Flatten,
    GlobalAvgPool,
    GraphBatch,
    Identity,
    edges_to_adjacency,
    parallel,
)
from ntklab.kernels.aggregate import AggregateLayer

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_aggregate.json"
DATA: dict[str, Any] = json.loads(REFERENCE.read_text())


def _gnn() -> nl.Architecture:
    block = [Conv(64, (1,), w_std=1.5, b_std=0.1), nl.Relu(), Aggregate()]
    return nl.serial(block, block, GlobalAvgPool(), nl.Dense(1, w_std=1.2, b_std=0.05))


def _graphs(seed: int, n: int = 3, c: int = 2, nodes: int = 5) -> GraphBatch:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, nodes, generator=g, dtype=F64)
    a = (torch.rand(n, nodes, nodes, generator=g) < 0.5).to(F64)
    return GraphBatch(x, a * torch.rand(n, nodes, nodes, generator=g, dtype=F64) * 2)


@pytest.mark.parametrize("case", DATA["gnn"], ids=lambda c: c["name"])
def test_gnn_matches_neural_tangents(case: dict[str, Any]) -> None:
    g1 = GraphBatch(torch.tensor(case["x1"], dtype=F64), torch.tensor(case["a1"], dtype=F64))
    g2 = None
    if case["x2"] is not None:
        g2 = GraphBatch(torch.tensor(case["x2"], dtype=F64), torch.tensor(case["a2"], dtype=F64))
    k = _gnn().kernel(g1, g2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=0)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=0)


def _dot_layer(case: dict[str, Any]) -> DotGeneral:
    dims = tuple(tuple(tuple(p) for p in part) for part in case["dimension_numbers"])
    if case["lhs"] is not None:
        return DotGeneral(lhs=torch.tensor(case["lhs"], dtype=F64), dimension_numbers=dims)
    rhs = case["rhs"]
    const = rhs if isinstance(rhs, float) else torch.tensor(rhs, dtype=F64)
    return DotGeneral(rhs=const, dimension_numbers=dims)


@pytest.mark.parametrize("case", DATA["dot"], ids=lambda c: c["name"])
def test_dot_general_matches_neural_tangents(case: dict[str, Any]) -> None:
    arch = nl.serial(
        Conv(64, (2, 2), padding="SAME", w_std=1.5, b_std=0.1),
        nl.Relu(),
        _dot_layer(case),
        GlobalAvgPool(),
        nl.Dense(1, w_std=1.2, b_std=0.05),
    )
    k = arch.kernel(torch.tensor(case["x1"], dtype=F64), torch.tensor(case["x2"], dtype=F64))
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=0)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=0)


@pytest.mark.parametrize("pool", ["flatten", "global"])
def test_aggregate_of_inputs_matches_the_aggregated_features(pool: str) -> None:
    """Right after the input the kernel is exact: the channel average of the aggregated
    features :math:`y = x A`, i.e. :math:`A_1^T K_0 A_2`, read at equal nodes (Flatten) or
    summed over all node pairs (GlobalAvgPool)."""
    g1, g2 = _graphs(1), _graphs(2, n=2)
    last = Flatten() if pool == "flatten" else GlobalAvgPool()
    k = nl.serial(Aggregate(), last).kernel(g1, g2)
    y1, y2 = g1.features @ g1.adjacency, g2.features @ g2.adjacency  # shape: (n, C, N)
    c, nodes = y1.shape[1], y1.shape[2]
    if pool == "flatten":
        want = torch.einsum("acj,bcj->ab", y1, y2) / (c * nodes)
    else:
        want = torch.einsum("ac,bc->ab", y1.sum(2), y2.sum(2)) / (c * nodes**2)
    torch.testing.assert_close(k.nngp, want, rtol=1e-12, atol=1e-12)


def test_aggregate_of_gaussian_node_features_monte_carlo() -> None:
    """Gaussian node features with the covariance :math:`K` of a Conv layer's output,
    aggregated by the adjacency, have the covariance :math:`A_1^T K A_2` that the layer
    computes (sampled jointly over the nodes of two graphs)."""
    g = _graphs(3, n=2, nodes=4)
    conv = Conv(1, (1,), w_std=1.3, b_std=0.4)
    # The full node covariance of a 1x1 convolution of the input: w^2 K0 + b^2.
    x = g.features
    k0 = torch.einsum("gci,hcj->gihj", x, x) / x.shape[1]  # shape: (2, N, 2, N)
    cov = (1.3**2 * k0 + 0.4**2).reshape(8, 8)
    z = torch.distributions.MultivariateNormal(
        torch.zeros(8, dtype=F64), cov + 1e-12 * torch.eye(8, dtype=F64)
    ).sample((200_000,))
    z = z.reshape(-1, 2, 4)  # samples of the pre-activations of both graphs
    y = torch.einsum("sgi,gij->sgj", z, g.adjacency)  # aggregated, shape: (S, 2, N)
    got = nl.serial(conv, Aggregate(), Flatten()).kernel(g).nngp
    # Flatten averages the same-node covariances over the nodes.
    prod = torch.einsum("sgj,shj->sgh", y, y) / 4
    mean, se = prod.mean(0), prod.std(0) / prod.shape[0] ** 0.5
    assert bool(((mean - got).abs() < 4 * se + 1e-9).all()), (mean, got, se)


def test_finite_network_output_covariance_monte_carlo() -> None:
    """The output covariance of many finite GNNs of one hidden layer is the NNGP (exact at
    any width: the readout is linear in independent weights), within 4 standard errors."""
    g = _graphs(4, n=3, nodes=5)
    arch = nl.serial(
        Conv(8, (1,), w_std=1.5, b_std=0.1),
        nl.Relu(),
        Aggregate(),
        GlobalAvgPool(),
        nl.Dense(1, w_std=1.2, b_std=0.05),
    )
    want = arch.kernel(g).nngp
    gen = torch.Generator().manual_seed(0)
    outs = []
    with torch.no_grad():
        for _ in range(1500):
            net = arch.to_torch(8, generator=gen, dtype=F64, in_features=2)
            outs.append(net(g)[:, 0])
    f = torch.stack(outs)  # shape: (M, n)
    prod = f[:, :, None] * f[:, None, :]
    mean, se = prod.mean(0), prod.std(0) / prod.shape[0] ** 0.5
    assert bool(((mean - want).abs() < 4 * se).all()), (mean, want, se)
    # the transposed adjacency (edges reversed) gives another kernel, outside the error bars
    flipped = arch.kernel(GraphBatch(g.features, g.adjacency.mT)).nngp
    assert bool(((mean - flipped).abs() > 4 * se).any())


def test_aggregate_module_sums_predecessors() -> None:
    g = _graphs(5)
    out = AggregateLayer()(g.features, g.adjacency)
    x, a = g.features, g.adjacency
    want = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(x.shape[2]):
            for i in range(x.shape[2]):
                want[n, :, j] += a[n, i, j] * x[n, :, i]
    torch.testing.assert_close(out, want)


def test_aggregate_in_branches_is_linear() -> None:
    """Concatenating the aggregated and the identity branch averages their kernels."""
    g1, g2 = _graphs(6), _graphs(7, n=2)
    head = [Conv(64, (1,), w_std=1.5, b_std=0.1), nl.Relu()]
    tail = [GlobalAvgPool(), nl.Dense(1, w_std=1.2, b_std=0.05)]
    mixed = nl.serial(head, FanOut(2), parallel(Aggregate(), Identity()), FanInConcat(), tail)
    k = mixed.kernel(g1, g2)
    k_agg = nl.serial(head, Aggregate(), tail).kernel(g1, g2)
    k_id = nl.serial(head, tail).kernel(g1, g2)
    torch.testing.assert_close(k.nngp, (k_agg.nngp + k_id.nngp) / 2)
    torch.testing.assert_close(k.ntk, (k_agg.ntk + k_id.ntk) / 2)
    assert not torch.allclose(k_agg.nngp, k_id.nngp, rtol=1e-2)


def test_aggregate_after_branches_of_convolutions() -> None:
    """Graph inputs keep their adjacency through branches of convolutions (which must not
    take the fused convolution kernel): the sum of two independent 1x1 convolutions is one
    with the variances doubled, before and inside the aggregation."""
    g1, g2 = _graphs(13), _graphs(14, n=2)
    r = 2**0.5

    def c(w: float = 1.5, b: float = 0.1) -> Conv:
        return Conv(64, (1,), w_std=w, b_std=b)

    tail = [nl.Relu(), Aggregate(), GlobalAvgPool(), nl.Dense(1, w_std=1.2, b_std=0.05)]
    block = [c(), nl.Relu(), Aggregate(), c()]  # Aggregate inside a branch of Conv, Relu
    archs = {
        "after": (
            nl.serial(c(), FanOut(2), parallel(c(), c()), FanInSum(), *tail),
            nl.serial(c(), c(1.5 * r, 0.1 * r), *tail),
        ),
        "inside": (
            nl.serial(c(), FanOut(2), parallel(block, block), FanInSum(), *tail),
            nl.serial(c(), c(), nl.Relu(), Aggregate(), c(1.5 * r, 0.1 * r), *tail),
        ),
    }
    with torch.no_grad():  # in place: where the fused kernels would run
        for summed, single in archs.values():
            got, want = summed.kernel(g1, g2), single.kernel(g1, g2)
            torch.testing.assert_close(got.ntk, want.ntk, rtol=1e-10, atol=0)
            torch.testing.assert_close(got.nngp, want.nngp, rtol=1e-10, atol=0)


def test_blocks_and_self_kernel_agree() -> None:
    g = _graphs(8, n=5)
    arch = _gnn()
    k = arch.kernel(g)
    blocked = arch.kernel(g, max_memory=20_000)  # blocks of 2 graphs
    cross = arch.kernel(g, g)
    torch.testing.assert_close(blocked.ntk, k.ntk, rtol=1e-12, atol=0)
    torch.testing.assert_close(cross.ntk, k.ntk, rtol=1e-7, atol=0)
    torch.testing.assert_close(k.var1, torch.diagonal(k.nngp))


def test_kernel_is_differentiable_in_features_and_adjacency() -> None:
    g = _graphs(12, n=2, nodes=3)
    arch = nl.serial(
        Conv(8, (1,), w_std=1.5, b_std=0.1), nl.Relu(), Aggregate(), GlobalAvgPool(), nl.Dense(1)
    )
    x = g.features.clone().requires_grad_(True)
    a = g.adjacency.clone().requires_grad_(True)

    def ntk(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return arch.kernel(GraphBatch(x, a), GraphBatch(x[:1] * 0.5, a[:1])).ntk

    assert torch.autograd.gradcheck(ntk, (x, a))


def test_edges_to_adjacency() -> None:
    edges = torch.tensor([[[0, 1], [1, 2], [0, 1], [-1, 2]], [[2, 0], [2, 2], [0, -1], [1, 0]]])
    a = edges_to_adjacency(edges, 3)
    want = torch.zeros(2, 3, 3, dtype=F64)
    want[0, 0, 1], want[0, 1, 2] = 2, 1
    want[1, 2, 0], want[1, 2, 2], want[1, 1, 0] = 1, 1, 1
    torch.testing.assert_close(a, want)


@pytest.mark.parametrize(
    ("lhs", "rhs", "dims", "einsum"),
    [
        (None, "m", (((3,), (0,)), ((), ())), "nchw,wk->nchk"),
        ("m2", None, (((1,), (2,)), ((), ())), "kh,nchw->nckw"),
        (None, "v", (((), ()), ((3,), (0,))), "nchw,w->ncwh"),  # lax: batch axes first
        (None, "v2", (((), ()), ((), ())), "nchw,k->nchwk"),
    ],
)
def test_dot_general_kernel_of_inputs(
    lhs: str | None, rhs: str | None, dims: Any, einsum: str
) -> None:
    """Right after the input the kernel is the channel and position average of the products
    of the mapped inputs (Flatten reads equal positions)."""
    g = torch.Generator().manual_seed(9)
    consts = {
        "m": torch.randn(4, 5, generator=g, dtype=F64),
        "m2": torch.randn(2, 3, generator=g, dtype=F64),
        "v": torch.randn(4, generator=g, dtype=F64),
        "v2": torch.randn(2, generator=g, dtype=F64),
    }
    x1 = torch.randn(3, 2, 3, 4, generator=g, dtype=F64)
    x2 = torch.randn(2, 2, 3, 4, generator=g, dtype=F64)
    const = consts[lhs or rhs]  # type: ignore[index]
    layer = (
        DotGeneral(lhs=const, dimension_numbers=dims)
        if lhs
        else DotGeneral(rhs=const, dimension_numbers=dims)
    )
    y1, y2 = (torch.einsum(einsum, *((const, x) if lhs else (x, const))) for x in (x1, x2))
    torch.testing.assert_close(
        layer.module(None, None, generator=None, dtype=F64, device=None)(x1), y1
    )
    k = nl.serial(layer, Flatten()).kernel(x1, x2)
    want = y1.flatten(1) @ y2.flatten(1).T / y1[0].numel()
    torch.testing.assert_close(k.nngp, want, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------
# bad input


def test_graph_batch_refuses_bad_shapes() -> None:
    x = torch.randn(3, 2, 5, dtype=F64)
    with pytest.raises(
        NtklabValueError, match=r"adjacency: expected a 3-D tensor of shape \(n, N, N\)"
    ):
        GraphBatch(x, torch.ones(3, 5))
    with pytest.raises(NtklabValueError, match=r"adjacency: expected a 3-D tensor"):
        GraphBatch(x, torch.ones(3, 5, 4))
    with pytest.raises(NtklabValueError, match=r"adjacency: expected 5 nodes"):
        GraphBatch(x, torch.ones(3, 4, 4))
    with pytest.raises(NtklabValueError, match="one adjacency per graph, 3"):
        GraphBatch(x, torch.ones(2, 5, 5))
    with pytest.raises(NtklabValueError, match=r"channels-last \(n, N, C\)"):
        GraphBatch(x.permute(0, 2, 1), torch.ones(3, 5, 5))
    with pytest.raises(NtklabValueError, match=r"features: expected a 3-D tensor"):
        GraphBatch(torch.randn(3, 5), torch.ones(3, 5, 5))
    with pytest.raises(NtklabTypeError, match="features: expected float32 or float64"):
        GraphBatch(x.half(), torch.ones(3, 5, 5))
    with pytest.raises(NtklabValueError, match="adjacency: expected finite values"):
        GraphBatch(x, torch.full((3, 5, 5), float("nan")))


def test_aggregate_refuses_missing_or_mismatched_graphs() -> None:
    g = _graphs(10)
    arch = _gnn()
    with pytest.raises(NtklabValueError, match="Aggregate: expected graph inputs"):
        arch.kernel(g.features)
    with pytest.raises(NtklabTypeError, match="x2: expected a GraphBatch"):
        arch.kernel(g, g.features)
    with pytest.raises(NtklabValueError, match="x2: expected graphs of x1's channels and nodes"):
        arch.kernel(g, _graphs(11, nodes=4))
    net = arch.to_torch(8, dtype=F64)
    with pytest.raises(NtklabTypeError, match="input: expected a GraphBatch"):
        net(g.features)
    with pytest.raises(NtklabValueError, match="adjacency: expected the adjacency"):
        AggregateLayer()(g.features)


def test_dot_general_refuses_batch_and_channel_axes() -> None:
    v = torch.ones(3)
    with pytest.raises(NtklabValueError, match="channels are the infinite-width axis"):
        DotGeneral(rhs=v, dimension_numbers=(((1,), (0,)), ((), ())))
    with pytest.raises(NtklabValueError, match="got axis 0"):
        DotGeneral(rhs=v, dimension_numbers=(((), ()), ((0,), (0,))))
    with pytest.raises(NtklabValueError, match="at most one constant"):
        DotGeneral(lhs=v, rhs=v)
    with pytest.raises(NtklabTypeError, match="dimension_numbers: expected"):
        DotGeneral(rhs=v, dimension_numbers=((2,), (0,)))
    with pytest.raises(NtklabValueError, match="axes of the constant below"):
        DotGeneral(rhs=v, dimension_numbers=(((2,), (1,)), ((), ())))
    arch = nl.serial(DotGeneral(rhs=v, dimension_numbers=(((2,), (0,)), ((), ()))), Flatten())
    with pytest.raises(NtklabValueError, match="to match axis 0 of the constant"):
        arch.kernel(torch.randn(2, 2, 4, 5, dtype=F64))
