"""Lazy kernel operators: products, diagonals and blocks of a kernel matrix never stored whole.

A :class:`KernelOperator` is the matrix :math:`K(X_1, X_2)` of a kernel function between two
batches, evaluated tile by tile. Each kernel declares the scratch memory one tile needs
(:meth:`BlockKernel.block_bytes`); the operator sizes its tiles so that one tile fits
``max_memory`` bytes (default: the policy of :mod:`ntklab.memory`), and refuses a budget too
small for a single entry. Tiles are computed in ``block_dtype`` (float32 when asked, for
speed) while products are accumulated in float64.

The design follows the blocked kernels of Falkon (Meanti et al., arXiv:2006.10350), where each
kernel reports the memory of one block so that a sizer can respect a budget.

The solvers (:func:`ntklab.solvers.solve`, :func:`ntklab.solvers.top_eigenpairs`) accept any
object with ``shape``, ``dtype``, ``device``, ``matmul`` and ``diagonal`` (the
:class:`LinearOperator` protocol): a :class:`KernelOperator`, a :class:`DenseOperator`, or the
empirical :class:`~ntklab.empirical.operator.NTKOperator`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

from .._inputs import check_kernel_inputs
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from ..kernels.engine import block_bytes as image_block_bytes
from ..memory import resolve_max_memory

__all__ = [
    "ArchitectureKernel",
    "BlockKernel",
    "DenseOperator",
    "KernelOperator",
    "LinearOperator",
    "as_operator",
    "kernel_operator",
    "operator_columns",
]


@runtime_checkable
class LinearOperator(Protocol):
    """What the solvers need of a symmetric PSD operator of shape ``(n, n)``."""

    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def matmul(self, v: Tensor) -> Tensor: ...

    def diagonal(self) -> Tensor: ...


class BlockKernel(Protocol):
    """A kernel function evaluated on tiles, with the scratch bytes one tile needs."""

    def __call__(self, x1: Tensor, x2: Tensor | None) -> Tensor:
        """:math:`K(x_1, x_2)` of shape (n1, n2); ``x2=None`` means ``x1`` (exact diagonal)."""
        ...

    def block_bytes(self, n1: int, n2: int, d: int, dtype: torch.dtype) -> int:
        """Peak scratch bytes of one call on an ``(n1, d)`` and an ``(n2, d)`` batch."""
        ...


@dataclass(frozen=True)
class ArchitectureKernel:
    """The NTK or NNGP of an analytic architecture (:func:`ntklab.kernels.serial`) as a
    :class:`BlockKernel`.

    Parameters
    ----------
    arch : Architecture or Layer
        Anything with ``kernel(x1, x2) -> Kernel``.
    get : {"ntk", "nngp"}
    input_shape : tuple of int
        The shape ``(C, *S)`` of one image input, for the memory of an image tile (``()``:
        flat inputs).
    """

    arch: object
    get: Literal["ntk", "nngp"] = "ntk"
    input_shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not callable(getattr(self.arch, "kernel", None)):
            raise NtklabTypeError(
                "arch: expected an architecture with a kernel(x1, x2) method, got "
                f"{type(self.arch).__name__}"
            )
        if self.get not in ("ntk", "nngp"):
            raise NtklabValueError(f"get: expected 'ntk' or 'nngp', got {self.get!r}")

    def __call__(self, x1: Tensor, x2: Tensor | None) -> Tensor:
        k = self.arch.kernel(x1, x2)  # type: ignore[attr-defined]
        out: Tensor = k.ntk if self.get == "ntk" else k.nngp
        return out

    def block_bytes(self, n1: int, n2: int, d: int, dtype: torch.dtype) -> int:
        """Two result matrices (NNGP, NTK) and up to four temporaries of the recursion, plus
        the scaled inputs; for images, the spatial covariances of every pair as
        ``arch.kernel`` estimates them (:func:`ntklab.kernels.engine.block_bytes`)."""
        item = torch.empty((), dtype=dtype).element_size()
        flat = item * (6 * n1 * n2 + 2 * (n1 + n2) * d + 4 * (n1 + n2))
        if len(self.input_shape) < 2:
            return flat
        plan = getattr(self.arch, "plan", None)
        full = callable(plan) and plan().carry == "full"
        like = torch.empty((1, *self.input_shape), dtype=dtype, device="meta")
        return flat + image_block_bytes(like, n1, n2, full)


def _index(sel: Tensor | slice, n: int, device: torch.device) -> Tensor:
    if isinstance(sel, slice):
        return torch.arange(n, device=device)[sel]
    if not isinstance(sel, Tensor) or sel.dtype not in (torch.int64, torch.int32):
        raise NtklabTypeError(f"index: expected a slice or an integer tensor, got {sel!r}")
    if sel.ndim != 1:
        raise NtklabValueError(f"index: expected a 1-D integer tensor, got shape {sel.shape}")
    if sel.numel() and (int(sel.min()) < 0 or int(sel.max()) >= n):
        raise NtklabValueError(f"index: expected indices in [0, {n}), got {sel.tolist()[:5]}...")
    return sel.to(device=device, dtype=torch.int64)


def _as_columns(name: str, v: object, n: int, dtype: torch.dtype) -> tuple[Tensor, bool]:
    """``v`` as an ``(n, k)`` block; the flag says whether it was a vector."""
    if not isinstance(v, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor of shape ({n},) or ({n}, k)")
    if not v.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype, got {v.dtype}")
    if v.ndim not in (1, 2) or v.shape[0] != n:
        raise NtklabValueError(
            f"{name}: expected a tensor of shape ({n},) or ({n}, k), got {tuple(v.shape)}"
        )
    del dtype
    return (v[:, None], True) if v.ndim == 1 else (v, False)


@dataclass(frozen=True)
class KernelOperator:
    """The kernel matrix :math:`K(X_1, X_2)` as a lazy operator computed in tiles.

    Build it with :func:`kernel_operator`.

    Attributes
    ----------
    kernel : BlockKernel
    x1 : Tensor of shape (n1, d) or (n1, C, *S)
    x2 : Tensor of shape (n2, d) or (n2, C, *S), or None
        ``None``: the symmetric operator :math:`K(X_1, X_1)`.
    max_memory : int
        Scratch bytes one tile may use; ``None`` at construction means the policy of
        :mod:`ntklab.memory` on ``x1``'s device, resolved then.
    block_dtype : torch.dtype or None
        Dtype the tiles are computed in (default: that of ``x1``); products accumulate in
        float64 and are returned in ``x1``'s dtype.
    """

    kernel: BlockKernel
    x1: Tensor
    x2: Tensor | None = None
    max_memory: int | None = None
    block_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_memory", resolve_max_memory(self.max_memory, self.x1.device))
        self.tile_shape()  # raises when not even one entry fits the budget

    @property
    def _budget(self) -> int:
        assert self.max_memory is not None  # resolved in __post_init__
        return self.max_memory

    # ------------------------------------------------------------------ description
    @property
    def symmetric(self) -> bool:
        return self.x2 is None

    @property
    def shape(self) -> tuple[int, int]:
        n1 = int(self.x1.shape[0])
        return (n1, n1 if self.x2 is None else int(self.x2.shape[0]))

    @property
    def dtype(self) -> torch.dtype:
        return self.x1.dtype

    @property
    def device(self) -> torch.device:
        return self.x1.device

    @property
    def _bdtype(self) -> torch.dtype:
        return self.block_dtype if self.block_dtype is not None else self.x1.dtype

    def __repr__(self) -> str:
        return (
            f"KernelOperator(shape={self.shape}, kernel={type(self.kernel).__name__}, "
            f"block_dtype={self._bdtype}, max_memory={self.max_memory}, device={self.device})"
        )

    def tile_bytes(self, b1: int, b2: int) -> int:
        """Scratch bytes of one ``(b1, b2)`` tile and its product with a block of vectors."""
        d = int(self.x1[0].numel())
        item = torch.empty((), dtype=self._bdtype).element_size()
        # + the tile's product (b1, .) in float64 is accounted by the caller's vectors
        return int(self.kernel.block_bytes(b1, b2, d, self._bdtype)) + item * (b1 + b2) * d

    def tile_shape(self) -> tuple[int, int]:
        """The ``(b1, b2)`` tile that fits ``max_memory`` (square when symmetric).

        Raises
        ------
        NtklabValueError
            When not even a ``(1, 1)`` tile fits.
        """
        n1, n2 = self.shape
        need = self.tile_bytes(1, 1)
        if self._budget < need:
            raise NtklabValueError(
                f"max_memory: expected at least {need} bytes (one kernel entry of this kernel "
                f"on inputs of shape {tuple(self.x1.shape)}), got {self.max_memory}"
            )
        side = self._largest(lambda s: self.tile_bytes(s, s), max(n1, n2))
        if self.symmetric:
            b = min(n1, side)
            return (b, b)
        b1 = min(n1, side)
        return (b1, self._largest(lambda s: self.tile_bytes(b1, s), n2))

    def _largest(self, cost: Callable[[int], int], upper: int) -> int:
        """The largest ``s`` in ``[1, upper]`` with ``cost(s) <= max_memory`` (bisection;
        ``cost`` increases)."""
        lo, hi = 1, max(1, upper)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if cost(mid) <= self._budget:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # ------------------------------------------------------------------ tiles
    def _rows(self, idx: Tensor) -> Tensor:
        return self.x1.index_select(0, idx).to(self._bdtype)

    def _cols(self, idx: Tensor) -> Tensor:
        x2 = self.x1 if self.x2 is None else self.x2
        return x2.index_select(0, idx).to(self._bdtype)

    def _tile(self, i0: int, i1: int, j0: int, j1: int) -> Tensor:
        """K[i0:i1, j0:j1] in ``block_dtype``; a diagonal tile of a symmetric operator goes
        through the kernel's ``x2=None`` path (exact diagonal)."""
        a = self.x1[i0:i1].to(self._bdtype)
        if self.symmetric and i0 == j0 and i1 == j1:
            return self.kernel(a, None)
        x2 = self.x1 if self.x2 is None else self.x2
        return self.kernel(a, x2[j0:j1].to(self._bdtype))

    def block(self, rows: Tensor | slice, cols: Tensor | slice) -> Tensor:
        """The dense sub-matrix ``K[rows][:, cols]``, computed in tiles, in ``x1``'s dtype.

        Parameters
        ----------
        rows, cols : slice or 1-D integer Tensor
        """
        n1, n2 = self.shape
        ri = _index(rows, n1, self.device)
        ci = _index(cols, n2, self.device)
        b1, b2 = self.tile_shape()
        out = torch.empty(ri.numel(), ci.numel(), dtype=self.dtype, device=self.device)
        same = self.symmetric and ri.numel() == ci.numel() and bool((ri == ci).all())
        for i0 in range(0, ri.numel(), b1):
            i1 = min(ri.numel(), i0 + b1)
            xa = self._rows(ri[i0:i1])
            for j0 in range(0, ci.numel(), b2):
                j1 = min(ci.numel(), j0 + b2)
                if same and i0 == j0 and i1 == j1:
                    tile = self.kernel(xa, None)
                else:
                    tile = self.kernel(xa, self._cols(ci[j0:j1]))
                out[i0:i1, j0:j1] = tile
        return out

    def columns(self, idx: Tensor) -> Tensor:
        """``K[:, idx]`` of shape (n1, m)."""
        return self.block(slice(None), idx)

    def to_dense(self) -> Tensor:
        """The whole matrix (n1, n2)."""
        return self.block(slice(None), slice(None))

    # ------------------------------------------------------------------ products
    def matmul(self, v: Tensor) -> Tensor:
        """:math:`K v` for ``v`` of shape (n2,) or (n2, k), computed tile by tile.

        Each tile is computed in ``block_dtype`` and multiplied there; the sums over tiles are
        accumulated in float64. Returns ``x1``'s dtype, shape (n1,) or (n1, k).
        """
        n1, n2 = self.shape
        block, vector = _as_columns("v", v, n2, self.dtype)
        b1, b2 = self.tile_shape()
        out = torch.zeros(n1, block.shape[1], dtype=torch.float64, device=self.device)
        vb = block.to(device=self.device, dtype=self._bdtype)
        for i0 in range(0, n1, b1):
            i1 = min(n1, i0 + b1)
            for j0 in range(0, n2, b2):
                j1 = min(n2, j0 + b2)
                out[i0:i1] += (self._tile(i0, i1, j0, j1) @ vb[j0:j1]).to(torch.float64)
        res = out.to(self.dtype)
        return res[:, 0] if vector else res

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matmul(v)

    def diagonal(self) -> Tensor:
        """The diagonal :math:`K(x_i, x_i)` of a symmetric operator, shape (n,)."""
        if not self.symmetric:
            raise NtklabValueError("diagonal: expected a symmetric operator (x2=None), got x2")
        n = self.shape[0]
        b, _ = self.tile_shape()
        out = torch.empty(n, dtype=self.dtype, device=self.device)
        # diagonal tiles of side <= sqrt(budget) are cheap next to a product
        for i0 in range(0, n, b):
            i1 = min(n, i0 + b)
            out[i0:i1] = self.kernel(self.x1[i0:i1].to(self._bdtype), None).diagonal()
        return out

    def cross(self, x: Tensor) -> KernelOperator:
        """The rectangular operator :math:`K(x, X_1)` for predictions at new points ``x``."""
        _, a = check_kernel_inputs(self.kernel, self.x1, x, names=("x1", "x"))
        assert a is not None
        return KernelOperator(
            kernel=self.kernel,
            x1=a,
            x2=self.x1,
            max_memory=self.max_memory,
            block_dtype=self.block_dtype,
        )

    def subset(self, idx: Tensor) -> KernelOperator:
        """The symmetric operator on the rows ``idx`` of ``x1`` (e.g. Nystrom centres)."""
        i = _index(idx, self.shape[0], self.device)
        return KernelOperator(
            kernel=self.kernel,
            x1=self.x1.index_select(0, i),
            max_memory=self.max_memory,
            block_dtype=self.block_dtype,
        )


