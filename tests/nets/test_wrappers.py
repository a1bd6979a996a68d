"""``ScaledOutput`` and ``AntisymmetricPair``, alone and as built by ``to_torch``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab.empirical import ntk
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.nets import AntisymmetricPair, ScaledOutput, output_scale, train

F64 = torch.float64
ARCH = nl.serial(
    nl.Dense(w_std=1.5, b_std=0.1),
    nl.Relu(),
    nl.Dense(w_std=1.2, b_std=0.2),
    nl.Tanh(),
    nl.Dense(w_std=1.5, b_std=0.1),
)


def test_scaled_output_multiplies_the_output(gen: torch.Generator) -> None:
    net = ARCH.to_torch(8, 2, in_features=3, generator=gen, dtype=F64)
    x = torch.randn(5, 3, generator=gen, dtype=F64)
    scaled = ScaledOutput(net, 3.5)
    torch.testing.assert_close(scaled(x), 3.5 * net(x), rtol=0.0, atol=0.0)
    assert scaled.alpha == 3.5 and list(scaled.parameters()) == list(net.parameters())
    # its empirical NTK is alpha^2 times the network's
    torch.testing.assert_close(ntk(scaled, x), 3.5**2 * ntk(net, x))
    assert output_scale(ScaledOutput(scaled, 2.0)) == 7.0
    assert output_scale(net) == 1.0
    assert output_scale(nn.Sequential(scaled)) == 1.0  # only the outermost chain counts


@pytest.mark.parametrize("alpha", [0.0, -1.0, math.inf, math.nan])
def test_scaled_output_rejects_bad_alpha(alpha: float) -> None:
    with pytest.raises(NtklabValueError, match="alpha: expected a finite float > 0"):
        ScaledOutput(nn.Linear(2, 1), alpha)
    with pytest.raises(NtklabValueError, match="alpha"):
        ARCH.to_torch(8, alpha=alpha)


def test_wrappers_reject_non_modules() -> None:
    with pytest.raises(NtklabTypeError, match="alpha"):
        ScaledOutput(nn.Linear(2, 1), "2")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"net: expected a torch\.nn\.Module"):
        ScaledOutput(lambda x: x, 2.0)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"net: expected a torch\.nn\.Module"):
        AntisymmetricPair(lambda x: x)  # type: ignore[arg-type]


@pytest.mark.parametrize("parameterization", ["ntk", "standard", "mup"])
def test_pair_starts_at_zero_with_the_ntk_of_one_half(
    gen: torch.Generator, parameterization: str
) -> None:
    pair = ARCH.to_torch(
        16,
        2,
        in_features=3,
        zero_output=True,
        generator=gen,
        dtype=F64,
        parameterization=parameterization,
    )  # type: ignore[arg-type]
    assert isinstance(pair, AntisymmetricPair)
    first = pair.first
    assert isinstance(first, nn.Sequential)
    assert first[0].out_features == 8 and first[2].out_features == 8  # width // 2 per half
    assert first[4].out_features == 2
    x = torch.randn(6, 3, generator=gen, dtype=F64)
    out = pair(x)
    assert out.shape == (6, 2) and bool((out == 0).all())
    assert bool((first(x) != 0).any())
    for outputs in ("trace", "full"):
        torch.testing.assert_close(
            ntk(pair, x, outputs=outputs),
            ntk(first, x, outputs=outputs),  # type: ignore[arg-type]
        )
    # and the pair's kernel is not trivially the half's: the halves are distinct parameters
    assert len(list(pair.parameters())) == 2 * len(list(first.parameters()))


def test_pair_halves_train_independently(gen: torch.Generator) -> None:
    pair = ARCH.to_torch(16, 1, in_features=3, zero_output=True, generator=gen, dtype=F64)
    x = torch.randn(6, 3, generator=gen, dtype=F64)
    y = torch.randn(6, 1, generator=gen, dtype=F64)
    assert isinstance(pair, AntisymmetricPair)
    start = [p.detach().clone() for p in pair.first.parameters()]
    train(pair, x, y, learning_rate=0.1, t=1)
    with torch.no_grad():
        assert float(pair(x).abs().max()) > 1e-4
    # one GD step from equal halves: the second moves exactly opposite to the first
    for p0, pa, pb in zip(start, pair.first.parameters(), pair.second.parameters(), strict=True):
        torch.testing.assert_close(pa.detach() - p0, -(pb.detach() - p0))
    moved = [
        float((pa.detach() - p0).abs().max())
        for p0, pa in zip(start, pair.first.parameters(), strict=True)
    ]
    assert min(moved) > 0, moved


def test_lazy_pair_is_copied_on_the_first_call(gen: torch.Generator) -> None:
    pair = ARCH.to_torch(16, 1, zero_output=True, generator=gen, dtype=F64)  # lazy input
    x = torch.randn(4, 5, generator=gen, dtype=F64)
    assert bool((pair(x) == 0).all())
    for pa, pb in zip(pair.first.parameters(), pair.second.parameters(), strict=True):
        assert pa is not pb
        torch.testing.assert_close(pa, pb, rtol=0.0, atol=0.0)
    pair_plain = AntisymmetricPair(
        nn.Sequential(nn.LazyLinear(4, dtype=F64), nn.Tanh(), nn.Linear(4, 1, dtype=F64))
    )
    assert bool((pair_plain(x) == 0).all())


def test_to_torch_wrapping_and_defaults(gen: torch.Generator) -> None:
    plain = ARCH.to_torch(8, 1, in_features=3, generator=gen)
    assert type(plain) is nn.Sequential
    scaled = ARCH.to_torch(8, 1, in_features=3, alpha=4.0, zero_output=True, generator=gen)
    assert isinstance(scaled, ScaledOutput) and scaled.alpha == 4.0
    assert isinstance(scaled.net, AntisymmetricPair)
    assert bool((scaled(torch.randn(3, 3)) == 0).all())
    with pytest.raises(NtklabValueError, match="width: expected an even width"):
        ARCH.to_torch(7, zero_output=True)
    with pytest.raises(NtklabTypeError, match="zero_output: expected a bool"):
        ARCH.to_torch(8, zero_output=1)  # type: ignore[arg-type]
