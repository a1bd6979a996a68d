"""from_torch: kernels of torch modules against Monte Carlo averages of the modules' own
empirical kernels, structural round trips, and errors for what it cannot read."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    Dropout,
    Flatten,
    GlobalAvgPool,
    LayerNorm,
    Residual,
    from_torch,
)
from ntklab.nets.conv_modules import ResidualBlock

F64 = torch.float64


def gaussian_init(model: nn.Module, gen: torch.Generator) -> None:
    """Redraw every Linear/Conv with Gaussian weights of torch's default variances,
    Var W = Var b = 1/(3 fan_in) (the convention from_torch reads by default)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear | nn.Conv1d | nn.Conv2d):
                fan_in = mod.weight[0].numel()
                std = (3.0 * fan_in) ** -0.5
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen, dtype=F64) * std)
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen, dtype=F64) * std)


def torch_init(model: nn.Module, gen: torch.Generator) -> None:
    """torch's own reset_parameters (uniform), seeded through the global generator."""
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    for mod in model.modules():
        if isinstance(mod, nn.Linear | nn.Conv1d | nn.Conv2d):
            mod.reset_parameters()


def monte_carlo(
    model: nn.Module,
    x: torch.Tensor,
    init: Callable[[nn.Module, torch.Generator], None],
    n_samples: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Means and standard errors of the empirical NNGP and NTK over initializations."""
    gen = torch.Generator().manual_seed(0)
    nngps, ntks = [], []
    model.eval()
    for _ in range(n_samples):
        init(model, gen)
        with torch.no_grad():
            nngps.append(nl.empirical.nngp(model, x))
        ntks.append(nl.empirical.ntk(model, x))
    k, t = torch.stack(nngps), torch.stack(ntks)
    s = math.sqrt(n_samples)
    return k.mean(0), k.std(0) / s, t.mean(0), t.std(0) / s


def assert_matches_monte_carlo(
    model: nn.Module,
    x: torch.Tensor,
    *,
    init: Callable[[nn.Module, torch.Generator], None] = gaussian_init,
    n_samples: int = 12,
    rtol: float = 0.06,
) -> None:
    model = model.to(F64)
    k = from_torch(model).kernel(x)
    nngp, nngp_se, ntk, ntk_se = monte_carlo(model, x, init, n_samples)
    torch.testing.assert_close(ntk, k.ntk, rtol=rtol, atol=float(4 * ntk_se.max()))
    torch.testing.assert_close(nngp, k.nngp, rtol=rtol, atol=float(4 * nngp_se.max()))


W = 96  # hidden width (channels) of the finite networks
OUT = 16  # outputs: the trace over them averages the NNGP samples


def _images(n: int = 3, c: int = 3, size: int = 6) -> torch.Tensor:
    return torch.randn(n, c, size, size, dtype=F64, generator=torch.Generator().manual_seed(5))


def test_mlp_linear_activations_layernorm_dropout() -> None:
    x = torch.randn(4, 24, dtype=F64, generator=torch.Generator().manual_seed(3))
    model = nn.Sequential(
        nn.Linear(24, 2 * W),
        nn.Tanh(),
        nn.Sequential(nn.Linear(2 * W, 2 * W), nn.LayerNorm(2 * W), nn.Dropout(0.2)),
        nn.Linear(2 * W, 2 * W),
        nn.GELU(),
        nn.Linear(2 * W, 2 * W, bias=False),
        nn.SiLU(),
        nn.Linear(2 * W, OUT),
    )
    assert_matches_monte_carlo(model, x)


def test_cnn_conv2d_paddings_strides_flatten() -> None:
    x = _images()
    model = nn.Sequential(
        nn.Conv2d(3, W, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(W, W, 3, stride=2, padding="valid"),
        nn.LeakyReLU(0.1),
        nn.Conv2d(W, W, (2, 1), padding="same", padding_mode="zeros"),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(W * 2 * 2, OUT),
    )
    assert_matches_monte_carlo(model, x)


def test_cnn_circular_avgpool_global_pool_groupnorm() -> None:
    x = _images()
    model = nn.Sequential(
        nn.Conv2d(3, W, 3, padding=1, padding_mode="circular"),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Conv2d(W, W, 3, padding=1),
        nn.GroupNorm(1, W),
        nn.Conv2d(W, W, 1),
        nn.ReLU(),
        nn.AvgPool2d(3, stride=1, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(W, OUT),
    )
    assert_matches_monte_carlo(model, x)


def test_conv1d_layernorm_over_channels_and_positions() -> None:
    x = torch.randn(3, 2, 8, dtype=F64, generator=torch.Generator().manual_seed(4))
    model = nn.Sequential(
        nn.Conv1d(2, W, 3, padding=1),
        nn.LayerNorm((W, 8), elementwise_affine=False),
        nn.ReLU(),
        nn.AvgPool1d(2),
        nn.Conv1d(W, W, 2),
        nn.ReLU(),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(W, OUT),
    )
    assert_matches_monte_carlo(model, x)


def test_residual_blocks() -> None:
    x = _images(c=2)
    block = ResidualBlock(nn.Sequential(nn.ReLU(), nn.Conv2d(W, W, 3, padding=1)), scale=0.6)
    model = nn.Sequential(
        nn.Conv2d(2, W, 3, padding=1),
        block,
        ResidualBlock(nn.Sequential(nn.ReLU(), nn.Conv2d(W, W, 3, padding=1))),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(W, OUT),
    )
    assert_matches_monte_carlo(model, x)


def test_torch_default_uniform_initialization() -> None:
    """torch's own uniform initialization: close to the Gaussian kernel when the first
    layer's fan-in is large (here 64)."""
    x = torch.randn(4, 64, dtype=F64, generator=torch.Generator().manual_seed(6))
    model = nn.Sequential(nn.Linear(64, 2 * W), nn.ReLU(), nn.Linear(2 * W, OUT))
    assert_matches_monte_carlo(model, x, init=torch_init)


def test_explicit_scales_per_path() -> None:
    x = torch.randn(4, 16, dtype=F64, generator=torch.Generator().manual_seed(7))
    model = nn.Sequential(nn.Linear(16, 2 * W), nn.ReLU(), nn.Linear(2 * W, OUT)).to(F64)

    def init(m: nn.Module, gen: torch.Generator) -> None:
        with torch.no_grad():
            m[0].weight.copy_(torch.randn(2 * W, 16, generator=gen, dtype=F64) * 1.5 / 4.0)
            m[0].bias.copy_(torch.randn(2 * W, generator=gen, dtype=F64) * 0.2)
            m[2].weight.copy_(torch.randn(OUT, 2 * W, generator=gen, dtype=F64) / math.sqrt(2 * W))
            m[2].bias.zero_().add_(torch.randn(OUT, generator=gen, dtype=F64) * 0.1)

    arch = from_torch(model, w_std={"0": 1.5, "2": 1.0}, b_std={"0": 0.2, "2": 0.1})
    expected = nl.serial(
        nl.Dense(w_std=1.5, b_std=0.2, parameterization="standard", width=2 * W),
        nl.Relu(),
        nl.Dense(w_std=1.0, b_std=0.1, parameterization="standard"),
    )
    torch.testing.assert_close(arch.kernel(x).ntk, expected.kernel(x).ntk)
    k = arch.kernel(x)
    nngp, nngp_se, ntk, ntk_se = monte_carlo(model, x, init, 12)
    torch.testing.assert_close(ntk, k.ntk, rtol=0.06, atol=float(4 * ntk_se.max()))
    torch.testing.assert_close(nngp, k.nngp, rtol=0.06, atol=float(4 * nngp_se.max()))


# ------------------------------------------------------------------ structure and round trips


def test_to_torch_round_trip_gives_the_same_kernel() -> None:
    arch = nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1),
        Residual([nl.Relu(), Conv(filter_shape=(3, 3), w_std=1.2)], scale=0.5),
        LayerNorm("all", eps=1e-3),
        nl.Relu(),
        AvgPool((2, 2)),
        Conv(filter_shape=(3, 3), padding="CIRCULAR", b_std=None),
        nl.Gelu(),
        Dropout(0.1),
        GlobalAvgPool(),
        nl.Dense(w_std=1.3, b_std=0.1),
    )
    net = arch.to_torch(width=8, dtype=F64)
    x = _images()
    net(x)  # materialize the lazy layers
    back = from_torch(net)
    k1, k2 = arch.kernel(x), back.kernel(x)
    torch.testing.assert_close(k2.ntk, k1.ntk)
    torch.testing.assert_close(k2.nngp, k1.nngp)


