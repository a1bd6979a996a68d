"""Masked graph batches: graphs of different node counts padded to a common ``N`` and masked
with ``mask_constant``, in ``Architecture.kernel`` and in the finite network of
``Architecture.to_torch``: parity with neural-tangents 0.6.5, a dense naive kernel of the
unpadded graphs, the finite network on the unpadded graphs, Monte Carlo, and bad input."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabValueError
from ntklab.kernels import Aggregate, Conv, GlobalAvgPool, GraphBatch

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_aggregate.json"
MASKED: list[dict[str, Any]] = json.loads(REFERENCE.read_text())["masked"]
PAD = -7.0
# arccos at correlations near 1 (a node with itself, off the kernel's diagonal pass) rounds
# to order sqrt(eps) * angle: 1e-8 relative
RTOL = 1e-8


def conv(w: float = 1.5, b: float = 0.1) -> Conv:
    return Conv(64, (1,), w_std=w, b_std=b)


def gnn1() -> nl.Architecture:
    return nl.serial(conv(), nl.Relu(), Aggregate(), GlobalAvgPool(), nl.Dense(1, 1.2, 0.05))


def gnn2() -> nl.Architecture:
    block = [conv(), nl.Relu(), Aggregate()]
    return nl.serial(block, block, GlobalAvgPool(), nl.Dense(1, 1.2, 0.05))


def activation_gnn(activation: nl.kernels.Layer) -> Callable[[], nl.Architecture]:
    return lambda: nl.serial(
        conv(), activation, Aggregate(), GlobalAvgPool(), nl.Dense(1, 1.2, 0.05)
    )


# the stacks of make_nt_aggregate_reference.py (MASKED_ARCHITECTURES), in ntklab's spelling
ARCHITECTURES: dict[str, Callable[[], nl.Architecture]] = {
    "gnn1": gnn1,
    "gnn2": gnn2,
    "polynomial": activation_gnn(nl.Polynomial((0.7, 1.0, 0.3))),
    "monomial0": activation_gnn(nl.Monomial(0)),
}
# where NT 0.6.5's masks look wrong (make_nt_aggregate_reference.DIFFERENT)
DIFFERENT = ("polynomial", "monomial0")


def _constant(case: dict[str, Any]) -> float:
    return math.nan if case["mask_constant"] == "nan" else float(case["mask_constant"])


def _batches(case: dict[str, Any]) -> tuple[GraphBatch, GraphBatch | None]:
    g1 = GraphBatch(torch.tensor(case["x1"], dtype=F64), torch.tensor(case["a1"], dtype=F64))
    g2 = None
    if case["x2"] is not None:
        g2 = GraphBatch(torch.tensor(case["x2"], dtype=F64), torch.tensor(case["a2"], dtype=F64))
    return g1, g2


def _assert_relative(got: torch.Tensor, want: torch.Tensor, rtol: float) -> None:
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= rtol * float(want.abs().max())


@pytest.mark.parametrize(
    "case", [c for c in MASKED if c["architecture"] not in DIFFERENT], ids=lambda c: c["name"]
)
def test_masked_gnn_matches_neural_tangents(case: dict[str, Any]) -> None:
    g1, g2 = _batches(case)
    k = ARCHITECTURES[case["architecture"]]().kernel(g1, g2, mask_constant=_constant(case))
    _assert_relative(k.nngp, torch.tensor(case["nngp"], dtype=F64), 1e-6)
    _assert_relative(k.ntk, torch.tensor(case["ntk"], dtype=F64), 1e-6)


def test_reference_padding_matters() -> None:
    """The NT references differ from the unmasked kernel of the zero-padded graphs (so the
    parity above tests the masks, not a kernel that ignores them)."""

    def zeroed(g: GraphBatch) -> GraphBatch:
        x = torch.nan_to_num(g.features, nan=0.0)
        return GraphBatch(torch.where(x == PAD, 0.0, x), g.adjacency)

    for case in MASKED[:2]:
        g1, g2 = _batches(case)
        arch = ARCHITECTURES[case["architecture"]]()
        unmasked = arch.kernel(zeroed(g1), None if g2 is None else zeroed(g2))
        ref = torch.tensor(case["ntk"], dtype=F64)
        assert float((unmasked.ntk - ref).abs().max()) > 1e-2 * float(ref.abs().max())


@pytest.mark.parametrize(
    "case", [c for c in MASKED if c["architecture"] in DIFFERENT], ids=lambda c: c["name"]
)
def test_where_neural_tangents_does_not_remask(case: dict[str, Any]) -> None:
    """Where NT 0.6.5 differs, by the evidence stored with its reference: NT does not remask
    the kernel after ``Polynomial`` and ``Monomial`` (``remask_kernel=False``). After
    ``Polynomial`` its masked kernel is NaN (its dual at the zero variance of the masked
    nodes); after ``Monomial(0)`` (value 1 at 0) its ``Aggregate`` and ``GlobalAvgPool``
    read the masked nodes, so its masked kernel is not its kernel of the unpadded graphs;
    NT's own finite network (``apply_fn``) ignores the padding in both. ntklab remasks
    after every layer, as the finite networks do: its masked kernel is NT's kernel of the
    unpadded graphs."""
    g1, g2 = _batches(case)
    k = ARCHITECTURES[case["architecture"]]().kernel(g1, g2, mask_constant=_constant(case))
    for name in ("nngp", "ntk"):
        unpadded = torch.tensor(case[f"nt_unpadded_{name}"], dtype=F64)
        _assert_relative(getattr(k, name), unpadded, 1e-6)
        nt_masked = torch.tensor(case[name], dtype=F64)
        if case["architecture"] == "polynomial":
            assert bool(nt_masked.isnan().all())
        else:
            gap = float((nt_masked - unpadded).abs().max())
            assert gap > 0.5 * float(unpadded.abs().max())
    assert case["nt_apply_gap"] < 1e-10


# --------------------------------------------------------------------------------------------
# against the unpadded graphs, without neural-tangents


def naive_gnn_kernel(
    graphs: list[tuple[torch.Tensor, torch.Tensor]], blocks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """NNGP and NTK of ``blocks`` x [1x1 Conv(1.5, 0.1), Relu, Aggregate], GlobalAvgPool,
    Dense(1.2, 0.05) between graphs of any node counts ``(features (C, m), adjacency (m,
    m))``: every layer on the joint covariance of all nodes of all graphs, the adjacency
    block-diagonal (Du et al., 2019, arXiv:1905.13192)."""
    x = torch.cat([f.T for f, _ in graphs])  # shape: (P, C), all nodes
    # shape: (P, P), block-diagonal
    adjacency = torch.block_diag(*[a for _, a in graphs])  # type: ignore[no-untyped-call]
    k = x @ x.T / x.shape[1]
    theta = torch.zeros_like(k)
    for _ in range(blocks):
        k = 1.5**2 * k + 0.1**2
        theta = 1.5**2 * theta + k
        d = k.diagonal().sqrt()
        c = (k / torch.outer(d, d)).clamp(-1.0, 1.0).fill_diagonal_(1.0)  # exact at i = j
        angle = torch.arccos(c)
        k = torch.outer(d, d) * (torch.sin(angle) + (math.pi - angle) * c) / (2 * math.pi)
        theta = theta * (math.pi - angle) / (2 * math.pi)
        k, theta = adjacency.T @ k @ adjacency, adjacency.T @ theta @ adjacency
    means = [torch.full((1, f.shape[1]), 1.0 / f.shape[1], dtype=F64) for f, _ in graphs]
    pool = torch.block_diag(*means)  # type: ignore[no-untyped-call]  # (G, P): node means
    k, theta = pool @ k @ pool.T, pool @ theta @ pool.T
    k = 1.2**2 * k + 0.05**2
    return k, 1.2**2 * theta + k


def random_graphs(
    seed: int, counts: list[int], channels: int = 3
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for m in counts:
        a = (torch.rand(m, m, generator=g) < 0.5) * 2 * torch.rand(m, m, generator=g, dtype=F64)
        out.append((torch.randn(channels, m, dtype=F64, generator=g), a))
    return out


def pad(
    graphs: list[tuple[torch.Tensor, torch.Tensor]], nodes: int, constant: float, seed: int
) -> GraphBatch:
    """The graphs padded to ``nodes`` with ``constant`` features and random (nonzero)
    adjacency weights from and to the padded nodes."""
    g = torch.Generator().manual_seed(seed)
    channels = graphs[0][0].shape[0]
    x = torch.full((len(graphs), channels, nodes), constant, dtype=F64)
    a = 0.5 + torch.rand(len(graphs), nodes, nodes, dtype=F64, generator=g)
    for i, (f, adj) in enumerate(graphs):
        m = f.shape[1]
        x[i, :, :m], a[i, :m, :m] = f, adj
    return GraphBatch(x, a)


@pytest.mark.parametrize("blocks", [1, 2])
@pytest.mark.parametrize("constant", [PAD, math.nan])
def test_padded_and_masked_is_the_kernel_of_the_unpadded_graphs(
    blocks: int, constant: float
) -> None:
    """Graphs of 2-6 nodes padded to 7 (the padded nodes joined to all others by nonzero
    weights) and masked: the kernel is the dense naive kernel of the unpadded graphs, self
    and cross; without the mask it is not."""
    graphs = random_graphs(blocks, [4, 2, 6, 3, 5])
    arch = gnn1() if blocks == 1 else gnn2()
    nngp, ntk = naive_gnn_kernel(graphs, blocks)
    whole = arch.kernel(pad(graphs, 7, constant, 0), mask_constant=constant)
    torch.testing.assert_close(whole.nngp, nngp, rtol=RTOL, atol=0.0)
    torch.testing.assert_close(whole.ntk, ntk, rtol=RTOL, atol=0.0)
    torch.testing.assert_close(whole.var1, nngp.diagonal(), rtol=RTOL, atol=0.0)
    cross = arch.kernel(
        pad(graphs[:2], 7, constant, 1), pad(graphs[2:], 7, constant, 2), mask_constant=constant
    )
    torch.testing.assert_close(cross.ntk, ntk[:2, 2:], rtol=RTOL, atol=0.0)
    torch.testing.assert_close(cross.nngp, nngp[:2, 2:], rtol=RTOL, atol=0.0)
    zero = pad(graphs, 7, 0.0, 0)  # isolated in nothing: zero nodes joined to all
    unmasked = arch.kernel(zero)
    assert float((unmasked.ntk - ntk).abs().max()) > 1e-2 * float(ntk.abs().max())


def test_naive_reference_is_the_kernel_of_equal_sized_graphs() -> None:
    """The naive reference agrees with ntklab's unmasked kernel where graphs need no padding
    (so the test above compares against the right kernel)."""
    graphs = random_graphs(5, [4, 4, 4])
    batch = GraphBatch(torch.stack([f for f, _ in graphs]), torch.stack([a for _, a in graphs]))
    nngp, ntk = naive_gnn_kernel(graphs, 2)
    k = gnn2().kernel(batch)
    torch.testing.assert_close(k.ntk, ntk, rtol=RTOL, atol=0.0)
    torch.testing.assert_close(k.nngp, nngp, rtol=RTOL, atol=0.0)


BRANCHED: dict[str, Callable[[], nl.Architecture]] = {
    "residual": lambda: nl.serial(
        conv(),
        nl.kernels.Residual([nl.Relu(), Aggregate(), conv(1.3, 0.3)], scale=0.8),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(1, 1.2, 0.05),
    ),
    "parallel": lambda: nl.serial(
        conv(),
        nl.kernels.FanOut(2),
        nl.kernels.parallel([Aggregate(), conv(1.3, 0.2)], conv(1.1, 0.4)),
        nl.kernels.FanInSum(),
        nl.Relu(),
        Aggregate(),
        GlobalAvgPool(),
        nl.Dense(1, 1.2, 0.05),
    ),
}


@pytest.mark.parametrize("name", sorted(BRANCHED))
def test_aggregate_in_branches_on_padded_graphs(name: str) -> None:
    """``Aggregate`` inside ``Residual`` and ``parallel`` branches: the masked kernel of
    graphs padded from 4 to 6 nodes is the unmasked kernel of the 4-node graphs, and the
    masked finite network gives the outputs of the unpadded graphs."""
    graphs = random_graphs(10, [4, 4, 4])
    short = GraphBatch(torch.stack([f for f, _ in graphs]), torch.stack([a for _, a in graphs]))
    arch = BRANCHED[name]()
    want = arch.kernel(short)
    got = arch.kernel(pad(graphs, 6, math.nan, 7), mask_constant=math.nan)
    torch.testing.assert_close(got.ntk, want.ntk, rtol=RTOL, atol=0.0)
    torch.testing.assert_close(got.nngp, want.nngp, rtol=RTOL, atol=0.0)
    net = arch.to_torch(8, mask_constant=PAD, dtype=F64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = net(pad(graphs, 6, PAD, 8))
        torch.testing.assert_close(out, net(short), rtol=1e-12, atol=1e-12)


def test_blocks_carry_the_masks() -> None:
    """Blocks of graph pairs (a small ``max_memory``) slice features, masks and adjacency
    together."""
    graphs = random_graphs(6, [3, 5, 2, 4, 5])
    batch = pad(graphs, 6, PAD, 3)
    arch = gnn2()
    whole = arch.kernel(batch, mask_constant=PAD)
    blocks = arch.kernel(batch, mask_constant=PAD, max_memory=30_000)
    torch.testing.assert_close(blocks.ntk, whole.ntk, rtol=1e-12, atol=0.0)
    other = arch.kernel(batch[:2], batch[2:], mask_constant=PAD, max_memory=30_000)
    torch.testing.assert_close(other.ntk, whole.ntk[:2, 2:], rtol=1e-8, atol=0.0)


# --------------------------------------------------------------------------------------------
# finite networks


@pytest.mark.parametrize("constant", [PAD, math.nan])
def test_finite_network_on_padding_is_the_network_on_each_graph(constant: float) -> None:
    """The same weights give the same outputs on the padded (masked) batch and on each
    graph alone with its own node count; on the zero-padded batch without masks they
    differ."""
    graphs = random_graphs(7, [4, 2, 6])
    arch = gnn2()
    net: Any = arch.to_torch(
        16, mask_constant=constant, generator=torch.Generator().manual_seed(0), dtype=F64
    )
    with torch.no_grad():
        out = net(pad(graphs, 8, constant, 4))
        alone = torch.cat([net(GraphBatch(f[None], a[None])) for f, a in graphs])
        torch.testing.assert_close(out, alone, rtol=1e-12, atol=1e-12)
        inner = net.net.net  # GraphNetwork -> MaskedNetwork -> Sequential, unmasked
        plain = nl.kernels.GraphNetwork(inner)(pad(graphs, 8, 0.0, 4))
    assert float((plain - alone).abs().max()) > 1e-3


def test_finite_network_monte_carlo_nngp() -> None:
    """The output covariance over initializations of masked finite GNNs is the masked NNGP
    within 4 standard errors per entry (exact in expectation at any width: the readout is
    linear in independent weights), and the NNGP of the zero-padded graphs is not."""
    graphs = random_graphs(8, [4, 2, 5])
    batch = pad(graphs, 6, PAD, 5)
    arch = nl.serial(
        Conv(8, (1,), w_std=1.5, b_std=1.0),  # large biases: the padding would weigh
        nl.Relu(),
        Aggregate(),
        GlobalAvgPool(),
        nl.Dense(1, w_std=1.2, b_std=0.05),
    )
    want = arch.kernel(batch, mask_constant=PAD).nngp
    unmasked = arch.kernel(pad(graphs, 6, 0.0, 5)).nngp
    gen = torch.Generator().manual_seed(1)

    def draw() -> torch.Tensor:
        net = arch.to_torch(8, mask_constant=PAD, generator=gen, dtype=F64, in_features=3)
        return net(batch)[:, 0]  # type: ignore[no-any-return]

    with torch.no_grad():
        f = torch.stack([draw() for _ in range(1500)])  # shape: (draws, n)
    products = f[:, :, None] * f[:, None, :]
    got, se = products.mean(0), products.std(0) / math.sqrt(f.shape[0])
    assert float(((got - want) / se).abs().max()) < 4.0
    assert float(((unmasked - want) / se).abs().max()) > 5.0


# --------------------------------------------------------------------------------------------
# bad input


def test_errors() -> None:
    graphs = random_graphs(9, [3, 4])
    batch = pad(graphs, 5, math.nan, 6)
    arch = gnn1()
    with pytest.raises(NtklabValueError, match=r"x1.features: expected finite values.*mask"):
        arch.kernel(batch)
    with pytest.raises(NtklabValueError, match=r"x1.features: expected finite values"):
        arch.kernel(batch, mask_constant=PAD)  # NaN is not the padding here
    net = arch.to_torch(8, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"input.features: expected finite values"):
        net(batch)
    empty = GraphBatch(batch.features.clone(), batch.adjacency)
    empty.features[1] = math.nan
    with pytest.raises(NtklabValueError, match="at least one unmasked position"):
        arch.kernel(empty, mask_constant=math.nan)
    with pytest.raises(NtklabValueError, match="at least one unmasked position"):
        arch.to_torch(8, dtype=F64, mask_constant=math.nan)(empty)
    with pytest.raises(NtklabValueError, match="Aggregate: expected graph inputs"):
        arch.kernel(batch.features, mask_constant=math.nan)
