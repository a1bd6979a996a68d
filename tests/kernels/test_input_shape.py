"""Architectures know their input (issue 31): ``input_shape`` from ``from_torch``, ``serial``
and ``with_input_shape``; wrong feature or channel counts and channels-last batches refused;
fan-in layers without a ``FanOut`` refused at construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab._inputs import check_kernel_inputs
from ntklab.errors import NtklabError, NtklabValueError
from ntklab.kernels import (
    Conv,
    FanInConcat,
    FanInProd,
    FanInSum,
    FanOut,
    Flatten,
    GlobalAvgPool,
    Residual,
    parallel,
)

F64 = torch.float64


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))


def test_from_torch_reads_in_features_and_refuses_another_feature_count() -> None:
    arch = nl.kernels.from_torch(_mlp())
    assert arch.input_shape == (5,)
    with pytest.raises(NtklabValueError, match=r"x1: expected 5 features.*got 7 features"):
        arch.kernel(torch.randn(4, 7, dtype=F64))
    x = torch.randn(4, 5, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"x1: expected 5 features.*got 3 features"):
        arch.kernel(x[:, :3], x[:, :3])
    # the accepted count gives the kernel of the same layers without an input shape
    bare = nl.serial(*arch.layers)
    assert bare.input_shape is None
    torch.testing.assert_close(arch.kernel(x).ntk, bare.kernel(x).ntk, rtol=0, atol=0)


def test_from_torch_reads_in_channels_and_catches_small_channels_last_batches() -> None:
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 1),
    )
    arch = nl.kernels.from_torch(net)
    assert arch.input_shape == (3, None, None)
    x = torch.randn(2, 3, 4, 4, dtype=F64)
    last = x.permute(0, 2, 3, 1)  # (2, 4, 4, 3): the old heuristic needed sides above 4
    with pytest.raises(NtklabValueError, match=r"x1: .*channels-last.*permute\(0, 3, 1, 2\)"):
        arch.kernel(last)
    with pytest.raises(NtklabValueError, match=r"x1: expected 3 channels.*got 5 channels"):
        arch.kernel(torch.randn(2, 5, 4, 4, dtype=F64))
    assert arch.kernel(x).ntk.shape == (2, 2)
    # the known channel count decides: (n, 28, 28, 1) is channels-first for 28 channels,
    # which the heuristic alone refuses
    many = nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(),
        input_shape=(28, None, None),
    )
    assert many.kernel(torch.randn(2, 28, 28, 1, dtype=F64)).ntk.shape == (2, 2)
    with pytest.raises(NtklabValueError, match="channels-last"):
        nl.serial(*many.layers).kernel(torch.randn(2, 28, 28, 1, dtype=F64))


def test_an_ambiguous_layout_is_refused_naming_input_shape_and_resolved_by_it() -> None:
    arch = nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(),
        input_shape=(3, None, None),
    )
    x = torch.randn(2, 3, 4, 3, dtype=F64)  # channels-first (3, 4, 3) or channels-last (3, 4)
    with pytest.raises(
        NtklabValueError,
        match=r"both as channels-first and as channels-last"
        r".*with_input_shape\(\(3, 4, 3\)\)",
    ):
        arch.kernel(x)
    exact = arch.with_input_shape((3, 4, 3))
    expected = nl.serial(*arch.layers).kernel(x).ntk
    torch.testing.assert_close(exact.kernel(x).ntk, expected, rtol=0, atol=0)
    # with the spatial size known, the channels-last reading of (3, 4, 3) is (2, 3, 4, 3)
    # permuted: a (2, 4, 3, 3) batch
    with pytest.raises(NtklabValueError, match="channels-last"):
        exact.kernel(x.permute(0, 2, 3, 1))


def test_serial_and_with_input_shape_validate_and_compose() -> None:
    dense = nl.serial(nl.Dense(w_std=1.5), nl.Relu(), input_shape=(4,))
    composed = nl.serial(dense, nl.Dense())
    assert composed.input_shape == (4,)  # the first item's input is the whole one's
    assert nl.serial(nl.Dense(), dense).input_shape is None
    with pytest.raises(NtklabValueError, match=r"input_shape: expected \(d,\)"):
        nl.serial(nl.Dense(), input_shape=(3, 8, 8))
    with pytest.raises(NtklabValueError, match=r"input_shape: expected 3 sizes"):
        nl.serial(Conv(filter_shape=(3, 3)), Flatten(), nl.Dense(), input_shape=(3, 8))
    with pytest.raises(NtklabValueError, match=r"input_shape\[0\]: expected a positive int"):
        nl.serial(nl.Dense(), input_shape=(0,))
    with pytest.raises(NtklabError, match="input_shape"):
        nl.serial(nl.Dense(), input_shape=5)  # type: ignore[arg-type]
    assert dense.with_input_shape(None).input_shape is None
    with pytest.raises(NtklabValueError, match=r"x1: expected 4 features"):
        check_kernel_inputs(composed, torch.randn(3, 6, dtype=F64))
    with pytest.raises(NtklabValueError, match=r"X: expected 4 features"):
        check_kernel_inputs(composed.kernel, torch.randn(3, 6, dtype=F64), names=("X", "Y"))


def test_to_torch_takes_in_features_from_input_shape_and_round_trips() -> None:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(), input_shape=(6,))
    net = arch.to_torch(width=8, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert net[0].in_features == 6  # type: ignore[index]  # not lazy
    assert nl.kernels.from_torch(net).input_shape == (6,)
    with pytest.raises(NtklabValueError, match=r"in_features: expected .*\(6,.*got 3"):
        arch.to_torch(width=8, in_features=3)
    conv = nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(),
        input_shape=(2, None, None),
    )
    cnet = conv.to_torch(width=4, dtype=F64)
    assert cnet[0].in_channels == 2  # type: ignore[index]
    assert nl.kernels.from_torch(cnet).input_shape == (2, None, None)


@pytest.mark.parametrize("fan_in", [FanInSum, FanInConcat, FanInProd])
def test_a_fan_in_without_fan_out_is_refused_at_construction(fan_in: type) -> None:
    name = fan_in.__name__
    with pytest.raises(NtklabValueError, match=rf"layers\[1\]: expected {name} to join"):
        nl.serial(nl.Dense(w_std=1.0), fan_in(), nl.Relu(), nl.Dense())
    with pytest.raises(NtklabValueError, match=rf"layers\[0\]\.branch\[1\]: expected {name}"):
        nl.serial(Residual([nl.Dense(w_std=1.0), fan_in()]), nl.Dense())
    # closed by a FanOut and parallel: accepted, and not the identity
    ok = nl.serial(
        nl.Dense(w_std=1.0, width=8),
        FanOut(2),
        parallel([nl.Relu(), nl.Dense(width=8)], [nl.Erf(), nl.Dense(width=8)]),
        fan_in(),
        nl.Dense(),
    )
    assert ok.kernel(torch.randn(3, 4, dtype=F64)).ntk.shape == (3, 3)


def test_unbalanced_branches_are_refused_at_construction() -> None:
    with pytest.raises(NtklabValueError, match=r"layers\[2\]: expected one input to Relu"):
        nl.serial(nl.Dense(), FanOut(2), nl.Relu(), FanInSum())
    with pytest.raises(NtklabValueError, match=r"layers\[1\]: expected the 2 branches"):
        nl.serial(nl.Dense(), parallel(nl.Relu(), nl.Dense()), FanInSum())
    with pytest.raises(NtklabValueError, match=r"as many branches as the FanOut"):
        nl.serial(nl.Dense(), FanOut(3), parallel(nl.Relu(), nl.Dense()), FanInSum())
    with pytest.raises(NtklabValueError, match=r"branches\[1\]: expected the branch to end"):
        nl.serial(nl.Dense(), FanOut(2), parallel(nl.Dense(), [nl.Dense(), FanOut(2)]))
