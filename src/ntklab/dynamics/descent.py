"""Gradient flow and gradient descent on the squared loss, as functions of a kernel's spectrum.

The loss and the time unit, stated once for all of ntklab (``ntklab.nets.train`` uses the same):

.. math::

    L(f) = \\frac{1}{2N} \\sum_{i,a} (f_a(x_i) - y_{ia})^2, \\qquad
    N = \\begin{cases} \\text{y.numel()} & \\text{normalization = "mean"} \\\\
                       1 & \\text{normalization = "sum"} \\end{cases}

Gradient descent with step :math:`\\eta` on the parameters of a network whose tangent kernel
is :math:`\\Theta` moves its training outputs, in the linearized (infinite-width) regime, as

.. math::

    r_{k+1} = (I - \\tfrac{\\eta}{N} \\Theta)\\, r_k, \\qquad r = f(X) - Y,

and gradient flow, its limit of small steps at fixed :math:`\\tau = \\eta k`, as
:math:`r(t) = e^{-\\eta t \\Theta / N} r(0)`. Time ``t`` counts steps (it may be fractional for
the flow): the flow time is :math:`\\eta t`, so ``learning_rate`` and ``t`` are interchangeable,
as in neural-tangents (arXiv:1912.02803). "mean" is neural-tangents' normalization; "sum" only
rescales time by :math:`N`.

Each schedule gives two functions of an eigenvalue :math:`\\lambda` of the (regularized) kernel:
the residual factor :math:`D_t(\\lambda)` (:math:`e^{-\\eta t\\lambda/N}` or
:math:`(1-\\eta\\lambda/N)^t`) and the integrated factor :math:`(1 - D_t(\\lambda))/\\lambda`,
which tends to :math:`\\eta t / N` at :math:`\\lambda = 0` and is evaluated there without
cancellation (``expm1``/``log1p``). Jacot et al. arXiv:1806.07572; Lee et al. arXiv:1902.06720.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..errors import NtklabTypeError, NtklabValueError, NumericalWarning

__all__ = [
    "Normalization",
    "Schedule",
    "critical_learning_rate",
    "loss_normalizer",
]

#: How the squared loss is normalized: ``"mean"`` divides the sum of squares by
#: ``N = y.numel()`` (neural-tangents' convention), ``"sum"`` by 1.
Normalization = Literal["mean", "sum"]
Kind = Literal["flow", "gd"]


def loss_normalizer(normalization: str, y_numel: int) -> float:
    """:math:`N` of the loss :math:`\\frac{1}{2N}\\|f - y\\|^2` (see the module docstring)."""
    if normalization == "mean":
        return float(y_numel)
    if normalization == "sum":
        return 1.0
    raise NtklabValueError(f"normalization: expected 'mean' or 'sum', got {normalization!r}")


def critical_learning_rate(
    max_eigenvalue: float, normalizer: float, momentum: float = 0.0
) -> float:
    """Largest step for which gradient descent on the kernel model converges.

    .. math:: \\eta_c = 2 (1 + \\mu) N / \\lambda_{max}

    (with momentum :math:`\\mu`; neural-tangents' ``max_learning_rate``). Above it the
    component along the top eigenvector grows geometrically.
    """
    if max_eigenvalue <= 0:
        return math.inf
    return 2.0 * (1.0 + momentum) * normalizer / max_eigenvalue


@dataclass(frozen=True)
class Schedule:
    """How training proceeds in time: gradient flow or discrete gradient descent.

    Parameters
    ----------
    kind : {"flow", "gd"}
        Continuous gradient flow, or gradient descent in steps (``t`` then counts steps and
        must be an integer).
    learning_rate : float
        Step :math:`\\eta > 0`.
    normalizer : float
        :math:`N` of the loss (:func:`loss_normalizer`).
    """

    kind: Kind
    learning_rate: float
    normalizer: float

    def __post_init__(self) -> None:
        if self.kind not in ("flow", "gd"):
            raise NtklabValueError(f"kind: expected 'flow' or 'gd', got {self.kind!r}")
        if not (
            isinstance(self.learning_rate, int | float) and not isinstance(self.learning_rate, bool)
        ):
            raise NtklabTypeError(
                f"learning_rate: expected a positive float, got {type(self.learning_rate)}"
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise NtklabValueError(
                f"learning_rate: expected a finite value > 0, got {self.learning_rate}"
            )

    @property
    def rate(self) -> float:
        """:math:`\\eta / N`, the factor multiplying the kernel."""
        return self.learning_rate / self.normalizer

    def check_stable(self, max_eigenvalue: float) -> None:
        """Warn when discrete GD's step exceeds the critical one for this spectrum."""
        if self.kind != "gd":
            return
        critical = critical_learning_rate(max_eigenvalue, self.normalizer)
        if self.learning_rate > critical:
            warnings.warn(
                f"learning_rate: {self.learning_rate:.6g} is above the critical learning rate "
                f"{critical:.6g} = 2 N / lambda_max of discrete gradient descent; the "
                "predictions diverge along the top eigenvectors",
                NumericalWarning,
                stacklevel=4,
            )

    def residual(self, evals: Tensor, t: Tensor) -> Tensor:
        """:math:`D_t(\\lambda)`: the factor by which the residual along :math:`\\lambda` shrinks.

        Parameters
        ----------
        evals : Tensor of shape (n,)
            Non-negative eigenvalues.
        t : Tensor of shape (T,)
            Finite, non-negative times in steps at ``learning_rate`` (the flow time is
            ``learning_rate * t``).

        Returns
        -------
        Tensor of shape (T, n)
        """
        x = evals[None, :] * self.rate  # shape: (1, n)
        tt = t[:, None]  # shape: (T, 1)
        if self.kind == "flow":
            return torch.exp(-x * tt)
        base = 1.0 - x
        positive = base > 0
        safe = torch.where(positive, base, torch.ones_like(base))
        smooth = torch.exp(tt * torch.log(safe))
        signed = base.abs().pow(tt) * torch.where(
            torch.remainder(tt, 2.0) == 0, torch.ones_like(tt), -torch.ones_like(tt)
        )
        return torch.where(positive, smooth, signed)

    def integrated(self, evals: Tensor, t: Tensor) -> Tensor:
        """:math:`(1 - D_t(\\lambda))/\\lambda`, equal to :math:`\\eta t / N` at :math:`\\lambda=0`.

        Returns
        -------
        Tensor of shape (T, n)
        """
        x = evals[None, :] * self.rate  # shape: (1, n)
        tt = t[:, None]
        if self.kind == "flow":
            y = x * tt
            ratio = -torch.expm1(-y) / torch.where(y > 0, y, torch.ones_like(y))
            ratio = torch.where(y > 0, ratio, torch.ones_like(ratio))
            return ratio * tt * self.rate
        base = 1.0 - x
        positive = base > 0
        safe_log = torch.log1p(-torch.where(positive, x, torch.zeros_like(x)))  # log(1 - x)
        one_minus_d = torch.where(
            positive, -torch.expm1(tt * safe_log), 1.0 - self.residual(evals, t)
        )
        nonzero = x > 0
        ratio = one_minus_d / torch.where(nonzero, x, torch.ones_like(x))
        return torch.where(nonzero, ratio, tt.expand_as(ratio)) * self.rate

    def check_times(self, t: Tensor) -> None:
        """Raise unless ``t`` is finite and non-negative (and integer for discrete GD)."""
        if not bool(torch.isfinite(t).all()):
            raise NtklabValueError(
                "t: expected finite times >= 0 (None means infinity), got "
                f"{t.flatten()[~torch.isfinite(t.flatten())][:3].tolist()}"
            )
        if bool((t < 0).any()):
            raise NtklabValueError(
                f"t: expected times >= 0, got {t.flatten()[t.flatten() < 0][:3].tolist()}"
            )
        if self.kind == "gd" and bool((t != torch.round(t)).any()):
            raise NtklabValueError(
                "t: expected whole numbers of steps for discrete gradient descent, got "
                f"{t.flatten()[t.flatten() != torch.round(t.flatten())][:3].tolist()}"
            )
