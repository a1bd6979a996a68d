"""Linear algebra for kernel matrices: stable dense factorizations."""

from .dense import (
    Cholesky,
    Eigh,
    check_symmetric,
    cholesky_with_jitter,
    psd_eigh,
    symmetrize,
)

__all__ = [
    "Cholesky",
    "Eigh",
    "check_symmetric",
    "cholesky_with_jitter",
    "psd_eigh",
    "symmetrize",
]
