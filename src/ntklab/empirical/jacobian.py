"""Empirical NTK by Jacobian contraction and by NTK-vector products (``torch.func``).

.. math::

    \\Theta(x, x')_{ab} = \\sum_p \\frac{\\partial f_a(x)}{\\partial \\theta_p}
                          \\frac{\\partial f_b(x')}{\\partial \\theta_p}
                        = [J(x) J(x')^\\top]_{ab}

Two of the algorithms of Novak, Sohl-Dickstein and Schoenholz, "Fast Finite Width Neural
Tangent Kernel" (ICML 2022, arXiv:2206.08720), for any module whose forward is a function of
its parameters (:class:`~ntklab.empirical.FunctionalModel`).

- :func:`ntk_jacobian`, **Jacobian contraction**: per-example Jacobians (``vmap`` of
  ``jacrev``, in chunks of examples), kept per parameter tensor and contracted with one
  matrix product per tensor (never concatenated into one ``(n, k, P)`` matrix). The smaller
  side's Jacobian is stored, the other streamed. Wins when ``k P`` per example is moderate:
  the contraction is dense matrix algebra and the traced/diagonal kernels need only
  ``2 n1 n2 k P`` flops.
- :func:`ntk_vp`, **NTK-vector products**: :math:`\\Theta v = J(x_1) (J(x_2)^\\top v)`. For a
  chunk of ``x2`` examples the cotangents ``e_{j,b}`` are pulled back with ``vjp`` (``jacrev``,
  vmapped), giving the rows :math:`J(x_2)^\\top e_{j,b}`, which are pushed through ``x1``
  with ``jvp`` (vmapped over the rows): the Jacobian of ``x1`` is never formed, and at most
  ``chunk_size * k`` rows of ``x2``'s exist at a time. Its memory does not grow with ``n1 P``,
  so it wins for huge parameter counts with few inputs and outputs per chunk, and for the
  full kernel with many outputs (``2 n1 n2 k F`` flops, F the forward cost, against
  ``2 n1 n2 k^2 P`` for the contraction). Trace and diagonal cost as much as full.

Cost models (documented on each function) feed :func:`ntklab.empirical.plan`:
with ``P`` differentiated parameters, ``k`` outputs, ``F`` forward flops and ``A`` saved
activations per example (:func:`probe`), ``s`` bytes per element and ``e`` result entries per
pair of inputs (1 for trace, ``k`` for diagonal, ``k^2`` for full).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import jacrev, jvp, vmap
from torch.utils.flop_counter import FlopCounterMode

from .._checks import check_positive_int
from .._forward_mode import FORWARD_MODE_LOCK
from ..errors import NtklabValueError
from ._functional import FunctionalModel, Outputs, check_batch
from ._guards import check_modules

__all__ = [
    "CHUNK_BYTES",
    "Probe",
    "jacobian_flops",
    "jacobian_peak_bytes",
    "ntk_jacobian",
    "ntk_vp",
    "ntk_vp_flops",
    "ntk_vp_peak_bytes",
    "probe",
]

#: Scratch memory (bytes) that one chunk may take when ``chunk_size`` is not given.
CHUNK_BYTES = 512 * 2**20

_OUTPUTS = ("trace", "full", "diagonal")
_BLOCK = 256  # rows of a symmetric contraction block: large enough for efficient products
# bookkeeping of autograd, vmap and the allocator: measured within 1.5 % + 0.1 MiB of the model
_MARGIN, _OVERHEAD = 1.02, 2**18
Rows = list[Tensor]  # per parameter tensor, shape: (c, k, P_p)


# ---------------------------------------------------------------------------------------------
# Cost models
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What one example costs, measured by one forward pass (:func:`probe`).

    Attributes
    ----------
    n_outputs : int
        ``k``, the outputs per example.
    activations : int
        ``A``, elements autograd saves for the backward pass (parameters excluded).
    forward_flops : float
        ``F``, flops of the matrix products and convolutions of the forward pass.
    """

    n_outputs: int
    activations: int
    forward_flops: float


