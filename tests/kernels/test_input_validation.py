"""Inputs that would give a silently wrong kernel are refused: half precision, channels-last
images into convolutional architectures (kernels and their finite networks)."""

from __future__ import annotations

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool

F64 = torch.float64
HALF = [torch.float16, torch.bfloat16]


def _deep_relu(depth: int) -> nl.kernels.Architecture:
    layers: list[nl.kernels.Layer] = []
    for _ in range(depth):
        layers += [nl.Dense(w_std=1.4, b_std=0.1), nl.Relu()]
    return nl.serial(*layers, nl.Dense(w_std=1.4, b_std=0.1))


def _cnn() -> nl.kernels.Architecture:
    return nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4), nl.Relu(), Flatten(), nl.Dense(w_std=1.0)
    )


@pytest.mark.parametrize("dtype", HALF)
def test_kernels_refuse_half_precision(dtype: torch.dtype) -> None:
    """Before, a depth-100 ReLU kernel ran in bfloat16 and came out ~80% off float64."""
    x = torch.randn(5, 3, dtype=dtype)
    with pytest.raises(NtklabTypeError, match=r"x1: expected float32 or float64, got torch\."):
        _deep_relu(100).kernel(x)
    with pytest.raises(NtklabTypeError, match=r"x2: expected float32 or float64"):
        _deep_relu(2).kernel(x.float(), x)
    with pytest.raises(NtklabTypeError, match=r"x1: expected float32 or float64"):
        _cnn().kernel(torch.randn(2, 1, 6, 6, dtype=dtype))
    # the entry points that share the input validation
    with pytest.raises(NtklabTypeError, match=r"float32 or float64"):
        nl.solvers.kernel_operator(_deep_relu(1), x)
    with pytest.raises(NtklabTypeError, match=r"float32 or float64"):
        nl.empirical.monte_carlo_kernel(_deep_relu(1), x, width=8, n_samples=2)


def test_float32_and_float64_are_accepted() -> None:
    x = torch.randn(4, 3, dtype=F64)
    k64 = _deep_relu(3).kernel(x)
    k32 = _deep_relu(3).kernel(x.float())
    torch.testing.assert_close(k32.ntk.double(), k64.ntk, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "shape",
    [(3, 28, 28, 1), (3, 32, 32, 3), (3, 12, 9, 1)],
    ids=["fashion-mnist", "cifar", "non-square"],
)
def test_conv_kernels_refuse_channels_last_images(shape: tuple[int, ...]) -> None:
    """Before, (n, 28, 28, 1) ran as a convolution over a 28 x 1 image with 28 channels."""
    x = torch.randn(*shape, dtype=F64)
    pattern = (
        rf"x1: expected a channels-first batch \(n, C, H, W\), got shape "
        rf"\({', '.join(map(str, shape))}\).*x1\.permute\(0, 3, 1, 2\)"
    )
    with pytest.raises(NtklabValueError, match=pattern):
        _cnn().kernel(x)
    with pytest.raises(NtklabValueError, match="channels-first"):
        nl.serial(GlobalAvgPool(), nl.Dense(w_std=1.0)).kernel(x)
    with pytest.raises(NtklabValueError, match=r"x2: expected a channels-first"):
        _cnn().kernel(x.permute(0, 3, 1, 2), x)
    # the permuted batch is accepted
    k = _cnn().kernel(x.permute(0, 3, 1, 2))
    assert k.ntk.shape == (3, 3) and bool(torch.isfinite(k.ntk).all())


def test_channels_last_rule_for_1d_signals() -> None:
    arch = nl.serial(Conv(filter_shape=3, w_std=1.4), nl.Relu(), Flatten(), nl.Dense(w_std=1.0))
    with pytest.raises(NtklabValueError, match=r"\(n, C, L\).*x1\.permute\(0, 2, 1\)"):
        arch.kernel(torch.randn(2, 50, 1, dtype=F64))
    assert arch.kernel(torch.randn(2, 1, 50, dtype=F64)).ntk.shape == (2, 2)


@pytest.mark.parametrize(
    "shape",
    [(2, 3, 8, 8), (2, 1, 28, 28), (2, 64, 3, 3), (2, 64, 4, 1), (2, 5, 5, 4), (2, 4, 9, 3)],
)
def test_channels_first_images_pass(shape: tuple[int, ...]) -> None:
    """The rule (last axis 1 or 3, every other non-batch axis > 4) leaves ordinary NCHW
    batches alone: small feature maps, 4 trailing entries, few leading channels."""
    k = nl.serial(
        Conv(filter_shape=(1, 1), w_std=1.4), nl.Relu(), Flatten(), nl.Dense(w_std=1.0)
    ).kernel(torch.randn(*shape, dtype=F64))
    assert k.ntk.shape == (2, 2)


def test_finite_network_refuses_channels_last_images() -> None:
    """``to_torch``'s first convolution refuses the same batches before it reads its channel
    count from them (it is lazy: before, it built 28 input channels)."""
    net = _cnn().to_torch(width=8, generator=torch.Generator().manual_seed(0), dtype=F64)
    x = torch.randn(2, 28, 28, 1, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"input: expected a channels-first batch"):
        net(x)
    assert net(x.permute(0, 3, 1, 2)).shape == (2, 1)
    assert net[0].in_channels == 1
    # later layers see (n, width, H, W) and are not checked: width 8, a 9 x 3 map passes
    net = nl.serial(
        Conv(filter_shape=(3, 3), padding="VALID", w_std=1.4),
        nl.Relu(),
        Conv(filter_shape=(3, 3)),
        Flatten(),
        nl.Dense(),
    ).to_torch(width=8, dtype=F64)
    assert net(torch.randn(2, 2, 11, 5, dtype=F64)).shape == (2, 1)


def test_a_flat_kernel_that_cannot_fit_max_memory_is_refused_before_computing() -> None:
    import ntklab as nl
    from ntklab.kernels.engine import flat_kernel_bytes

    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    x = torch.randn(64, 3, dtype=torch.float64)
    needed = flat_kernel_bytes(arch.layers, x, None)
    with pytest.raises(NtklabValueError, match=r"max_memory.*n1 = 64 by n2 = 64.*kernel_operator"):
        arch.kernel(x, max_memory=needed - 1)
    k = arch.kernel(x, max_memory=needed)
    assert k.ntk.shape == (64, 64)
