"""The empirical NTK of a batch as a matrix-free linear operator.

:math:`\\Theta = J J^T` with :math:`J = \\partial f(x) / \\partial \\theta` the ``(n k, P)``
Jacobian of the ``n k`` outputs of a batch in the parameters. A product needs one
vector-Jacobian product and one Jacobian-vector product over the whole batch,

.. math:: \\Theta v = J \\, (J^T v),

so it costs about three forward passes (one forward, one backward, one forward with tangents)
and the memory of one backward pass: neither :math:`\\Theta` (``(n k)^2`` numbers) nor
:math:`J` (``n k P``) is ever formed. This is what iterative solvers (conjugate gradients for
kernel regression) and Krylov eigensolvers (top eigenpairs) need ("NTK-vector
products" in Novak, Sohl-Dickstein & Schoenholz, arXiv:2206.08720).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._forward_mode import FORWARD_MODE_LOCK
from ..errors import NtklabTypeError, NtklabValueError
from ..memory import resolve_max_memory
from ._functional import FunctionalModel, ParamSelection, check_batch, functional_model
from ._guards import check_modules, check_per_example

__all__ = ["NTKOperator", "ntk_operator"]

_Restore = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class NTKOperator:
    """The empirical NTK :math:`\\Theta` of one batch, as a symmetric ``(n k, n k)`` operator.

    Build it with :func:`ntk_operator`.

    Vectors are indexed by (input ``i``, output ``a``): a vector is a tensor of shape
    ``(n, k)`` or its row-major flattening ``(n k,)`` (entry ``i k + a``); for a
    single-output model (``k = 1``) that is simply ``(n,)``. As a matrix,

    .. math:: \\Theta[i k + a, j k + b] = \\langle \\partial_\\theta f_a(x_i),
              \\partial_\\theta f_b(x_j) \\rangle,

    the ``outputs="full"`` kernel ``(n, n, k, k)`` of :func:`ntklab.empirical.ntk` with its
    axes ordered ``(i, a, j, b)`` and flattened.

    Attributes
    ----------
    model : FunctionalModel
        The network as a function of the differentiated parameters.
    x : Tensor of shape (n, ...)
        The batch.
    n_outputs : int
        ``k``, the number of outputs per input.
    max_memory : int
        Approximate scratch budget in bytes for one block of :meth:`diagonal` and
        :meth:`to_dense` (products need only the memory of one backward pass). ``None``
        at construction means the policy of :mod:`ntklab.memory` on the batch's device,
        resolved then.
    """

    model: FunctionalModel
    x: Tensor
    n_outputs: int
    max_memory: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_memory", resolve_max_memory(self.max_memory, self.x.device))

    @property
    def _budget(self) -> int:
        assert self.max_memory is not None  # resolved in __post_init__
        return self.max_memory

    # ------------------------------------------------------------------ description
    @property
    def n_inputs(self) -> int:
        """``n``, the number of inputs in the batch."""
        return int(self.x.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """``(n k, n k)``."""
        size = self.n_inputs * self.n_outputs
        return (size, size)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's parameters (and of the vectors it acts on)."""
        return self.model.dtype

    @property
    def device(self) -> torch.device:
        return self.model.device

    def __repr__(self) -> str:
        return (
            f"NTKOperator(shape={self.shape}, n_inputs={self.n_inputs}, "
            f"n_outputs={self.n_outputs}, n_params={self.model.n_params}, dtype={self.dtype}, "
            f"device={self.device})"
        )

    # ------------------------------------------------------------------ products
    def matmul(self, v: Tensor) -> Tensor:
        """:math:`\\Theta v` for a vector or a block of vectors.

        Parameters
        ----------
        v : Tensor
            A vector of shape ``(n, k)`` or ``(n k,)``, or a block of ``m`` vectors of shape
            ``(n, k, m)`` or ``(n k, m)``, on the operator's dtype and device.

        Returns
        -------
        Tensor
            Of the shape of ``v``. A vector costs one ``vjp`` and one ``jvp`` over the whole
            batch; a block shares the forward pass of the ``vjp`` and vmaps both products
            over its ``m`` columns. Not differentiable.

        Raises
        ------
        NtklabTypeError
            ``v`` is not a tensor or not of the operator's dtype.
        NtklabValueError
            ``v`` has none of the shapes above or is on another device.
        """
        block, restore = self._as_block(v)
        if block.shape[0] == 0:
            return torch.zeros_like(v)
        return restore(_theta_block(self.model, self.x, block))

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matmul(v)

    def diagonal(self) -> Tensor:
        """The diagonal :math:`\\Theta[i, a, i, a] = \\| \\partial_\\theta f_a(x_i) \\|^2`.

        Per-example Jacobians ``(k, P)`` are formed for one chunk of examples at a time
        (``vmap`` of ``jacrev`` over the chunk, sized to ``max_memory``), reduced to their
        squared row norms, and discarded: memory ``O(chunk k P)``, never ``O(n k P)``.

        Returns
        -------
        Tensor of shape (n, k), or (n,) when k = 1
            Matching the vector layout of :meth:`matmul`.
        """
        fm, k = self.model, self.n_outputs
        per_example = k * fm.n_params * _itemsize(self.dtype) * 3  # jacobian + vjp scratch
        chunk = max(1, min(self.n_inputs, self._budget // max(per_example, 1)))

        def squared_norms(params: dict[str, Tensor], xi: Tensor) -> Tensor:  # shape: (k,)
            jac = torch.func.jacrev(fm.single)(params, xi)  # name -> (k, *shape)
            return sum(
                (torch.linalg.vector_norm(j.reshape(k, -1), dim=1).square() for j in jac.values()),
                torch.zeros(k, dtype=self.dtype, device=self.device),
            )

        with torch.no_grad():
            diag = torch.func.vmap(squared_norms, in_dims=(None, 0), chunk_size=chunk)(
                fm.params, self.x
            )  # shape: (n, k)
        return diag.reshape(-1) if k == 1 else diag

    def to_dense(self) -> Tensor:
        """The dense ``(n k, n k)`` matrix, by products with blocks of unit vectors.

        For tests and small batches only: it costs ``O((n k)^2)`` memory and ``n k``
        products (vmapped in blocks sized to ``max_memory``).

        Returns
        -------
        Tensor of shape (n k, n k)
            Entry ``[i k + a, j k + b]`` is :math:`\\Theta_{ab}(x_i, x_j)`.
        """
        size = self.shape[0]
        n, k = self.n_inputs, self.n_outputs
        per_vector = (self.model.n_params + size) * _itemsize(self.dtype) * 4
        block = max(1, min(size, self._budget // max(per_vector, 1)))
        dense = torch.empty(size, size, dtype=self.dtype, device=self.device)
        for start in range(0, size, block):
            stop = min(start + block, size)
            units = torch.zeros(stop - start, size, dtype=self.dtype, device=self.device)
            units[:, start:stop].fill_diagonal_(1.0)  # shape: (m, n k), unit vectors e_c
            cols = _theta_block(self.model, self.x, units.reshape(-1, n, k))  # shape: (m, n, k)
            dense[:, start:stop] = cols.reshape(stop - start, size).T
        return dense

    # ------------------------------------------------------------------ validation
    def _as_block(self, v: object) -> tuple[Tensor, _Restore]:
        """``v`` as a block ``(m, n, k)`` and the map back to ``v``'s layout."""
        n, k = self.n_inputs, self.n_outputs
        expected = (
            f"a vector of shape ({n}, {k}) or ({n * k},), or a block of m vectors of shape "
            f"({n}, {k}, m) or ({n * k}, m)"
        )
        if not isinstance(v, Tensor):
            raise NtklabTypeError(f"v: expected {expected}, got {type(v).__name__}")
        if v.dtype != self.dtype:
            raise NtklabTypeError(f"v: expected the operator's dtype {self.dtype}, got {v.dtype}")
        if v.device != self.device:
            raise NtklabValueError(
                f"v: expected the operator's device {self.device}, got {v.device}"
            )
        shape = tuple(v.shape)
        if shape == (n * k,) or shape == (n, k):
            return v.reshape(1, n, k), lambda out: out.reshape(shape)
        if v.ndim == 3 and shape[:2] == (n, k):
            return v.permute(2, 0, 1), lambda out: out.permute(1, 2, 0)
        if v.ndim == 2 and shape[0] == n * k:
            m = shape[1]
            return v.T.reshape(m, n, k), lambda out: out.reshape(m, n * k).T
        raise NtklabValueError(f"v: expected {expected}, got shape {shape}")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _theta_block(fm: FunctionalModel, x: Tensor, vs: Tensor) -> Tensor:
    """:math:`\\Theta v` for each of the ``m`` vectors ``vs`` of shape ``(m, n, k)``.

    One forward pass with its ``vjp`` closure, then the ``vjp`` (``J^T v``, a parameter-shaped
    dict) and the ``jvp`` (``J g``) vmapped over the block.
    """

    def f(params: dict[str, Tensor]) -> Tensor:  # shape: (n, k)
        return fm(params, x)

    def jvp(tangent: dict[str, Tensor]) -> Tensor:
        out: Tensor = torch.func.jvp(f, (fm.params,), (tangent,))[1]
        return out

    # torch.func transforms ignore an outer no_grad; it only stops recording for autograd;
    # forward-mode AD levels are process-wide in torch, hence the lock
    with torch.no_grad(), FORWARD_MODE_LOCK:
        vjp_fn = torch.func.vjp(f, fm.params)[1]
        if vs.shape[0] == 1:
            (g,) = vjp_fn(vs[0])  # J^T v: name -> (*shape)
            return jvp(g).unsqueeze(0)
        (gs,) = torch.func.vmap(vjp_fn)(vs)  # name -> (m, *shape)
        return torch.func.vmap(jvp)(gs)  # shape: (m, n, k)


def ntk_operator(
    model: nn.Module,
    x: Tensor,
    *,
    params: ParamSelection = None,
    max_memory: int | None = None,
) -> NTKOperator:
    """The empirical NTK of ``model`` on the batch ``x`` as a matrix-free operator.

    .. math:: \\Theta = J J^T, \\qquad J_{(i a), p} = \\partial f_a(x_i) / \\partial \\theta_p,
              \\qquad \\Theta v = J (J^T v).

    Parameters
    ----------
    model : nn.Module
        Any module whose forward is a function of its parameters and buffers (put BatchNorm in
        eval mode). It is not modified.
    x : Tensor of shape (n, ...)
        The batch, on the model's dtype and device.
    params : mapping of str to Tensor, iterable of str, or None
        The parameters to differentiate (default: all with ``requires_grad``); a mapping also
        gives their values.
    max_memory : int, optional
        Approximate scratch budget in bytes for one block of ``diagonal()`` and
        ``to_dense()``. Default ``None``: the policy of :mod:`ntklab.memory` (half of the
        memory this process may still use on ``x``'s device).

    Returns
    -------
    NTKOperator
        ``op @ v`` (``op.matmul(v)``), ``op.diagonal()``, ``op.shape == (n k, n k)``,
        ``op.dtype``, ``op.device``, ``op.n_outputs``, ``op.to_dense()``.

    Raises
    ------
    NtklabTypeError
        ``model`` is not a module; ``x`` is not a tensor or not of the model's dtype.
    NtklabValueError
        The model has no parameters; ``params`` names one it lacks; ``x`` is on another device
        or the model's forward rejects it; ``max_memory`` is not positive.

    Notes
    -----
    Use it when ``n k`` is too large for the dense kernel: a conjugate-gradient solve of
    :math:`\\Theta \\alpha = y` or a Lanczos run for the top eigenpairs needs only products,
    each about the cost of three forward passes over the batch (see
    ``benchmarks/bench_operator.py`` for the measured ratio to a forward plus a backward pass).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> op = ntk_operator(net, torch.randn(5, 3))
    >>> op.shape
    (10, 10)
    >>> (op @ torch.ones(5, 2)).shape
    torch.Size([5, 2])
    """
    if max_memory is not None:
        resolve_max_memory(max_memory)  # the type and sign, before any work
    fm = functional_model(model, params)
    check_modules(fm.module)
    x = check_batch("x", x, fm)
    check_per_example(fm, x)
    with torch.no_grad():
        k = int(fm(fm.params, x[:1]).shape[1])
    return NTKOperator(model=fm, x=x, n_outputs=k, max_memory=max_memory)
