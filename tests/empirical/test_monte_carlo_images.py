"""monte_carlo_kernel and ntk_sup_distance on images and 1-D signals: the empirical average
over the finite networks ``arch.to_torch`` drawn from the same generator, computed by hand."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

import ntklab as nl
from conftest import naive_ntk
from ntklab.analysis.concentration import ntk_sup_distance
from ntklab.empirical.monte_carlo import monte_carlo_kernel
from ntklab.errors import NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool

F64 = torch.float64
CNN2 = nl.serial(
    Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense(w_std=1.2)
)
CNN1 = nl.serial(
    Conv(filter_shape=(3,), w_std=1.4, b_std=0.1), nl.Erf(), Flatten(), nl.Dense(w_std=1.2)
)
CASES = [pytest.param(CNN2, (2, 4, 4), id="images"), pytest.param(CNN1, (2, 5), id="signals")]


def _networks(arch: nl.kernels.Architecture, x: Tensor, width: int, k: int, s: int, seed: int):
    """The ``s`` networks monte_carlo_kernel draws: ``arch.to_torch`` one after the other from
    one generator, each created (its lazy convolutions) by a forward pass on one input."""
    gen = torch.Generator().manual_seed(seed)
    nets = []
    for _ in range(s):
        net = arch.to_torch(width, k, generator=gen, dtype=F64)
        with torch.no_grad():
            net(x[:1])
        nets.append(net)
    return nets


@pytest.mark.parametrize(("arch", "shape"), CASES)
def test_monte_carlo_on_images_is_the_average_over_finite_networks(
    arch: nl.kernels.Architecture, shape: tuple
) -> None:
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randn(3, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(2, *shape, dtype=F64, generator=gen)
    width, k, s = 6, 2, 3
    mc = monte_carlo_kernel(
        arch,
        x1,
        x2,
        width=width,
        n_samples=s,
        out_features=k,
        generator=torch.Generator().manual_seed(5),
    )
    nngps, ntks = [], []
    for net in _networks(arch, x1, width, k, s, seed=5):
        with torch.no_grad():
            nngps.append(net(x1) @ net(x2).T / k)  # shape: (n1, n2)
        ntks.append(naive_ntk(net, x1, x2).diagonal(dim1=2, dim2=3).mean(dim=2))
    assert_close(mc.nngp, torch.stack(nngps).mean(0), rtol=1e-10, atol=1e-12)
    assert_close(mc.ntk, torch.stack(ntks).mean(0), rtol=1e-10, atol=1e-12)
    assert_close(mc.ntk_stderr, torch.stack(ntks).std(0) / s**0.5, rtol=1e-8, atol=1e-12)
    assert mc.ntk.shape == (3, 2)


def test_ntk_sup_distance_on_images_is_the_distance_of_the_drawn_networks() -> None:
    x = torch.randn(3, 2, 4, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    d = ntk_sup_distance(CNN2, x, widths=[5], n_seeds=2, generator=torch.Generator().manual_seed(9))
    analytic = CNN2.kernel(x).ntk
    want = [
        float((naive_ntk(net, x).diagonal(dim1=2, dim2=3).mean(dim=2) - analytic).abs().max())
        for net in _networks(CNN2, x, 5, 1, 2, seed=9)
    ]
    assert_close(d[0], torch.tensor(want, dtype=F64), rtol=1e-10, atol=1e-12)


def test_monte_carlo_image_errors() -> None:
    x = torch.randn(3, 2, 4, 4, dtype=F64)
    mlp = nl.serial(nl.Dense(), nl.Relu(), nl.Dense())
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x1: expected a 2-D tensor .*got 4-D shape \(3, 2, 4, 4\); the architecture has n"
            r"o spatial layer"
        ),
    ):
        monte_carlo_kernel(mlp, x, width=4, n_samples=2)
    with pytest.raises(NtklabValueError, match=r"x1: expected a channels-first batch"):
        monte_carlo_kernel(CNN2, torch.randn(3, 8, 8, 1, dtype=F64), width=4, n_samples=2)
    with pytest.raises(
        NtklabValueError,
        match=(
            r"x2: expected the channels and spatial shape of x1, \(2, 4, 4\), got shape \(2, 2"
            r", 5, 5\)"
        ),
    ):
        monte_carlo_kernel(CNN2, x, torch.randn(2, 2, 5, 5, dtype=F64), width=4, n_samples=2)
