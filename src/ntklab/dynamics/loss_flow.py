"""Function-space training dynamics of a linearized network on any differentiable loss.

A network linearized around its initialization (or an infinitely wide one) trained by
gradient flow on a loss :math:`L(f(X), Y)` moves its outputs along its tangent kernel
:math:`\\Theta` (Lee et al. arXiv:1902.06720, eq. 6):

.. math::

    \\dot f_t(X) = -\\eta\\, \\Theta_{XX}\\, \\nabla_f L(f_t(X), Y), \\qquad
    \\dot f_t(x) = -\\eta\\, \\Theta_{xX}\\, \\nabla_f L(f_t(X), Y),

with ``t`` counted in steps at the learning rate :math:`\\eta` (the flow time is
:math:`\\eta t`), as in :mod:`ntklab.predict`. With momentum :math:`\\mu` (heavy ball,
neural-tangents' continuous version), in the time :math:`s = \\sqrt{\\eta}\\, t`,

.. math::

    \\ddot f_s = -\\Theta\\, \\nabla_f L(f_s(X), Y) - \\frac{1 - \\mu}{\\sqrt{\\eta}}\\, \\dot f_s,
    \\qquad \\dot f_0 = 0,

the limit of :math:`v \\leftarrow \\mu v - \\eta \\Theta \\nabla L`, :math:`f \\leftarrow f + v`
at small :math:`\\eta`. Only the squared loss has a closed form
(:mod:`.function_space`); here the ODE is solved numerically (:func:`.ode.dopri5`, adaptive
RK45, in float64), with :math:`\\nabla_f L` from torch.autograd. The kernel is an (n, n)
matrix shared by every output (neural-tangents' ``trace_axes=(-1,)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_positive_int
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from ..solvers.dense import check_symmetric
from .function_space import as_targets
from .ode import dopri5

__all__ = ["Loss", "LossFlow", "loss_flow"]

Loss = Callable[[Tensor, Tensor], Tensor]
_F64 = torch.float64


def _positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a float, got {type(value).__name__} {value!r}")
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise NtklabValueError(
            f"{name}: expected a finite value {'>=' if allow_zero else '>'} 0, got {value}"
        )
    return float(value)


@short_repr
@dataclass(frozen=True, eq=False)
class LossFlow:
    """The function-space ODE of one training set; build it with :func:`loss_flow`.

    ``kernel`` (n, n) and ``y_train`` (n, k) are float64 copies; ``vector`` says whether the
    targets were 1-D (the loss then sees (n,) outputs).
    """

    loss: Loss
    kernel: Tensor  # shape: (n, n)
    y_train: Tensor  # shape: (n, k)
    vector: bool
    learning_rate: float
    momentum: float | None
    rtol: float
    atol: float
    max_steps: int

    def loss_gradient(self, fx_train: Tensor) -> Tensor:
        """:math:`\\nabla_f L(f, Y)` at training outputs ``fx_train`` (n, k), by autograd."""
        f = fx_train.detach().clone().requires_grad_(True)
        y = self.y_train
        with torch.enable_grad():
            value = self.loss(f[:, 0] if self.vector else f, y[:, 0] if self.vector else y)
        if not isinstance(value, Tensor) or value.numel() != 1:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise NtklabValueError(f"loss: expected loss(fx, y) to return a scalar, got {got}")
        if not value.requires_grad:
            raise NtklabValueError(
                "loss: expected a scalar differentiable in fx, got one that does not depend on "
                "fx through torch.autograd"
            )
        (grad,) = torch.autograd.grad(value.reshape(()), f, allow_unused=True)
        return torch.zeros_like(f) if grad is None else grad.detach()

    def _time_scale(self) -> tuple[float, float]:
        """(ODE time per step, friction): :math:`\\eta, 0` or :math:`\\sqrt\\eta,
        (\\mu - 1)/\\sqrt\\eta`."""
        if self.momentum is None:
            return self.learning_rate, 0.0
        root = math.sqrt(self.learning_rate)
        return root, (self.momentum - 1.0) / root

    def solve(
        self, times: Tensor, fx_train_0: Tensor, fx_test_0: Tensor | None, k_test_train: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Train and test outputs at ``times`` (T,) in steps: shapes (T, n, k) and (T, m, k).

        ``fx_train_0`` (n, k), ``fx_test_0`` (m, k) or None (then the test part is empty)
        and ``k_test_train`` (m, n), all float64.
        """
        n = self.kernel.shape[0]
        ktd = k_test_train if fx_test_0 is not None else k_test_train[:0]
        # Train and test rows in one operator: their velocities are -[K; K_test] grad L.
        k_all = torch.cat([self.kernel, ktd])  # shape: (n + m, n)
        f0 = fx_train_0 if fx_test_0 is None else torch.cat([fx_train_0, fx_test_0])
        g0 = self.loss_gradient(fx_train_0)
        if not bool(torch.isfinite(g0).all()):
            raise NtklabValueError("loss: expected a finite gradient at fx_train_0, got NaN/inf")
        per_step, friction = self._time_scale()
        rows = f0.shape[0]

        def velocity(f: Tensor) -> Tensor:
            return -(k_all @ self.loss_gradient(f[:n]))

        def with_momentum(state: Tensor) -> Tensor:
            f, q = state[:rows], state[rows:]
            return torch.cat([q, velocity(f) + friction * q])

        fun: Callable[[Tensor], Tensor] = velocity
        state0 = f0
        if self.momentum is not None:
            fun, state0 = with_momentum, torch.cat([f0, torch.zeros_like(f0)])
        out = dopri5(
            fun,
            state0,
            times * per_step,
            rtol=self.rtol,
            atol=self.atol,
            max_steps=self.max_steps,
        )
        return out[:, :n], out[:, n:rows]


def loss_flow(
    loss: Loss,
    k_train_train: Tensor,
    y_train: Tensor,
    *,
    learning_rate: float = 1.0,
    momentum: float | None = None,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 100_000,
) -> LossFlow:
    """Validate the arguments of the function-space ODE and build it.

    Parameters
    ----------
    loss : callable ``loss(fx, y) -> scalar Tensor``
        Differentiable in ``fx`` by torch.autograd; called with float64 ``fx`` and ``y`` of
        the shape of ``y_train``.
    k_train_train : Tensor of shape (n, n)
        Symmetric tangent kernel on the training inputs.
    y_train : Tensor of shape (n, k) or (n,)
    learning_rate : float
        :math:`\\eta > 0`; times count steps.
    momentum : float in [0, 1], optional
        Heavy-ball momentum :math:`\\mu` (continuous version, see the module docstring).
    rtol, atol : float
        Tolerances of :func:`.ode.dopri5` on the outputs.
    max_steps : int
        The solver's step budget.

    Returns
    -------
    LossFlow
    """
    if not callable(loss):
        raise NtklabTypeError(
            f"loss: expected a callable loss(fx, y) -> scalar tensor, got {type(loss).__name__}"
        )
    k = check_symmetric("k_train_train", k_train_train).to(_F64)
    y, vector = as_targets(y_train, int(k.shape[0]), like=k)
    lr = _positive("learning_rate", learning_rate)
    if momentum is not None:
        mu = _positive("momentum", momentum, allow_zero=True)
        if mu > 1:
            raise NtklabValueError(f"momentum: expected a value in [0, 1], got {momentum}")
    return LossFlow(
        loss,
        k,
        y,
        vector,
        lr,
        None if momentum is None else float(momentum),
        _positive("rtol", rtol),
        _positive("atol", atol),
        check_positive_int("max_steps", max_steps),
    )
