"""Kernel matrices of explicit features, :math:`K = \\Phi \\Phi^T`, as low-rank operators.

A feature matrix :math:`\\Phi` of shape (n, F) (random features of an architecture,
:meth:`ntklab.kernels.engine.Architecture.features`) stands for the (n, n) kernel
:math:`\\Phi\\Phi^T` without forming it: products cost :math:`O(nF)`. Any spectral function of
the kernel applied to a right-hand side and read at test points goes through the (F, F) Gram
matrix :math:`\\Phi^T\\Phi = W \\operatorname{diag}(s) W^T`, whose nonzero eigenvalues are
those of :math:`\\Phi\\Phi^T`:

.. math::

    \\Phi_* \\Phi^T g(\\Phi\\Phi^T + \\rho I)\\, Y
      = \\Phi_* \\, W \\operatorname{diag}(g(s + \\rho)) W^T \\Phi^T Y

(the directions outside the range of :math:`\\Phi` are annihilated by :math:`\\Phi^T`), so
kernel ridge regression (:math:`g(\\lambda) = 1/\\lambda`) and gradient flow at time t cost
:math:`O(nF^2 + F^3)` instead of :math:`O(n^3)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from .dense import Eigh, psd_eigh

__all__ = ["FeatureOperator", "pseudo_inverse_values"]


def pseudo_inverse_values(values: Tensor) -> Tensor:
    """:math:`1/\\lambda` for eigenvalues above :math:`F \\epsilon \\max\\lambda`, else 0 (the
    minimum-norm solution of a singular system)."""
    top = values.max() if values.numel() else values.new_zeros(())
    tol = values.shape[-1] * torch.finfo(values.dtype).eps * top
    keep = values > tol
    return torch.where(keep, 1.0 / torch.where(keep, values, torch.ones_like(values)), 0.0)


@short_repr
@dataclass(frozen=True, eq=False)
class FeatureOperator:
    """The kernel matrix :math:`\\Phi\\Phi^T` of features ``features`` (n, F), behind the
    :class:`~ntklab.solvers.operator.LinearOperator` interface (so :func:`ntklab.solvers.solve`
    and :func:`ntklab.solvers.top_eigenpairs` accept it), with the spectral solves of the
    module docstring.

    Examples
    --------
    >>> import torch
    >>> from ntklab.solvers import FeatureOperator
    >>> phi = torch.randn(6, 3, dtype=torch.float64)
    >>> op = FeatureOperator(phi)
    >>> torch.allclose(op.matmul(torch.ones(6, dtype=torch.float64)), phi @ phi.T.sum(1))
    True
    """

    features: Tensor

    def __post_init__(self) -> None:
        phi = self.features
        if not isinstance(phi, Tensor):
            raise NtklabTypeError(
                f"features: expected a torch.Tensor of shape (n, F), got {type(phi).__name__}"
            )
        if phi.ndim != 2 or min(phi.shape) < 1:
            raise NtklabValueError(
                f"features: expected a non-empty tensor of shape (n, F), got {tuple(phi.shape)}"
            )
        if not phi.is_floating_point():
            raise NtklabTypeError(f"features: expected a floating dtype, got {phi.dtype}")
        if not bool(torch.isfinite(phi).all()):
            raise NtklabValueError("features: expected finite values, got NaN or inf")

    @property
    def shape(self) -> tuple[int, int]:
        n = int(self.features.shape[0])
        return (n, n)

    @property
    def dtype(self) -> torch.dtype:
        return self.features.dtype

    @property
    def device(self) -> torch.device:
        return self.features.device

    def matmul(self, v: Tensor) -> Tensor:
        """:math:`\\Phi(\\Phi^T v)` for ``v`` of shape (n,) or (n, k)."""
        return self.features @ (self.features.T @ v)

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matmul(v)

    def diagonal(self) -> Tensor:
        """:math:`\\|\\phi_i\\|^2`, shape (n,)."""
        return self.features.square().sum(dim=1)

    def columns(self, idx: Tensor) -> Tensor:
        """``K[:, idx]`` of shape (n, len(idx))."""
        return self.features @ self.features[idx].T

    def to_dense(self) -> Tensor:
        return self.features @ self.features.T

    @cached_property
    def gram_eigh(self) -> Eigh:
        """Eigenpairs of the (F, F) Gram matrix :math:`\\Phi^T\\Phi`."""
        return psd_eigh(self.features.T @ self.features, name="features Gram matrix")

    def weights(self, fn: Callable[[Tensor], Tensor], rhs: Tensor) -> Tensor:
        """:math:`\\beta = W \\operatorname{diag}(g(s)) W^T \\Phi^T B`, so that
        :math:`\\Phi_* \\beta = \\Phi_*\\Phi^T g(\\Phi\\Phi^T) B`.

        Parameters
        ----------
        fn : callable
            :math:`g`, applied to the eigenvalues (F,); it may return (T, F) (several times).
        rhs : Tensor of shape (n, k)

        Returns
        -------
        Tensor of shape (F, k), or (T, F, k)
        """
        eig = self.gram_eigh
        return eig.apply(fn(eig.values), self.features.T @ rhs)
