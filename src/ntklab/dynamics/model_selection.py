r"""Choosing the ridge of kernel ridge regression on a held-out validation split.

With the fit points :math:`X_f` (kernel :math:`K = V \Lambda V^\top`) and validation points
:math:`X_v`, the KRR predictor of ridge :math:`\rho` on the validation points is

.. math::

    \hat y_v(\rho) = K_{vf}\, V (\Lambda + \rho I)^{-1} V^\top y_f ,

so one eigendecomposition of :math:`K` serves every candidate ridge (and every target
column). The ridge with the smallest validation mean squared error is kept, independently per
target column. Leave-one-out selection on all points is
:func:`ntklab.dynamics.select_ridge_loo`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_matrix, check_positive_int
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from ..solvers.dense import check_symmetric, psd_eigh
from .function_space import as_targets

__all__ = ["ValidationRidgeSelection", "select_ridge_validation", "validation_split"]


@short_repr
@dataclass(frozen=True)
class ValidationRidgeSelection:
    """The ridge chosen on a validation split, and the fitted predictor at that ridge.

    Attributes
    ----------
    ridge : Tensor of shape () or (k,)
        The chosen ridge, per target column (shape ``()`` for 1-D targets).
    ridges : Tensor of shape (R,)
        The candidates.
    validation_mse : Tensor of shape (R,) or (R, k)
        Validation mean squared error of each candidate (per column for 2-D targets).
    alpha : Tensor of shape (n_fit,) or (n_fit, k)
        Dual coefficients :math:`(K + \\rho I)^{-1} y_f` at the chosen ridge(s).
    """

    ridge: Tensor
    ridges: Tensor
    validation_mse: Tensor
    alpha: Tensor

    @property
    def best_mse(self) -> Tensor:
        """Validation MSE at the chosen ridge, shape ``()`` or ``(k,)``."""
        return self.validation_mse.min(dim=0).values

    def predict(self, k_test_fit: Tensor) -> Tensor:
        """Predictions :math:`k_{*f}\\,\\alpha` at new points.

        Parameters
        ----------
        k_test_fit : Tensor of shape (m, n_fit)
            Kernel between the new points and the fit points.

        Returns
        -------
        Tensor of shape (m,) or (m, k)
        """
        k = check_matrix("k_test_fit", k_test_fit)
        if k.shape[1] != self.alpha.shape[0]:
            raise NtklabValueError(
                f"k_test_fit: expected shape (m, {self.alpha.shape[0]}) (the fit points), got "
                f"{tuple(k.shape)}"
            )
        return k.to(self.alpha.dtype) @ self.alpha


def select_ridge_validation(
    k_fit_fit: Tensor,
    y_fit: Tensor,
    k_val_fit: Tensor,
    y_val: Tensor,
    ridges: Sequence[float] | Tensor,
) -> ValidationRidgeSelection:
    r"""Choose the KRR ridge by the mean squared error on a validation split.

    .. math::

        \rho^\star = \arg\min_{\rho \in \text{ridges}}
        \frac{1}{n_v} \bigl\| K_{vf} (K_{ff} + \rho I)^{-1} y_f - y_v \bigr\|^2 ,

    per target column, with one eigendecomposition of :math:`K_{ff}` for all candidates.

    Parameters
    ----------
    k_fit_fit : Tensor of shape (n_fit, n_fit)
        Kernel on the fit points (symmetric PSD).
    y_fit : Tensor of shape (n_fit,) or (n_fit, k)
    k_val_fit : Tensor of shape (n_val, n_fit)
        Kernel between validation and fit points.
    y_val : Tensor of shape (n_val,) or (n_val, k)
        Validation targets, with the layout of ``y_fit``.
    ridges : sequence of float or Tensor of shape (R,)
        Candidates, each > 0 (absolute, in the units of the kernel).

    Returns
    -------
    ValidationRidgeSelection

    Examples
    --------
    >>> x = torch.linspace(-1, 1, 40, dtype=torch.float64)[:, None]
    >>> k = torch.exp(-((x - x.T) ** 2) / 0.1)
    >>> y = torch.sin(3 * x[:, 0])
    >>> sel = select_ridge_validation(k[::2, ::2], y[::2], k[1::2, ::2], y[1::2], [1e-6, 1e2])
    >>> float(sel.ridge)
    1e-06
    """
    k = check_symmetric("k_fit_fit", k_fit_fit)
    n = int(k.shape[0])
    y, vector = as_targets(y_fit, n, like=k, name="y_fit")
    kv = check_matrix("k_val_fit", k_val_fit).to(k.dtype)
    if kv.shape[1] != n:
        raise NtklabValueError(
            f"k_val_fit: expected shape (n_val, {n}) (the fit points), got {tuple(kv.shape)}"
        )
    if not isinstance(y_val, Tensor):
        raise NtklabTypeError(f"y_val: expected a torch.Tensor, got {type(y_val).__name__}")
    yv, vector_val = as_targets(y_val, int(kv.shape[0]), like=k, name="y_val")
    if vector_val != vector or yv.shape[1] != y.shape[1]:
        raise NtklabValueError(
            f"y_val: expected the layout of y_fit ({tuple(y_fit.shape)[1:]} per point), got "
            f"shape {tuple(y_val.shape)}"
        )
    r = torch.as_tensor(ridges, dtype=k.dtype, device=k.device).reshape(-1)
    if r.numel() == 0:
        raise NtklabValueError("ridges: expected at least one candidate, got none")
    bad = [v for v in r.tolist() if not (math.isfinite(v) and v > 0)]
    if bad:
        raise NtklabValueError(f"ridges: expected finite values > 0, got {bad[0]!r}")
    eig = psd_eigh(0.5 * (k + k.T))
    z = eig.vectors.T @ y  # shape: (n, k)
    kv_v = kv @ eig.vectors  # shape: (n_val, n)
    inv = 1.0 / (eig.values[None, :] + r[:, None])  # shape: (R, n)
    pred = torch.einsum("vj,rj,jk->rvk", kv_v, inv, z)  # shape: (R, n_val, k)
    mse = (pred - yv[None]).square().mean(dim=1)  # shape: (R, k)
    best = torch.argmin(mse, dim=0)  # shape: (k,)
    chosen = r[best]  # shape: (k,)
    alpha = eig.vectors @ (z / (eig.values[:, None] + chosen[None, :]))  # shape: (n, k)
    if vector:
        return ValidationRidgeSelection(chosen[0], r, mse[:, 0], alpha[:, 0])
    return ValidationRidgeSelection(chosen, r, mse, alpha)


def validation_split(
    n: int, validation_fraction: float, *, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """A random split of ``range(n)`` into fit and validation indices.

    Parameters
    ----------
    n : int
        Number of points, ``>= 2``.
    validation_fraction : float
        In (0, 1); the validation set has ``round(fraction * n)`` points, clipped to
        ``[1, n - 1]``.
    generator : torch.Generator

    Returns
    -------
    fit, validation : Tensor of shape (n - n_val,), Tensor of shape (n_val,), int64
        Disjoint, covering ``range(n)``, each sorted.

    Examples
    --------
    >>> fit, val = validation_split(8, 0.25, generator=torch.Generator().manual_seed(0))
    >>> len(fit), len(val)
    (6, 2)
    """
    n = check_positive_int("n", n)
    if n < 2:
        raise NtklabValueError(f"n: expected at least 2 points to split, got {n}")
    if (
        isinstance(validation_fraction, bool)
        or not isinstance(validation_fraction, int | float)
        or not 0 < validation_fraction < 1
    ):
        raise NtklabValueError(
            f"validation_fraction: expected a float in (0, 1), got {validation_fraction!r}"
        )
    if not isinstance(generator, torch.Generator):
        raise NtklabTypeError(
            f"generator: expected a torch.Generator, got {type(generator).__name__}"
        )
    n_val = min(n - 1, max(1, round(validation_fraction * n)))
    perm = torch.randperm(n, generator=generator, device=generator.device).cpu()
    return perm[n_val:].sort().values, perm[:n_val].sort().values
