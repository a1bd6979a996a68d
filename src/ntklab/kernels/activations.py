"""Activations: their dual kernels (the kernel rules) and the finite module
:class:`ElementwiseActivation`.

For a centred Gaussian pair :math:`(u, v)` whose covariance is the incoming NNGP,
an activation :math:`\\phi` maps the kernels as (arXiv:1806.07572, arXiv:1912.02803)

.. math::

    K'(x, x') = E[\\phi(u)\\phi(v)], \\qquad
    \\Theta'(x, x') = \\Theta(x, x')\\, E[\\phi'(u)\\phi'(v)].

With :math:`a = K(x,x)`, :math:`b = K(x',x')`, :math:`c = K(x,x')` and the correlation
:math:`\\cos\\theta = c/\\sqrt{ab}`, the closed forms used here are

- ReLU (arc-cosine kernels, Cho & Saul 2009):
  :math:`E[\\phi\\phi] = \\frac{\\sqrt{ab}}{2\\pi}(\\sin\\theta + (\\pi - \\theta)\\cos\\theta)`,
  :math:`E[\\phi'\\phi'] = \\frac{\\pi - \\theta}{2\\pi}`;
- leaky ReLU :math:`\\phi = (1-\\alpha)\\,\\mathrm{relu} + \\alpha x`, and ``Abs`` (α = -1);
- erf (Williams 1997): :math:`\\frac{2}{\\pi}\\arcsin\\frac{2c}{\\sqrt{(1+2a)(1+2b)}}`,
  derivative :math:`\\frac{4}{\\pi}((1+2a)(1+2b) - 4c^2)^{-1/2}`;
- GELU :math:`x\\Phi(x)`: derived below (:func:`_gelu_dual`);
- sin and cos: :math:`e^{-(a+b)/2}\\sinh c` and :math:`e^{-(a+b)/2}\\cosh c`.

Any other torch-differentiable scalar function goes through :class:`Elementwise`, which
integrates by the polar quadrature of :mod:`ntklab.kernels.quadrature`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_positive_int
from ..errors import NtklabTypeError, NtklabValueError, NumericalWarning
from .engine import Layer
from .kernel import KernelState
from .quadrature import DEFAULT_DEGREE, _rules, gaussian_pair_expectation
from .quadrature import derivative as autograd_derivative

__all__ = [
    "ABRelu",
    "Abs",
    "Activation",
    "Cos",
    "Elementwise",
    "ElementwiseActivation",
    "Erf",
    "Gelu",
    "Identity",
    "LeakyRelu",
    "Relu",
    "Sigmoid",
    "Silu",
    "Sin",
    "Softplus",
    "Tanh",
]

_TWO_PI = 2.0 * math.pi


def _activation_name(layer: Layer) -> str:
    """``Relu``, ``Erf``, ..., or the ``name`` of an :class:`Elementwise`."""
    name = getattr(layer, "name", None)
    return name if isinstance(name, str) and name else type(layer).__name__


class ElementwiseActivation(nn.Module):
    """Applies a scalar function elementwise; the finite counterpart of an activation layer."""

    def __init__(self, fn: Callable[[Tensor], Tensor], name: str) -> None:
        super().__init__()
        self.fn = fn
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name


class Activation(Layer):
    """An elementwise nonlinearity :math:`\\phi` and its dual kernels."""

    @property
    def reads_preactivations(self) -> bool:
        return True

    @abstractmethod
    def phi(self, x: Tensor) -> Tensor:
        """The activation applied elementwise (the finite network's nonlinearity)."""

    @abstractmethod
    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        """:math:`(E[\\phi(u)\\phi(v)],\\ E[\\phi'(u)\\phi'(v)])` for covariance ``cov``.

        ``var1``/``var2`` broadcast against ``cov``. With ``inplace=True`` the first output
        may reuse ``cov``'s memory. The second is ``None`` when ``derivative`` is False.
        """

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        """Raise when the nearest layer before this one that does more than average or
        reshape (pooling, ``Flatten``, ``Dropout`` and ``Identity`` are looked through) is
        itself an activation.

        The dual kernels :math:`E[\\phi(u)\\phi(v)]` and :math:`E[\\phi'(u)\\phi'(v)]` are
        expectations over Gaussian pre-activations :math:`(u, v)` (Neal, 1996; Lee et al.,
        2018), which a layer with fresh weights provides at infinite width. The output of an
        activation is not Gaussian (:math:`\\mathrm{relu}(u) \\ge 0`), so applying a second
        dual to its covariance gives a wrong kernel; the composition :math:`\\phi(\\psi(x))`
        is one activation, :class:`Elementwise`.
        """
        super().check_in_chain(layers, index, where, in_branch)
        if self.passes_through:
            return
        before = next((j for j in range(index - 1, -1, -1) if not layers[j].passes_through), None)
        if before is None:
            return
        prev = layers[before]
        if not prev.reads_preactivations or prev.passes_through:
            return
        this, that = _activation_name(self), _activation_name(prev)
        raise NtklabValueError(
            f"{where}[{index}]: expected a Dense or Conv layer before the activation {this}, "
            f"got it directly after the activation {that} at {where}[{before}]; an "
            "activation's kernel assumes Gaussian pre-activations and the output of "
            f"{that} is not Gaussian. For the composed nonlinearity x -> {this}({that}(x)) use "
            "one Elementwise(fn, name) in place of both (its kernel by quadrature), or put a "
            "Dense or Conv layer between them"
        )

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.product:
            raise NtklabValueError(
                f"{type(self).__name__}: expected Gaussian pre-activations, got a product of "
                "branches (FanInProd), which is not Gaussian; put a Dense or Conv layer between "
                "them"
            )
        need_dot = state.ntk is not None
        nngp, dot = self.dual(
            state.cov, state.var1, state.var2, inplace=inplace, derivative=need_dot
        )
        ntk = state.ntk
        if ntk is not None and dot is not None:
            ntk = ntk.mul_(dot) if inplace else ntk * dot
        gaussian = state.gaussian and isinstance(self, Identity)
        return dataclasses.replace(state, cov=nngp, ntk=ntk, gaussian=gaussian)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return ElementwiseActivation(self.phi, repr(self))


# --------------------------------------------------------------------------------------------
# correlations


def _rounding_tolerance(dtype: torch.dtype) -> float:
    return math.sqrt(torch.finfo(dtype).eps)


def correlation(
    cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """:math:`\\cos\\theta = c / \\sqrt{ab}` clamped into [-1, 1], and :math:`\\sqrt a, \\sqrt b`.

    A :class:`~ntklab.errors.NumericalWarning` is issued when the clamp moved a value by
    more than :math:`\\sqrt{\\epsilon}` of the dtype (more than rounding can explain).
    Zero variances give correlation 0. On the diagonal pass (``cov``, ``var1`` and ``var2``
    the same tensor) the correlation is exactly 1, so rounding cannot open a spurious angle.
    """
    tiny = torch.finfo(cov.dtype).tiny
    s1 = var1.clamp_min(tiny).sqrt()
    s2 = var2.clamp_min(tiny).sqrt()
    if cov is var1 and var1 is var2:  # the diagonal pass: each input with itself, exactly 1
        return torch.ones_like(cov), s1, s2
    c = cov.div_(s1).div_(s2) if inplace else cov / (s1 * s2)
    _clamp_correlation(c, inplace=inplace)
    return (c if inplace else c.clamp(-1.0, 1.0)), s1, s2


def _clamp_correlation(c: Tensor, *, inplace: bool) -> None:
    if c.numel() == 0:
        return
    lo, hi = torch.aminmax(c.detach())
    excess = max(float(hi) - 1.0, -1.0 - float(lo))
    if not math.isfinite(excess):
        raise NtklabValueError(
            "kernel: expected finite correlations, got NaN or inf (the incoming kernel is not "
            "finite; check the inputs and the layer scales)"
        )
    if excess > _rounding_tolerance(c.dtype):
        warnings.warn(
            f"correlation outside [-1, 1] by {excess:.3g} (beyond rounding for {c.dtype}); "
            "clamped. The incoming kernel violates Cauchy-Schwarz.",
            NumericalWarning,
            stacklevel=4,
        )
    if inplace:
        c.clamp_(-1.0, 1.0)


class _ArccosDuals(torch.autograd.Function):
    """:math:`J_0 = \\pi - \\arccos c` and :math:`J_1 = \\sqrt{1-c^2} + J_0 c` with an exact
    gradient :math:`J_1' = J_0` (finite at :math:`c = \\pm 1`) and :math:`J_0' = (1-c^2)^{-1/2}`
    capped at :math:`1/\\sqrt{\\epsilon}` where it diverges."""

    @staticmethod
    def forward(c: Tensor) -> tuple[Tensor, Tensor]:
        j0 = torch.arccos(-c)
        j1 = torch.sqrt(torch.clamp(1.0 - c * c, min=0.0)) + j0 * c
        return j0, j1

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor], output: tuple[Tensor, Tensor]) -> None:
        ctx.save_for_backward(inputs[0], output[0])

    @staticmethod
    def backward(ctx: Any, g0: Tensor, g1: Tensor) -> Tensor:
        c, j0 = ctx.saved_tensors
        eps = torch.finfo(c.dtype).eps
        dj0 = torch.rsqrt(torch.clamp(1.0 - c * c, min=eps))
        grad: Tensor = g1 * j0 + g0 * dj0
        return grad


