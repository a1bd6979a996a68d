"""Graph architectures (FanOut, parallel, FanInSum/Concat/Prod, repeat, Residual): parity
with neural-tangents, Monte Carlo of the finite graph modules, the carry plan and bad graphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.empirical import monte_carlo_kernel
from ntklab.errors import NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    FanInConcat,
    FanInProd,
    FanInSum,
    FanOut,
    Flatten,
    GlobalAvgPool,
    Residual,
    parallel,
    repeat,
)

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_graphs.json"


def build(spec: list[dict[str, Any]]) -> list[nl.kernels.Layer]:
    """ntklab layers from the JSON spec of make_nt_graph_reference.py (widths are NT's
    ``out_dim``/``out_chan``, which weigh a concatenation)."""
    layers: list[nl.kernels.Layer] = []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Conv":
            layers.append(
                Conv(
                    filter_shape=tuple(layer["filter"]),
                    strides=tuple(layer["strides"]),
                    padding=layer["padding"],
                    w_std=layer["w_std"],
                    b_std=layer["b_std"],
                    width=layer["width"],
                )
            )
        elif kind == "Dense":
            layers.append(
                nl.Dense(w_std=layer["w_std"], b_std=layer["b_std"], width=layer["width"])
            )
        elif kind == "AvgPool":
            layers.append(
                AvgPool(tuple(layer["window"]), tuple(layer["strides"]), layer["padding"])
            )
        elif kind == "FanOut":
            layers.append(FanOut(layer["n"]))
        elif kind == "parallel":
            layers.append(parallel(*[build(b) for b in layer["branches"]]))
        else:
            layers.append(
                {
                    "GlobalAvgPool": GlobalAvgPool,
                    "Flatten": Flatten,
                    "FanInSum": FanInSum,
                    "FanInProd": FanInProd,
                    "FanInConcat": FanInConcat,
                    "Identity": nl.Identity,
                    "Relu": nl.Relu,
                    "Erf": nl.Erf,
                }[kind]()
            )
    return layers


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_parity_with_neural_tangents(case: dict[str, Any]) -> None:
    arch = nl.serial(*build(case["architecture"]))
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------- Monte Carlo of the finite graph modules


def _x_flat(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 5, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _x_img(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 2, 5, 5, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _d(w: float, b: float, width: int | None = None) -> nl.Dense:
    return nl.Dense(w_std=w, b_std=b, width=width)


MC_ARCHITECTURES = {
    "dense_sum": (
        lambda: nl.serial(
            _d(1.2, 0.1),
            FanOut(2),
            parallel([nl.Relu(), _d(1.4, 0.0)], [nl.Erf(), _d(1.1, 0.2)]),
            FanInSum(),
            nl.Relu(),
            _d(1.0, 0.1),
        ),
        _x_flat,
    ),
    "dense_concat_unequal_widths": (
        lambda: nl.serial(
            _d(1.2, 0.1, 512),
            FanOut(3),
            parallel([nl.Relu(), _d(1.4, 0.0, 64)], [nl.Erf(), _d(0.5, 0.2, 448)], nl.Identity()),
            FanInConcat(),
            _d(1.1, 0.1),
            nl.Relu(),
            _d(1.0, 0.1),
        ),
        _x_flat,
    ),
    "dense_prod": (
        lambda: nl.serial(
            _d(1.2, 0.1),
            FanOut(2),
            parallel(_d(0.8, 0.3), [nl.Relu(), _d(1.4, 0.1)]),
            FanInProd(),
            _d(1.1, 0.1),
            nl.Relu(),
            _d(1.0, 0.1),
        ),
        _x_flat,
    ),
    "conv_pool_in_branch_sum": (
        lambda: nl.serial(
            Conv(filter_shape=(3, 3), w_std=1.5, b_std=0.1),
            FanOut(2),
            parallel(
                [nl.Relu(), AvgPool((3, 3), (1, 1), "SAME"), Conv(filter_shape=(3, 3), w_std=1.2)],
                nl.Identity(),
            ),
            FanInSum(),
            nl.Relu(),
            Flatten(),
            _d(1.0, 0.1),
        ),
        _x_img,
    ),
    "conv_concat_gap": (
        lambda: nl.serial(
            Conv(filter_shape=(3, 3), w_std=1.5, b_std=0.1),
            FanOut(2),
            parallel(
                [nl.Relu(), Conv(filter_shape=(3, 3), w_std=1.2, width=32)],
                [nl.Relu(), Conv(filter_shape=(1, 1), w_std=1.1, b_std=0.1, width=96)],
            ),
            FanInConcat(),
            Conv(filter_shape=(1, 1), w_std=1.2, b_std=0.1),
            nl.Relu(),
            GlobalAvgPool(),
            _d(1.0, 0.1),
        ),
        _x_img,
    ),
}


@pytest.mark.parametrize("name", sorted(MC_ARCHITECTURES))
def test_kernel_matches_monte_carlo_of_the_finite_graph(name: str) -> None:
    """The analytic kernels against the average over random finite networks built by
    ``to_torch`` (width 512 for Dense, 128 channels for Conv): within 5 standard errors plus
    4% of the kernel's scale (the O(1/width) bias)."""
    make, inputs = MC_ARCHITECTURES[name]
    arch = make()
    x1, x2 = inputs(3, 1), inputs(2, 2)
    width = 128 if x1.ndim > 2 else 512
    mc = monte_carlo_kernel(
        arch, x1, x2, width=width, n_samples=24, generator=torch.Generator().manual_seed(7)
    )
    k = arch.kernel(x1, x2)
    for got, se, want in ((mc.ntk, mc.ntk_stderr, k.ntk), (mc.nngp, mc.nngp_stderr, k.nngp)):
        bound = 5 * se + 0.04 * want.abs().max()
        assert ((got - want).abs() <= bound).all(), (name, got, want, se)


