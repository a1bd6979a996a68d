"""One memory policy for every function that may allocate :math:`O(n^2)` bytes or more.

Kernel matrices grow with the square of the number of inputs (:math:`n = 20{,}000` inputs
and ten outputs make a 160 GB ``outputs="full"`` empirical NTK in float32), so every such
function of ntklab takes ``max_memory``, the bytes one call may allocate, and plans its
blocks (or refuses, with an error naming the bytes it needs) within it. They share one
default, ``max_memory=None``, which means *the policy*:

.. math::

    \\texttt{max\\_memory} = f \\cdot \\min\\bigl(\\text{cgroup limit} - \\text{cgroup usage},\\;
    \\texttt{MemAvailable},\\; \\text{free device memory (CUDA)}\\bigr),
    \\qquad f = \\texttt{DEFAULT\\_FRACTION} = 0.5,

read at the time of the call:

- the cgroup limits of this process, version 1 (``memory.limit_in_bytes`` minus
  ``memory.usage_in_bytes``) and version 2 (``memory.max`` minus ``memory.current``), of
  the cgroup named in ``/proc/self/cgroup`` and of each of its ancestors (a container's or
  a batch job's memory limit, which ``MemAvailable`` does not see);
- ``MemAvailable`` of ``/proc/meminfo`` (what the kernel can give without swapping);
- on a CUDA device, the free memory ``torch.cuda.mem_get_info`` reports.

The smallest of those that can be read is the memory *available*
(:func:`available_memory`); where none can be read (not Linux), the physical memory the OS
reports, else :data:`FALLBACK_MEMORY`. Half of it leaves room for what the caller already
holds and for the allocator's fragmentation. A positive ``int`` passed as ``max_memory``
replaces the policy (:func:`resolve_max_memory` validates it); it may exceed what is
available (then an allocation may fail inside torch).
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import torch

from .errors import NtklabTypeError, NtklabValueError

__all__ = [
    "DEFAULT_FRACTION",
    "FALLBACK_MEMORY",
    "available_memory",
    "cgroup_available",
    "default_max_memory",
    "format_bytes",
    "meminfo_available",
    "resolve_max_memory",
]

#: Fraction of the available memory that ``max_memory=None`` grants one call.
DEFAULT_FRACTION = 0.5

#: Bytes taken as available when no limit can be read (1 GiB).
FALLBACK_MEMORY = 2**30

# Where the limits are read; module attributes so that tests can point them at fake files.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
PROC_MEMINFO = Path("/proc/meminfo")

# cgroup v1 writes "no limit" as a huge page-aligned number (2**63 - 4096 on x86-64)
_UNLIMITED = 2**60


def _read_bytes(path: Path) -> int | None:
    """The integer in a one-value cgroup file; ``None`` when absent, unreadable, ``max``
    (cgroup v2's "no limit") or implausibly large (cgroup v1's "no limit")."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        value = int(text.split()[0])
    except ValueError:
        return None
    return value if 0 <= value < _UNLIMITED else None


def _own_cgroup_paths() -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in v1's memory hierarchy."""
    v2: str | None = None
    v1: str | None = None
    try:
        lines = PROC_SELF_CGROUP.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _ancestors(root: Path, path: str | None) -> list[Path]:
    """``root`` and the folders of ``path`` below it, outermost first."""
    dirs = [root]
    if path:
        current = root
        for part in Path(path).parts:
            if part in ("/", "", ".", ".."):
                continue
            current = current / part
            dirs.append(current)
    return dirs


