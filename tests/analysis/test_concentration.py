"""NTK concentration: the sup distance equals a naive loop on a tiny case (both code paths),
and it shrinks with width as m^(-1/2)."""

from __future__ import annotations

import doctest

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

import ntklab as nl
from ntklab.analysis import concentration, fit_power_law, ntk_sup_distance
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64
ARCH = nl.serial(
    nl.Dense(w_std=1.2, b_std=0.1),
    nl.Erf(),
    nl.Dense(w_std=1.0, b_std=0.2),
    nl.Tanh(),
    nl.Dense(w_std=1.0, b_std=0.1),
)


def test_docstring_examples() -> None:
    result = doctest.testmod(concentration)
    assert result.attempted >= 3
    assert result.failed == 0


def autograd_ntk(net: nn.Module, x1: Tensor, x2: Tensor) -> Tensor:
    """Trace-convention NTK from per-example, per-output torch.autograd.grad (independent)."""
    params = [p for p in net.parameters() if p.requires_grad]

    def jac(x: Tensor) -> Tensor:  # shape: (n, k, P)
        rows = []
        for i in range(x.shape[0]):
            out = net(x[i : i + 1]).reshape(-1)
            grads = [
                torch.cat(
                    [g.reshape(-1) for g in torch.autograd.grad(out[a], params, retain_graph=True)]
                )
                for a in range(out.shape[0])
            ]
            rows.append(torch.stack(grads))
        return torch.stack(rows)

    j1, j2 = jac(x1), jac(x2)
    return torch.einsum("iap,jap->ij", j1, j2) / j1.shape[1]


def naive_distances(x1: Tensor, x2: Tensor, widths: list[int], seeds: int, out: int) -> Tensor:
    gen = torch.Generator().manual_seed(5)
    analytic = ARCH.kernel(x1, x2).ntk
    rows = []
    for width in widths:
        row = []
        for _ in range(seeds):
            net = ARCH.to_torch(width, out, in_features=x1.shape[1], generator=gen, dtype=F64)
            row.append(float((autograd_ntk(net, x1, x2) - analytic).abs().max()))
        rows.append(row)
    return torch.tensor(rows, dtype=F64)


@pytest.mark.parametrize("max_memory", [1 << 28, 1])  # vectorized path / one-by-one path
@pytest.mark.parametrize("out", [1, 2])
def test_equals_a_naive_loop(max_memory: int, out: int) -> None:
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(3, 2, dtype=F64, generator=g)
    x2 = torch.randn(2, 2, dtype=F64, generator=g)
    got = ntk_sup_distance(
        ARCH,
        x1,
        x2,
        widths=[4, 7],
        n_seeds=3,
        generator=5,
        out_features=out,
        max_memory=max_memory,
    )
    assert got.shape == (2, 3) and got.dtype == F64
    assert_close(got, naive_distances(x1, x2, [4, 7], 3, out), rtol=1e-10, atol=1e-12)
    scale = ARCH.kernel(x1, x2).ntk.abs().max()
    relative = ntk_sup_distance(
        ARCH,
        x1,
        x2,
        widths=[4, 7],
        n_seeds=3,
        generator=5,
        out_features=out,
        relative=True,
        max_memory=max_memory,
    )
    assert_close(relative, got / scale, rtol=1e-12, atol=0)


def test_shrinks_as_inverse_square_root_of_width() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, generator=g)
    x = x / x.norm(dim=1, keepdim=True)
    widths = [32, 128, 512, 2048]
    distances = ntk_sup_distance(ARCH, x, widths=widths, n_seeds=8, generator=2)
    assert distances.dtype == torch.float32
    medians = distances.double().median(dim=1).values
    assert bool((medians.diff() < 0).all())
    fit = fit_power_law(widths, medians)
    assert -0.7 < fit.slope < -0.35


def test_bad_arguments() -> None:
    x = torch.randn(3, 2, dtype=F64)
    with pytest.raises(NtklabValueError, match="widths: expected at least one width"):
        ntk_sup_distance(ARCH, x, widths=[], n_seeds=2)
    with pytest.raises(NtklabValueError, match="widths\\[1\\]: expected an int >= 1"):
        ntk_sup_distance(ARCH, x, widths=[4, 0], n_seeds=2)
    with pytest.raises(NtklabValueError, match="n_seeds: expected an int >= 1"):
        ntk_sup_distance(ARCH, x, widths=[4], n_seeds=0)
    with pytest.raises(NtklabTypeError, match="arch: expected an ntklab Architecture"):
        ntk_sup_distance(nn.Linear(2, 1), x, widths=[4], n_seeds=1)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="x2: expected the feature dimension"):
        ntk_sup_distance(ARCH, x, torch.randn(2, 3, dtype=F64), widths=[4], n_seeds=1)
    with pytest.raises(NtklabTypeError, match="generator"):
        ntk_sup_distance(ARCH, x, widths=[4], n_seeds=1, generator="seed")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="relative: expected a bool"):
        ntk_sup_distance(ARCH, x, widths=[4], n_seeds=1, relative=1)  # type: ignore[arg-type]
