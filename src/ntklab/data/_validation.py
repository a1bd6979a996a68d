"""Argument checks shared by the data package (private)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ntklab.errors import NtklabTypeError, NtklabValueError

__all__ = [
    "as_angles",
    "check_float_dtype",
    "check_generator",
    "check_nonnegative_int",
    "check_real",
    "check_vector",
    "draw_normal",
]

# Largest number of elements one block of a (points x frequencies) product may hold.
BLOCK_ELEMENTS = 1 << 22


def check_generator(generator: object) -> torch.Generator:
    """Return ``generator`` if it is a ``torch.Generator``, else raise naming it."""
    if not isinstance(generator, torch.Generator):
        raise NtklabTypeError(
            f"generator: expected a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
            f"got {type(generator).__name__}"
        )
    return generator


def check_float_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it is a real floating torch dtype, else raise naming ``name``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise NtklabTypeError(
            f"{name}: expected a real floating torch dtype (torch.float32 or torch.float64), "
            f"got {dtype!r}"
        )
    return dtype


def check_nonnegative_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 0, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise NtklabTypeError(
            f"{name}: expected a non-negative int, got {type(value).__name__} {value!r}"
        )
    if value < 0:
        raise NtklabValueError(f"{name}: expected an int >= 0, got {value}")
    return value


def check_real(name: str, value: object, *, minimum: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite real number (``> minimum`` if given)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a real number, got {type(value).__name__}")
    if not math.isfinite(value) or (minimum is not None and not value > minimum):
        bound = f" > {minimum}" if minimum is not None else ""
        raise NtklabValueError(f"{name}: expected a finite real number{bound}, got {value!r}")
    return float(value)


def check_vector(name: str, value: object, *, length: int | None = None) -> Tensor:
    """Return ``value`` if it is a finite real floating 1-D tensor (of ``length`` if given)."""
    if not isinstance(value, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a real floating tensor, got dtype {value.dtype}")
    if value.ndim != 1 or (length is not None and value.shape[0] != length):
        shape = f"({length},)" if length is not None else "(n,)"
        raise NtklabValueError(
            f"{name}: expected a 1-D tensor of shape {shape}, got shape {tuple(value.shape)}"
        )
    if not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return value


def as_angles(name: str, x: object) -> Tensor:
    """Angles of shape (n,) from angles (n,) or points (n, 2) on S^1 (via ``atan2``)."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor of angles (n,) or points (n, 2), got "
            f"{type(x).__name__}"
        )
    if not x.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a real floating tensor, got dtype {x.dtype}")
    if x.ndim == 1:
        return x
    if x.ndim == 2 and x.shape[1] == 2:
        return torch.atan2(x[:, 1], x[:, 0])
    raise NtklabValueError(
        f"{name}: expected angles of shape (n,) or points on S^1 of shape (n, 2), got shape "
        f"{tuple(x.shape)}"
    )


def draw_normal(
    shape: tuple[int, ...],
    generator: torch.Generator,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> Tensor:
    """Standard normals drawn on the generator's device, then moved to ``device``."""
    out = torch.randn(shape, generator=generator, dtype=dtype, device=generator.device)
    return out.to(device=device)
