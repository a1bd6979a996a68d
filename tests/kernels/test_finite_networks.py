"""``to_torch`` networks converge to ``arch.kernel``: Monte Carlo over finite networks.

The empirical NTK is computed here with plain autograd (per-example gradients, then explicit
products), independently of any ntklab code beyond the network itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ntklab as nl

F64 = torch.float64


def empirical_ntk(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Theta = J J^T with J the (n, P) Jacobian of the scalar output, by autograd."""
    params = [p for p in net.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(net(x[i : i + 1]).sum(), params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    jac = torch.stack(rows)
    return jac @ jac.T


def readout_nngp(net: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """E[f(x) f(x')] over the last layer's weights, given the network's hidden features."""
    *body, head = list(net)
    feats = torch.nn.Sequential(*body)(x)
    m = feats.shape[1]
    return head.w_std**2 * feats @ feats.T / m + (head.b_std or 0.0) ** 2


def _slope(widths: list[int], errors: list[float]) -> float:
    return float(np.polyfit(np.log(widths), np.log(errors), 1)[0])


ARCH = nl.serial(
    nl.Dense(w_std=1.5, b_std=0.1),
    nl.Relu(),
    nl.Dense(w_std=1.2, b_std=0.2),
    nl.Erf(),
    nl.Dense(w_std=1.5, b_std=0.1),
)


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(0))


def test_empirical_ntk_error_falls_like_inverse_sqrt_width(x: torch.Tensor) -> None:
    k = ARCH.kernel(x)
    widths = [32, 128, 512, 2048]
    errors = []
    for width in widths:
        errs = []
        for seed in range(6):
            net = ARCH.to_torch(width, 1, generator=torch.Generator().manual_seed(seed), dtype=F64)
            theta = empirical_ntk(net, x)
            errs.append(float(torch.linalg.norm(theta - k.ntk) / torch.linalg.norm(k.ntk)))
        errors.append(math.sqrt(np.mean(np.square(errs))))
    slope = _slope(widths, errors)
    assert -0.65 <= slope <= -0.35, (slope, errors)
    assert errors[-1] < 0.1


def test_readout_nngp_error_falls_like_inverse_sqrt_width(x: torch.Tensor) -> None:
    k = ARCH.kernel(x)
    widths = [32, 128, 512, 2048]
    errors = []
    for width in widths:
        errs = []
        for seed in range(8):
            net = ARCH.to_torch(width, 1, generator=torch.Generator().manual_seed(seed), dtype=F64)
            with torch.no_grad():
                errs.append(
                    float(
                        torch.linalg.norm(readout_nngp(net, x) - k.nngp) / torch.linalg.norm(k.nngp)
                    )
                )
        errors.append(math.sqrt(np.mean(np.square(errs))))
    slope = _slope(widths, errors)
    assert -0.65 <= slope <= -0.35, (slope, errors)


def test_output_covariance_over_seeds_matches_nngp(x: torch.Tensor) -> None:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    k = arch.kernel(x)
    seeds = 3000
    with torch.no_grad():
        outs = torch.stack(
            [
                arch.to_torch(
                    256, 1, in_features=3, generator=torch.Generator().manual_seed(s), dtype=F64
                )(x)[:, 0]
                for s in range(seeds)
            ]
        )  # shape: (seeds, n)
    cov = outs.T @ outs / seeds
    # standard error of a Gaussian second moment: sqrt((K_ii K_jj + K_ij^2) / S)
    se = torch.sqrt((torch.outer(k.var1, k.var1) + k.nngp**2) / seeds)
    assert ((cov - k.nngp).abs() <= 4.5 * se + 0.02 * k.nngp.abs()).all()
    assert outs.mean(0).abs().max() < 4.5 * float(torch.sqrt(k.var1.max() / seeds))


def test_standard_parameterization_network_matches_its_kernel(x: torch.Tensor) -> None:
    def arch(width: int) -> nl.Architecture:
        return nl.serial(
            nl.Dense(w_std=1.3, b_std=0.2, parameterization="standard", width=width),
            nl.Relu(),
            nl.Dense(w_std=1.3, b_std=0.2, parameterization="standard", width=width),
            nl.Relu(),
            nl.Dense(w_std=1.3, b_std=0.2, parameterization="standard"),
        )

    widths = [64, 256, 1024, 4096]
    errors = []
    for width in widths:
        k = arch(width).kernel(x)
        errs = []
        for seed in range(3):
            net = arch(width).to_torch(
                7, 1, generator=torch.Generator().manual_seed(seed), dtype=F64
            )
            theta = empirical_ntk(net, x)
            errs.append(float(torch.linalg.norm(theta - k.ntk) / torch.linalg.norm(k.ntk)))
        errors.append(math.sqrt(np.mean(np.square(errs))))
    assert -0.7 <= _slope(widths, errors) <= -0.3, errors
    assert errors[-1] < 0.08, errors


def test_to_torch_structure_and_lazy_input() -> None:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=None))
    net = arch.to_torch(width=16, out_features=3)
    y = net(torch.randn(4, 5))
    assert y.shape == (4, 3)
    assert net[0].weight.shape == (16, 5) and net[2].bias is None
    same = arch.to_torch(16, 3, in_features=5, generator=torch.Generator().manual_seed(1))
    again = arch.to_torch(16, 3, in_features=5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(same[0].weight, again[0].weight)
