"""The further closed-form activations of neural-tangents' stax (``ABRelu``, ``Sign``, ``Exp``,
``ExpNormalized``, ``GaussianBump``, ``Rbf``, ``Gabor``, ``Hermite``, ``Monomial``,
``RectifiedMonomial``, ``Polynomial``, ``SigmoidLike``) against independent references:

- neural-tangents 0.6.5 kernels of small networks (tests/data/nt_reference_activations.json,
  written by tests/data/make_nt_activation_reference.py);
- the polar Gaussian quadrature of the same function (``Elementwise``), NNGP and derivative
  dual, at correlations -1, 0, 1 and between, and on the diagonal pass;
- Monte Carlo over finite networks ``arch.to_torch`` (mean of many draws within 5 standard
  errors);
- Price's theorem (the NTK factor is the derivative of the NNGP in the covariance);
- the special cases that other layers compute (``Relu``, ``LeakyRelu``, ``Abs``, ``Identity``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import Activation

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_activations.json"

# NT name -> ntklab class (stax.Gaussian is GaussianBump, stax.Sigmoid_like is SigmoidLike)
_BY_NT_NAME: dict[str, Any] = {
    "ABRelu": nl.ABRelu,
    "Sign": nl.Sign,
    "Exp": nl.Exp,
    "ExpNormalized": nl.ExpNormalized,
    "Gaussian": nl.GaussianBump,
    "Rbf": nl.Rbf,
    "Gabor": nl.Gabor,
    "Hermite": nl.Hermite,
    "Monomial": nl.Monomial,
    "RectifiedMonomial": nl.RectifiedMonomial,
    "Polynomial": nl.Polynomial,
    "Sigmoid_like": nl.SigmoidLike,
    # parameters a, b, c of these three: tests/kernels/test_erf_sin_cos_parameters.py
    "Erf": nl.Erf,
    "Sin": nl.Sin,
    "Cos": nl.Cos,
}


def _layer(spec: dict[str, Any]) -> nl.kernels.Layer:
    kwargs = {k: v for k, v in spec.items() if k != "layer"}
    if spec["layer"] == "Dense":
        return nl.Dense(
            w_std=kwargs["w_std"],
            b_std=kwargs["b_std"],
            parameterization=kwargs["parameterization"],
            width=kwargs["width"],
        )
    return _BY_NT_NAME[spec["layer"]](**kwargs)  # type: ignore[no-any-return]


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


def test_reference_covers_every_new_activation() -> None:
    used = {s["layer"] for case in _cases() for s in case["architecture"]} - {"Dense"}
    assert used == set(_BY_NT_NAME)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_parity_with_neural_tangents(case: dict[str, Any]) -> None:
    """Float64 NNGP and NTK agree with neural-tangents 0.6.5 to 1e-6 relative."""
    arch = nl.serial(*[_layer(s) for s in case["architecture"]])
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    for name in ("nngp", "ntk"):
        expected = torch.tensor(case[name], dtype=F64)
        scale = float(expected.abs().max())
        torch.testing.assert_close(getattr(k, name), expected, rtol=1e-6, atol=1e-6 * scale)


# --------------------------------------------------------------------------------------------
# closed forms against quadrature

# (a, b, c): correlations 1, -1 (a = b and a != b), 0, and between; variances up to 2
PAIRS = torch.tensor(
    [
        [1.0, 1.0, 1.0],
        [0.5, 2.0, 1.0],
        [1.0, 1.0, -1.0],
        [0.5, 2.0, -1.0],
        [0.3, 1.7, 0.0],
        [1.0, 1.0, 0.3],
        [2.0, 0.5, -0.9],
        [0.05, 0.2, 0.09],
        [1.5, 1.2, 1.3],
    ],
    dtype=F64,
)

ACTIVATIONS: dict[str, Activation] = {
    "abrelu": nl.ABRelu(-0.3, 1.7),
    "abrelu_negative": nl.ABRelu(0.5, -2.0),
    "sign": nl.Sign(),
    "exp": nl.Exp(0.7, 0.5),
    "gaussian_bump": nl.GaussianBump(1.3, -0.7),
    "gaussian_bump_positive_b": nl.GaussianBump(0.9, 0.05),
    "rbf": nl.Rbf(0.8),
    "gabor": nl.Gabor(),
    "hermite_0": nl.Hermite(0),
    "hermite_1": nl.Hermite(1),
    "hermite_4": nl.Hermite(4),
    "monomial_0": nl.Monomial(0),
    "monomial_3": nl.Monomial(3),
    "monomial_5": nl.Monomial(5),
    "rectified_monomial_0": nl.RectifiedMonomial(0),
    "rectified_monomial_1": nl.RectifiedMonomial(1),
    "rectified_monomial_2": nl.RectifiedMonomial(2),
    "rectified_monomial_3": nl.RectifiedMonomial(3),
    "rectified_monomial_4": nl.RectifiedMonomial(4),
    "polynomial": nl.Polynomial([0.1, -1.0, 0.5, 0.3]),
    "sigmoid_like": nl.SigmoidLike(),
}


def _dual(act: Activation, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b, c = pairs.unbind(1)
    nngp, dot = act.dual(c.clone(), a, b, inplace=False, derivative=True)
    assert dot is not None
    return nngp, dot.expand_as(nngp)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_closed_form_matches_quadrature(name: str) -> None:
    """NNGP and derivative dual against ``Elementwise(phi)`` (polar Gauss-Legendre quadrature,
    the derivative by autograd), at correlations +-1, 0 and between, to 1e-8 relative."""
    act = ACTIVATIONS[name]
    nngp, dot = _dual(act, PAIRS)
    q_nngp, q_dot = _dual(nl.Elementwise(act.phi, name, degree=40), PAIRS)
    scale = float(q_nngp.abs().max())
    torch.testing.assert_close(nngp, q_nngp, rtol=1e-8, atol=1e-8 * scale)
    torch.testing.assert_close(dot, q_dot, rtol=1e-8, atol=1e-8 * max(1.0, scale))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_diagonal_pass_matches_quadrature_of_the_square(name: str) -> None:
    """On the diagonal pass (``cov``, ``var1``, ``var2`` one tensor) the dual is
    :math:`E[\\phi(u)^2]` and :math:`E[\\phi'(u)^2]`."""
    act = ACTIVATIONS[name]
    v = torch.tensor([0.05, 0.5, 1.0, 2.0], dtype=F64)
    nngp, dot = act.dual(v, v, v, inplace=False, derivative=True)
    assert dot is not None
    q_nngp, q_dot = nl.Elementwise(act.phi, name, degree=40).dual(
        v, v, v, inplace=False, derivative=True
    )
    assert q_dot is not None
    torch.testing.assert_close(nngp, q_nngp, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(dot.expand_as(q_dot), q_dot, rtol=1e-8, atol=1e-12)


def test_closed_diagonal_rules() -> None:
    """The variance rules of stax written out: (a^2+b^2)/2 K, (2n-1)!! K^n (/2 rectified),
    1 for Rbf and Sign, 0 for Sign at zero variance."""
    v = torch.tensor([0.0, 0.5, 2.0], dtype=F64)

    def diag(act: Activation) -> torch.Tensor:
        return act.dual(v, v, v, inplace=False, derivative=False)[0]

    torch.testing.assert_close(diag(nl.ABRelu(0.3, -1.2)), (0.09 + 1.44) / 2 * v)
    torch.testing.assert_close(diag(nl.Monomial(3)), 15 * v**3)
    torch.testing.assert_close(diag(nl.RectifiedMonomial(3)), 15 * v**3 / 2)
    torch.testing.assert_close(diag(nl.Rbf(0.4)), torch.ones_like(v), rtol=0, atol=0)
    torch.testing.assert_close(diag(nl.Sign()), torch.tensor([0.0, 1.0, 1.0], dtype=F64))
    torch.testing.assert_close(diag(nl.GaussianBump(2.0, -1.0)), 4.0 / torch.sqrt(1 + 4 * v))
    torch.testing.assert_close(diag(nl.Exp(0.5, 2.0)), 0.25 * torch.exp(8 * v))
    torch.testing.assert_close(diag(nl.ExpNormalized(0.7, -0.2)), v * math.exp(0.7 * 0.8))
    # phi(0) = 1 for the step [x >= 0] x^0: an input of zero variance is always counted
    torch.testing.assert_close(
        diag(nl.RectifiedMonomial(0)), torch.tensor([1.0, 0.5, 0.5], dtype=F64)
    )


# --------------------------------------------------------------------------------------------
# Price's theorem, special cases, float32


@pytest.mark.parametrize(
    "act",
    [*[ACTIVATIONS[n] for n in sorted(ACTIVATIONS)], nl.ExpNormalized(1.3, -0.4)],
    ids=repr,
)
def test_ntk_factor_is_the_covariance_derivative_of_the_nngp(act: Activation) -> None:
    """:math:`\\partial_c E[\\phi(u)\\phi(v)] = E[\\phi'(u)\\phi'(v)]` where the derivative exists
    (``Sign`` and the step have a zero NTK factor by convention, as in stax)."""
    pairs = PAIRS[[4, 5, 6, 7]]  # |rho| < 1
    a, b, c = pairs.unbind(1)
    c = c.clone().requires_grad_(True)
    nngp, dot = act.dual(c, a, b, inplace=False, derivative=True)
    assert dot is not None
    if nngp.requires_grad:
        (grad,) = torch.autograd.grad(nngp.sum(), c)
    else:  # a constant function: the NNGP does not depend on c
        grad = torch.zeros_like(c)
    if isinstance(act, nl.Sign) or act == nl.RectifiedMonomial(0):
        assert bool((dot == 0).all())
        assert float(grad.abs().min()) > 0.1  # the distributional derivative is not zero
    else:
        torch.testing.assert_close(grad, dot.expand_as(grad).detach(), rtol=1e-9, atol=1e-12)


def test_relu_leaky_relu_and_abs_are_abrelu() -> None:
    a, b, c = PAIRS.unbind(1)
    for special, general in [
        (nl.Relu(), nl.ABRelu(0.0, 1.0)),
        (nl.LeakyRelu(0.2), nl.ABRelu(0.2, 1.0)),
        (nl.LeakyRelu(-0.7), nl.ABRelu(-0.7, 1.0)),
        (nl.Abs(), nl.ABRelu(-1.0, 1.0)),
        (nl.RectifiedMonomial(1), nl.ABRelu(0.0, 1.0)),
    ]:
        k1, d1 = special.dual(c.clone(), a, b, inplace=False, derivative=True)
        k2, d2 = general.dual(c.clone(), a, b, inplace=False, derivative=True)
        torch.testing.assert_close(k1, k2, rtol=1e-13, atol=1e-14)
        assert d1 is not None and d2 is not None
        torch.testing.assert_close(d1.expand_as(k1), d2.expand_as(k1), rtol=1e-13, atol=1e-14)
    # ABRelu(a, b) swaps with ABRelu(b, a) under x -> -x: the same kernel
    k1, _ = nl.ABRelu(0.3, 1.1).dual(c.clone(), a, b, inplace=False, derivative=False)
    k2, _ = nl.ABRelu(1.1, 0.3).dual(c.clone(), a, b, inplace=False, derivative=False)
    torch.testing.assert_close(k1, k2)


def test_hermite_is_c_to_the_n_at_unit_variance_only() -> None:
    """stax.Hermite's :math:`c^n`, :math:`n c^{n-1}` hold at unit variances; elsewhere the
    kernel is the polynomial's (checked against quadrature above), not :math:`c^n`."""
    one = torch.ones(5, dtype=F64)
    c = torch.tensor([-1.0, -0.4, 0.0, 0.7, 1.0], dtype=F64)
    for n in range(6):
        k, d = nl.Hermite(n).dual(c.clone(), one, one, inplace=False, derivative=True)
        torch.testing.assert_close(k, c**n, rtol=1e-12, atol=1e-12)
        assert d is not None
        torch.testing.assert_close(d.expand_as(k), n * c ** max(n - 1, 0), rtol=1e-12, atol=1e-12)
    k, _ = nl.Hermite(3).dual(c.clone(), 2 * one, 2 * one, inplace=False, derivative=False)
    assert float((k - c**3).abs().max()) > 1.0


