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


def test_custom_forward_is_read_or_rejected() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * 2

    class Abs(Net):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).abs()

    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    net = Net()
    twice, once = from_torch(net).kernel(x), from_torch(net.fc).kernel(x)
    torch.testing.assert_close(twice.ntk, 4 * once.ntk)  # (2 f)(x) (2 f)(x') = 4 f f'
    torch.testing.assert_close(twice.nngp, 4 * once.nngp)
    with pytest.raises(NtklabValueError, match=r"Abs \(the model itself\): its forward calls"):
        from_torch(Abs())
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


def test_sum_of_the_same_value_is_rejected() -> None:
    class Square(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x  # not a product of independent branches

    with pytest.raises(NtklabValueError, match=r"Square at path '1'.*share all their weights"):
        from_torch(nn.Sequential(nn.Linear(3, 4), Square(), nn.Linear(4, 1)))
    with pytest.raises(NtklabValueError, match=r"at most one branch without parameters"):
        nl.serial(
            nl.Dense(),
            nl.kernels.FanOut(2),
            nl.kernels.parallel(nl.Identity(), nl.Identity()),
            nl.kernels.FanInSum(),
        )


# ------------------------------------------------------------- forwards read as graphs (fx)

W_GRAPH = 256


class _DiffBlock(nn.Module):
    """relu(2 x - f(x)): a difference, a constant factor and a function applied to a sum."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.ReLU(), nn.Linear(W_GRAPH, W_GRAPH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(2 * x - self.f(x))


class _MixBlock(nn.Module):
    """cat([a(x), b(tanh x)], 1) * c(x): a concatenation inside a product."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(W_GRAPH, W_GRAPH // 2)
        self.b = nn.Linear(W_GRAPH, W_GRAPH // 2)
        self.c = nn.Linear(W_GRAPH, W_GRAPH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), self.b(torch.tanh(x))], dim=1) * self.c(x)


def _gaussian_model(block: type[nn.Module]) -> nn.Module:
    """Linear -> block -> Linear -> ReLU -> Linear with Gaussian weights N(0, 1.2^2 / fan_in) and
    biases N(0, 0.1^2), float64."""
    model = nn.Sequential(
        nn.Linear(5, W_GRAPH),
        block(),
        nn.Linear(W_GRAPH, W_GRAPH),
        nn.ReLU(),
        nn.Linear(W_GRAPH, 1),
    )
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 1.2 / m.in_features**0.5)
            nn.init.normal_(m.bias, 0.0, 0.1)
    return model.double()


@pytest.mark.parametrize("block", [_DiffBlock, _MixBlock], ids=["difference", "concat_product"])
def test_traced_graph_forward_matches_monte_carlo(block: type[nn.Module]) -> None:
    """A forward with sums, differences, constant factors, functions of sums, concatenation
    and products is read as a graph; its kernel matches the Monte Carlo average of the
    module itself (5 standard errors plus 4% of the kernel's scale)."""
    arch = from_torch(_gaussian_model(block), w_std=1.2, b_std=0.1)
    x1 = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x2 = torch.randn(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(5)
    mc = nl.empirical.monte_carlo_kernel(lambda: _gaussian_model(block), x1, x2, n_samples=16)
    k = arch.kernel(x1, x2)
    for got, se, want in ((mc.ntk, mc.ntk_stderr, k.ntk), (mc.nngp, mc.nngp_stderr, k.nngp)):
        bound = 5 * se + 0.04 * want.abs().max()
        assert ((got - want).abs() <= bound).all(), (got, want, se)


def test_traced_graph_errors_name_the_module_path() -> None:
    class AddsOne(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.f(x) + 1.0

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f = nn.Linear(4, 4)
            self.g = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.f(x)
            return self.g(h) + self.g(x)

    with pytest.raises(NtklabValueError, match=r"AddsOne at path '1'.*adds a constant"):
        from_torch(nn.Sequential(nn.Linear(3, 4), AddsOne()))
    with pytest.raises(NtklabValueError, match=r"Shared at path '1'.*submodule g is called"):
        from_torch(nn.Sequential(nn.Linear(3, 4), Shared()))
