"""The training-set kernel of a closed-form prediction, regularized and factorized once.

Every closed-form prediction of :mod:`ntklab.dynamics` needs two operators of the regularized
train-train kernel :math:`\\Theta_r = \\Theta + \\rho I`:

- the integrated operator :math:`\\Phi_t = V \\operatorname{diag}((1 - D_t(\\lambda))/\\lambda)
  V^T`, which at :math:`t = \\infty` is :math:`\\Theta_r^{-1}`;
- the residual operator :math:`D_t = V \\operatorname{diag}(D_t(\\lambda)) V^T`, zero at
  :math:`t = \\infty`,

with :math:`D_t` the schedule's residual factor (:mod:`.descent`). Finite times go through the
eigendecomposition, infinite time through a Cholesky solve (with jitter when the kernel is
singular); both are computed on first use and cached with the training set.

The ridge: :math:`\\rho` = ``ridge`` times the mean of the diagonal of :math:`\\Theta` with
``ridge_relative=True`` (neural-tangents' default for its ``diag_reg``, scale-free), or
``ridge`` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from ..solvers.dense import Cholesky, Eigh, check_symmetric, cholesky_with_jitter, psd_eigh
from .descent import Schedule

__all__ = ["TrainKernel", "as_times", "ridge_value"]


def ridge_value(kernel: Tensor, ridge: float, relative: bool, name: str = "ridge") -> float:
    """The ridge :math:`\\rho` added to the diagonal (see the module docstring); ``name`` is
    the argument's name in errors."""
    if isinstance(ridge, bool) or not isinstance(ridge, int | float):
        raise NtklabTypeError(f"{name}: expected a float >= 0, got {type(ridge).__name__}")
    if not (math.isfinite(ridge) and ridge >= 0):
        raise NtklabValueError(f"{name}: expected a finite value >= 0, got {ridge}")
    if not relative:
        return float(ridge)
    return float(ridge) * float(kernel.diagonal().mean())


def as_times(t: object, *, like: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """Flatten times ``t`` (number, sequence or tensor) to shape (T,) and remember their shape."""
    if isinstance(t, bool):
        raise NtklabTypeError("t: expected a number, an array of numbers or None, got a bool")
    try:
        tt = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise NtklabTypeError(
            f"t: expected a number, an array of numbers or None, got {type(t).__name__}"
        ) from err
    if not tt.is_floating_point():
        tt = tt.to(like.dtype)
    if bool(torch.isnan(tt).any()):
        raise NtklabValueError("t: expected times >= 0 (None means infinity), got NaN")
    return tt.reshape(-1), tuple(tt.shape)


@short_repr
@dataclass(frozen=True, eq=False)
class TrainKernel:
    """A regularized train-train kernel with its cached factorizations.

    Parameters
    ----------
    kernel : Tensor of shape (n, n)
        Symmetric PSD train-train kernel :math:`\\Theta`.
    schedule : Schedule
        Gradient flow or descent, with the learning rate and the loss normalizer.
    reg : float
        Ridge strength (relative to the mean diagonal when ``relative``).
    relative : bool
    name : str
        How errors and warnings refer to the kernel.
    reg_name : str
        How errors refer to the ridge (``"diag_reg"`` under :mod:`ntklab.predict`).
    """

    kernel: Tensor
    schedule: Schedule
    reg: float = 0.0
    relative: bool = True
    name: str = "k_train_train"
    reg_name: str = "ridge"

    def __post_init__(self) -> None:
        check_symmetric(self.name, self.kernel)

    @cached_property
    def ridge(self) -> float:
        """:math:`\\rho`, the absolute value added to the diagonal."""
        return ridge_value(self.kernel, self.reg, self.relative, self.reg_name)

    @cached_property
    def regularized(self) -> Tensor:
        """:math:`\\Theta + \\rho I`, symmetrized. Shape (n, n)."""
        k = 0.5 * (self.kernel + self.kernel.T)
        if self.ridge:
            k = k + self.ridge * torch.eye(k.shape[0], dtype=k.dtype, device=k.device)
        return k

    @cached_property
    def eigh(self) -> Eigh:
        """Eigenpairs of the regularized kernel (negative rounding clamped to 0)."""
        eig = psd_eigh(self.regularized, name=self.name)
        self.schedule.check_stable(float(eig.values[-1]))
        return eig

    @cached_property
    def cholesky(self) -> Cholesky:
        """Cholesky factor of the regularized kernel (jitter when singular)."""
        return cholesky_with_jitter(self.regularized, name=self.name)

    @property
    def n(self) -> int:
        return int(self.kernel.shape[0])

    def integrated(self, t: Tensor | None, rhs: Tensor) -> Tensor:
        """:math:`\\Phi_t B`: shape (T, n, k) for times of shape (T,), (n, k) for ``t=None``."""
        if t is None:
            return self.cholesky.solve(rhs)
        self.schedule.check_times(t)
        eig = self.eigh
        return eig.apply(self.schedule.integrated(eig.values, t), rhs)

    def residual(self, t: Tensor, rhs: Tensor) -> Tensor:
        """:math:`D_t B`: shape (T, n, k) for finite times of shape (T,)."""
        self.schedule.check_times(t)
        eig = self.eigh
        return eig.apply(self.schedule.residual(eig.values, t), rhs)

    def sandwich(self, t: Tensor, middle: Tensor) -> Tensor:
        """:math:`D_t M D_t` for a symmetric (n, n) ``middle``: shape (T, n, n)."""
        self.schedule.check_times(t)
        eig = self.eigh
        d = self.schedule.residual(eig.values, t)  # shape: (T, n)
        m = eig.vectors.T @ middle @ eig.vectors  # shape: (n, n)
        inner = d[:, :, None] * m[None] * d[:, None, :]
        return eig.vectors @ inner @ eig.vectors.T
