"""Kernels of fully-connected architectures: parity with neural-tangents, closed forms,
numerics at depth, autograd, dtype/device, and errors on bad input."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_kernels.json"


def _layer(spec: dict[str, Any]) -> nl.kernels.Layer:
    kind = spec["layer"]
    if kind == "Dense":
        return nl.Dense(
            w_std=spec["w_std"],
            b_std=spec["b_std"],
            parameterization=spec["parameterization"],
            width=spec["width"],
        )
    if kind == "LeakyRelu":
        return nl.LeakyRelu(spec["alpha"])
    simple = {
        "Relu": nl.Relu,
        "Abs": nl.Abs,
        "Erf": nl.Erf,
        "Gelu": nl.Gelu,
        "Sin": nl.Sin,
        "Cos": nl.Cos,
        "Identity": nl.Identity,
        "Tanh": nl.Tanh,
    }
    return simple[kind]()


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


# NT's own quadrature (ElementwiseNumerical, deg=50) is itself off by ~3e-4 on these
LOOSE = {"numerical_tanh": 1e-3, "erf_depth1_numerical": 1e-6}


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_parity_with_neural_tangents(case: dict[str, Any]) -> None:
    """Float64 NNGP and NTK agree with neural-tangents 0.6.5 to 1e-6 relative.

    Reference values were generated once by ``tests/data/make_nt_reference.py``.
    """
    arch = nl.serial(*[_layer(s) for s in case["architecture"]])
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    rtol = LOOSE.get(case["name"], 1e-6)
    for name in ("nngp", "ntk"):
        expected = torch.tensor(case[name], dtype=F64)
        scale = expected.abs().max()
        torch.testing.assert_close(getattr(k, name), expected, rtol=rtol, atol=rtol * scale)


def _relu_reference(
    x1: np.ndarray, x2: np.ndarray, w: float, b: float
) -> tuple[np.ndarray, np.ndarray]:
    """Depth-1 ReLU network kernels written out in numpy, from the arc-cosine formulas."""
    d = x1.shape[1]
    k12 = w**2 * x1 @ x2.T / d + b**2
    k11 = w**2 * (x1 * x1).sum(1) / d + b**2
    k22 = w**2 * (x2 * x2).sum(1) / d + b**2
    norm = np.sqrt(np.outer(k11, k22))
    theta = np.arccos(np.clip(k12 / norm, -1, 1))
    relu_k = norm * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2 * np.pi)
    relu_dot = (np.pi - theta) / (2 * np.pi)
    nngp = w**2 * relu_k + b**2
    ntk = nngp + w**2 * k12 * relu_dot  # Theta_1 = K_1 after the first Dense
    return nngp, ntk


def test_depth_one_relu_matches_numpy_formulas() -> None:
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=(6, 4)), rng.normal(size=(5, 4))
    arch = nl.serial(nl.Dense(w_std=1.3, b_std=0.2), nl.Relu(), nl.Dense(w_std=1.3, b_std=0.2))
    k = arch.kernel(torch.from_numpy(x1), torch.from_numpy(x2))
    nngp, ntk = _relu_reference(x1, x2, 1.3, 0.2)
    np.testing.assert_allclose(k.nngp.numpy(), nngp, rtol=1e-12)
    np.testing.assert_allclose(k.ntk.numpy(), ntk, rtol=1e-12)


def test_kernel_of_x1_alone_is_symmetric_and_matches_explicit_pair() -> None:
    x = torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    arch = nl.serial(
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Erf(),
        nl.Dense(w_std=1.5, b_std=0.1),
        nl.Relu(),
        nl.Dense(w_std=1.0),
    )
    k_self, k_pair = arch.kernel(x), arch.kernel(x, x.clone())
    torch.testing.assert_close(k_self.nngp, k_self.nngp.T)
    # identical pairs computed off the diagonal pass have correlation 1 only up to rounding,
    # which moves the angle by up to sqrt(2 eps): the NTK there agrees to ~1e-8, not 1e-16
    torch.testing.assert_close(k_self.ntk, k_pair.ntk, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(k_self.var1, torch.diagonal(k_self.nngp))
    assert torch.linalg.eigvalsh(k_self.ntk).min() > 0


def test_standard_parameterization_ntk_scales_with_width() -> None:
    """Theta' = n_in K + w^2 Theta + 1: doubling the hidden width adds the NNGP term again."""
    x = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(1))

    def arch(width: int) -> nl.Architecture:
        return nl.serial(
            nl.Dense(w_std=1.2, b_std=0.1, parameterization="standard", width=width),
            nl.Relu(),
            nl.Dense(w_std=1.2, b_std=0.1, parameterization="standard"),
        )

    k1, k2 = arch(100).kernel(x), arch(200).kernel(x)
    relu_k = (k1.nngp - 0.1**2) / 1.2**2  # E[relu relu] of the hidden layer
    torch.testing.assert_close(k2.ntk - k1.ntk, 100 * relu_k, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k1.nngp, k2.nngp)
    with pytest.raises(NtklabValueError, match="width"):
        nl.serial(
            nl.Dense(w_std=1.0, parameterization="standard"),
            nl.Relu(),
            nl.Dense(w_std=1.0, parameterization="standard"),
        ).kernel(x)