def arccos_duals(c: Tensor) -> tuple[Tensor, Tensor]:
    """:math:`(J_0, J_1)` of the arc-cosine kernels at correlation ``c`` (differentiable)."""
    out: tuple[Tensor, Tensor] = _ArccosDuals.apply(c)  # type: ignore[no-untyped-call]
    return out


def _relu_dual_inplace(
    cov: Tensor, var1: Tensor, var2: Tensor, derivative: bool
) -> tuple[Tensor, Tensor | None]:
    """The ReLU dual written in place into ``cov``'s memory, fused to few passes."""
    tiny = torch.finfo(cov.dtype).tiny
    s1 = var1.clamp_min(tiny).sqrt()
    s2 = var2.clamp_min(tiny).sqrt()
    c = cov.div_(s1).div_(s2)  # cos(theta)
    _clamp_correlation(c, inplace=True)
    j0 = torch.arccos(c.neg_())  # c now holds -cos(theta);  j0 = pi - theta
    tmp = torch.addcmul(c.new_ones(()), c, c, value=-1.0).sqrt_()  # sin(theta)
    # J1 = sin(theta) + (pi - theta) cos(theta), written over c
    nngp = torch.addcmul(tmp, j0, c, value=-1.0, out=c)
    del tmp
    nngp.mul_(s1 / _TWO_PI).mul_(s2)
    return nngp, (j0.mul_(1.0 / _TWO_PI) if derivative else None)


