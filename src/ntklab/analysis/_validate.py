"""Argument checks shared by the analysis modules (private).

Every check raises :class:`~ntklab.errors.NtklabValueError` or
:class:`~ntklab.errors.NtklabTypeError` naming the argument, what was expected and what came.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from ntklab.errors import NtklabTypeError, NtklabValueError

Normalization = Literal["mean", "sum"]
"""How a squared loss is normalized, one keyword used across :mod:`ntklab.analysis`.

``"mean"``: :math:`L = \\frac{1}{2N}\\sum (f - y)^2` with :math:`N` the number of entries of
``y`` (neural-tangents' ``predict``), so full-batch GD on a kernel model is
:math:`r_{t+1} = (I - \\eta K / N) r_t`. ``"sum"``: :math:`L = \\frac12 \\sum (f - y)^2` and
:math:`r_{t+1} = (I - \\eta K) r_t`.
"""

_NORMALIZATIONS = ("mean", "sum")


def describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"


def real_tensor(
    name: str,
    value: object,
    ndims: tuple[int, ...],
    *,
    shape_text: str,
    allow_integer: bool = False,
) -> Tensor:
    """``value`` if it is a non-empty, finite, real tensor with one of ``ndims`` dimensions."""
    if not isinstance(value, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor of shape {shape_text}, got {describe(value)}"
        )
    if value.is_complex() or not (
        value.is_floating_point()
        or (allow_integer and (value.dtype == torch.bool or not value.dtype.is_floating_point))
    ):
        kind = "a real floating or integer dtype" if allow_integer else "a floating dtype"
        raise NtklabTypeError(f"{name}: expected {kind}, got {value.dtype}")
    if value.ndim not in ndims:
        raise NtklabValueError(
            f"{name}: expected a tensor of shape {shape_text}, got {value.ndim}-D shape "
            f"{tuple(value.shape)}"
        )
    if value.numel() == 0:
        raise NtklabValueError(
            f"{name}: expected a non-empty tensor of shape {shape_text}, got shape "
            f"{tuple(value.shape)}"
        )
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return value


def square_matrix(name: str, value: object) -> Tensor:
    """A finite floating tensor of shape (n, n)."""
    matrix = real_tensor(name, value, (2,), shape_text="(n, n)")
    if matrix.shape[0] != matrix.shape[1]:
        raise NtklabValueError(
            f"{name}: expected a square matrix of shape (n, n), got shape {tuple(matrix.shape)}"
        )
    return matrix


def real_number(name: str, value: object) -> float:
    """``value`` as a float if it is a finite real number (not a bool)."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex():
        value = float(value.detach().cpu())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NtklabTypeError(f"{name}: expected a real number, got {describe(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise NtklabValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def positive_number(name: str, value: object) -> float:
    number = real_number(name, value)
    if not number > 0:
        raise NtklabValueError(f"{name}: expected a number > 0, got {number!r}")
    return number


def nonnegative_number(name: str, value: object) -> float:
    number = real_number(name, value)
    if number < 0:
        raise NtklabValueError(f"{name}: expected a number >= 0, got {number!r}")
    return number


def integer(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum`` (not a bool)."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise NtklabTypeError(f"{name}: expected an int >= {minimum}, got {describe(value)}")
    value = int(value)
    if value < minimum:
        raise NtklabValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def probability(name: str, value: object) -> float:
    number = real_number(name, value)
    if not 0.0 < number < 1.0:
        raise NtklabValueError(f"{name}: expected a number in (0, 1), got {number!r}")
    return number


def normalization(value: object) -> Normalization:
    if value == "mean":
        return "mean"
    if value == "sum":
        return "sum"
    raise NtklabValueError(
        f"normalization: expected one of {', '.join(map(repr, _NORMALIZATIONS))}, got {value!r}"
    )


def steps_tensor(name: str, steps: object, device: torch.device) -> Tensor:
    """Non-negative integer step counts as a 1-D float64 tensor on ``device``.

    Accepts an int, a sequence of ints, or a 0-D/1-D tensor of integers (or of floats with
    integral values).
    """
    if isinstance(steps, bool):
        raise NtklabTypeError(f"{name}: expected non-negative integers, got {describe(steps)}")
    if isinstance(steps, numbers.Integral):
        values = torch.tensor([int(steps)], dtype=torch.float64, device=device)
    elif isinstance(steps, Tensor):
        if steps.is_complex() or steps.dtype == torch.bool:
            raise NtklabTypeError(f"{name}: expected integer steps, got dtype {steps.dtype}")
        if steps.ndim > 1:
            raise NtklabValueError(
                f"{name}: expected a 0-D or 1-D tensor of steps, got shape {tuple(steps.shape)}"
            )
        values = steps.detach().to(device=device, dtype=torch.float64).reshape(-1)
    elif isinstance(steps, Sequence) and not isinstance(steps, str):
        if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in steps):
            raise NtklabTypeError(f"{name}: expected a sequence of ints, got {steps!r}")
        values = torch.tensor([int(s) for s in steps], dtype=torch.float64, device=device)
    else:
        raise NtklabTypeError(
            f"{name}: expected an int, a sequence of ints or a 1-D integer tensor, got "
            f"{describe(steps)}"
        )
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        raise NtklabValueError(f"{name}: expected finite steps >= 0, got {values.tolist()}")
    if not bool((values == values.round()).all()):
        raise NtklabValueError(f"{name}: expected integral step counts, got {values.tolist()}")
    return values


def psd_floor(name: str, eigvals: Tensor, rtol: float = 1e-4) -> Tensor:
    """Eigenvalues of a PSD matrix with rounding-level negatives set to 0.

    Negatives within ``rtol * max|lambda|`` are ordinary rounding (a float32 kernel's
    eigenvalues computed in float64 show them) and are set to zero silently; larger ones
    mean the matrix is not positive semi-definite, which raises.
    """
    scale = float(eigvals.abs().max())
    lowest = float(eigvals.min())
    if lowest < -rtol * scale:
        raise NtklabValueError(
            f"{name}: expected the eigenvalues of a positive semi-definite matrix (negatives "
            f"no larger than {rtol:g} * max |lambda| = {rtol * scale:.3g}, rounding), got a "
            f"minimum of {lowest:.6g}"
        )
    return eigvals.clamp(min=0.0)