def kernel_operator(
    kernel: object,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    get: Literal["ntk", "nngp"] = "ntk",
    max_memory: int | None = None,
    block_dtype: torch.dtype | None = None,
) -> KernelOperator:
    """A lazy kernel matrix :math:`K(X_1, X_2)` computed in tiles that fit ``max_memory``.

    Parameters
    ----------
    kernel : Architecture, Layer or BlockKernel
        An analytic architecture (its ``get`` kernel is used) or any :class:`BlockKernel`.
    x1 : Tensor of shape (n1, d), or channels-first images (n1, C, *S)
        Whatever the architecture's ``kernel`` takes
        (:func:`ntklab._inputs.check_kernel_inputs`): images ``(n, C, H, W)`` or signals
        ``(n, C, L)`` for an architecture with Conv or pooling layers. Tiles are blocks of
        rows (the first axis).
    x2 : Tensor of shape (n2, ...) with the trailing shape of ``x1``, optional
        Default: the symmetric operator on ``x1``.
    get : {"ntk", "nngp"}
        For an architecture.
    max_memory : int, optional
        Bytes of scratch one tile may use. Default ``None``: the policy of
        :mod:`ntklab.memory` (half of the memory this process may still use on ``x1``'s
        device). Tiles are the largest that fit: larger tiles are faster.
    block_dtype : torch.dtype, optional
        Compute tiles in this dtype (e.g. ``torch.float32`` for float64 inputs).

    Returns
    -------
    KernelOperator

    Raises
    ------
    NtklabValueError
        ``max_memory`` is too small for one kernel entry, or the inputs are malformed.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.solvers import kernel_operator
    >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5))
    >>> op = kernel_operator(arch, torch.randn(50, 3, dtype=torch.float64), max_memory=2**16)
    >>> (op @ torch.ones(50, dtype=torch.float64)).shape
    torch.Size([50])
    """
    if max_memory is not None:
        resolve_max_memory(max_memory)  # the type and sign, before any work
    if block_dtype is not None and block_dtype not in (torch.float32, torch.float64):
        raise NtklabTypeError(f"block_dtype: expected float32, float64 or None, got {block_dtype}")
    bk: BlockKernel
    if callable(getattr(kernel, "block_bytes", None)) and callable(kernel):
        bk = kernel  # type: ignore[assignment]
        a, b = check_kernel_inputs(kernel, x1, x2)
    else:
        a, b = check_kernel_inputs(kernel, x1, x2)
        bk = ArchitectureKernel(kernel, get, tuple(a.shape[1:]) if a.ndim > 2 else ())
    return KernelOperator(kernel=bk, x1=a, x2=b, max_memory=max_memory, block_dtype=block_dtype)


