r"""Streaming the empirical NTK block by block into a preallocated result.

An ``(n1, n2)`` kernel (with ``k x k`` or ``k`` output entries per pair for ``"full"`` and
``"diagonal"``) is filled in blocks of input pairs: block ``(I, J)`` is one call of a method
on the rows ``x1[I]`` and ``x2[J]``, written into its place of the result, so the scratch
memory is that of one block whatever ``n1 n2`` is. For the symmetric kernel (``x2`` None)
the blocks are square and only those on and above the diagonal are computed; each block
above it is mirrored below,

.. math:: \Theta(x_j, x_i)_{ba} = \Theta(x_i, x_j)_{ab},

which halves the work. After each block an optional ``progress(fraction, message)`` callback
receives the fraction of the result's entries written so far (a mirrored block counts
twice): it increases and ends at exactly 1.0. Library code never prints; a caller may print
or draw a progress bar from the callback.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import NtklabTypeError, NtklabValueError
from ._functional import FunctionalModel, Outputs

__all__ = [
    "Progress",
    "check_block_size",
    "check_out",
    "check_progress",
    "fill_blocks",
    "result_shape",
]

#: ``progress(fraction, message)``: the fraction (0 to 1) of the result written so far.
Progress = Callable[[float, str], None]


def result_shape(n1: int, n2: int, k: int, outputs: Outputs) -> tuple[int, ...]:
    """``(n1, n2)`` for trace, ``(n1, n2, k, k)`` for full, ``(n1, n2, k)`` for diagonal."""
    tail = {"trace": (), "full": (k, k), "diagonal": (k,)}[outputs]
    return (n1, n2, *tail)


def check_progress(progress: object) -> Progress | None:
    """``progress`` if it is None or callable, else an :class:`NtklabTypeError`."""
    if progress is not None and not callable(progress):
        raise NtklabTypeError(
            f"progress: expected None or a callable progress(fraction, message), got "
            f"{type(progress).__name__}"
        )
    return progress


def check_out(
    out: object, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> Tensor:
    """Validate a preallocated result: a tensor of exactly ``shape``, ``dtype``, ``device``.

    Raises
    ------
    NtklabTypeError
        ``out`` is not a tensor or has another dtype.
    NtklabValueError
        Another shape or device.
    """
    if not isinstance(out, Tensor):
        raise NtklabTypeError(f"out: expected a torch.Tensor of shape {shape}, got {type(out)}")
    if out.dtype != dtype:
        raise NtklabTypeError(f"out: expected the model's dtype {dtype}, got {out.dtype}")
    if tuple(out.shape) != shape:
        raise NtklabValueError(f"out: expected the result's shape {shape}, got {tuple(out.shape)}")
    if out.device != device:
        raise NtklabValueError(f"out: expected the model's device {device}, got {out.device}")
    return out


def _swap(block: Tensor, outputs: Outputs) -> Tensor:
    """The block of the swapped arguments (the mirror of a symmetric kernel's block)."""
    t = block.transpose(0, 1)
    return t.transpose(2, 3) if outputs == "full" else t


def fill_blocks(
    compute: Callable[[FunctionalModel, Tensor, Tensor | None, Outputs], Tensor],
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None,
    outputs: Outputs,
    out: Tensor,
    block1: int,
    block2: int,
    progress: Progress | None = None,
    *,
    rectangular: bool = False,
) -> Tensor:
    """Fill ``out`` with the kernel of ``x1`` and ``x2``, one block of input pairs at a time.

    Parameters
    ----------
    compute : callable
        ``compute(fm, rows, cols, outputs)`` returns the block of the kernel between the
        inputs ``rows`` and ``cols`` (``cols`` None: between ``rows`` and themselves).
    fm : FunctionalModel
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...) or None
        None: the symmetric kernel of ``x1``; square blocks of
        ``min(block1, block2)`` inputs, only those on and above the diagonal computed, the
        others mirrored. With ``rectangular``: row blocks of ``block1`` inputs, each with its
        square diagonal block and the blocks of ``block2`` columns to its right (a method
        that keeps a row block's work between calls, :func:`.structured.reusing_rows`, then
        repeats less of it with few wide row blocks).
    outputs : {"trace", "full", "diagonal"}
    out : Tensor of shape (n1, n2, ...)
        The preallocated result (see :func:`result_shape`), filled in place.
    block1, block2 : int
        Rows (inputs of ``x1``) and columns (inputs of ``x2``) of a block, at least 1; the
        last block of each side is ragged.
    progress : callable, optional
        ``progress(fraction, message)`` after each block: the fraction of ``out``'s entries
        written so far (monotone, exactly 1.0 after the last block).
    rectangular : bool
        See ``x2``.

    Returns
    -------
    Tensor
        ``out``.
    """
    n1 = x1.shape[0]
    n2 = n1 if x2 is None else x2.shape[0]
    total = n1 * n2
    done = 0
    if x2 is None:  # square blocks so that the diagonal ones are symmetric
        step = block1 if rectangular else min(block1, block2)
        across = block2 if rectangular else step
        starts = range(0, n1, step)
        count = sum(1 + -(-max(n1 - i - step, 0) // across) for i in starts)
        index = 0
        for i in starts:
            rows = slice(i, min(i + step, n1))
            xi = x1[rows]
            for j in [i, *range(rows.stop, n1, across)]:
                cols = slice(j, min(j + (step if j == i else across), n1))
                if j == i:
                    block = compute(fm, xi, None, outputs)
                    out[rows, cols] = block
                else:
                    block = compute(fm, xi, x1[cols], outputs)
                    out[rows, cols] = block
                    out[cols, rows] = _swap(block, outputs)
                del block
                index += 1
                size = (rows.stop - rows.start) * (cols.stop - cols.start)
                done += size if j == i else 2 * size
                if progress is not None:
                    fraction = 1.0 if index == count else done / total
                    progress(
                        fraction,
                        f"block {index}/{count}: inputs {rows.start}-{rows.stop} x "
                        f"{cols.start}-{cols.stop} of {n1} (upper triangle, mirrored)",
                    )
        return out
    count = -(-n1 // block1) * -(-n2 // block2)
    index = 0
    for i in range(0, n1, block1):
        rows = slice(i, min(i + block1, n1))
        xi = x1[rows]  # one tensor per row block (see .structured.reusing_rows)
        for j in range(0, n2, block2):
            cols = slice(j, min(j + block2, n2))
            out[rows, cols] = compute(fm, xi, x2[cols], outputs)
            index += 1
            done += (rows.stop - rows.start) * (cols.stop - cols.start)
            if progress is not None:
                fraction = 1.0 if index == count else done / total
                progress(
                    fraction,
                    f"block {index}/{count}: inputs {rows.start}-{rows.stop} of {n1} x "
                    f"{cols.start}-{cols.stop} of {n2}",
                )
    return out


def check_block_size(block_size: object) -> int | None:
    """``block_size`` if None or a positive int, else an error naming it."""
    if block_size is None:
        return None
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise NtklabTypeError(f"block_size: expected a positive int or None, got {block_size!r}")
    if block_size < 1:
        raise NtklabValueError(f"block_size: expected a positive int or None, got {block_size}")
    return block_size