def probe(fm: FunctionalModel, x: Tensor) -> Probe:
    """Measure the outputs, saved activations and forward flops of one example ``x[:1]``.

    Parameters
    ----------
    fm : FunctionalModel
    x : Tensor of shape (n, ...)
        A batch of inputs; only the first is run.

    Returns
    -------
    Probe
    """
    params = {n: p.detach().requires_grad_() for n, p in fm.params.items()}
    known = {t.untyped_storage().data_ptr() for t in (*fm.params.values(), *fm.frozen.values())}
    saved = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal saved
        if t.untyped_storage().data_ptr() not in known:
            saved += t.numel()
        return t

    counter = FlopCounterMode(display=False)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, _identity), counter:
        out = fm(params, x[:1])
    return Probe(int(out.shape[1]), saved, float(counter.get_total_flops()))


def _identity(t: Tensor) -> Tensor:
    return t


def _itemsize(fm: FunctionalModel) -> int:
    return torch.empty((), dtype=fm.dtype).element_size()


def _entries(outputs: Outputs, k: int) -> int:
    """Result entries per pair of inputs."""
    return {"trace": 1, "full": k * k, "diagonal": k}[outputs]


def _with_margin(nbytes: int) -> int:
    return math.ceil(nbytes * _MARGIN) + _OVERHEAD


