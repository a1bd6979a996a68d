"""Parameterizations of ``to_torch`` networks: ntk / standard / muP (Yang & Hu,
arXiv:2011.14522), roles of the Dense layers, and their scalings with the width.

Per-parameter kernels are computed with plain autograd Jacobians, independently of
``ntklab.empirical``; width exponents are least-squares slopes over a few widths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

import ntklab as nl
from ntklab.analysis.rates import fit_power_law
from ntklab.empirical import ntk
from ntklab.errors import NtklabValueError
from ntklab.kernels.engine import Layer
from ntklab.kernels.kernel import KernelState
from ntklab.nets import DenseLayer, train

F64 = torch.float64
W_STD, B_STD = (1.5, 1.2, 0.9), (0.2, 0.1, 0.3)
ARCH = nl.serial(
    nl.Dense(w_std=W_STD[0], b_std=B_STD[0]),
    nl.Relu(),
    nl.Dense(w_std=W_STD[1], b_std=B_STD[1]),
    nl.Tanh(),
    nl.Dense(w_std=W_STD[2], b_std=B_STD[2]),
)


def _jacobian(net: nn.Module, x: Tensor, param: Tensor) -> Tensor:
    """(n, numel) Jacobian of the scalar output with respect to one parameter tensor."""
    rows = [
        torch.autograd.grad(net(x[i : i + 1]).sum(), param)[0].reshape(-1)
        for i in range(x.shape[0])
    ]
    return torch.stack(rows)


def _param_ntk(net: nn.Module, x: Tensor, param: Tensor) -> Tensor:
    jac = _jacobian(net, x, param)
    return jac @ jac.T


def _build(parameterization: str, width: int = 32, seed: int = 7, out: int = 1) -> nn.Module:
    return ARCH.to_torch(
        width,
        out,
        in_features=3,
        parameterization=parameterization,  # type: ignore[arg-type]
        generator=torch.Generator().manual_seed(seed),
        dtype=F64,
    )


def test_roles_and_parameterization_override() -> None:
    net = _build("mup")
    assert isinstance(net, nn.Sequential)
    dense = [m for m in net if isinstance(m, DenseLayer)]
    assert [m.role for m in dense] == ["input", "hidden", "output"]
    assert {m.parameterization for m in dense} == {"mup"}
    single = nl.serial(nl.Dense(w_std=1.0, b_std=0.1)).to_torch(
        4, 2, in_features=3, parameterization="mup"
    )
    assert isinstance(single, nn.Sequential) and single[0].role == "only"
    mixed = nl.serial(
        nl.Dense(w_std=1.0, parameterization="standard"), nl.Relu(), nl.Dense(w_std=1.0)
    )
    kept = mixed.to_torch(8, in_features=3)
    assert isinstance(kept, nn.Sequential)
    assert [kept[0].parameterization, kept[2].parameterization] == ["standard", "ntk"]
    over = mixed.to_torch(8, in_features=3, parameterization="ntk")
    assert isinstance(over, nn.Sequential)
    assert [over[0].parameterization, over[2].parameterization] == ["ntk", "ntk"]
    with pytest.raises(NtklabValueError, match="parameterization: expected None, 'ntk'"):
        ARCH.to_torch(8, parameterization="yang")  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Opaque(Layer):
    """A layer with weights whose module has no ``out_features`` (a per-feature gain)."""

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        return state

    @property
    def has_parameters(self) -> bool:
        return True

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        class Gain(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.gain = nn.Parameter(torch.ones((), dtype=dtype, device=device))

            def forward(self, x: Tensor) -> Tensor:
                return x * self.gain

        return Gain()


def test_module_without_out_features_leaves_the_next_dense_lazy() -> None:
    arch = nl.serial(nl.Dense(w_std=1.0), _Opaque(), nl.Relu(), nl.Dense(w_std=1.0))
    net = arch.to_torch(8, 2, in_features=3, dtype=F64)
    assert isinstance(net, nn.Sequential)
    assert not net[0].has_uninitialized_params() and net[3].has_uninitialized_params()
    assert net(torch.randn(4, 3, dtype=F64)).shape == (4, 2)
    assert net[3].in_features == 8
    with pytest.raises(NtklabValueError, match="parameterization: expected an architecture"):
        arch.to_torch(8, parameterization="mup")


def test_ntk_and_standard_same_function_kernels_differ_by_the_multipliers(
    gen: torch.Generator,
) -> None:
    """Same draws, same function; the gradient with respect to a raw parameter is its forward
    multiplier times the gradient with respect to the effective one, so per layer
    Theta_ntk[W] = (sigma_w^2 / n_in) Theta_std[W] and Theta_ntk[b] = sigma_b^2 Theta_std[b]."""
    width = 32
    net_ntk, net_std = _build("ntk", width), _build("standard", width)
    x = torch.randn(5, 3, generator=gen, dtype=F64)
    torch.testing.assert_close(net_ntk(x), net_std(x))
    layers = [(0, 3), (2, width), (4, width)]
    for (index, fan_in), w, b in zip(layers, W_STD, B_STD, strict=True):
        a, s = net_ntk[index], net_std[index]  # type: ignore[index]
        torch.testing.assert_close(
            _param_ntk(net_ntk, x, a.weight), w**2 / fan_in * _param_ntk(net_std, x, s.weight)
        )
        torch.testing.assert_close(
            _param_ntk(net_ntk, x, a.bias), b**2 * _param_ntk(net_std, x, s.bias)
        )
    k_ntk, k_std = ntk(net_ntk, x), ntk(net_std, x)
    assert float(torch.linalg.norm(k_std - k_ntk) / torch.linalg.norm(k_ntk)) > 1.0


@pytest.mark.parametrize("parameterization", ["ntk", "standard", "mup"])
def test_empirical_ntk_reads_the_multipliers(gen: torch.Generator, parameterization: str) -> None:
    """``ntklab.empirical.ntk`` (structured, which reads ``DenseLayer.scales``) equals the sum
    of the per-parameter autograd kernels."""
    net = _build(parameterization, 16)
    x = torch.randn(5, 3, generator=gen, dtype=F64)
    direct = sum(_param_ntk(net, x, p) for p in net.parameters())
    assert isinstance(direct, Tensor)
    torch.testing.assert_close(ntk(net, x, method="structured"), direct)
    torch.testing.assert_close(ntk(net, x, method="jacobian"), direct)


def test_mup_differs_from_ntk_only_by_the_readout(gen: torch.Generator) -> None:
    """Same draws: muP's input and hidden effective weights equal NTK's, its readout weights
    are n^{-1/2} times NTK's (Table 3 of arXiv:2011.14522), every bias the same."""
    width = 32
    net_ntk, net_mup = _build("ntk", width), _build("mup", width)
    x = torch.randn(6, 3, generator=gen, dtype=F64)
    torch.testing.assert_close(net_mup[:4](x), net_ntk[:4](x))  # type: ignore[index]
    bias = B_STD[2] * net_ntk[4].bias  # type: ignore[index]
    torch.testing.assert_close(net_mup(x) - bias, (net_ntk(x) - bias) / math.sqrt(width))