def test_100_layer_relu_float32_is_finite_and_close_to_float64() -> None:
    """Max-normalized error <= 1e-4; no NumericalWarning (every clamp is rounding)."""
    x = torch.randn(40, 10, dtype=F64, generator=torch.Generator().manual_seed(2))
    block = nl.serial(nl.Dense(w_std=math.sqrt(2.0), b_std=0.1), nl.Relu())
    arch = nl.serial(*([block] * 100), nl.Dense(w_std=math.sqrt(2.0), b_std=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k64 = arch.kernel(x)
        k32 = arch.kernel(x.float())
    for name in ("nngp", "ntk"):
        a, b = getattr(k64, name), getattr(k32, name)
        assert b.dtype == torch.float32 and torch.isfinite(b).all()
        assert float((a - b.double()).abs().max() / a.abs().max()) <= 1e-4, name


def test_no_grad_and_autograd_paths_agree() -> None:
    x1 = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    x2 = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(4))
    arch = nl.serial(
        nl.Dense(w_std=1.4, b_std=0.3),
        nl.Relu(),
        nl.Dense(w_std=1.1, b_std=0.2),
        nl.LeakyRelu(0.1),
        nl.Dense(w_std=1.0, b_std=0.1),
    )
    with torch.no_grad():
        fast = arch.kernel(x1, x2)
    slow = arch.kernel(x1.clone().requires_grad_(), x2)
    torch.testing.assert_close(fast.ntk, slow.ntk.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(fast.nngp, slow.nngp.detach(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("act", [nl.Relu(), nl.Erf(), nl.Gelu(), nl.Tanh(degree=12)], ids=repr)
def test_gradients_in_inputs_match_finite_differences(act: nl.kernels.Layer) -> None:
    gen = torch.Generator().manual_seed(5)
    x1 = torch.randn(3, 2, dtype=F64, generator=gen, requires_grad=True)
    x2 = torch.randn(2, 2, dtype=F64, generator=gen, requires_grad=True)
    arch = nl.serial(
        nl.Dense(w_std=1.3, b_std=0.2),
        act,
        nl.Dense(w_std=1.2, b_std=0.1),
        act,
        nl.Dense(w_std=1.0, b_std=0.1),
    )

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = arch.kernel(a, b)
        return k.nngp, k.ntk

    assert torch.autograd.gradcheck(f, (x1, x2), eps=1e-6, atol=1e-6)
    # and with x2 = x1 (the diagonal has correlation exactly 1)
    assert torch.autograd.gradcheck(lambda a: arch.kernel(a).ntk, (x1,), eps=1e-6, atol=1e-6)


def test_gradients_in_hyperparameters() -> None:
    x = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(6))
    w = torch.tensor(1.3, dtype=F64, requires_grad=True)
    b = torch.tensor(0.2, dtype=F64, requires_grad=True)

    def f(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        arch = nl.serial(
            nl.Dense(w_std=w, b_std=b),
            nl.Relu(),
            nl.Dense(w_std=w, b_std=b),
            nl.Relu(),
            nl.Dense(w_std=w, b_std=b),
        )
        return arch.kernel(x).ntk

    assert torch.autograd.gradcheck(f, (w, b), eps=1e-6, atol=1e-6)


def test_dtype_and_device_follow_inputs() -> None:
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(3, 2, dtype=dtype)
        k = arch.kernel(x)
        for t in (k.nngp, k.ntk, k.var1, k.var2):
            assert t.dtype == dtype and t.device == x.device


def test_serial_flattens_and_one_layer_is_an_architecture() -> None:
    block = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu())
    arch = nl.serial(block, [nl.Dense(w_std=1.5, b_std=0.1), nl.Relu()], nl.Dense(w_std=1.0))
    assert len(arch) == 5
    x = torch.randn(3, 2, dtype=F64)
    torch.testing.assert_close(
        nl.Dense(w_std=2.0, b_std=0.5).kernel(x).nngp, 4 * x @ x.T / 2 + 0.25
    )


# ------------------------------------------------------------------------------ bad input


@pytest.fixture
def arch() -> nl.Architecture:
    return nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))


def test_mismatched_feature_dimension(arch: nl.Architecture) -> None:
    with pytest.raises(NtklabValueError, match=r"x2: expected the feature dimension of x1 \(3\)"):
        arch.kernel(torch.randn(4, 3), torch.randn(2, 5))


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_wrong_number_of_dimensions(arch: nl.Architecture, shape: tuple[int, ...]) -> None:
    with pytest.raises(NtklabValueError, match=r"x1: expected a 2-D tensor"):
        arch.kernel(torch.randn(*shape))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs(arch: nl.Architecture, bad: float) -> None:
    x = torch.randn(4, 3)
    x[1, 2] = bad
    with pytest.raises(NtklabValueError, match=r"x2: expected finite values, got 1 NaN or inf"):
        arch.kernel(torch.randn(2, 3), x)


def test_wrong_types(arch: nl.Architecture) -> None:
    with pytest.raises(NtklabTypeError, match=r"x1: expected a torch\.Tensor"):
        arch.kernel(np.ones((3, 2)))  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="x1: expected a floating dtype"):
        arch.kernel(torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(NtklabTypeError, match=r"x2: expected the dtype of x1"):
        arch.kernel(torch.ones(3, 2), torch.ones(3, 2, dtype=F64))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"w_std": -1.0}, "w_std"),
        ({"w_std": 1.0, "b_std": -0.1}, "b_std"),
        ({"w_std": float("nan")}, "w_std"),
    ],
)
def test_negative_scales(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(NtklabValueError, match=rf"{name}: expected a finite value >= 0"):
        nl.Dense(**kwargs)


def test_bad_parameterization() -> None:
    with pytest.raises(NtklabValueError, match="parameterization: expected 'ntk' or 'standard'"):
        nl.Dense(w_std=1.0, parameterization="mup")  # type: ignore[arg-type]


def test_activation_before_any_dense() -> None:
    with pytest.raises(NtklabValueError, match=r"layers\[0\]: expected a Dense layer before"):
        nl.serial(nl.Relu(), nl.Dense(w_std=1.0))
    with pytest.raises(NtklabValueError, match=r"layers\[0\]"):
        nl.Relu().kernel(torch.randn(3, 2))


def test_not_a_layer() -> None:
    with pytest.raises(NtklabTypeError, match=r"layers\[1\]: expected an ntklab layer"):
        nl.serial(nl.Dense(w_std=1.0), torch.nn.ReLU())  # type: ignore[arg-type]


# ----------------------------------------------- positional arguments mean what they mean in stax


def test_positional_arguments_are_stax_widths() -> None:
    """``Dense(512)`` is 512 units (stax's out_dim), not a weight scale of 512; the scales are
    the next positional arguments as in ``stax.Dense(out_dim, W_std, b_std)``."""
    x = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    stax_style = nl.serial(nl.Dense(512), nl.Relu(), nl.Dense(1))
    keywords = nl.serial(nl.Dense(width=512), nl.Relu(), nl.Dense(width=1))
    assert stax_style == keywords
    k = stax_style.kernel(x)
    # w_std = 1, b_std = 0: Theta = K1 + K1' Theta-chain stays of the order of the input kernel
    torch.testing.assert_close(k.ntk, keywords.kernel(x).ntk)
    assert float(k.ntk.diagonal().max()) < 10.0
    assert nl.Dense(512, 1.5, 0.1) == nl.Dense(width=512, w_std=1.5, b_std=0.1)
    net = stax_style.to_torch(64, out_features=3, in_features=3)
    assert net[0].out_features == 512 and net[2].out_features == 1  # the layers' own widths
    with pytest.raises(TypeError):
        nl.Dense(512, 1.5, 0.1, "standard")  # type: ignore[misc]  # keyword only
    with pytest.raises(NtklabTypeError, match=r"width: expected a positive int or None .*w_std="):
        nl.Dense(1.5, 0.1)  # type: ignore[arg-type]  # the old (w_std, b_std) order


def test_conv_positional_arguments_are_stax_channels_and_filter() -> None:
    conv = nl.kernels.Conv(64, (3, 3))
    assert (conv.width, conv.filter_shape, conv.strides) == (64, (3, 3), (1, 1))
    assert nl.kernels.Conv(8, (3, 3), (2, 2), "VALID", 1.4, 0.1) == nl.kernels.Conv(
        width=8, filter_shape=(3, 3), strides=(2, 2), padding="VALID", w_std=1.4, b_std=0.1
    )
    net = nl.serial(conv, nl.Relu(), nl.kernels.Flatten(), nl.Dense(1)).to_torch(16)
    net(torch.randn(2, 3, 6, 6))
    assert net[0].out_channels == 64 and net[0].weight.shape == (64, 3, 3, 3)
    with pytest.raises(NtklabTypeError, match=r"width: expected a positive int or None .*out_chan"):
        nl.kernels.Conv((3, 3))  # type: ignore[arg-type]  # the old (filter_shape, ...) order


def test_kernel_to_converts_every_tensor() -> None:
    x = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    k = nl.serial(nl.Dense(w_std=1.3), nl.Relu(), nl.Dense()).kernel(x)
    k32 = k.to(torch.float32)
    for name in ("nngp", "ntk", "var1", "var2"):
        got, want = getattr(k32, name), getattr(k, name)
        assert got.dtype == torch.float32 and got.device == want.device
        torch.testing.assert_close(got, want.float())
    assert k.to("cpu", torch.float64).ntk.dtype == F64
