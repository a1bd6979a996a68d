"""An adaptive Dormand-Prince (RK45) integrator for autonomous ODEs :math:`\\dot y = F(y)` in torch.

The method of Dormand and Prince (1980) with the error control of Hairer, Norsett and Wanner
(1993, II.4): each step takes the 5th-order solution and estimates its error by the embedded
4th-order one; a step is accepted when the root mean square of
:math:`e_i / (a + r \\max(|y_i|, |y'_i|))` is at most 1 (:math:`a` = ``atol``, :math:`r` =
``rtol``), and the next step is the current one times :math:`0.9\\, \\mathrm{err}^{-1/5}`
clipped to :math:`[0.2, 10]`. Steps are shortened to land exactly on every requested time,
so no interpolation error is added. The same method (with the same error norm) is
``scipy.integrate.solve_ivp(method="RK45")`` and ``jax.experimental.ode.odeint``, which
neural-tangents' ``predict.gradient_descent`` uses; it is written here in torch so that the
right-hand side runs on the tensors' device and may use autograd. It is explicit: a stiff
system (fast modes much faster than the horizon) needs on the order of
:math:`\\lambda_{max} T / 3` steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import NtklabValueError

__all__ = ["dopri5"]

# Butcher tableau of Dormand-Prince 5(4); the 7th stage is the next step's first (FSAL).
_A: tuple[tuple[float, ...], ...] = (
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
# 5th-order weights minus the embedded 4th-order ones: the error estimate's weights.
_E: tuple[float, ...] = (
    71 / 57600,
    0.0,
    -71 / 16695,
    71 / 1920,
    -17253 / 339200,
    22 / 525,
    -1 / 40,
)
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0


def _rms(x: Tensor) -> float:
    return float(torch.sqrt(torch.mean(x * x)))


def _combine(y: Tensor, h: float, ks: list[Tensor], coeffs: tuple[float, ...]) -> Tensor:
    out = y.clone()
    for c, k in zip(coeffs, ks, strict=False):
        if c:
            out.add_(k, alpha=h * c)
    return out


def _step(
    fun: Callable[[Tensor], Tensor], y: Tensor, k1: Tensor, h: float
) -> tuple[Tensor, Tensor, Tensor]:
    """One Dormand-Prince step of size ``h``: (new state, its derivative, error estimate)."""
    ks = [k1]
    for row in _A[:-1]:
        ks.append(fun(_combine(y, h, ks, row)))
    y_new = _combine(y, h, ks, _A[-1])
    ks.append(fun(y_new))
    err = _combine(torch.zeros_like(y), h, ks, _E)
    return y_new, ks[-1], err


def _initial_step(
    fun: Callable[[Tensor], Tensor], y0: Tensor, f0: Tensor, rtol: float, atol: float
) -> float:
    """Hairer, Norsett and Wanner's starting step (1993, II.4)."""
    scale = atol + rtol * y0.abs()
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    d2 = _rms((fun(y0 + h0 * f0) - f0) / scale) / h0
    big = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if big <= 1e-15 else (0.01 / big) ** 0.2
    return min(100 * h0, h1)


def dopri5(
    fun: Callable[[Tensor], Tensor],
    y0: Tensor,
    times: Tensor,
    *,
    rtol: float,
    atol: float,
    max_steps: int,
) -> Tensor:
    """Solve :math:`\\dot y = F(y)`, :math:`y(0) = y_0`, at the given times.

    Parameters
    ----------
    fun : callable Tensor -> Tensor
        :math:`F`, returning a tensor of the shape of ``y``.
    y0 : Tensor of any shape
    times : Tensor of shape (T,)
        Finite, non-decreasing, :math:`\\ge 0`.
    rtol, atol : float
        Relative and absolute tolerances of the local error (see the module docstring).
    max_steps : int
        Step attempts (accepted or not) allowed in all.

    Returns
    -------
    Tensor of shape (T, *y0.shape)
        :math:`y(t)` at each time.

    Raises
    ------
    NtklabValueError
        When ``max_steps`` attempts do not reach the last time, or the step size underflows
        (the solution blows up or ``fun`` returns NaN).
    """
    t, y = 0.0, y0
    k1 = fun(y)
    h = _initial_step(fun, y, k1, rtol, atol) if len(times) and float(times[-1]) > 0 else 0.0
    attempts = 0
    out = []
    for target in times.tolist():
        while t < target:
            if attempts >= max_steps:
                raise NtklabValueError(
                    f"max_steps: the ODE solver used its {max_steps} steps and reached time "
                    f"{t:.6g} of {target:.6g}; the system is stiff at this horizon (raise "
                    "max_steps, or loosen rtol/atol)"
                )
            attempts += 1
            last = t + h >= target
            hh = target - t if last else h
            y_new, k_new, err = _step(fun, y, k1, hh)
            scale = atol + rtol * torch.maximum(y.abs(), y_new.abs())
            norm = _rms(err / scale)
            if not math.isfinite(norm):
                norm = math.inf
            if norm <= 1.0:
                t = target if last else t + hh
                y, k1 = y_new, k_new
            factor = _MAX_FACTOR if norm == 0 else _SAFETY * norm**-0.2
            factor = min(_MAX_FACTOR, max(_MIN_FACTOR, factor))
            # A step shortened to land on a time does not shrink the next one.
            h = max(h, hh * factor) if (last and norm <= 1.0) else hh * factor
            if h <= 1e-14 * max(1.0, abs(t)):
                raise NtklabValueError(
                    f"the ODE solver's step underflowed at time {t:.6g}: the solution is not "
                    "finite there (the right-hand side returned NaN/inf or blows up)"
                )
        out.append(y)
    if not out:
        return y0.new_empty((0, *y0.shape))
    return torch.stack(out)
