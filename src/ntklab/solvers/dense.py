"""Dense factorizations of kernel matrices that survive singular and ill-conditioned input.

Kernel matrices are positive semi-definite in exact arithmetic, but an NTK on nearly duplicated
inputs, or a ReLU NNGP at large depth, is singular to rounding. Two factorizations serve the
closed-form predictions of :mod:`ntklab.dynamics`:

- :func:`psd_eigh`: the symmetric eigendecomposition, with eigenvalues below zero clamped to
  zero, silently within rounding and with a :class:`~ntklab.errors.NumericalWarning` naming
  the most negative eigenvalue beyond it; it serves any function of the matrix (finite
  training times).
- :func:`cholesky_with_jitter`: the Cholesky factor of :math:`A + \\epsilon I`, retrying with a
  growing jitter :math:`\\epsilon` (from ``1e-10`` of the mean diagonal, times 10 per try) when
  the plain factorization fails, and saying so with a
  :class:`~ntklab.errors.NumericalWarning` that names the jitter; it serves solves
  (infinite training time, kernel ridge regression, GP posteriors).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError, NumericalWarning

__all__ = [
    "Cholesky",
    "Eigh",
    "check_symmetric",
    "cholesky_with_jitter",
    "psd_eigh",
    "symmetrize",
]

_JITTER_START = 1e-10
_JITTER_TRIES = 8


@short_repr
@dataclass(frozen=True)
class Eigh:
    """Eigenpairs of a symmetric PSD matrix, :math:`A = V \\operatorname{diag}(\\lambda) V^T`.

    Attributes
    ----------
    values : Tensor of shape (n,)
        Eigenvalues in ascending order, clamped at 0.
    vectors : Tensor of shape (n, n)
        Orthonormal eigenvectors as columns.
    clamped : int
        How many negative eigenvalues were set to 0.
    """

    values: Tensor
    vectors: Tensor
    clamped: int

    def apply(self, fn_values: Tensor, rhs: Tensor) -> Tensor:
        """:math:`V \\operatorname{diag}(g) V^T B` for a batch of spectral functions ``g``.

        Parameters
        ----------
        fn_values : Tensor of shape (..., n)
            Values :math:`g(\\lambda_i)`; leading axes (e.g. times) broadcast.
        rhs : Tensor of shape (n, k)

        Returns
        -------
        Tensor of shape (..., n, k)
        """
        z = self.vectors.T @ rhs  # shape: (n, k)
        return self.vectors @ (fn_values[..., :, None] * z)


@short_repr
@dataclass(frozen=True)
class Cholesky:
    """Lower Cholesky factor of :math:`A + \\epsilon I` and the jitter :math:`\\epsilon` used."""

    factor: Tensor
    jitter: float

    def solve(self, rhs: Tensor) -> Tensor:
        """:math:`(A + \\epsilon I)^{-1} B` for ``rhs`` of shape (n, k)."""
        return torch.cholesky_solve(rhs, self.factor)


def check_symmetric(name: str, a: object) -> Tensor:
    """Return ``a`` if it is a finite, square, symmetric floating matrix, else raise.

    Symmetry is checked to a relative tolerance of ``1e-6`` (float64) or ``1e-4`` (float32) of
    the largest entry: kernels assembled blockwise are symmetric only to rounding.
    """
    if not isinstance(a, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor of shape (n, n), got {type(a)}")
    if not a.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype, got {a.dtype}")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise NtklabValueError(
            f"{name}: expected a non-empty square matrix (n, n), got shape {tuple(a.shape)}"
        )
    if not bool(torch.isfinite(a).all()):
        bad = int((~torch.isfinite(a)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    scale = float(a.abs().max())
    asym = float((a - a.T).abs().max())
    tol = (1e-6 if a.dtype == torch.float64 else 1e-4) * max(scale, 1e-300)
    if asym > tol:
        raise NtklabValueError(
            f"{name}: expected a symmetric matrix, got max |A - A^T| = {asym:.3g} "
            f"(largest entry {scale:.3g})"
        )
    return a


def symmetrize(a: Tensor) -> Tensor:
    """:math:`(A + A^T)/2` over the last two axes."""
    return 0.5 * (a + a.transpose(-1, -2))


def _check_square_finite(name: str, a: object) -> Tensor:
    """Return ``a`` if it is a floating tensor of shape (..., n, n) with finite entries, else
    raise naming ``name``, the shape and the count of NaN or inf entries (a NaN matrix is not
    "not positive semi-definite": it is not a matrix of numbers)."""
    if not isinstance(a, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor of shape (n, n), got {type(a)}")
    if not a.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype, got {a.dtype}")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise NtklabValueError(
            f"{name}: expected a square matrix of shape (n, n), got shape {tuple(a.shape)}"
        )
    finite = torch.isfinite(a)
    if not bool(finite.all()):
        nan = int(torch.isnan(a).sum())
        inf = int((~finite).sum()) - nan
        raise NtklabValueError(
            f"{name}: expected finite values, got {nan} NaN and {inf} inf entries (of "
            f"{a.numel()}, shape {tuple(a.shape)})"
        )
    return a


def psd_eigh(a: Tensor, *, name: str = "matrix") -> Eigh:
    """Eigendecomposition of a symmetric PSD matrix with negative eigenvalues clamped to 0.

    Negative eigenvalues within rounding, :math:`|\\lambda| \\le n\\,\\epsilon
    \\max_i |\\lambda_i|` (:math:`\\epsilon` the machine epsilon of ``a``'s dtype), are clamped
    silently: a PSD matrix stored in floating point has them. Larger ones mean that ``a`` is
    not positive semi-definite; they are clamped too, with a
    :class:`~ntklab.errors.NumericalWarning` naming the most negative eigenvalue.

    Parameters
    ----------
    a : Tensor of shape (n, n)
        Symmetric (only the lower triangle is read).
    name : str
        How the warning refers to ``a``.

    Returns
    -------
    Eigh

    Warns
    -----
    NumericalWarning
        When an eigenvalue below :math:`-n\\,\\epsilon \\max_i |\\lambda_i|` was clamped.

    Raises
    ------
    NtklabValueError
        When ``a`` is not square, or has NaN or inf entries (named as such, with ``name``).
    NtklabTypeError
        When ``a`` is not a floating tensor.
    """
    _check_square_finite(name, a)
    values, vectors = torch.linalg.eigh(a)
    negative = values < 0
    clamped = int(negative.sum())
    if clamped:
        lowest = float(values[0])
        scale = float(values.abs().max())
        threshold = a.shape[-1] * torch.finfo(values.dtype).eps * scale
        if lowest < -threshold:
            warnings.warn(
                f"{name}: not positive semi-definite beyond rounding; clamped {clamped} "
                f"negative eigenvalue(s) to 0, the most negative {lowest:.3g} "
                f"({-lowest / scale:.1e} of the largest |eigenvalue| {scale:.3g}, rounding "
                f"allows {threshold / scale:.1e})",
                NumericalWarning,
                stacklevel=2,
            )
        values = values.clamp(min=0.0)
    return Eigh(values=values, vectors=vectors, clamped=clamped)


def cholesky_with_jitter(a: Tensor, *, name: str = "matrix") -> Cholesky:
    """Cholesky factor of ``a``, adding a growing jitter to the diagonal until it succeeds.

    Parameters
    ----------
    a : Tensor of shape (n, n)
        Symmetric positive semi-definite.
    name : str
        How warnings and errors refer to ``a``.

    Returns
    -------
    Cholesky
        With ``jitter = 0`` when the plain factorization succeeded.

    Warns
    -----
    NumericalWarning
        When a jitter was needed, naming its value (absolute and relative to the mean diagonal).

    Raises
    ------
    NtklabValueError
        When even a jitter of ``1e-3`` times the mean diagonal does not make ``a`` factorizable
        (it is then far from PSD); when ``a`` is not square or has NaN or inf entries.
    """
    _check_square_finite(name, a)
    factor, info = torch.linalg.cholesky_ex(a)
    if int(info) == 0:
        return Cholesky(factor=factor, jitter=0.0)
    mean_diag = float(a.diagonal().mean().abs())
    base = mean_diag if mean_diag > 0 else 1.0
    eye = torch.eye(a.shape[0], dtype=a.dtype, device=a.device)
    for attempt in range(_JITTER_TRIES):
        jitter = base * _JITTER_START * 10.0**attempt
        factor, info = torch.linalg.cholesky_ex(a + jitter * eye)
        if int(info) == 0:
            warnings.warn(
                f"{name}: not positive definite to working precision; added a jitter of "
                f"{jitter:.3g} ({jitter / base:.1e} of the mean diagonal) to factorize it",
                NumericalWarning,
                stacklevel=3,
            )
            return Cholesky(factor=factor, jitter=jitter)
    raise NtklabValueError(
        f"{name}: expected a positive semi-definite matrix, got one that a jitter of "
        f"{jitter:.3g} ({jitter / base:.0e} of the mean diagonal) does not make factorizable"
    )