@short_repr
@dataclass(frozen=True)
class DenseOperator:
    """A stored symmetric matrix behind the :class:`LinearOperator` interface."""

    matrix: Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.matrix.shape[0]), int(self.matrix.shape[1]))

    @property
    def dtype(self) -> torch.dtype:
        return self.matrix.dtype

    @property
    def device(self) -> torch.device:
        return self.matrix.device

    def matmul(self, v: Tensor) -> Tensor:
        return self.matrix @ v

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matmul(v)

    def diagonal(self) -> Tensor:
        return self.matrix.diagonal()

    def columns(self, idx: Tensor) -> Tensor:
        return self.matrix[:, idx]

    def to_dense(self) -> Tensor:
        return self.matrix


def as_operator(name: str, op: object) -> LinearOperator:
    """``op`` as a square :class:`LinearOperator` (a tensor is wrapped), else raise."""
    if isinstance(op, Tensor):
        from .dense import check_symmetric

        return DenseOperator(check_symmetric(name, op))
    if not isinstance(op, LinearOperator):
        raise NtklabTypeError(
            f"{name}: expected a kernel operator (shape, dtype, device, matmul, diagonal) or "
            f"a square tensor, got {type(op).__name__}"
        )
    if isinstance(op, KernelOperator) and not op.symmetric:
        raise NtklabValueError(f"{name}: expected a symmetric operator (x2=None), got K(x1, x2)")
    n1, n2 = op.shape
    if n1 != n2 or n1 == 0:
        raise NtklabValueError(f"{name}: expected a non-empty square operator, got {op.shape}")
    return op


def operator_columns(op: LinearOperator, idx: Tensor) -> Tensor:
    """``K[:, idx]`` of shape (n, m): the operator's own ``columns`` when it has one, else
    products with unit vectors."""
    cols = getattr(op, "columns", None)
    if callable(cols):
        out: Tensor = cols(idx)
        return out
    n = op.shape[0]
    e = torch.zeros(n, idx.numel(), dtype=op.dtype, device=op.device)
    e[idx, torch.arange(idx.numel(), device=op.device)] = 1.0
    return op.matmul(e)


def to_dense(op: LinearOperator) -> Tensor:
    """The dense matrix of ``op`` (its own ``to_dense`` when it has one)."""
    fn = getattr(op, "to_dense", None)
    if callable(fn):
        out: Tensor = fn()
        return out
    n = op.shape[0]
    return op.matmul(torch.eye(n, dtype=op.dtype, device=op.device))
