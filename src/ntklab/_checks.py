"""Validation of arguments at public boundaries.

Every check raises :class:`~ntklab.errors.NtklabValueError` or
:class:`~ntklab.errors.NtklabTypeError` with a message that names the argument, what was
expected and what was received.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .errors import NtklabTypeError, NtklabValueError

__all__ = ["check_inputs", "check_nonnegative", "check_positive_int"]


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a tensor of shape {tuple(x.shape)}, dtype {x.dtype}, device {x.device}"
    return f"{type(x).__name__} {x!r}"


def check_matrix(name: str, x: object) -> Tensor:
    """Return ``x`` if it is a finite floating 2-D tensor, else raise naming ``name``."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor of shape (n, d), got {_describe(x)}"
        )
    if x.ndim != 2:
        raise NtklabValueError(
            f"{name}: expected a 2-D tensor of shape (n, d), got {x.ndim}-D shape {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype (float32/float64), got {x.dtype}")
    if x.shape[1] == 0:
        raise NtklabValueError(f"{name}: expected at least one feature, got shape {tuple(x.shape)}")
    if x.is_meta:
        raise NtklabValueError(f"{name}: expected a tensor with data, got a meta tensor")
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return x


def check_inputs(x1: object, x2: object | None) -> tuple[Tensor, Tensor | None]:
    """Validate a pair of input batches ``x1`` (n1, d) and ``x2`` (n2, d) or None."""
    a = check_matrix("x1", x1)
    if x2 is None:
        return a, None
    b = check_matrix("x2", x2)
    if a.shape[1] != b.shape[1]:
        raise NtklabValueError(
            f"x2: expected the feature dimension of x1 ({a.shape[1]}), got shape {tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise NtklabTypeError(f"x2: expected the dtype of x1 ({a.dtype}), got {b.dtype}")
    if a.device != b.device:
        raise NtklabValueError(f"x2: expected the device of x1 ({a.device}), got {b.device}")
    return a, b


def check_nonnegative(name: str, value: float | Tensor) -> None:
    """Raise unless ``value`` (a number or tensor) is finite and >= 0."""
    if isinstance(value, Tensor):
        if not value.is_floating_point():
            raise NtklabTypeError(f"{name}: expected a float or floating tensor, got {value.dtype}")
        ok = bool(torch.isfinite(value).all()) and bool((value >= 0).all())
        shown: object = value.detach().cpu().tolist()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        ok = math.isfinite(value) and value >= 0
        shown = value
    else:
        raise NtklabTypeError(f"{name}: expected a non-negative float, got {_describe(value)}")
    if not ok:
        raise NtklabValueError(f"{name}: expected a finite value >= 0, got {shown}")


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise NtklabTypeError(f"{name}: expected a positive int, got {_describe(value)}")
    if value < 1:
        raise NtklabValueError(f"{name}: expected an int >= 1, got {value}")
    return value