def cgroup_available() -> int | None:
    """Bytes left under the tightest cgroup memory limit of this process, or ``None``.

    For each cgroup from the root of the mounted hierarchy down to this process's (as named
    in ``/proc/self/cgroup``), version 2's ``memory.max - memory.current`` and version 1's
    ``memory.limit_in_bytes - memory.usage_in_bytes``; unlimited ones are skipped.

    Returns
    -------
    int or None
        The smallest remainder (at least 0), or ``None`` when no limit is set or readable.
    """
    v2_path, v1_path = _own_cgroup_paths()
    candidates = [(d, "memory.max", "memory.current") for d in _ancestors(CGROUP_ROOT, v2_path)]
    candidates += [
        (d, "memory.limit_in_bytes", "memory.usage_in_bytes")
        for d in _ancestors(CGROUP_ROOT / "memory", v1_path)
    ]
    best: int | None = None
    for folder, limit_name, usage_name in candidates:
        limit = _read_bytes(folder / limit_name)
        if limit is None:
            continue
        usage = _read_bytes(folder / usage_name) or 0
        left = max(0, limit - usage)
        best = left if best is None else min(best, left)
    return best


def meminfo_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or ``None`` when it cannot be read."""
    try:
        with PROC_MEMINFO.open() as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    fields = line.split()
                    scale = 1024 if len(fields) > 2 and fields[2].lower() == "kb" else 1
                    return int(fields[1]) * scale
    except (OSError, ValueError, IndexError):
        return None
    return None


def _os_memory() -> int | None:
    """Physical memory the OS reports: available pages where known, else all pages."""
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            pages = os.sysconf(name)
            size = os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
        if pages > 0 and size > 0:
            return int(pages * size)
    return None


def _as_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cpu")
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        return torch.device(device)
    raise NtklabTypeError(f"device: expected a torch.device, a str or None, got {device!r}")


def available_memory(device: torch.device | str | None = None) -> int:
    """Bytes this process may still allocate on ``device``: the smallest of what it can read.

    Parameters
    ----------
    device : torch.device or str, optional
        Where the allocation goes (default CPU). For a CUDA device the device's free memory
        (``torch.cuda.mem_get_info``) is one more bound.

    Returns
    -------
    int
        The minimum of :func:`cgroup_available`, :func:`meminfo_available` and, on CUDA, the
        device's free memory; where none can be read, the OS's physical memory, else
        :data:`FALLBACK_MEMORY`.

    Examples
    --------
    >>> from ntklab.memory import available_memory
    >>> available_memory() > 0
    True
    """
    dev = _as_device(device)
    bounds = [b for b in (cgroup_available(), meminfo_available()) if b is not None]
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        bounds.append(int(free))
    if not bounds:
        bounds.append(_os_memory() or FALLBACK_MEMORY)
    return min(bounds)


def default_max_memory(device: torch.device | str | None = None) -> int:
    """The policy: :data:`DEFAULT_FRACTION` of :func:`available_memory`, at least 1 byte.

    Parameters
    ----------
    device : torch.device or str, optional

    Returns
    -------
    int
    """
    return max(1, int(DEFAULT_FRACTION * available_memory(device)))


def resolve_max_memory(
    max_memory: object, device: torch.device | str | None = None, *, name: str = "max_memory"
) -> int:
    """``max_memory`` validated, or the policy (:func:`default_max_memory`) for ``None``.

    Parameters
    ----------
    max_memory : int or None
        Bytes; a positive int (not a bool).
    device : torch.device or str, optional
        For the policy.
    name : str
        The argument's name in error messages.

    Returns
    -------
    int

    Raises
    ------
    NtklabTypeError
        Not an int (floats such as ``1.5e9`` included: write ``2**30`` or ``int(1.5e9)``).
    NtklabValueError
        Not positive.
    """
    if max_memory is None:
        return default_max_memory(device)
    if isinstance(max_memory, bool) or not isinstance(max_memory, numbers.Integral):
        raise NtklabTypeError(
            f"{name}: expected an int (bytes) or None (the memory policy), got {max_memory!r}"
        )
    value = int(max_memory)
    if value < 1:
        raise NtklabValueError(f"{name}: expected a positive number of bytes, got {value}")
    return value


def format_bytes(n: float) -> str:
    """``n`` bytes in a short human form, e.g. ``"1.5 GiB"``.

    Examples
    --------
    >>> format_bytes(3 * 2**29)
    '1.5 GiB'
    """
    value = float(n)
    units = ("B", "KiB", "MiB", "GiB")
    for unit in units:
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