def test_concatenation_weights_matter_against_monte_carlo() -> None:
    """The width weighting of FanInConcat is visible: the kernel of equal widths misses the
    Monte Carlo average of the unequal-width network by more than the tolerance above."""
    make, inputs = MC_ARCHITECTURES["dense_concat_unequal_widths"]
    arch = make()
    x1, x2 = inputs(3, 1), inputs(2, 2)
    mc = monte_carlo_kernel(
        arch, x1, x2, width=512, n_samples=24, generator=torch.Generator().manual_seed(7)
    )
    equal = nl.serial(
        _d(1.2, 0.1, 512),
        FanOut(3),
        parallel([nl.Relu(), _d(1.4, 0.0, 512)], [nl.Erf(), _d(0.5, 0.2, 512)], nl.Identity()),
        FanInConcat(),
        _d(1.1, 0.1),
        nl.Relu(),
        _d(1.0, 0.1),
    ).kernel(x1, x2)
    bound = 5 * mc.ntk_stderr + 0.04 * equal.ntk.abs().max()
    assert ((mc.ntk - equal.ntk).abs() > bound).any()


# ----------------------------------------------------------------- structure, plan, errors


def test_residual_is_fanout_parallel_fansum() -> None:
    x1, x2 = _x_img(3, 1), _x_img(2, 2)
    branch = [nl.Relu(), Conv(filter_shape=(3, 3), w_std=1.2, b_std=0.1)]
    sugar = nl.serial(
        Conv(filter_shape=(3, 3)), Residual(branch, scale=0.7), nl.Relu(), GlobalAvgPool(), _d(1, 0)
    )
    scaled = [*branch[:-1], Conv(filter_shape=(3, 3), w_std=1.2 * 0.7, b_std=0.1 * 0.7)]
    graph = nl.serial(
        Conv(filter_shape=(3, 3)),
        FanOut(2),
        parallel(nl.Identity(), scaled),
        FanInSum(),
        nl.Relu(),
        GlobalAvgPool(),
        _d(1, 0),
    )
    for b in (None, x2):
        torch.testing.assert_close(sugar.kernel(x1, b).nngp, graph.kernel(x1, b).nngp)
        torch.testing.assert_close(sugar.kernel(x1, b).ntk, graph.kernel(x1, b).ntk)


def test_to_torch_builds_the_same_graph() -> None:
    arch = MC_ARCHITECTURES["dense_concat_unequal_widths"][0]()
    net = arch.to_torch(32, in_features=5, generator=torch.Generator().manual_seed(0))
    kinds = [type(m).__name__ for m in net]
    assert kinds == [
        "DenseLayer",
        "FanOutLayer",
        "ParallelLayer",
        "FanInConcatLayer",
        "DenseLayer",
        "ElementwiseActivation",
        "DenseLayer",
    ]
    branches = net[2].branches
    assert [b[-1].out_features for b in branches[:2]] == [64, 448]
    assert net[4].in_features == 64 + 448 + 512  # the concatenation feeds the next Dense
    x = _x_flat(4, 3).float()
    y = net(x)
    assert y.shape == (4, 1)
    # the finite module computes the graph: concat of the branch outputs, then the head
    h = net[0](x)
    cat = torch.cat([branches[0](h), branches[1](h), h], dim=1)
    torch.testing.assert_close(y, net[6](net[5](net[4](cat))))


