"""The optional ``dask`` extra: imported where used, with an error that names the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from ntklab.errors import NtklabError

__all__ = ["MissingExtraError", "require"]

_INSTALL = 'pip install "ntklab[dask]"'


class MissingExtraError(NtklabError, ImportError):
    """An optional dependency of ntklab is not installed."""


def require(module: str) -> ModuleType:
    """Import ``module`` (``"dask.array"``, ``"distributed"``, ``"zarr"``) or explain the fix.

    Raises
    ------
    MissingExtraError
        When the module is not installed; the message says ``pip install "ntklab[dask]"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module}: expected the optional dependency to be installed for ntklab.distributed, "
            f"but it could not be imported ({exc}); install it with {_INSTALL}"
        ) from exc