def test_default_scales_are_torch_variances() -> None:
    arch = from_torch(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2)))
    conv, dense = arch.layers[0], arch.layers[3]
    assert isinstance(conv, Conv) and isinstance(dense, nl.Dense)
    assert conv.parameterization == "standard" and conv.width == 8
    assert conv.w_std == pytest.approx(3**-0.5)
    assert conv.b_std == pytest.approx((3 * 27) ** -0.5)
    assert dense.b_std == pytest.approx((3 * 8) ** -0.5)
    assert isinstance(arch.layers[2], Flatten)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("model", "name", "path"),
    [
        (nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2)), "MaxPool2d", "1"),
        (nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.BatchNorm1d(4))), "BatchNorm1d", "1.0"),
        (nn.Sequential(nn.Linear(3, 4), nn.MultiheadAttention(4, 2)), "MultiheadAttention", "1"),
        (nn.Sequential(nn.Conv2d(3, 4, 3), nn.Linear(4, 2)), "Linear", "1"),
        (nn.Sequential(nn.Conv2d(3, 4, 3, dilation=2)), "Conv2d", "0"),
    ],
)
def test_unsupported_modules_name_the_module_and_path(
    model: nn.Module, name: str, path: str
) -> None:
    with pytest.raises(NtklabValueError, match=rf"{name} at path '{path}'.*monte_carlo_kernel"):
        from_torch(model)


