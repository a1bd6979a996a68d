"""Dual kernels of activations against independent references.

- Closed forms against a Monte Carlo average over correlated Gaussian pairs.
- The polar quadrature of ``Elementwise`` against the closed forms (the documented 1e-8).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ntklab.kernels.quadrature import derivative, gaussian_pair_expectation

F64 = torch.float64

# (a, b, c): variances and covariance, |c| <= sqrt(ab), variances up to 4
PAIRS = torch.tensor(
    [
        [1.0, 1.0, 0.3],
        [1.0, 1.0, 1.0],
        [2.0, 0.5, -0.9],
        [0.3, 1.7, 0.0],
        [4.0, 4.0, 3.99],
        [4.0, 2.5, -2.0],
        [0.05, 0.2, 0.09],
    ],
    dtype=F64,
)

CLOSED_FORMS = {
    "relu": (nl.Relu(), torch.relu),
    "leaky_relu": (nl.LeakyRelu(0.2), lambda t: torch.nn.functional.leaky_relu(t, 0.2)),
    "abs": (nl.Abs(), torch.abs),
    "erf": (nl.Erf(), torch.erf),
    "gelu": (nl.Gelu(), torch.nn.functional.gelu),
    "sin": (nl.Sin(), torch.sin),
    "cos": (nl.Cos(), torch.cos),
    "identity": (nl.Identity(), lambda t: t),
}


def _dual(act: nl.kernels.Activation, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b, c = pairs.unbind(1)
    nngp, dot = act.dual(c.clone(), a, b, inplace=False, derivative=True)
    assert dot is not None
    return nngp, dot.expand_as(nngp)


def _monte_carlo(fn, pairs: torch.Tensor, n: int, gen: torch.Generator):  # type: ignore[no-untyped-def]
    """E[f(u)f(v)] and E[f'(u)f'(v)] from n correlated Gaussian samples, and standard errors."""
    a, b, c = pairs.unbind(1)
    z1 = torch.randn(n, 1, generator=gen, dtype=F64)
    z2 = torch.randn(n, 1, generator=gen, dtype=F64)
    rho = (c / torch.sqrt(a * b)).clamp(-1, 1)
    u = torch.sqrt(a) * z1
    v = torch.sqrt(b) * (rho * z1 + torch.sqrt(1 - rho**2) * z2)
    d = derivative(fn)
    out = []
    for prod in (fn(u) * fn(v), d(u) * d(v)):
        out.append((prod.mean(0), prod.std(0) / math.sqrt(n)))
    return out


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_closed_form_matches_monte_carlo(name: str, gen: torch.Generator) -> None:
    act, fn = CLOSED_FORMS[name]
    nngp, dot = _dual(act, PAIRS)
    (mc_k, se_k), (mc_d, se_d) = _monte_carlo(fn, PAIRS, 400_000, gen)
    # 5 standard errors (plus rounding) on every pair
    assert ((nngp - mc_k).abs() <= 5 * se_k + 1e-12).all(), (nngp, mc_k, se_k)
    assert ((dot - mc_d).abs() <= 5 * se_d + 1e-12).all(), (dot, mc_d, se_d)


@pytest.mark.parametrize("name", ["relu", "erf", "gelu", "sin", "cos", "leaky_relu", "abs"])
def test_quadrature_within_1e8_of_closed_forms(name: str) -> None:
    act, fn = CLOSED_FORMS[name]
    nngp, dot = _dual(act, PAIRS)
    q = nl.Elementwise(fn, name)
    q_nngp, q_dot = _dual(q, PAIRS)
    torch.testing.assert_close(q_nngp, nngp, rtol=0, atol=1e-8)
    torch.testing.assert_close(q_dot, dot, rtol=0, atol=1e-8)


def test_quadrature_converges_with_degree() -> None:
    """Lower degrees are measurably worse: the accuracy comes from the rule, not luck."""
    nngp, dot = _dual(nl.Erf(), PAIRS)
    errors = []
    for degree in (8, 16, 32):
        q_nngp, q_dot = _dual(nl.Elementwise(torch.erf, "erf", degree), PAIRS)
        errors.append(float(torch.max((q_nngp - nngp).abs().max(), (q_dot - dot).abs().max())))
    assert errors[0] > errors[1] > errors[2]
    assert errors[0] > 1e-6


def test_named_quadrature_activations_match_monte_carlo(gen: torch.Generator) -> None:
    for act, fn in [
        (nl.Tanh(), torch.tanh),
        (nl.Sigmoid(), torch.sigmoid),
        (nl.Softplus(), torch.nn.functional.softplus),
        (nl.Silu(), torch.nn.functional.silu),
    ]:
        nngp, dot = _dual(act, PAIRS)
        (mc_k, se_k), (mc_d, se_d) = _monte_carlo(fn, PAIRS, 400_000, gen)
        assert ((nngp - mc_k).abs() <= 5 * se_k + 1e-12).all(), act
        assert ((dot - mc_d).abs() <= 5 * se_d + 1e-12).all(), act


def test_quadrature_is_differentiable_in_covariance() -> None:
    """d/dc E[phi(u)phi(v)] = E[phi'(u)phi'(v)] (Price's theorem), checked through autograd."""
    a = torch.tensor([1.0, 2.0], dtype=F64)
    b = torch.tensor([1.5, 0.5], dtype=F64)
    c = torch.tensor([0.4, -0.3], dtype=F64, requires_grad=True)
    value = gaussian_pair_expectation(torch.tanh, torch.tanh, c, a, b)
    (grad,) = torch.autograd.grad(value.sum(), c)
    d = derivative(torch.tanh)
    expected = gaussian_pair_expectation(d, d, c.detach(), a, b)
    torch.testing.assert_close(grad, expected, rtol=1e-7, atol=1e-9)


def test_relu_inplace_path_equals_reference_path() -> None:
    a, b, c = PAIRS.unbind(1)
    ref_k, ref_d = nl.Relu().dual(c.clone(), a, b, inplace=False, derivative=True)
    fast_k, fast_d = nl.Relu().dual(c.clone(), a, b, inplace=True, derivative=True)
    assert ref_d is not None and fast_d is not None
    torch.testing.assert_close(fast_k, ref_k, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(fast_d, ref_d, rtol=1e-14, atol=1e-14)


def test_clamp_beyond_rounding_warns() -> None:
    var = torch.ones(3, dtype=F64)
    cov = torch.tensor([0.5, 1.01, -1.2], dtype=F64)  # violates Cauchy-Schwarz
    with pytest.warns(NumericalWarning, match="beyond rounding"):
        nngp, _ = nl.Relu().dual(cov, var, var, inplace=False, derivative=True)
    assert torch.isfinite(nngp).all()
    # rounding-level excess is clamped silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nl.Relu().dual(torch.ones(3, dtype=F64) + 1e-15, var, var, inplace=False, derivative=True)


def test_elementwise_rejects_bad_functions() -> None:
    with pytest.raises(NtklabTypeError, match="fn"):
        nl.Elementwise("tanh")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="elementwise"):
        nl.Elementwise(lambda t: t.sum(), "sum")
    with pytest.raises(NtklabValueError, match="degree"):
        nl.Elementwise(torch.tanh, "tanh", degree=0)
    with pytest.raises(NtklabValueError, match="alpha"):
        nl.LeakyRelu(float("nan"))


@pytest.mark.parametrize("fn", [torch.log, torch.sqrt, torch.log1p])
def test_elementwise_refuses_functions_not_finite_on_the_quadrature_grid(
    fn: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Before, ``Elementwise(torch.log)`` was accepted and gave an all-NaN kernel."""
    name = getattr(fn, "__name__", "")
    with pytest.raises(
        NtklabValueError,
        match=rf"Gaussian quadrature grid, got fn = nan at x = -[0-9.e-]+ for {name} \(",
    ):
        nl.Elementwise(fn)


def test_elementwise_refuses_a_nan_derivative_and_names_a_lambda() -> None:
    """``where(t > 0, sqrt(t), 0)`` is finite, but its autograd derivative is NaN for t < 0
    (0 times the NaN slope of sqrt there): its NTK would be NaN."""
    nl.Elementwise(lambda t: t.abs().sqrt(), "sqrt-abs")  # finite on the grid, derivative too
    with pytest.raises(
        NtklabValueError,
        match=r"the derivative of fn \(by autograd\) = nan at x = -.* for <lambda> \(name 'rs'",
    ):
        nl.Elementwise(lambda t: torch.where(t > 0, t.sqrt(), 0.0), "rs")


@pytest.mark.parametrize(
    ("build", "where", "this", "that"),
    [
        (lambda: [nl.Dense(w_std=1.0), nl.Relu(), nl.Relu(), nl.Dense(w_std=1.0)], 2, "Relu", 1),
        # Dropout (the identity at inference) only passes the relu's output on
        (lambda: [nl.Dense(w_std=1.0), nl.Relu(), nl.Dropout(0.1), nl.Erf()], 3, "Erf", 1),
        (lambda: [nl.Dense(w_std=1.0), nl.Erf(), nl.Elementwise(torch.tanh, "tanh")], 2, "tanh", 1),
    ],
)
def test_an_activation_directly_after_an_activation_is_refused(
    build: Callable[[], list[nl.Layer]], where: int, this: str, that: int
) -> None:
    """Before, ``serial(Dense, Relu, Relu, Dense)`` applied the ReLU dual to the covariance
    of a ReLU output, which is not Gaussian, and returned a wrong kernel without a word."""
    layers = build()
    prev = type(layers[that]).__name__
    with pytest.raises(NtklabValueError) as info:
        nl.serial(*layers)
    text = str(info.value)
    assert text.startswith(f"layers[{where}]: expected a Dense or Conv layer before the ")
    assert f"activation {this}, got it directly after the activation {prev} at layers[{that}]" in (
        text
    )
    assert f"x -> {this}({prev}(x)) use one Elementwise(fn, name)" in text


def test_an_activation_after_an_activation_in_a_branch_is_refused() -> None:
    from ntklab.kernels import FanInSum, FanOut, parallel

    branch = [nl.Dense(w_std=1.0), nl.Relu(), nl.Abs()]
    with pytest.raises(NtklabValueError, match=r"layers\[2\]\.branches\[1\]\[2\]: expected a"):
        nl.serial(nl.Dense(w_std=1.0), FanOut(2), parallel(nl.Identity(), branch), FanInSum())


def test_activations_separated_by_a_layer_with_weights_or_identity_are_accepted() -> None:
    """``Identity`` is exact on any input, and a Dense layer makes the next input Gaussian."""
    nl.serial(nl.Dense(w_std=1.0), nl.Relu(), nl.Identity(), nl.Dense(w_std=1.0), nl.Relu())
    nl.serial(nl.Dense(w_std=1.0), nl.Identity(), nl.Relu(), nl.Dense(w_std=1.0))


def test_from_torch_refuses_two_activations_in_a_row() -> None:
    net = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Tanh(), torch.nn.Linear(4, 1)
    )
    with pytest.raises(NtklabValueError, match=r"directly after the activation Relu"):
        nl.from_torch(net)


def test_the_composed_nonlinearity_as_one_elementwise_is_right_and_two_duals_are_wrong() -> None:
    """relu(relu(u)) = relu(u): ``Elementwise`` of the composition gives the arc-cosine
    kernel (closed form, Cho & Saul, 2009), while applying the ReLU dual twice (what the
    refused chain computed) does not."""
    a, b, c = PAIRS[:, 0], PAIRS[:, 1], PAIRS[:, 2]
    composed = nl.Elementwise(lambda t: torch.relu(torch.relu(t)), "relu2")
    got, got_dot = composed.dual(c.clone(), a, b, inplace=False, derivative=True)
    want, want_dot = nl.Relu().dual(c.clone(), a, b, inplace=False, derivative=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-8)
    assert got_dot is not None and want_dot is not None
    torch.testing.assert_close(got_dot, want_dot, rtol=0, atol=1e-8)
    va, _ = nl.Relu().dual(a.clone(), a, a, inplace=False, derivative=False)
    vb, _ = nl.Relu().dual(b.clone(), b, b, inplace=False, derivative=False)
    twice, _ = nl.Relu().dual(want.clone(), va, vb, inplace=False, derivative=False)
    assert float((twice - want).abs().max()) > 0.1