def test_monomial_closed_forms_of_stax() -> None:
    a, b, c = PAIRS.unbind(1)
    k2, _ = nl.Monomial(2).dual(c.clone(), a, b, inplace=False, derivative=False)
    torch.testing.assert_close(k2, 2 * c**2 + a * b)
    k3, d3 = nl.Monomial(3).dual(c.clone(), a, b, inplace=False, derivative=True)
    torch.testing.assert_close(k3, 6 * c**3 + 9 * c * a * b)
    assert d3 is not None
    torch.testing.assert_close(d3, 9 * (2 * c**2 + a * b))  # degree^2 E[u^2 v^2]
    k1, _ = nl.Monomial(1).dual(c.clone(), a, b, inplace=False, derivative=False)
    torch.testing.assert_close(k1, c)


def test_sign_is_twice_the_step_minus_one() -> None:
    """sign = 2 step - 1 almost surely and E[step] = 1/2: E[sign sign] = 4 E[step step] - 1."""
    a, b, c = PAIRS.unbind(1)
    k, _ = nl.Sign().dual(c.clone(), a, b, inplace=False, derivative=False)
    step, _ = nl.RectifiedMonomial(0).dual(c.clone(), a, b, inplace=False, derivative=False)
    torch.testing.assert_close(k, 4 * step - 1, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(k[[0, 1, 2, 3, 4]], torch.tensor([1, 1, -1, -1, 0], dtype=F64))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_float32_follows_float64_at_all_correlations(name: str) -> None:
    """Float32 duals stay finite and within 1e-5 of float64, correlations +-1 included."""
    act = ACTIVATIONS[name]
    k64, d64 = _dual(act, PAIRS)
    k32, d32 = _dual(act, PAIRS.float())
    assert k32.dtype == torch.float32 and d32.dtype == torch.float32
    assert bool(torch.isfinite(k32).all() and torch.isfinite(d32).all())
    scale = float(k64.abs().max())
    # the clone path rounds the correlation of an identical pair: arccos(1 - eps) ~ sqrt(2 eps)
    tol = 2e-4 if isinstance(act, nl.Sign | nl.RectifiedMonomial) else 1e-5
    torch.testing.assert_close(k32.double(), k64, rtol=tol, atol=tol * scale)
    torch.testing.assert_close(d32.double(), d64, rtol=tol, atol=tol * max(1.0, scale))


def test_float32_network_kernels_match_float64() -> None:
    x = torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(3))
    for act in ACTIVATIONS.values():
        arch = nl.serial(
            nl.Dense(w_std=0.9, b_std=0.1), act, nl.Dense(w_std=0.9, b_std=0.1), act, nl.Dense()
        )
        k64, k32 = arch.kernel(x), arch.kernel(x.float())
        for name in ("nngp", "ntk"):
            ref = getattr(k64, name)
            got = getattr(k32, name).double()
            tol = 1e-4 * float(ref.abs().max())
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=tol, msg=repr(act))