def test_mup_output_at_initialization_shrinks_as_inverse_sqrt_width(
    gen: torch.Generator,
) -> None:
    arch = nl.serial(
        nl.Dense(w_std=1.5, b_std=0.2),
        nl.Relu(),
        nl.Dense(w_std=1.2, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.0),
    )
    x = torch.randn(4, 3, generator=gen, dtype=F64)
    widths = [32, 128, 512]
    rms: dict[str, list[float]] = {"mup": [], "ntk": []}
    for kind, values in rms.items():
        for width in widths:
            with torch.no_grad():
                outs = torch.stack(
                    [
                        arch.to_torch(
                            width,
                            1,
                            in_features=3,
                            parameterization=kind,  # type: ignore[arg-type]
                            generator=gen,
                            dtype=F64,
                        )(x)
                        for _ in range(48)
                    ]
                )
            values.append(float(outs.square().mean().sqrt()))
    slope_mup = fit_power_law(widths, rms["mup"]).slope
    slope_ntk = fit_power_law(widths, rms["ntk"]).slope
    assert -0.62 < slope_mup < -0.38, rms
    assert abs(slope_ntk) < 0.12, rms


def test_one_sgd_step_moves_features_by_order_one_only_under_mup(gen: torch.Generator) -> None:
    """After one SGD step at a width-independent learning rate, the hidden pre-activations
    move by Theta(1) per coordinate under muP and by Theta(n^{-1/2}) under NTK. The residual
    f(x) - y is fixed across widths and seeds (y = f_0(x) - r) so only the width varies."""
    arch = nl.serial(
        nl.Dense(w_std=1.0, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.4, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.0, b_std=0.1),
    )
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    residual = torch.randn(8, 1, generator=gen, dtype=F64)
    widths = [64, 256, 1024]
    moves: dict[str, list[float]] = {"mup": [], "ntk": []}
    for kind, values in moves.items():
        for width in widths:
            per_seed = []
            for _ in range(2):
                net = arch.to_torch(
                    width,
                    1,
                    in_features=3,
                    parameterization=kind,  # type: ignore[arg-type]
                    generator=gen,
                    dtype=F64,
                )
                assert isinstance(net, nn.Sequential)
                with torch.no_grad():
                    h0, y = net[:3](x), net(x) - residual
                train(net, x, y, learning_rate=1.0, t=1)
                with torch.no_grad():
                    per_seed.append(float((net[:3](x) - h0).square().mean().sqrt()))
            values.append(sum(per_seed) / len(per_seed))
    slope_mup = fit_power_law(widths, moves["mup"]).slope
    slope_ntk = fit_power_law(widths, moves["ntk"]).slope
    assert abs(slope_mup) < 0.15 and min(moves["mup"]) > 0.05, moves
    assert -0.7 < slope_ntk < -0.35, moves


def test_ntk_network_kernel_approaches_the_infinite_width_kernel(gen: torch.Generator) -> None:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    x = torch.randn(6, 3, generator=gen, dtype=F64)
    limit = arch.kernel(x).ntk
    errors = []
    for width in (64, 4096):
        net = arch.to_torch(
            width, 1, in_features=3, parameterization="ntk", generator=gen, dtype=F64
        )
        errors.append(float(torch.linalg.norm(ntk(net, x) - limit) / torch.linalg.norm(limit)))
    assert errors[1] < 0.06 and errors[1] < 0.5 * errors[0], errors


def test_mup_tangent_kernel_stays_order_one_across_width() -> None:
    # muP with one width-independent learning rate needs an O(1) NTK; a readout bias scaled
    # like the hidden biases would make it grow linearly with the width.
    arch = nl.serial(
        nl.Dense(w_std=1.4, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.4, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.4, b_std=0.1),
    )
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    top = []
    for width in (64, 1024):
        net = arch.to_torch(
            width,
            in_features=3,
            parameterization="mup",
            dtype=torch.float64,
            generator=torch.Generator().manual_seed(0),
        )
        top.append(float(torch.linalg.eigvalsh(nl.empirical.ntk(net, x))[-1]))
    assert 0.5 < top[1] / top[0] < 1.5, top