def test_custom_forward_is_rejected() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * 2

    with pytest.raises(NtklabValueError, match=r"Net \(the model itself\): it has its own forward"):
        from_torch(Net())
    with pytest.raises(NtklabTypeError, match=r"module: expected a torch\.nn\.Module"):
        from_torch("net")  # type: ignore[arg-type]


class _TracedBlock(nn.Module):
    """A residual block written the usual way: forward is x + c * branch(x)."""

    def __init__(self, width: int, scale: float | None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(width, width)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.fc2(self.act(self.fc1(x)))
        return x + branch if self.scale is None else x + self.scale * branch


@pytest.mark.parametrize("scale", [None, 0.5])
def test_residual_modules_with_their_own_forward_are_read_by_tracing(scale: float | None) -> None:
    model = nn.Sequential(nn.Linear(3, 8), _TracedBlock(8, scale), nn.ReLU(), nn.Linear(8, 1))
    read = from_torch(model)
    block = read.layers[1]
    assert isinstance(block, Residual)
    assert block.scale == (1.0 if scale is None else scale)
    same = from_torch(
        nn.Sequential(
            nn.Linear(3, 8),
            ResidualBlock(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)), scale or 1.0),
            nn.ReLU(),
            nn.Linear(8, 1),
        )
    )
    x = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(read.kernel(x).ntk, same.kernel(x).ntk, rtol=1e-12, atol=0)


def test_traced_forward_that_is_not_a_residual_chain_is_rejected() -> None:
    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.tanh(self.fc(x)) * x  # not x + c * chain(x)

    with pytest.raises(NtklabValueError, match=r"Gate at path '1': it has its own forward"):
        from_torch(nn.Sequential(nn.Linear(3, 4), Gate()))