@dataclass(frozen=True)
class Relu(Activation):
    """:math:`\\phi(x) = \\max(x, 0)`; arc-cosine dual kernels of degrees 1 and 0."""

    @property
    def fused_kind(self) -> Literal["relu"] | None:
        return "relu" if type(self) is Relu else None

    def phi(self, x: Tensor) -> Tensor:
        return torch.relu(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        if inplace:
            return _relu_dual_inplace(cov, var1, var2, derivative)
        c, s1, s2 = correlation(cov, var1, var2, inplace=False)
        j0, j1 = arccos_duals(c)
        return (s1 * s2) * j1 / _TWO_PI, j0 / _TWO_PI


def check_finite_float(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number (an activation's parameter),
    else raise naming ``name``."""
    if isinstance(value, np.floating | np.integer):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a finite float, got {value!r}")
    if not math.isfinite(value):
        raise NtklabValueError(f"{name}: expected a finite float, got {value!r}")
    return float(value)


def abrelu_dual(
    a: float, b: float, cov: Tensor, var1: Tensor, var2: Tensor, *, derivative: bool
) -> tuple[Tensor, Tensor | None]:
    """Dual kernels of :math:`\\phi(x) = a \\min(x, 0) + b \\max(x, 0)`.

    Writing :math:`\\phi = (b - a)\\,\\mathrm{relu} + a x` and using
    :math:`E[\\mathrm{relu}(u)\\, v] = c/2` (Stein's lemma),

    .. math::
        E[\\phi\\phi] = \\frac{(b-a)^2}{2\\pi} \\sqrt{K_{11} K_{22}}\\, J_1(\\theta) + ab\\, c,
        \\qquad
        E[\\phi'\\phi'] = \\frac{(b-a)^2}{2\\pi} J_0(\\theta) + ab,

    the arc-cosine kernels :math:`J_0 = \\pi - \\theta`,
    :math:`J_1 = \\sin\\theta + (\\pi - \\theta)\\cos\\theta` (Cho & Saul, 2009); the same as
    neural-tangents' ``ABRelu`` (Novak et al., 2020, arXiv:1912.02803), which cites
    (Tsuchida et al., 2018, arXiv:1711.09090).
    On the diagonal (:math:`\\theta = 0`) :math:`E[\\phi^2] = (a^2 + b^2) K / 2`.
    """
    c, s1, s2 = correlation(cov, var1, var2, inplace=False)
    j0, j1 = arccos_duals(c)
    scale = (b - a) ** 2 / _TWO_PI
    nngp = (s1 * s2) * j1 * scale + (a * b) * cov
    return nngp, (j0 * scale + a * b if derivative else None)


@dataclass(frozen=True)
class ABRelu(Activation):
    """:math:`\\phi(x) = a \\min(x, 0) + b \\max(x, 0)`: slope ``a`` for :math:`x < 0`, ``b``
    for :math:`x > 0` (neural-tangents' ``stax.ABRelu(a, b)``; its ``do_stabilize`` has no
    counterpart: the dual is computed from the correlation, which does not overflow).

    ``Relu`` is ``ABRelu(0, 1)``, ``LeakyRelu(alpha)`` is ``ABRelu(alpha, 1)`` and ``Abs`` is
    ``ABRelu(-1, 1)``; their kernels are equal (tested). Dual kernels: :func:`abrelu_dual`.

    Parameters
    ----------
    a, b : float
        The slopes for negative and positive inputs, finite.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> x = torch.randn(4, 3, dtype=torch.float64)
    >>> k = nl.serial(nl.Dense(w_std=1.0), nl.ABRelu(-1.0, 1.0), nl.Dense(w_std=1.0)).kernel(x)
    >>> a = nl.serial(nl.Dense(w_std=1.0), nl.Abs(), nl.Dense(w_std=1.0)).kernel(x)
    >>> bool(torch.allclose(k.ntk, a.ntk))
    True
    """

    a: float
    b: float

    def __post_init__(self) -> None:
        check_finite_float("a", self.a)
        check_finite_float("b", self.b)

    def phi(self, x: Tensor) -> Tensor:
        return torch.where(x > 0, self.b * x, self.a * x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return abrelu_dual(self.a, self.b, cov, var1, var2, derivative=derivative)


@dataclass(frozen=True)
class LeakyRelu(Activation):
    """:math:`\\phi(x) = \\max(x, \\alpha x) = (1-\\alpha)\\,\\mathrm{relu}(x) + \\alpha x`
    (for :math:`\\alpha \\le 1`; ``ABRelu(alpha, 1)`` in general).

    .. math::
        E[\\phi\\phi] = (1-\\alpha)^2 E[\\mathrm{relu}\\,\\mathrm{relu}] + \\alpha c, \\qquad
        E[\\phi'\\phi'] = (1-\\alpha)^2 \\frac{\\pi-\\theta}{2\\pi} + \\alpha.
    """

    alpha: float = 0.01

    def __post_init__(self) -> None:
        if not isinstance(self.alpha, int | float) or not math.isfinite(self.alpha):
            raise NtklabValueError(f"alpha: expected a finite float, got {self.alpha!r}")

    def phi(self, x: Tensor) -> Tensor:
        return torch.where(x > 0, x, self.alpha * x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return abrelu_dual(self.alpha, 1.0, cov, var1, var2, derivative=derivative)


@dataclass(frozen=True)
class Abs(Activation):
    """:math:`\\phi(x) = |x| = 2\\,\\mathrm{relu}(x) - x` (``ABRelu(-1, 1)``)."""

    def phi(self, x: Tensor) -> Tensor:
        return torch.abs(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return abrelu_dual(-1.0, 1.0, cov, var1, var2, derivative=derivative)


def check_affine_parameters(a: object, b: object, c: object) -> None:
    """Raise unless the parameters ``a``, ``b``, ``c`` of ``Erf``, ``Sin`` or ``Cos`` are finite
    real numbers (naming the first that is not)."""
    check_finite_float("a", a)
    check_finite_float("b", b)
    check_finite_float("c", c)


@dataclass(frozen=True)
class Erf(Activation):
    """:math:`\\phi(x) = a\\,\\mathrm{erf}(b x) + c` (neural-tangents' ``stax.Erf(a, b, c)``);
    the defaults give :math:`\\mathrm{erf}(x)`.

    With the pre-activation kernels scaled by :math:`b^2`, :math:`\\tilde K = b^2 K`, and
    :math:`P = (1 + 2\\tilde K_{11})(1 + 2\\tilde K_{22})` (Williams, 1997; erf is odd, so the
    shift adds :math:`c^2` only):

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{2a^2}{\\pi} \\arcsin\\frac{2\\tilde K_{12}}{\\sqrt P} + c^2,
        \\qquad
        E[\\phi'(u)\\phi'(v)] = \\frac{4 a^2 b^2}{\\pi} \\big(P - 4\\tilde K_{12}^2\\big)^{-1/2}.

    On the diagonal (:math:`K_{11} = K_{22} = K_{12} = K`) the argument of the arcsine is
    :math:`2\\tilde K / (1 + 2\\tilde K) < 1` and the derivative dual is
    :math:`\\frac{4a^2b^2}{\\pi}(1 + 4\\tilde K)^{-1/2}`.

    Parameters
    ----------
    a : float
        Output scale, finite.
    b : float
        Input scale, finite.
    c : float
        Output shift, finite.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> act = nl.Erf(a=2.0, b=0.5, c=0.1)
    >>> float(act.phi(torch.tensor([0.0], dtype=torch.float64))[0])
    0.1
    """

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0

    def __post_init__(self) -> None:
        check_affine_parameters(self.a, self.b, self.c)

    def phi(self, x: Tensor) -> Tensor:
        out = torch.erf(x if self.b == 1.0 else self.b * x)
        if self.a != 1.0:
            out = self.a * out
        return out if self.c == 0.0 else out + self.c

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        b2, a2 = self.b * self.b, self.a * self.a
        cov, var1, var2 = b2 * cov, b2 * var1, b2 * var2
        prod = (1.0 + 2.0 * var1) * (1.0 + 2.0 * var2)
        ratio = 2.0 * cov * torch.rsqrt(prod)
        _clamp_correlation(ratio, inplace=False)
        nngp = (2.0 * a2 / math.pi) * torch.arcsin(ratio.clamp(-1.0, 1.0)) + self.c * self.c
        dot = None
        if derivative:
            dot = (4.0 * a2 * b2 / math.pi) * torch.rsqrt(
                (prod - 4.0 * cov * cov).clamp_min(torch.finfo(cov.dtype).tiny)
            )
        return nngp, dot


def _gelu_dual(
    cov: Tensor, var1: Tensor, var2: Tensor, derivative: bool
) -> tuple[Tensor, Tensor | None]:
    """Dual kernels of :math:`\\phi(x) = x\\Phi(x)`.

    With :math:`D = (1+a)(1+b)` and :math:`S = \\sqrt{D - c^2}`, by Stein's lemma and
    Price's theorem applied to :math:`\\phi(x) = x/2 + (x/2)\\,\\mathrm{erf}(x/\\sqrt2)`:

    .. math::
        E[\\phi(u)\\phi(v)] = \\frac{c}{4} + \\frac{1}{2\\pi}\\Big(c \\arcsin\\frac{c}{\\sqrt D}
            + \\frac{abD - c^2 (ab - 1)}{D S}\\Big),

        E[\\phi'(u)\\phi'(v)] = \\frac14 + \\frac{1}{2\\pi}\\Big(\\arcsin\\frac{c}{\\sqrt D}
            + \\frac{c}{S} + \\frac{c\\,(D(2 - ab) + (ab - 1)c^2)}{D S^3}\\Big).
    """
    a, b, c = var1, var2, cov
    d = (1.0 + a) * (1.0 + b)
    s2 = (d - c * c).clamp_min(torch.finfo(c.dtype).tiny)
    s = torch.sqrt(s2)
    asin = torch.arcsin((c * torch.rsqrt(d)).clamp(-1.0, 1.0))
    ab = a * b
    nngp = c / 4.0 + (c * asin + (ab * d - c * c * (ab - 1.0)) / (d * s)) / _TWO_PI
    dot = None
    if derivative:
        dot = 0.25 + (asin + c / s + c * (d * (2.0 - ab) + (ab - 1.0) * c * c) / (d * s2 * s)) / (
            _TWO_PI
        )
    return nngp, dot


@dataclass(frozen=True)
class Gelu(Activation):
    """:math:`\\phi(x) = x\\,\\Phi(x)` (exact GELU, ``torch.nn.GELU(approximate='none')``)."""

    def phi(self, x: Tensor) -> Tensor:
        return torch.nn.functional.gelu(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return _gelu_dual(cov, var1, var2, derivative)


def sinusoid_duals(
    b: float, c: float, cov: Tensor, var1: Tensor, var2: Tensor
) -> tuple[Tensor, Tensor]:
    """:math:`(E[\\sin(bu + c)\\sin(bv + c)],\\ E[\\cos(bu + c)\\cos(bv + c)])`.

    From the Gaussian characteristic function, :math:`E[\\cos(b(u \\mp v))] =
    e^{-b^2(K_{11} + K_{22} \\mp 2K_{12})/2}`, and the product formulas
    :math:`2\\sin\\alpha\\sin\\beta = \\cos(\\alpha-\\beta) - \\cos(\\alpha+\\beta)` (the
    :math:`+` for the cosines), with :math:`D = e^{-b^2(K_{11} + K_{22})/2}` and
    :math:`x = b^2 K_{12}`:

    .. math::
        E[\\sin\\sin] = D(\\cos^2 c\\, \\sinh x + \\sin^2 c\\, \\cosh x), \\qquad
        E[\\cos\\cos] = D(\\cos^2 c\\, \\cosh x + \\sin^2 c\\, \\sinh x),

    which are neural-tangents' :math:`\\tfrac12(e^{-b^2(S/2 - K_{12})} \\mp \\cos 2c\\,
    e^{-b^2(S/2 + K_{12})})`, :math:`S = K_{11} + K_{22}`, written without cancellation for
    :math:`K_{12} \\ge 0`. A term whose coefficient :math:`\\cos^2 c` or :math:`\\sin^2 c` is
    exactly 0 is skipped (``c = 0``: :math:`D \\sinh x`, :math:`D \\cosh x`). On the diagonal
    (:math:`x = b^2 K`, :math:`D = e^{-x}`) they are :math:`\\tfrac12(1 \\mp \\cos 2c\\,
    e^{-2b^2K})`.
    """
    b2 = b * b
    cos2, sin2 = math.cos(c) ** 2, math.sin(c) ** 2
    if cov is var1 and var1 is var2:  # the diagonal pass: no overflow of sinh, cosh
        one_minus = torch.expm1(-2.0 * b2 * cov).neg_().mul_(0.5)  # (1 - e^{-2x}) / 2
        one_plus = 1.0 - one_minus  # (1 + e^{-2x}) / 2
        return cos2 * one_minus + sin2 * one_plus, cos2 * one_plus + sin2 * one_minus
    damp = torch.exp(-b2 * ((var1 + var2) / 2.0))
    x = b2 * cov
    sinh, cosh = damp * torch.sinh(x), damp * torch.cosh(x)
    if sin2 == 0.0:
        return sinh, cosh
    if cos2 == 0.0:
        return cosh, sinh
    return cos2 * sinh + sin2 * cosh, cos2 * cosh + sin2 * sinh


@dataclass(frozen=True)
class Sin(Activation):
    """:math:`\\phi(x) = a \\sin(b x + c)` (neural-tangents' ``stax.Sin(a, b, c)``); the
    defaults give :math:`\\sin x`, whose duals are :math:`e^{-(K_{11}+K_{22})/2}\\sinh K_{12}`
    and :math:`e^{-(K_{11}+K_{22})/2}\\cosh K_{12}`.

    By the Gaussian characteristic function (:func:`sinusoid_duals`),
    :math:`E[\\phi\\phi] = a^2 E[\\sin(bu+c)\\sin(bv+c)]` and
    :math:`E[\\phi'\\phi'] = a^2 b^2 E[\\cos(bu+c)\\cos(bv+c)]`.

    Parameters
    ----------
    a : float
        Output scale, finite.
    b : float
        Input scale (frequency), finite.
    c : float
        Phase shift, finite.

    Examples
    --------
    >>> import math, torch, ntklab as nl
    >>> x = torch.tensor([0.3], dtype=torch.float64)
    >>> bool(torch.allclose(nl.Sin(c=math.pi / 2).phi(x), nl.Cos().phi(x)))
    True
    """

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0

    def __post_init__(self) -> None:
        check_affine_parameters(self.a, self.b, self.c)

    def phi(self, x: Tensor) -> Tensor:
        inner = x if self.b == 1.0 else self.b * x
        out = torch.sin(inner if self.c == 0.0 else inner + self.c)
        return out if self.a == 1.0 else self.a * out

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        ss, cc = sinusoid_duals(self.b, self.c, cov, var1, var2)
        a2 = self.a * self.a
        return a2 * ss, ((a2 * self.b * self.b) * cc if derivative else None)


@dataclass(frozen=True)
class Cos(Activation):
    """:math:`\\phi(x) = a \\cos(b x + c)` (neural-tangents' ``stax.Cos(a, b, c)``, which is
    ``Sin(a, b, c + pi/2)``); the defaults give :math:`\\cos x`, whose duals are
    :math:`e^{-(K_{11}+K_{22})/2}\\cosh K_{12}` and :math:`e^{-(K_{11}+K_{22})/2}\\sinh K_{12}`.

    By the Gaussian characteristic function (:func:`sinusoid_duals`),
    :math:`E[\\phi\\phi] = a^2 E[\\cos(bu+c)\\cos(bv+c)]` and
    :math:`E[\\phi'\\phi'] = a^2 b^2 E[\\sin(bu+c)\\sin(bv+c)]`.

    Parameters
    ----------
    a : float
        Output scale, finite.
    b : float
        Input scale (frequency), finite.
    c : float
        Phase shift, finite.
    """

    a: float = 1.0
    b: float = 1.0
    c: float = 0.0

    def __post_init__(self) -> None:
        check_affine_parameters(self.a, self.b, self.c)

    def phi(self, x: Tensor) -> Tensor:
        inner = x if self.b == 1.0 else self.b * x
        out = torch.cos(inner if self.c == 0.0 else inner + self.c)
        return out if self.a == 1.0 else self.a * out

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        ss, cc = sinusoid_duals(self.b, self.c, cov, var1, var2)
        a2 = self.a * self.a
        return a2 * cc, ((a2 * self.b * self.b) * ss if derivative else None)


@dataclass(frozen=True)
class Identity(Activation):
    """:math:`\\phi(x) = x`: the kernels pass through unchanged."""

    @property
    def passes_through(self) -> bool:
        return True

    def phi(self, x: Tensor) -> Tensor:
        return x

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        return cov, (torch.ones((), dtype=cov.dtype, device=cov.device) if derivative else None)


@dataclass(frozen=True)
class Elementwise(Activation):
    """Any torch-differentiable scalar function, dual kernels by Gaussian quadrature.

    ``fn`` must act elementwise. The derivative :math:`\\phi'` comes from autograd. The
    expectations are computed by the polar quadrature of
    :func:`~ntklab.kernels.quadrature.gaussian_pair_expectation` with ``degree`` nodes per
    radial half-line and per angular arc (``8 degree**2`` evaluations per pair of inputs).
    At the default degree 32 the error against the closed forms of ReLU, erf, GELU and sin
    is below 1e-8 for variances up to 4 (tested); activations that grow exponentially need
    care (the radial integral is truncated at radius 9).

    Parameters
    ----------
    fn : callable
        The activation, ``Tensor -> Tensor``, elementwise.
    name : str
        Shown in ``repr`` and in the finite network.
    degree : int
        Quadrature nodes per dimension and arc.

    Raises
    ------
    NtklabValueError
        At construction, when ``fn`` or its derivative is NaN or infinite at a node of the
        quadrature grid at unit variance (:math:`r \\cos\\varphi`, :math:`|r| < 9`), e.g.
        ``torch.log`` or ``torch.sqrt`` at negative points: the dual kernels would be NaN.
        The message names the function and the point.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> tanh = nl.Elementwise(torch.tanh, "tanh")
    >>> arch = nl.serial(nl.Dense(w_std=1.0), tanh, nl.Dense(w_std=1.0))
    >>> arch.kernel(torch.randn(3, 2, dtype=torch.float64)).nngp.shape
    torch.Size([3, 3])
    """

    fn: Callable[[Tensor], Tensor] = field(compare=True)
    name: str = "Elementwise"
    degree: int = DEFAULT_DEGREE

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise NtklabTypeError(f"fn: expected a callable Tensor -> Tensor, got {self.fn!r}")
        check_positive_int("degree", self.degree)
        probe = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
        out = self.fn(probe)
        if not isinstance(out, Tensor) or out.shape != probe.shape:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise NtklabValueError(
                f"fn: expected an elementwise function returning a tensor of the input's shape "
                f"(5,), got {got}"
            )
        self._check_finite_on_grid()

    def _check_finite_on_grid(self) -> None:
        """Raise unless ``fn`` and its derivative are finite on the quadrature grid at unit
        variance (the points :math:`r \\cos\\varphi` where the duals evaluate them)."""
        radius, _, t, _ = _rules(self.degree)
        angles = np.concatenate([0.5 * np.pi * (1.0 + t), 0.5 * np.pi * (2.0 + t)])
        grid = torch.from_numpy(np.multiply.outer(radius, np.cos(angles)).reshape(-1))
        what = "fn"
        values = self.fn(grid)
        if bool(torch.isfinite(values).all()):
            what = "the derivative of fn (by autograd)"
            values = autograd_derivative(self.fn)(grid)
            if bool(torch.isfinite(values).all()):
                return
        bad = int(torch.nonzero(~torch.isfinite(values))[0, 0])
        label = getattr(self.fn, "__name__", None) or repr(self.fn)
        raise NtklabValueError(
            f"fn: expected finite values on the Gaussian quadrature grid, got {what} = "
            f"{float(values[bad])} at x = {float(grid[bad]):.6g} for {label} (name "
            f"{self.name!r}; a node of the degree-{self.degree} grid at unit variance, one of "
            f"{grid.numel()}): its dual kernels would be NaN. Use a function defined and finite "
            "on the whole real line"
        )

    def __repr__(self) -> str:
        return f"Elementwise({self.name})"

    def phi(self, x: Tensor) -> Tensor:
        return self.fn(x)

    def dual(
        self, cov: Tensor, var1: Tensor, var2: Tensor, *, inplace: bool, derivative: bool
    ) -> tuple[Tensor, Tensor | None]:
        nngp = gaussian_pair_expectation(self.fn, self.fn, cov, var1, var2, self.degree)
        dot = None
        if derivative:
            d = autograd_derivative(self.fn)
            dot = gaussian_pair_expectation(d, d, cov, var1, var2, self.degree)
        return nngp, dot


def Tanh(degree: int = DEFAULT_DEGREE) -> Elementwise:
    """:math:`\\tanh`, dual kernels by quadrature."""
    return Elementwise(torch.tanh, "tanh", degree)


def Sigmoid(degree: int = DEFAULT_DEGREE) -> Elementwise:
    """The logistic sigmoid, dual kernels by quadrature."""
    return Elementwise(torch.sigmoid, "sigmoid", degree)


def Softplus(degree: int = DEFAULT_DEGREE) -> Elementwise:
    """:math:`\\log(1 + e^x)`, dual kernels by quadrature."""
    return Elementwise(torch.nn.functional.softplus, "softplus", degree)


def Silu(degree: int = DEFAULT_DEGREE) -> Elementwise:
    """:math:`x\\,\\sigma(x)` (SiLU / swish), dual kernels by quadrature."""
    return Elementwise(torch.nn.functional.silu, "silu", degree)
