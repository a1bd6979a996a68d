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

__all__ = [
    "check_channels_first",
    "check_inputs",
    "check_matrix",
    "check_nonnegative",
    "check_positive_int",
    "check_precision",
]

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_CHANNELS_LAST_SIZES = (1, 3)


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a tensor of shape {tuple(x.shape)}, dtype {x.dtype}, device {x.device}"
    return f"{type(x).__name__} {x!r}"


def check_precision(name: str, x: Tensor) -> Tensor:
    """Return ``x`` if its dtype is float32 or float64, else raise naming ``name``.

    Kernel computations refuse half precision: float16 and bfloat16 carry 11 and 8 significant
    bits, and a depth-100 ReLU NTK computed in bfloat16 is about 80% off its float64 value
    (Frobenius norm; float16: about 40%), while float32 stays within 1e-4.
    """
    if not x.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype (float32/float64), got {x.dtype}")
    if x.dtype in _HALF_DTYPES:
        raise NtklabTypeError(
            f"{name}: expected float32 or float64, got {x.dtype}: kernels in half precision "
            f"lose most of their digits (a deep ReLU NTK in bfloat16 is ~80% off); convert "
            f"with {name}.float() or {name}.double()"
        )
    return x


def check_channels_first(name: str, x: Tensor) -> Tensor:
    """Return ``x`` unless it looks like a channels-last image batch, else raise.

    ntklab's image batches are channels-first, torch's ``(n, C, H, W)`` and ``(n, C, L)``.
    A batch is taken for channels-last (neural-tangents' and TensorFlow's ``(n, H, W, C)``,
    ``(n, L, C)``) when its last axis has 1 or 3 entries (grey or RGB) while every other
    non-batch axis has more than 4: ``(n, 28, 28, 1)``, ``(n, 32, 32, 3)``, ``(n, 100, 1)``.
    Read as channels-first such a batch would silently convolve over its width with the
    image rows as channels.
    """
    inner = x.shape[1:-1]
    if x.ndim in (3, 4) and x.shape[-1] in _CHANNELS_LAST_SIZES and min(inner) > 4:
        order = "(0, 3, 1, 2)" if x.ndim == 4 else "(0, 2, 1)"
        want = "(n, C, H, W)" if x.ndim == 4 else "(n, C, L)"
        raise NtklabValueError(
            f"{name}: expected a channels-first batch {want}, got shape {tuple(x.shape)}, "
            f"which looks channels-last (last axis of size {x.shape[-1]}, the axes before it "
            f"larger than 4); permute it with {name}.permute{order}"
        )
    return x


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
    check_precision(name, x)
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
