"""One-line representations of ntklab's data containers and results.

A frozen dataclass holding tensors prints, by default, every tensor in full: a data set or a
training history runs to hundreds of lines. :func:`short_repr` replaces the generated
``__repr__`` with one line that names each field and summarizes tensors and arrays by shape
and dtype, mappings and sequences by their length, and nested containers the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
from torch import Tensor, nn

__all__ = ["short_repr", "summarize"]

_T = TypeVar("_T", bound=type)
_MAX_TEXT = 60
_MAX_ITEMS = 4


def summarize(value: object, depth: int = 0) -> str:
    """A short, one-line description of ``value``: ``Tensor(3, 2) float64`` for a tensor."""
    if isinstance(value, Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        device = "" if value.device.type == "cpu" else f" {value.device}"
        if value.ndim == 0 and value.numel() == 1 and value.device.type != "meta":
            return f"tensor({value.item():.6g}, {dtype}{device})"
        return f"Tensor{tuple(value.shape)} {dtype}{device}"
    if isinstance(value, np.ndarray):
        return f"ndarray{value.shape} {value.dtype}"
    if isinstance(value, nn.Module):
        return f"{type(value).__name__}(...)"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if depth >= 2:
            return f"{type(value).__name__}(...)"
        if type(value).__repr__ is _dataclass_repr:
            return _dataclass_repr(value, depth + 1)
        return summarize(repr(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        if len(value) > _MAX_ITEMS or (depth >= 2 and value):
            return f"{{{len(value)} entries}}"
        inner = ", ".join(f"{k!r}: {summarize(v, depth + 1)}" for k, v in value.items())
        return f"{{{inner}}}"
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        if len(value) > _MAX_ITEMS:
            return f"{type(value).__name__} of {len(value)}"
        inner = ", ".join(summarize(v, depth + 1) for v in value)
        return (
            f"[{inner}]"
            if isinstance(value, list)
            else f"({inner}{',' if len(value) == 1 else ''})"
        )
    text = repr(value)
    if "\n" in text or len(text) > _MAX_TEXT:
        text = text.split("\n", 1)[0][: _MAX_TEXT - 3] + "..."
    return text


def _dataclass_repr(self: Any, depth: int = 0) -> str:
    parts = [
        f"{f.name}={summarize(getattr(self, f.name), depth + 1)}"
        for f in dataclasses.fields(self)
        if f.repr and not f.name.startswith("_")
    ]
    return f"{type(self).__name__}({', '.join(parts)})"


def short_repr(cls: _T) -> _T:
    """Class decorator: give a dataclass the one-line ``__repr__`` of this module.

    Apply it above ``@dataclass`` (which would otherwise write its own ``__repr__``).

    Examples
    --------
    >>> @short_repr
    ... @dataclasses.dataclass(frozen=True)
    ... class Fit:
    ...     x: Tensor
    ...     slope: float
    >>> Fit(torch.zeros(300, 2, dtype=torch.float64), 1 / 3)
    Fit(x=Tensor(300, 2) float64, slope=0.333333)
    """
    cls.__repr__ = _dataclass_repr  # type: ignore[assignment]
    return cls