# --------------------------------------------------------------------------------------------
# finite networks


def _empirical_ntk(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    params = [p for p in net.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(net(x[i : i + 1]).sum(), params, allow_unused=True)
        rows.append(
            torch.cat(
                [
                    (torch.zeros_like(p) if g is None else g).reshape(-1)
                    for g, p in zip(grads, params, strict=True)
                ]
            )
        )
    jac = torch.stack(rows)
    return jac @ jac.T


@pytest.mark.parametrize(
    "act",
    [
        nl.Sign(),
        nl.ABRelu(-0.5, 1.5),
        nl.RectifiedMonomial(0),
        nl.RectifiedMonomial(2),
        nl.Gabor(),
        nl.Hermite(3),
        nl.SigmoidLike(),
        nl.Exp(0.8, 0.3),
        nl.GaussianBump(1.2, -0.8),
        nl.Rbf(0.7),
        nl.Monomial(2),
        nl.Polynomial((0.1, -0.5, 0.3, 0.2)),
    ],
    ids=repr,
)
def test_finite_networks_average_to_the_kernel(act: Activation) -> None:
    """One hidden layer of width 64 from ``to_torch``: its readout NNGP (given the features)
    and its empirical NTK are unbiased estimates of the kernels; their mean over 150 draws
    lies within 5 standard errors."""
    x = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(7))
    arch = nl.serial(nl.Dense(w_std=1.3, b_std=0.3), act, nl.Dense(w_std=1.1, b_std=0.2))
    k = arch.kernel(x)
    nngps, ntks = [], []
    for seed in range(150):
        gen = torch.Generator().manual_seed(seed)
        net = arch.to_torch(64, 1, in_features=3, generator=gen, dtype=F64)
        with torch.no_grad():
            feats = torch.nn.Sequential(*list(net)[:-1])(x)
        nngps.append(1.1**2 * feats @ feats.T / feats.shape[1] + 0.2**2)
        ntks.append(_empirical_ntk(net, x))
    for name, draws in (("nngp", nngps), ("ntk", ntks)):
        stack = torch.stack(draws)
        mean, se = stack.mean(0), stack.std(0) / math.sqrt(len(draws))
        err = (mean - getattr(k, name)).abs()
        assert bool((err <= 5 * se + 1e-10).all()), (name, err / se)


def test_to_torch_modules_apply_the_function_and_round_trip() -> None:
    x = torch.linspace(-2.0, 2.0, 9, dtype=F64)
    for act in ACTIVATIONS.values():
        arch = nl.serial(nl.Dense(w_std=1.0), act, nl.Dense(w_std=1.0))
        net = arch.to_torch(8, in_features=3, dtype=F64)
        assert repr(act) in repr(net[1])
        torch.testing.assert_close(net[1](x), act.phi(x))
        xs = torch.randn(3, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
        back = nl.from_torch(net).kernel(xs)
        torch.testing.assert_close(back.ntk, arch.kernel(xs).ntk)
    torch.testing.assert_close(nl.Sign().phi(x), torch.sign(x))
    torch.testing.assert_close(nl.ABRelu(-0.5, 2.0).phi(x), torch.where(x > 0, 2 * x, -0.5 * x))
    torch.testing.assert_close(nl.RectifiedMonomial(0).phi(torch.zeros(1)), torch.ones(1))
    torch.testing.assert_close(
        nl.Hermite(3).phi(x), (x**3 - 3 * x) / math.sqrt(6.0), rtol=1e-14, atol=1e-14
    )
    torch.testing.assert_close(nl.Polynomial([1.0, 0.0, -2.0]).phi(x), 1.0 - 2.0 * x**2)
    torch.testing.assert_close(
        nl.Rbf(0.5).phi(x), math.sqrt(2) * torch.sin(x + math.pi / 4), rtol=1e-14, atol=1e-14
    )


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: nl.ABRelu(float("nan"), 1.0), NtklabValueError, r"^a: expected a finite"),
        (lambda: nl.ABRelu(0.0, "1"), NtklabTypeError, r"^b: expected a finite float, got '1'"),
        (lambda: nl.Exp(a=float("inf")), NtklabValueError, r"^a: expected a finite"),
        (lambda: nl.Rbf(0.0), NtklabValueError, r"^gamma: expected a finite float > 0, got 0.0"),
        (lambda: nl.Rbf(-1.0), NtklabValueError, r"^gamma: expected a finite float > 0"),
        (lambda: nl.ExpNormalized(gamma=-0.5), NtklabValueError, r"^gamma: expected .* >= 0"),
        (lambda: nl.ExpNormalized(shift=float("nan")), NtklabValueError, r"^shift:"),
        (lambda: nl.GaussianBump(b=float("inf")), NtklabValueError, r"^b: expected a finite"),
        (lambda: nl.Hermite(-1), NtklabValueError, r"^degree: expected an int >= 0, got -1"),
        (lambda: nl.Monomial(2.0), NtklabTypeError, r"^degree: expected a non-negative int"),
        (lambda: nl.RectifiedMonomial(True), NtklabTypeError, r"^degree: expected a non-neg"),
        (lambda: nl.Polynomial([]), NtklabValueError, r"^coef: expected at least one"),
        (lambda: nl.Polynomial([1.0, float("nan")]), NtklabValueError, r"^coef\[1\]: expected"),
        (lambda: nl.Polynomial("12"), NtklabTypeError, r"^coef: expected a sequence"),
        (lambda: nl.Polynomial(3.0), NtklabTypeError, r"^coef: expected a sequence"),
    ],
)
def test_bad_arguments_are_refused_naming_them(build: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build()


def test_gaussian_bump_with_positive_b_refuses_infinite_moments() -> None:
    """exp(b x^2) has an infinite second moment once 4 b K(x, x) >= 1."""
    x = torch.full((2, 3), 2.0, dtype=F64)  # K(x, x) = 4 after Dense(w_std=1)
    ok = nl.serial(nl.Dense(w_std=1.0), nl.GaussianBump(1.0, 0.06), nl.Dense(w_std=1.0))
    assert bool(torch.isfinite(ok.kernel(x).ntk).all())
    bad = nl.serial(nl.Dense(w_std=1.0), nl.GaussianBump(1.0, 0.07), nl.Dense(w_std=1.0))
    with pytest.raises(NtklabValueError, match=r"^b: expected 4 b K\(x, x\) < 1 .* b = 0.07"):
        bad.kernel(x)


def test_exp_normalized_has_no_finite_network() -> None:
    arch = nl.serial(nl.Dense(w_std=1.0), nl.ExpNormalized(), nl.Dense(w_std=1.0))
    with pytest.raises(NtklabValueError, match=r"^ExpNormalized: expected an activation with"):
        arch.to_torch(8, in_features=3)


def test_new_activations_are_exported() -> None:
    for name in [*_BY_NT_NAME.values()]:
        assert getattr(nl, name.__name__) is name
        assert getattr(nl.kernels, name.__name__) is name
        assert name.__name__ in nl.__all__ and name.__name__ in nl.kernels.__all__
