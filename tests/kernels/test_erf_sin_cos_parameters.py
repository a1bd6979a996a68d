"""The parameters ``a``, ``b``, ``c`` of ``Erf`` (:math:`a\\,\\mathrm{erf}(bx) + c`), ``Sin``
(:math:`a \\sin(bx + c)`) and ``Cos`` (:math:`a \\cos(bx + c)`), as in neural-tangents' stax.

Independent references: neural-tangents 0.6.5 kernels (the ``erf_abc*``, ``sin_abc*`` and
``cos_abc*`` cases of tests/data/nt_reference_activations.json, checked by
``test_stax_activations.test_parity_with_neural_tangents``); the polar Gaussian quadrature of
the same function (``Elementwise``); today's closed forms at the defaults; autograd for the
ensemble's closed-form backward pass.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import Activation
from ntklab.kernels.activations import ElementwiseActivation
from ntklab.nets.ensemble import MLPEnsemble, ensemble, train_ensemble

F64 = torch.float64
TIGHT: dict[str, Any] = {"rtol": 1e-10, "atol": 1e-10}

# (var1, var2, cov): correlations 1, -1 (equal and unequal variances), 0, and between
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

PARAMETRIZED: dict[str, Activation] = {
    "erf": nl.Erf(a=1.3, b=0.7, c=0.2),
    "erf_negative": nl.Erf(a=-0.8, b=-1.4, c=-0.3),
    "erf_flat": nl.Erf(a=0.0, b=2.0, c=0.5),
    "sin": nl.Sin(a=1.2, b=0.8, c=0.4),
    "sin_negative": nl.Sin(a=-0.9, b=-1.3, c=-1.1),
    "sin_quarter": nl.Sin(a=1.0, b=1.0, c=math.pi / 2),
    "cos": nl.Cos(a=1.2, b=0.8, c=0.4),
    "cos_negative": nl.Cos(a=-1.1, b=0.6, c=2.0),
    "cos_quarter": nl.Cos(a=0.7, b=1.5, c=-math.pi / 2),
}


def _dual(act: Activation, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v1, v2, cov = pairs.unbind(1)
    nngp, dot = act.dual(cov.clone(), v1, v2, inplace=False, derivative=True)
    assert dot is not None
    return nngp, dot.expand_as(nngp)


@pytest.mark.parametrize("name", sorted(PARAMETRIZED))
def test_closed_form_matches_quadrature(name: str) -> None:
    """NNGP and derivative dual against ``Elementwise(phi)`` (polar quadrature, the derivative
    by autograd) at correlations +-1, 0 and between, to 1e-8 relative."""
    act = PARAMETRIZED[name]
    nngp, dot = _dual(act, PAIRS)
    q_nngp, q_dot = _dual(nl.Elementwise(act.phi, name, degree=40), PAIRS)
    scale = float(q_nngp.abs().max())
    assert_close(nngp, q_nngp, rtol=1e-8, atol=1e-8 * scale)
    assert_close(dot, q_dot, rtol=1e-8, atol=1e-8 * max(1.0, float(q_dot.abs().max())))


@pytest.mark.parametrize("name", sorted(PARAMETRIZED))
def test_diagonal_pass_matches_quadrature_of_the_square(name: str) -> None:
    act = PARAMETRIZED[name]
    v = torch.tensor([0.05, 0.5, 1.0, 2.0], dtype=F64)
    nngp, dot = act.dual(v, v, v, inplace=False, derivative=True)
    q_nngp, q_dot = nl.Elementwise(act.phi, name, degree=40).dual(
        v, v, v, inplace=False, derivative=True
    )
    assert dot is not None and q_dot is not None
    assert_close(nngp, q_nngp, rtol=1e-8, atol=1e-12)
    assert_close(dot.expand_as(q_dot), q_dot, rtol=1e-8, atol=1e-12)


def test_diagonal_rules_of_stax() -> None:
    """NT's variance rules, :math:`\\tfrac{2a^2}{\\pi}\\arcsin\\frac{2b^2K}{1+2b^2K} + c^2` and
    :math:`\\tfrac{a^2}{2}(1 \\mp \\cos 2c\\, e^{-2b^2K})`, finite even where
    :math:`\\sinh(b^2 K)` overflows."""
    v = torch.tensor([0.0, 0.5, 3.0, 2000.0], dtype=F64)
    a, b, c = 1.3, 0.7, 0.4

    def diag(act: Activation) -> tuple[torch.Tensor, torch.Tensor]:
        nngp, dot = act.dual(v, v, v, inplace=False, derivative=True)
        assert dot is not None
        return nngp, dot

    k = b * b * v
    erf, erf_dot = diag(nl.Erf(a, b, c))
    assert_close(erf, 2 * a**2 / math.pi * torch.arcsin(2 * k / (1 + 2 * k)) + c**2)
    assert_close(erf_dot, 4 * a**2 * b**2 / math.pi / torch.sqrt(1 + 4 * k))
    tail = math.cos(2 * c) * torch.exp(-2 * k)
    sin, sin_dot = diag(nl.Sin(a, b, c))
    cos, cos_dot = diag(nl.Cos(a, b, c))
    assert_close(sin, a**2 / 2 * (1 - tail))
    assert_close(sin_dot, a**2 * b**2 / 2 * (1 + tail))
    assert_close(cos, a**2 / 2 * (1 + tail))
    assert_close(cos_dot, a**2 * b**2 / 2 * (1 - tail))


def test_defaults_are_todays_closed_forms_exactly() -> None:
    """``Erf()``, ``Sin()``, ``Cos()`` give the closed forms of erf, sin, cos off the diagonal to
    a few ulps (the code takes the same operations; torch's vectorized transcendentals round by
    one ulp differently on some CPUs: 1.35e-16 relative seen on one), and equal the explicit
    defaults."""
    v1, v2, cov = PAIRS.unbind(1)
    damp = torch.exp(-(v1 + v2) / 2.0)
    prod = (1.0 + 2.0 * v1) * (1.0 + 2.0 * v2)
    ratio = (2.0 * cov * torch.rsqrt(prod)).clamp(-1.0, 1.0)
    expected = {
        "Erf": (
            (2.0 / math.pi) * torch.arcsin(ratio),
            (4.0 / math.pi) * torch.rsqrt((prod - 4.0 * cov * cov).clamp_min(1e-300)),
        ),
        "Sin": (damp * torch.sinh(cov), damp * torch.cosh(cov)),
        "Cos": (damp * torch.cosh(cov), damp * torch.sinh(cov)),
    }
    for cls in (nl.Erf, nl.Sin, nl.Cos):
        assert cls() == cls(a=1.0, b=1.0, c=0.0)
        nngp, dot = _dual(cls(), PAIRS)
        want_nngp, want_dot = expected[cls.__name__]
        assert_close(nngp, want_nngp, rtol=1e-15, atol=0)
        assert_close(dot, want_dot, rtol=1e-15, atol=0)
    x = torch.linspace(-3.0, 3.0, 13, dtype=F64)
    assert torch.equal(nl.Erf().phi(x), torch.erf(x))
    assert torch.equal(nl.Sin().phi(x), torch.sin(x))
    assert torch.equal(nl.Cos().phi(x), torch.cos(x))


def test_functions_and_the_cos_sin_identity() -> None:
    """The modules compute the functions; ``Cos(a, b, c)`` is ``Sin(a, b, c + pi/2)`` (NT's
    definition) in function and kernels."""
    x = torch.linspace(-3.0, 3.0, 13, dtype=F64)
    assert_close(nl.Erf(1.3, 0.7, 0.2).phi(x), 1.3 * torch.erf(0.7 * x) + 0.2)
    assert_close(nl.Sin(1.2, 0.8, 0.4).phi(x), 1.2 * torch.sin(0.8 * x + 0.4))
    assert_close(nl.Cos(1.2, 0.8, 0.4).phi(x), 1.2 * torch.cos(0.8 * x + 0.4))
    for a, b, c in [(1.2, 0.8, 0.4), (-1.1, 0.6, 2.0), (1.0, 1.0, 0.0)]:
        cos, sin = nl.Cos(a, b, c), nl.Sin(a, b, c + math.pi / 2)
        assert_close(cos.phi(x), sin.phi(x), rtol=1e-14, atol=1e-14)
        for got, want in zip(_dual(cos, PAIRS), _dual(sin, PAIRS), strict=True):
            assert_close(got, want, rtol=1e-13, atol=1e-14)


def test_to_torch_round_trip() -> None:
    xs = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    x = torch.linspace(-2.0, 2.0, 9, dtype=F64)
    for act in PARAMETRIZED.values():
        arch = nl.serial(nl.Dense(w_std=1.0, b_std=0.3), act, nl.Dense(w_std=1.0))
        net = arch.to_torch(8, in_features=3, dtype=F64)
        (module,) = [m for m in net.modules() if isinstance(m, ElementwiseActivation)]
        assert module.name == repr(act)
        assert_close(module(x), act.phi(x))
        back = nl.from_torch(net)
        assert back.layers[1] == act
        assert_close(back.kernel(xs).ntk, arch.kernel(xs).ntk)


@pytest.mark.parametrize("cls", [nl.Erf, nl.Sin, nl.Cos])
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"a": float("nan")}, NtklabValueError, r"^a: expected a finite float, got nan"),
        ({"b": float("inf")}, NtklabValueError, r"^b: expected a finite float, got inf"),
        ({"c": -float("inf")}, NtklabValueError, r"^c: expected a finite float, got -inf"),
        ({"a": "2"}, NtklabTypeError, r"^a: expected a finite float, got '2'"),
        ({"b": True}, NtklabTypeError, r"^b: expected a finite float, got True"),
        ({"c": None}, NtklabTypeError, r"^c: expected a finite float, got None"),
    ],
)
def test_bad_parameters_are_refused_naming_them(
    cls: Any, kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        cls(**kwargs)


# --------------------------------------------------------------------------------------------
# the ensemble's closed-form derivative of Erf(a, b, c)


def test_ensemble_erf_derivative_is_autograds() -> None:
    """``_activation_backward``'s erf rule is :math:`g\\,\\phi'(z)` by autograd of ``phi``."""
    from ntklab.nets.ensemble import _activation_backward

    gen = torch.Generator().manual_seed(3)
    z = torch.randn(2, 5, 4, generator=gen, dtype=F64)
    g = torch.randn(2, 5, 4, generator=gen, dtype=F64)
    for act in [nl.Erf(1.3, 0.7, 0.2), nl.Erf(-0.8, -1.4, -0.3), nl.Erf()]:
        zz = z.clone().requires_grad_(True)
        (want,) = torch.autograd.grad(act.phi(zz), zz, g)
        got = _activation_backward(act, "erf", z, act.phi(z), g.clone(), torch.empty_like(z))
        assert_close(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("fast", [False, True])
def test_ensemble_training_with_erf_parameters_equals_autograd(fast: bool) -> None:
    """Manual (closed-form) and autograd training agree for ``Erf(a, b, c)``, on the general
    path (two activations, two outputs) and the one-hidden-layer fast path."""
    gen = torch.Generator().manual_seed(5)
    act = nl.Erf(a=1.3, b=-0.7, c=0.2)
    layers: list[Any] = [nl.Dense(w_std=1.3, b_std=0.2), act]
    if not fast:
        layers += [nl.Dense(w_std=1.1, b_std=0.3), nl.Erf(a=-0.8, b=1.4, c=-0.3)]
    arch = nl.serial(*layers, nl.Dense(w_std=0.9, b_std=0.1))
    k = 1 if fast else 2
    ens = ensemble(arch, 5, 7, k, in_features=3, generator=gen, dtype=F64)
    x = torch.randn(5, 3, generator=gen, dtype=F64)
    y = torch.randn(5, k, generator=gen, dtype=F64)
    x_test = torch.randn(4, 3, generator=gen, dtype=F64)
    runs = [
        train_ensemble(
            ens,
            x,
            y,
            learning_rate=0.1,
            t=4,
            x_test=x_test,
            backward=backward,
            weight_decay=0.01,
            record_t=[0, 4],
            chunk_size=2,
        )
        for backward in ("manual", "autograd")
    ]
    assert runs[0].test_outputs is not None and runs[1].test_outputs is not None
    assert runs[0].test_outputs[1].sub(runs[0].test_outputs[0]).abs().max() > 1e-3
    assert_close(runs[0].test_outputs, runs[1].test_outputs, **TIGHT)
    assert_close(runs[0].train_losses, runs[1].train_losses, **TIGHT)
    trained = [r.ensemble for r in runs]
    assert isinstance(trained[0], MLPEnsemble) and isinstance(trained[1], MLPEnsemble)
    for p, q in zip(trained[0].dense, trained[1].dense, strict=True):
        assert_close(p.weight, q.weight, **TIGHT)
    # the members are the finite networks of the architecture: same outputs at t = 0
    net = ens.member(0)
    with torch.no_grad():
        assert_close(net(x_test), runs[0].test_outputs[0, 0], **TIGHT)
