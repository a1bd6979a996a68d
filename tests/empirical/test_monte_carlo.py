"""``nngp`` conventions, and Monte Carlo estimates converging to the analytic kernels."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

import ntklab as nl
from conftest import F64, mlp3, naive_ntk
from ntklab.empirical.monte_carlo import MonteCarloKernel, monte_carlo_kernel, nngp
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels.engine import Layer
from ntklab.kernels.kernel import KernelState

ARCH = nl.serial(
    nl.Dense(w_std=1.5, b_std=0.1),
    nl.Relu(),
    nl.Dense(w_std=1.2, b_std=0.2),
    nl.Erf(),
    nl.Dense(w_std=1.5, b_std=0.1),
)


@pytest.fixture(scope="module")
def x() -> Tensor:
    return torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))


def relative_error(estimate: Tensor, truth: Tensor) -> float:
    return float(torch.linalg.norm(estimate - truth) / torch.linalg.norm(truth))


def slope(sizes: list[int], errors: list[float]) -> float:
    return float(np.polyfit(np.log(sizes), np.log(errors), 1)[0])


# --------------------------------------------------------------------------------------- nngp
def test_nngp_conventions_are_outer_products(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor],
) -> None:
    _, model, x1, x2 = model_and_inputs
    with torch.no_grad():
        f1 = model(x1).reshape(x1.shape[0], -1)
        f2 = model(x2).reshape(x2.shape[0], -1)
    k = f1.shape[1]
    full = torch.stack([torch.outer(f1[:, a], f2[:, b]) for a in range(k) for b in range(k)])
    full = full.reshape(k, k, *full.shape[1:]).permute(2, 3, 0, 1)  # shape: (n1, n2, k, k)
    assert_close(nngp(model, x1, x2, outputs="full"), full, rtol=1e-12, atol=1e-12)
    diagonal = full.diagonal(dim1=2, dim2=3)  # shape: (n1, n2, k)
    assert_close(nngp(model, x1, x2, outputs="diagonal"), diagonal, rtol=1e-12, atol=1e-12)
    assert_close(nngp(model, x1, x2), diagonal.mean(dim=2), rtol=1e-12, atol=1e-12)
    assert_close(nngp(model, x1), nngp(model, x1, x1), rtol=0.0, atol=0.0)


def test_nngp_is_differentiable_in_parameters_and_inputs() -> None:
    torch.manual_seed(0)
    model = mlp3(2).to(F64)
    x = torch.randn(3, 5, dtype=F64, requires_grad=True)
    nngp(model, x).sum().backward()  # type: ignore[no-untyped-call]
    assert x.grad is not None and bool(x.grad.abs().sum() > 0)
    assert all(p.grad is not None for p in model.parameters())


def test_nngp_bad_input() -> None:
    model = mlp3(1).to(F64)
    x = torch.randn(4, 5, dtype=F64)
    with pytest.raises(NtklabValueError, match="outputs: expected one of 'trace'"):
        nngp(model, x, outputs="mean")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="model: expected a module with parameters"):
        nngp(nn.Tanh(), x)
    with pytest.raises(NtklabValueError, match=r"x2: the model's forward rejected .* \(2, 4\)"):
        nngp(model, x, torch.randn(2, 4, dtype=F64))
    with pytest.raises(NtklabTypeError, match=r"x2: expected the model's dtype torch\.float64"):
        nngp(model, x, x.float())
    with pytest.raises(NtklabValueError, match="x1: expected the model's device cpu, got meta"):
        nngp(model, x.to("meta"))


# -------------------------------------------------------------------- Monte Carlo: exactness
@pytest.mark.parametrize("two_batches", [False, True])
def test_vectorized_estimate_equals_a_loop_over_the_same_draws(
    x: Tensor, two_batches: bool
) -> None:
    x2 = (
        torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
        if two_batches
        else None
    )
    width, n_samples = 16, 7
    mc = monte_carlo_kernel(
        ARCH,
        x,
        x2,
        width=width,
        n_samples=n_samples,
        generator=torch.Generator().manual_seed(3),
        batch_size=3,  # batches 3, 3, 1
    )
    gen = torch.Generator().manual_seed(3)
    nngps, ntks = [], []
    for _ in range(n_samples):
        net = ARCH.to_torch(width, 1, in_features=3, generator=gen, dtype=F64)
        with torch.no_grad():
            f1 = net(x)
            f2 = f1 if x2 is None else net(x2)
        nngps.append(f1 @ f2.T)
        ntks.append(naive_ntk(net, x, x2)[:, :, 0, 0])
    for estimate, stderr, samples in [
        (mc.nngp, mc.nngp_stderr, torch.stack(nngps)),
        (mc.ntk, mc.ntk_stderr, torch.stack(ntks)),
    ]:
        assert_close(estimate, samples.mean(dim=0), rtol=1e-12, atol=1e-12)
        assert_close(stderr, samples.std(dim=0) / math.sqrt(n_samples), rtol=1e-12, atol=1e-12)
    assert (mc.n_samples, mc.width, mc.out_features) == (n_samples, width, 1)


def test_deterministic_given_the_generator_whatever_the_batch_size(x: Tensor) -> None:
    def run(batch_size: int | None) -> MonteCarloKernel:
        return monte_carlo_kernel(
            ARCH,
            x,
            width=32,
            n_samples=5,
            out_features=3,
            batch_size=batch_size,
            generator=torch.Generator().manual_seed(11),
        )

    a, b, c = run(None), run(None), run(2)
    assert torch.equal(a.ntk, b.ntk) and torch.equal(a.nngp_stderr, b.nngp_stderr)
    assert_close(a.ntk, c.ntk, rtol=1e-12, atol=1e-12)
    assert_close(a.nngp, c.nngp, rtol=1e-12, atol=1e-12)
    assert_close(a.ntk_stderr, c.ntk_stderr, rtol=1e-10, atol=1e-12)


def test_out_features_are_averaged(x: Tensor) -> None:
    """With k outputs the estimate is the mean over outputs of the trace convention."""
    mc = monte_carlo_kernel(
        ARCH, x, width=16, n_samples=2, out_features=3, generator=torch.Generator().manual_seed(4)
    )
    gen = torch.Generator().manual_seed(4)
    nets = [ARCH.to_torch(16, 3, in_features=3, generator=gen, dtype=F64) for _ in range(2)]
    ntk = sum(naive_ntk(net, x).diagonal(dim1=2, dim2=3).mean(dim=2) for net in nets) / 2
    nngp_ = sum(nngp(net, x) for net in nets) / 2
    assert_close(mc.ntk, ntk, rtol=1e-12, atol=1e-12)
    assert_close(mc.nngp, nngp_, rtol=1e-12, atol=1e-12)
    assert mc.out_features == 3


def test_dtype_follows_the_inputs_or_the_argument(x: Tensor) -> None:
    gen = torch.Generator().manual_seed(0)
    mc32 = monte_carlo_kernel(ARCH, x.float(), width=8, n_samples=2, generator=gen)
    assert mc32.ntk.dtype == mc32.nngp_stderr.dtype == torch.float32
    mc64 = monte_carlo_kernel(ARCH, x.float(), width=8, n_samples=2, generator=gen, dtype=F64)
    assert mc64.ntk.dtype == F64


# --------------------------------------------------------------- Monte Carlo: convergence
def test_ntk_error_falls_like_inverse_sqrt_width_times_samples(x: Tensor) -> None:
    """At fixed S = 4 the relative NTK error falls like (m S)^(-1/2), m from 16 to 1024."""
    k = ARCH.kernel(x)
    n_samples, widths, repeats = 4, [16, 64, 256, 1024], 8
    errors = []
    for width in widths:
        errs = [
            relative_error(
                monte_carlo_kernel(
                    ARCH,
                    x,
                    width=width,
                    n_samples=n_samples,
                    generator=torch.Generator().manual_seed(100 * width + r),
                ).ntk,
                k.ntk,
            )
            for r in range(repeats)
        ]
        errors.append(math.sqrt(np.mean(np.square(errs))))
    fitted = slope([w * n_samples for w in widths], errors)
    assert -0.65 <= fitted <= -0.35, (fitted, errors)
    assert errors[-1] < 0.06


def test_nngp_error_falls_like_inverse_sqrt_samples(x: Tensor) -> None:
    """The NNGP sample f(x) f(x')^T of one network does not concentrate with width: its error
    falls like S^(-1/2) in the number of networks S."""
    k = ARCH.kernel(x)
    sizes, repeats = [4, 16, 64, 256], 6
    errors = []
    for n_samples in sizes:
        errs = [
            relative_error(
                monte_carlo_kernel(
                    ARCH,
                    x,
                    width=64,
                    n_samples=n_samples,
                    generator=torch.Generator().manual_seed(1000 * n_samples + r),
                ).nngp,
                k.nngp,
            )
            for r in range(repeats)
        ]
        errors.append(math.sqrt(np.mean(np.square(errs))))
    fitted = slope(sizes, errors)
    assert -0.65 <= fitted <= -0.35, (fitted, errors)


def test_truth_within_four_standard_errors(x: Tensor) -> None:
    """|estimate - truth| <= 4 stderr + a bias allowance of order 1/width, elementwise."""
    x2 = torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
    k = ARCH.kernel(x, x2)
    width, n_samples, out_features = 256, 128, 8
    mc = monte_carlo_kernel(
        ARCH,
        x,
        x2,
        width=width,
        n_samples=n_samples,
        out_features=out_features,
        generator=torch.Generator().manual_seed(7),
    )
    for estimate, stderr, truth in [
        (mc.nngp, mc.nngp_stderr, k.nngp),
        (mc.ntk, mc.ntk_stderr, k.ntk),
    ]:
        bias = truth.abs().max() / width
        assert bool((stderr > 0).all())
        z = (estimate - truth) / stderr
        assert bool(((estimate - truth).abs() <= 4 * stderr + bias).all()), z
    # The standard error is the right size: for Gaussian outputs with covariance K, a sample
    # f(x) f(x') has variance K(x, x) K(x', x') + K(x, x')^2, averaged over S k samples.
    gaussian = ((k.var1[:, None] * k.var2[None, :] + k.nngp**2) / (n_samples * out_features)).sqrt()
    assert_close(mc.nngp_stderr, gaussian, rtol=0.35, atol=0.0)


# ---------------------------------------------------------------------------- bad input
@dataclass(frozen=True)
class _NoWeights(Layer):
    """A layer without parameters that is not an activation (passes Architecture checks)."""

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        return state

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return nn.Identity()


def test_monte_carlo_bad_input(x: Tensor) -> None:
    with pytest.raises(NtklabTypeError, match="arch: expected an ntklab Architecture"):
        monte_carlo_kernel(mlp3(1), x, width=8, n_samples=2)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="arch: expected an architecture with at least one"):
        monte_carlo_kernel(nl.serial(_NoWeights()), x, width=8, n_samples=2)
    with pytest.raises(NtklabValueError, match="n_samples: expected an int >= 2"):
        monte_carlo_kernel(ARCH, x, width=8, n_samples=1)
    with pytest.raises(NtklabValueError, match="width: expected an int >= 1"):
        monte_carlo_kernel(ARCH, x, width=0, n_samples=2)
    with pytest.raises(NtklabValueError, match="batch_size: expected an int >= 1"):
        monte_carlo_kernel(ARCH, x, width=8, n_samples=2, batch_size=0)
    with pytest.raises(NtklabTypeError, match=r"dtype: expected a floating torch\.dtype"):
        monte_carlo_kernel(ARCH, x, width=8, n_samples=2, dtype=torch.int64)
    with pytest.raises(NtklabValueError, match="x1: expected a 2-D tensor"):
        monte_carlo_kernel(ARCH, x[0], width=8, n_samples=2)
    with pytest.raises(NtklabValueError, match=r"x2: expected the feature dimension of x1 \(3\)"):
        monte_carlo_kernel(ARCH, x, torch.randn(2, 4, dtype=F64), width=8, n_samples=2)
    with pytest.raises(NtklabTypeError, match="x2: expected the dtype of x1"):
        monte_carlo_kernel(ARCH, x, x.float(), width=8, n_samples=2)
    with pytest.raises(NtklabValueError, match="x2: expected the device of x1"):
        monte_carlo_kernel(ARCH, x, x.to("meta"), width=8, n_samples=2)


def test_module_factory_draws_the_same_networks_as_the_architecture() -> None:
    """A factory returning ``arch.to_torch(...)`` from one generator gives exactly the
    estimate of the architecture itself with the same generator (the same networks)."""
    arch = nl.serial(nl.Dense(w_std=1.4, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.0, b_std=0.1))
    x1 = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x2 = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = monte_carlo_kernel(
        arch, x1, x2, width=64, n_samples=6, generator=torch.Generator().manual_seed(3)
    )
    g = torch.Generator().manual_seed(3)

    def make() -> nn.Module:
        return arch.to_torch(64, in_features=3, generator=g, dtype=torch.float64)

    got = monte_carlo_kernel(make, x1, x2, n_samples=6)
    torch.testing.assert_close(got.ntk, ref.ntk)
    torch.testing.assert_close(got.nngp, ref.nngp)
    assert got.width is None and got.out_features == 1


def test_module_factory_of_an_image_model_and_refusals() -> None:
    x = torch.randn(3, 2, 5, 5, generator=torch.Generator().manual_seed(0))

    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(2, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))

    mc = monte_carlo_kernel(make, x, n_samples=3)
    assert mc.ntk.shape == (3, 3) and mc.out_features == 2
    assert bool((mc.ntk.diagonal() > 0).all())
    with pytest.raises(NtklabTypeError, match="got the module Sequential itself"):
        monte_carlo_kernel(make(), x, n_samples=3)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="width: expected None with a module factory"):
        monte_carlo_kernel(make, x, width=8, n_samples=3)
    with pytest.raises(NtklabTypeError, match="returns int"):
        monte_carlo_kernel(lambda: 3, x, n_samples=3)  # type: ignore[arg-type, return-value]
