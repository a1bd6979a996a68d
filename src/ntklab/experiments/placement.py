"""Where and in which precision a run computes: ``--device`` and ``--dtype``.

:func:`resolve_device` checks a device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) against
the machine before anything runs; :func:`check_dtype` a precision name. An experiment says
which of its config fields ``--dtype`` sets (:attr:`~ntklab.experiments.Experiment.dtype_field`:
the precision of its networks or kernels, where float32 is meaningful) and whether its
``measure`` places its tensors on the run's device
(:attr:`~ntklab.experiments.Experiment.uses_device`); :func:`dtype_overrides` turns
``--dtype`` into the config override, or refuses it for an experiment whose precision is
fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ntklab.errors import NtklabValueError

if TYPE_CHECKING:
    import torch

    from .base import Experiment

__all__ = ["DTYPES", "check_dtype", "device_tag", "dtype_overrides", "resolve_device"]

#: The precisions ``--dtype`` accepts.
DTYPES: tuple[str, ...] = ("float32", "float64")
_DEVICE_TYPES = ("cpu", "cuda", "mps")
_DEVICE_NAME = "device (--device)"
_DTYPE_NAME = "dtype (--dtype)"


def resolve_device(device: object) -> torch.device:
    """The :class:`torch.device` named by ``device``, checked against this machine.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.

    Raises
    ------
    NtklabValueError
        A string that names no device, a device type other than cpu/cuda/mps, or a device
        this machine does not have (``torch.cuda.is_available()`` is False, or fewer GPUs
        than the index).

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    import torch

    if not isinstance(device, str | torch.device):
        raise NtklabValueError(
            f"{_DEVICE_NAME}: expected a device such as 'cpu', 'cuda' or 'cuda:1', got "
            f"{type(device).__name__} {device!r}"
        )
    try:
        dev = torch.device(device.strip() if isinstance(device, str) else device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in _DEVICE_TYPES:
        raise NtklabValueError(
            f"{_DEVICE_NAME}: expected 'cpu', 'cuda', 'cuda:N' or 'mps', got {str(device)!r}"
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise NtklabValueError(
                f"{_DEVICE_NAME}: {dev} is not available on this machine "
                "(torch.cuda.is_available() is False)"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise NtklabValueError(
                f"{_DEVICE_NAME}: {dev} is not available on this machine, which has {count} "
                f"CUDA device(s) (cuda:0 to cuda:{count - 1})"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise NtklabValueError(
            f"{_DEVICE_NAME}: mps is not available on this machine "
            "(torch.backends.mps.is_available() is False)"
        )
    if dev.type == "cpu" and dev.index is not None:
        dev = torch.device("cpu")
    return dev


def device_tag(device: torch.device) -> str:
    """``""`` for the CPU, else the device as it appears in a run folder's name
    (``"cuda"``, ``"cuda1"``): runs on another device are kept beside the CPU run."""
    if device.type == "cpu":
        return ""
    return device.type + ("" if device.index is None else str(device.index))


def check_dtype(dtype: object) -> str:
    """Return ``dtype`` if it is ``"float32"`` or ``"float64"``, else raise naming --dtype."""
    if dtype not in DTYPES:
        raise NtklabValueError(f"{_DTYPE_NAME}: expected 'float32' or 'float64', got {dtype!r}")
    return str(dtype)


def dtype_overrides(
    experiment: Experiment, dtype: str | None, overrides: Mapping[str, str]
) -> dict[str, str]:
    """``overrides`` with ``--dtype`` set on the experiment's :attr:`dtype_field`.

    Raises
    ------
    NtklabValueError
        An invalid precision; a ``--set`` of the same field to another value; ``--dtype`` for
        an experiment whose precision is fixed (no ``dtype_field``), unless it names that
        fixed precision.
    """
    out = dict(overrides)
    if dtype is None:
        return out
    dtype = check_dtype(dtype)
    field = experiment.dtype_field
    if field is None:
        if dtype == experiment.fixed_dtype:
            return out
        raise NtklabValueError(
            f"{_DTYPE_NAME}: experiment {experiment.name!r} computes in "
            f"{experiment.fixed_dtype} (a fixed precision that its figures need), got {dtype}"
        )
    if field in out and out[field] != dtype:
        raise NtklabValueError(
            f"{_DTYPE_NAME}: expected the same precision as --set {field}={out[field]}, got {dtype}"
        )
    out[field] = dtype
    return out
