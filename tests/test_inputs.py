"""The input rule of a kernel, read off its layers as ``Architecture.kernel`` reads them."""

from __future__ import annotations

import pytest
import torch

import ntklab as nl
from ntklab._inputs import check_kernel_inputs, input_rule
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import Conv, Flatten, GlobalAvgPool
from ntklab.solvers.operator import ArchitectureKernel

MLP = nl.serial(nl.Dense(), nl.Relu(), nl.Dense())
CNN2 = nl.serial(Conv(filter_shape=(3, 3)), nl.Relu(), GlobalAvgPool(), nl.Dense())
CNN1 = nl.serial(Conv(filter_shape=(3,)), nl.Relu(), Flatten(), nl.Dense())
POOL = nl.serial(GlobalAvgPool(), nl.Dense())


@pytest.mark.parametrize(
    ("kernel", "ndims", "text"),
    [
        (MLP, (2,), "(n, d)"),
        (nl.Dense(), (2,), "(n, d)"),
        (CNN2, (4,), "(n, C, H, W)"),
        (CNN2.kernel, (4,), "(n, C, H, W)"),
        (ArchitectureKernel(CNN1), (3,), "(n, C, L)"),
        (POOL, (2, 3, 4), "(n, d), (n, C, L) or (n, C, H, W)"),
        (lambda a, b: None, (2, 3, 4), "(n, d), (n, C, L) or (n, C, H, W)"),
    ],
)
def test_input_rule_follows_the_layers(kernel: object, ndims: tuple, text: str) -> None:
    rule = input_rule(kernel)
    assert rule.ndims == ndims and rule.shape_text == text
    # and it is the rule arch.kernel applies: an accepted batch goes through, others do not
    arch = getattr(kernel, "arch", getattr(kernel, "__self__", kernel))
    if hasattr(arch, "kernel") and not callable(getattr(arch, "block_bytes", None)):
        for nd, shape in ((2, (3, 5)), (3, (3, 2, 6)), (4, (3, 2, 5, 5))):
            x = torch.randn(*shape, dtype=torch.float64)
            if nd in ndims:
                arch.kernel(x)  # type: ignore[attr-defined]
            else:
                with pytest.raises(NtklabValueError):
                    arch.kernel(x)  # type: ignore[attr-defined]


def test_messages_name_the_caller_s_arguments() -> None:
    x = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    with pytest.raises(NtklabTypeError, match=r"x_train: expected a torch.Tensor of shape "):
        check_kernel_inputs(CNN2, x.numpy(), names=("x_train", "x_test"))
    with pytest.raises(NtklabTypeError, match=r"x_train: expected float32 or float64"):
        check_kernel_inputs(CNN2, x.half(), names=("x_train", "x_test"))
    with pytest.raises(NtklabValueError, match=r"x_test: expected finite values, got 1 NaN"):
        bad = x.clone()
        bad[0, 0, 0, 0] = float("nan")
        check_kernel_inputs(CNN2, x, bad, names=("x_train", "x_test"))
    with pytest.raises(NtklabTypeError, match=r"x_test: expected the dtype of x_train"):
        check_kernel_inputs(CNN2, x, x.float(), names=("x_train", "x_test"))
    with pytest.raises(NtklabValueError, match=r"x_test: expected the feature dimension of "):
        check_kernel_inputs(MLP, x.flatten(1), x[:, :, :2].flatten(1), names=("x_train", "x_test"))
    with pytest.raises(NtklabValueError, match=r"x_train: expected non-empty features"):
        check_kernel_inputs(CNN2, x[:, :0], names=("x_train", "x_test"))