def test_repeat_chains_copies() -> None:
    block = [nl.Relu(), _d(1.3, 0.1)]
    a = nl.serial(_d(1.3, 0.1), repeat(block, 3))
    b = nl.serial(_d(1.3, 0.1), *block, *block, *block)
    assert a == b
    x = _x_flat(3, 0)
    torch.testing.assert_close(a.kernel(x).ntk, b.kernel(x).ntk)


def test_carry_plan_is_decided_before_compute() -> None:
    """Pooling only inside a branch: full covariance up to it, the diagonal after; a pooling
    layer after the FanIn keeps every branch full."""
    inner = nl.serial(
        Conv(filter_shape=(3, 3)),
        FanOut(2),
        parallel(
            [nl.Relu(), AvgPool((3, 3), (1, 1), "SAME"), Conv(filter_shape=(3, 3))], nl.Identity()
        ),
        FanInSum(),
        nl.Relu(),
        Flatten(),
        _d(1, 0),
    )
    plan = inner.plan()
    assert plan.carry == "full"
    assert plan.keep_full == (True, True, False, False, False, False, False)
    pooled, identity = plan.branches[2]
    assert pooled.keep_full == (True, False, False) and identity.keep_full == (False,)
    after = nl.serial(*inner.layers[:4], AvgPool((2, 2)), Flatten(), _d(1, 0)).plan()
    assert all(p.keep_full == (True,) * len(p.keep_full) for p in after.branches[2])
    assert (
        nl.serial(Conv(filter_shape=(3, 3)), nl.Relu(), Flatten(), _d(1, 0)).plan().carry
        == "diagonal"
    )


def test_graph_errors_name_the_layer() -> None:
    x = _x_flat(3, 0)
    with pytest.raises(NtklabValueError, match="with one output, got 2 branches"):
        nl.serial(_d(1, 0), FanOut(2)).kernel(x)
    # refused at construction (issue 31), naming the layer and its position
    with pytest.raises(NtklabValueError, match=r"layers\[2\]: expected one input to Relu, got 2"):
        nl.serial(_d(1, 0), FanOut(2), nl.Relu(), _d(1, 0))
    with pytest.raises(NtklabValueError, match=r"layers\[2\]: .*FanOut before it \(2\), got 3"):
        nl.serial(_d(1, 0), FanOut(2), parallel(_d(1, 0), _d(1, 0), _d(1, 0)), FanInSum())
    with pytest.raises(NtklabValueError, match="FanInSum: expected at most one branch"):
        nl.serial(
            _d(1, 0),
            FanOut(2),
            parallel([_d(1, 0), nl.Relu()], [_d(1, 0), nl.Erf()]),
            FanInSum(),
            _d(1, 0),
        ).kernel(x)
    with pytest.raises(NtklabValueError, match="FanInConcat: expected the width of every"):
        nl.serial(
            _d(1, 0), FanOut(2), parallel(_d(1, 0), nl.Relu()), FanInConcat(), _d(1, 0)
        ).kernel(x)
    with pytest.raises(NtklabValueError, match="Relu: expected Gaussian pre-activations"):
        nl.serial(
            _d(1, 0), FanOut(2), parallel(_d(1, 0), _d(1, 0)), FanInProd(), nl.Relu(), _d(1, 0)
        ).kernel(x)
    with pytest.raises(NtklabValueError, match="FanInSum: expected branches of one shape"):
        nl.serial(
            Conv(filter_shape=(3, 3)),
            FanOut(2),
            parallel(Conv(filter_shape=(3, 3), strides=(2, 2)), Conv(filter_shape=(3, 3))),
            FanInSum(),
            Flatten(),
            _d(1, 0),
        ).kernel(_x_img(2, 0))
    with pytest.raises(NtklabValueError, match=r"axis: expected 1"):
        FanInConcat(axis=2)