def _default_chunk(n: int, row_bytes: int) -> int:
    """Examples per chunk: as many as fit :data:`CHUNK_BYTES`, at least 1, at most ``n``."""
    return max(1, min(n, CHUNK_BYTES // max(row_bytes, 1)))


def _jacobian_chunks(
    fm: FunctionalModel, m: int, big: int, k: int, activations: int, chunk_size: int | None
) -> tuple[int, int]:
    """Chunk sizes of :func:`ntk_jacobian`: (stored side of ``m``, streamed side of ``big``).

    The stored Jacobian is kept whole anyway, so the stored side is computed in one piece
    (no copy into a buffer) unless its activation scratch exceeds :data:`CHUNK_BYTES`; the
    streamed side in chunks of at most :data:`CHUNK_BYTES`.
    """
    if chunk_size is not None:
        return min(m, chunk_size), min(big, chunk_size)
    s = _itemsize(fm)
    row = _jacobian_row(fm, k, activations) * s
    scratch = m * 2 * (k + 1) * activations * s
    stored = m if scratch <= CHUNK_BYTES else _default_chunk(m, row)
    return stored, _default_chunk(big, row)


def _jacobian_row(fm: FunctionalModel, k: int, activations: int) -> int:
    """Elements one example takes in a Jacobian chunk: its rows ``k P``, its saved
    activations ``A``, their gradients for the ``k`` outputs ``k A``, and as much again for
    the backward pass's scratch (unfolded convolution inputs, ...)."""
    return k * fm.n_params + 2 * (k + 1) * activations


def _vp_row(fm: FunctionalModel, n1: int, k: int, activations: int) -> int:
    """Elements one ``x2`` example takes in an NTK-vector-product chunk: its Jacobian rows
    and their computation, the ``k n1`` tangents of ``x1``'s activations and the outputs."""
    return _jacobian_row(fm, k, activations) + k * n1 * (activations + 2 * k)


def jacobian_peak_bytes(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    chunk_size: int | None = None,
    activations: int = 0,
) -> int:
    """Upper bound of the memory :func:`ntk_jacobian` allocates, result included.

    .. math::

        1.02\\, s\\, [m k P + \\max(S, c (k P + 2 (k + 1) A) + b m e) + n_1 n_2 e]
        + 256\\,\\mathrm{KiB}

    with ``m = min(n1, n2)`` examples whose Jacobian is stored, computed ``c_s`` at a time
    with scratch :math:`S = c_s (2 (k + 1) A + [c_s < m]\\, k P)` (the buffer filled from
    chunks), then ``c`` examples of the other side at a time (``chunk_size``, by default as
    many as fit :data:`CHUNK_BYTES`) with one contraction block of
    ``b = min(max(n1, n2), max(c, 256))`` rows; and the result.

    Parameters
    ----------
    fm : FunctionalModel
    n1, n2 : int
        Batch sizes.
    k : int
        Outputs per example.
    outputs : {"trace", "full", "diagonal"}
    chunk_size : int, optional
        As passed to :func:`ntk_jacobian`.
    activations : int
        ``A`` of :func:`probe`. With 0 (unknown) the bound leaves out activation memory,
        which matters when activations outweigh parameters (convolutional nets).
    """
    m, big = min(n1, n2), max(n1, n2)
    kp = k * fm.n_params
    c_stored, c = _jacobian_chunks(fm, m, big, k, activations, chunk_size)
    stored_scratch = c_stored * (2 * (k + 1) * activations + (kp if c_stored < m else 0))
    e = _entries(outputs, k)
    streamed_scratch = c * _jacobian_row(fm, k, activations) + min(big, max(c, _BLOCK)) * m * e
    elements = m * kp + max(stored_scratch, streamed_scratch) + n1 * n2 * e
    return _with_margin(elements * _itemsize(fm))


def ntk_vp_peak_bytes(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    chunk_size: int | None = None,
    activations: int = 0,
) -> int:
    """Upper bound of the memory :func:`ntk_vp` allocates, result included.

    .. math::

        1.02\\, s\\, [c (k P + 2 (k + 1) A) + n_1 A + c k n_1 (A + 2 k) + n_1 n_2 e]
        + 256\\,\\mathrm{KiB}

    for a chunk of ``c`` examples of ``x2`` (``chunk_size``, by default as many as fit
    :data:`CHUNK_BYTES`): their ``c k`` Jacobian rows, the forward pass of ``x1`` with its
    ``c k`` tangents, the pushed-forward outputs and the result. Nothing grows with
    ``n1 P``.

    Parameters
    ----------
    fm : FunctionalModel
    n1, n2 : int
        Batch sizes.
    k : int
        Outputs per example.
    outputs : {"trace", "full", "diagonal"}
    chunk_size : int, optional
        As passed to :func:`ntk_vp`.
    activations : int
        ``A`` of :func:`probe` (0 when unknown).
    """
    row = _vp_row(fm, n1, k, activations)
    c = min(n2, chunk_size or _default_chunk(n2, row * _itemsize(fm)))
    elements = c * row + n1 * activations + n1 * n2 * _entries(outputs, k)
    return _with_margin(elements * _itemsize(fm))


def jacobian_flops(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    forward_flops: float | None = None,
) -> float:
    """Rough flop count of :func:`ntk_jacobian`.

    .. math::

        (n_1 + n_2)(1 + 2k) F + 2 n_1 n_2 k P \\quad (\\times k \\text{ for full})

    a forward and ``k`` backward passes (each about ``2 F``) per example, then the
    contraction. ``F`` defaults to ``2 P`` (a multiply-add per parameter: exact for dense
    layers, low for convolutions, which reuse their weights; see :func:`probe`).
    """
    p = fm.n_params
    f = 2.0 * p if forward_flops is None else forward_flops
    contraction = 2.0 * n1 * n2 * p * (k * k if outputs == "full" else k)
    return (n1 + n2) * (1 + 2 * k) * f + contraction


def ntk_vp_flops(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    *,
    forward_flops: float | None = None,
) -> float:
    """Rough flop count of :func:`ntk_vp`, the same for every ``outputs``.

    .. math::

        n_2 (1 + 2k) F + n_1 F + 2 n_1 n_2 k F

    the Jacobian rows of ``x2``, the forward pass of ``x1``, and one tangent pass (about
    ``2 F``) of ``x1`` per row. ``F`` defaults to ``2 P`` (see :func:`jacobian_flops`).
    """
    f = 2.0 * fm.n_params if forward_flops is None else forward_flops
    return n2 * (1 + 2 * k) * f + n1 * f + 2.0 * n1 * n2 * k * f


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


def _check_args(
    fm: FunctionalModel, x1: object, x2: object, outputs: object, chunk_size: object
) -> tuple[Tensor, Tensor | None]:
    if outputs not in _OUTPUTS:
        raise NtklabValueError(f"outputs: expected one of {_OUTPUTS}, got {outputs!r}")
    if chunk_size is not None:
        check_positive_int("chunk_size", chunk_size)
    check_modules(fm.module)
    a = check_batch("x1", x1, fm)
    if x2 is None:
        return a, None
    b = check_batch("x2", x2, fm)
    if a.shape[1:] != b.shape[1:]:
        raise NtklabValueError(
            f"x2: expected inputs of the shape of x1's, {tuple(a.shape[1:])}, got "
            f"{tuple(b.shape[1:])}"
        )
    return a, b


def _empty(fm: FunctionalModel, n1: int, n2: int, k: int, outputs: Outputs) -> Tensor:
    tail = {"trace": (), "full": (k, k), "diagonal": (k,)}[outputs]
    return torch.empty((n1, n2, *tail), dtype=fm.dtype, device=fm.device)


def _swap(block: Tensor, outputs: Outputs) -> Tensor:
    """The block of the swapped arguments: :math:`\\Theta(x', x)_{ba} = \\Theta(x, x')_{ab}`."""
    t = block.transpose(0, 1)
    return t.transpose(2, 3) if outputs == "full" else t


def _chunks(n: int, size: int) -> Iterator[slice]:
    return (slice(s, min(s + size, n)) for s in range(0, n, size))


def _jacobian_rows(fm: FunctionalModel) -> Callable[[Tensor], Rows]:
    """``x (c, ...) -> [J_p (c, k, P_p)]``: per-example Jacobians, one per parameter tensor."""
    per_batch = vmap(jacrev(fm.single), in_dims=(None, 0))

    def rows(x: Tensor) -> Rows:
        jac: dict[str, Tensor] = per_batch(fm.params, x)
        return [j.reshape(j.shape[0], j.shape[1], -1) for j in jac.values()]

    return rows


# ---------------------------------------------------------------------------------------------
# Jacobian contraction
# ---------------------------------------------------------------------------------------------


def _contract(rows1: Rows, rows2: Rows, outputs: Outputs) -> Tensor:
    """One block :math:`\\sum_p J_{1,p} J_{2,p}^\\top`, reduced as ``outputs`` asks.

    Parameters
    ----------
    rows1, rows2 : list of Tensor of shapes (c1, k, P_p), (c2, k, P_p)

    Returns
    -------
    Tensor of shape (c1, c2), (c1, c2, k, k) or (c1, c2, k)
        Trace: one product over the flattened ``(k P_p)`` axis, divided by ``k``. Full: one
        product of ``(c1 k, P_p)`` by ``(P_p, c2 k)``. Diagonal: ``k`` batched products.
    """
    c1, k = rows1[0].shape[:2]
    c2 = rows2[0].shape[0]
    pairs = zip(rows1, rows2, strict=True)
    if outputs == "diagonal":  # shape: (k, c1, c2)
        acc = torch.zeros((k, c1, c2), dtype=rows1[0].dtype, device=rows1[0].device)
        for a, b in pairs:
            acc.baddbmm_(a.transpose(0, 1), b.permute(1, 2, 0))
        return acc.permute(1, 2, 0)
    m1, m2 = (c1, c2) if outputs == "trace" else (c1 * k, c2 * k)
    acc = torch.zeros((m1, m2), dtype=rows1[0].dtype, device=rows1[0].device)
    for a, b in pairs:
        acc.addmm_(a.reshape(m1, -1), b.reshape(m2, -1).T)
    if outputs == "trace":
        return acc.div_(k)
    return acc.view(c1, k, c2, k).permute(0, 2, 1, 3)


def _stored_rows(fm: FunctionalModel, x: Tensor, size: int) -> Rows:
    """Per-example Jacobians of all of ``x`` (n, ...), computed ``size`` examples at a time
    into one ``(n, k, P_p)`` buffer per parameter tensor (no concatenation)."""
    rows = _jacobian_rows(fm)
    n = x.shape[0]
    if size >= n:
        return rows(x)
    buffers: Rows = []
    for span in _chunks(n, size):
        part = rows(x[span])
        if not buffers:
            buffers = [torch.empty((n, *j.shape[1:]), dtype=j.dtype, device=j.device) for j in part]
        for buffer, j in zip(buffers, part, strict=True):
            buffer[span] = j
    return buffers


def _symmetric(stored: Rows, out: Tensor, outputs: Outputs) -> None:
    """Fill ``out`` with :math:`J J^\\top`: one product per parameter tensor when ``n`` is at
    most :data:`_BLOCK`, else the blocks on and above the diagonal, mirrored."""
    n = stored[0].shape[0]
    for i in range(0, n, _BLOCK):
        rows_i = slice(i, min(i + _BLOCK, n))
        for j in range(i, n, _BLOCK):
            cols = slice(j, min(j + _BLOCK, n))
            block = _contract([r[rows_i] for r in stored], [r[cols] for r in stored], outputs)
            out[rows_i, cols] = block
            if j > i:
                out[cols, rows_i] = _swap(block, outputs)


def ntk_jacobian(
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None = None,
    outputs: Outputs = "trace",
    *,
    chunk_size: int | None = None,
) -> Tensor:
    """Empirical NTK by Jacobian contraction.

    .. math::

        \\Theta(x_i, x'_j)_{ab} = \\sum_{p} J_p(x_i)_{a} \\cdot J_p(x'_j)_{b}

    summed over parameter tensors ``p``, each :math:`J_p` the per-example Jacobian from
    ``vmap(jacrev(f))`` on chunks of ``chunk_size`` examples. The Jacobian of the smaller
    batch is stored (one buffer per parameter tensor), the other batch is streamed chunk by
    chunk, each chunk contracted with the whole stored Jacobian. For ``x2=None`` the
    Jacobian of ``x1`` is computed once and contracted with itself, in blocks of 256 rows on
    and above the diagonal (mirrored) when ``n1 > 256``. Memory and flops:
    :func:`jacobian_peak_bytes`, :func:`jacobian_flops`.

    Parameters
    ----------
    fm : FunctionalModel
        The model as a function of the differentiated parameters.
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1``.
    outputs : {"trace", "full", "diagonal"}
        neural-tangents' conventions: trace is the mean over outputs of
        :math:`\\Theta_{aa}`, shape (n1, n2); full (n1, n2, k, k); diagonal (n1, n2, k).
    chunk_size : int, optional
        Examples per vmapped Jacobian. Default: the stored batch in one piece unless its
        activation scratch exceeds :data:`CHUNK_BYTES`, the streamed batch in chunks of at
        most :data:`CHUNK_BYTES`.

    Returns
    -------
    Tensor of shape (n1, n2), (n1, n2, k, k) or (n1, n2, k)
        In the model's dtype and on its device (differentiable in the inputs).

    Examples
    --------
    >>> import torch
    >>> from ntklab.empirical import functional_model
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> ntk_jacobian(functional_model(net), torch.randn(4, 3), outputs="full").shape
    torch.Size([4, 4, 2, 2])
    """
    a, b = _check_args(fm, x1, x2, outputs, chunk_size)
    info = probe(fm, a)
    k = info.n_outputs
    n1 = a.shape[0]
    n2 = n1 if b is None else b.shape[0]
    stored_size, size = _jacobian_chunks(
        fm, min(n1, n2), max(n1, n2), k, info.activations, chunk_size
    )
    out = _empty(fm, n1, n2, k, outputs)
    if b is None:
        _symmetric(_stored_rows(fm, a, stored_size), out, outputs)
        return out
    # the smaller batch's Jacobian is stored, the other batch streamed chunk by chunk
    swapped = n2 > n1
    stored, streamed = (a, b) if swapped else (b, a)
    kept = _stored_rows(fm, stored, stored_size)
    rows = _jacobian_rows(fm)
    for span in _chunks(streamed.shape[0], size):
        block = _contract(rows(streamed[span]), kept, outputs)  # shape: (c, stored, ...)
        if swapped:
            out[:, span] = _swap(block, outputs)
        else:
            out[span] = block
        del block
    return out


# ---------------------------------------------------------------------------------------------
# NTK-vector products
# ---------------------------------------------------------------------------------------------


def _vp_block(fm: FunctionalModel, x: Tensor, rows2: Rows, k: int, outputs: Outputs) -> Tensor:
    """The block :math:`J(x) J_2^\\top` of rows ``rows2`` (c, k, P_p) of a chunk of ``x2``:
    each of the ``c k`` rows is a tangent pushed through ``x`` (r, ...) with ``jvp``, vmapped
    over the rows (the primal pass runs once). Returns the ``(r, c, ...)`` result block."""
    tangents = {  # shape: (c k, *p.shape)
        name: j.reshape(-1, *p.shape) for (name, p), j in zip(fm.params.items(), rows2, strict=True)
    }

    def push(tangent: dict[str, Tensor]) -> Tensor:
        out: Tensor = jvp(lambda p: fm(p, x), (fm.params,), (tangent,))[1]
        return out

    with FORWARD_MODE_LOCK:  # forward-mode AD levels are process-wide in torch
        pushed: Tensor = vmap(push)(tangents)  # shape: (c k, r, k)
    return _select(pushed.view(rows2[0].shape[0], k, x.shape[0], k), outputs)


def _select(block: Tensor, outputs: Outputs) -> Tensor:
    """From ``block[j, b, i, a]`` (c, k, r, k) = :math:`\\Theta(x_i, x'_j)_{ab}` to the
    ``(r, c, ...)`` result block."""
    if outputs == "full":
        return block.permute(2, 0, 3, 1)
    diagonal = block.diagonal(dim1=1, dim2=3)  # shape: (c, r, k)
    if outputs == "diagonal":
        return diagonal.transpose(0, 1)
    return diagonal.mean(-1).T


def ntk_vp(
    fm: FunctionalModel,
    x1: Tensor,
    x2: Tensor | None = None,
    outputs: Outputs = "trace",
    *,
    chunk_size: int | None = None,
) -> Tensor:
    """Empirical NTK by NTK-vector products, never forming the Jacobian of ``x1``.

    .. math::

        \\Theta(\\cdot, x'_j)_{\\cdot b} = J(x_1)\\, \\big(J(x'_j)^\\top e_b\\big)

    For a chunk of ``chunk_size`` examples of ``x2``, the rows :math:`J(x'_j)^\\top e_b` come
    from ``vjp`` vmapped over the cotangents ``e_b`` and the examples (``vmap(jacrev)``),
    and each is pushed through all of ``x1`` with ``jvp`` (vmapped over the rows). For
    ``x2=None`` a chunk of columns is pushed only through the rows up to its end and the
    rest is mirrored, which halves the work when there are several chunks. Trace and
    diagonal are read off the full block (same cost). Memory and flops:
    :func:`ntk_vp_peak_bytes`, :func:`ntk_vp_flops`.

    Parameters
    ----------
    fm : FunctionalModel
        The model as a function of the differentiated parameters.
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1``.
    outputs : {"trace", "full", "diagonal"}
        As in :func:`ntk_jacobian`.
    chunk_size : int, optional
        Examples of ``x2`` per step (``chunk_size * k`` rows pushed together; default: as
        many as fit :data:`CHUNK_BYTES`).

    Returns
    -------
    Tensor of shape (n1, n2), (n1, n2, k, k) or (n1, n2, k)
        In the model's dtype and on its device (differentiable in the inputs).

    Examples
    --------
    >>> import torch
    >>> from ntklab.empirical import functional_model
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> x = torch.randn(4, 3)
    >>> fm = functional_model(net)
    >>> torch.allclose(ntk_vp(fm, x), ntk_jacobian(fm, x), atol=1e-5)
    True
    """
    a, b = _check_args(fm, x1, x2, outputs, chunk_size)
    info = probe(fm, a)
    k = info.n_outputs
    cols = a if b is None else b
    n1, n2 = a.shape[0], cols.shape[0]
    row = _vp_row(fm, n1, k, info.activations) * _itemsize(fm)
    size = chunk_size or _default_chunk(n2, row)
    rows = _jacobian_rows(fm)
    out = _empty(fm, n1, n2, k, outputs)
    for span in _chunks(n2, size):
        # symmetric: rows below the chunk's end only; the rest is mirrored from earlier chunks
        r = n1 if b is not None else span.stop
        block = _vp_block(fm, a[:r], rows(cols[span]), k, outputs)
        out[:r, span] = block
        if b is None and span.start > 0:
            out[span, : span.start] = _swap(block[: span.start], outputs)
    return out
