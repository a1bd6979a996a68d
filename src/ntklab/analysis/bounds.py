r"""Loss of a kernel (linear) model under full-batch gradient descent, and its bounds.

A model that is linear in its parameters with kernel (NTK) :math:`K` on the :math:`n`
training inputs, trained by full-batch GD with step :math:`\eta` on the squared loss, moves its
residual :math:`r = f - y` by a fixed linear map. With the ``normalization`` keyword used
throughout :mod:`ntklab.analysis`:

- ``"mean"`` (default, neural-tangents' ``predict``): :math:`L(f) = \frac{1}{2N}\sum (f-y)^2`
  with :math:`N` the number of entries of :math:`y` (:math:`N = nk` for :math:`k` outputs),
  and :math:`r_{t+1} = (I - \eta K / N)\, r_t`;
- ``"sum"``: :math:`L(f) = \frac12 \sum (f-y)^2` and :math:`r_{t+1} = (I - \eta K)\, r_t`.

Write :math:`s = \eta / N` (``"mean"``) or :math:`s = \eta` (``"sum"``) for the step acting on
:math:`K`. With :math:`K = \sum_i \lambda_i v_i v_i^\top` and :math:`e_i = \|v_i^\top
r_0\|^2` (summed over outputs) the loss after :math:`t` steps is exactly

.. math:: L_t = c_N \sum_i (1 - s\lambda_i)^{2t} e_i, \qquad c_N = \tfrac{1}{2N}
          \text{ or } \tfrac12,

(:func:`gd_loss_curve`). The trace bound of the paper "Label-NTK alignments and a tighter
convergence bound in the NTK regime" (claim D2) assumes residual alignment, :math:`e_i \propto
\lambda_i`, which turns the sum into a trace (:func:`trace_bound`); the classical bound keeps only
:math:`\lambda_{\min}` (:func:`lambda_min_bound`). The step :math:`1/\lambda_{\max}` is
``learning_rate = 1/lambda_max`` with ``normalization="sum"``, or ``learning_rate = N/lambda_max``
with ``"mean"`` (both :math:`s = 1/\lambda_{\max}`). Every curve is float64 and vectorized over the
times ``t`` (steps at ``learning_rate``, neural-tangents' units).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ntklab.errors import NtklabValueError

from ._validate import (
    Normalization,
    integer,
    nonnegative_number,
    positive_number,
    psd_floor,
    real_tensor,
    steps_tensor,
)
from ._validate import normalization as _check_normalization
from .alignment import _targets

__all__ = [
    "gd_loss_curve",
    "generalization_figure",
    "lambda_min_bound",
    "trace_bound",
]


def _eigvals(eigvals: object) -> Tensor:
    return real_tensor("eigvals", eigvals, (1,), shape_text="(n,)").detach().to(torch.float64)


def _step_on_kernel(learning_rate: object, n_entries: int, norm: Normalization) -> float:
    step = positive_number("learning_rate", learning_rate)
    return step / n_entries if norm == "mean" else step


def _n_entries(n_entries: object, n: int) -> int:
    if n_entries is None:
        return n
    count = integer("n_entries", n_entries, 1)
    if count % n != 0:
        raise NtklabValueError(
            f"n_entries: expected a multiple of the number of eigenvalues {n} (n inputs times k "
            f"outputs), got {count}"
        )
    return count


def _decay(values: Tensor, steps: Tensor, step: float) -> Tensor:
    """:math:`(1 - s\\lambda_i)^{2t}` for every step and eigenvalue, shape (T, n)."""
    factor = (1.0 - step * values).abs()  # an even power: the sign does not matter
    return factor[None, :].pow(2.0 * steps[:, None])


def gd_loss_curve(
    eigvals: Tensor,
    eigvecs: Tensor,
    r0: Tensor,
    t: int | Tensor | list[int],
    *,
    learning_rate: float,
    normalization: Normalization = "mean",
) -> Tensor:
    r"""Exact loss of a kernel (linear) model after ``t`` full-batch GD steps.

    .. math::

        L_t = \frac{1}{2N} \sum_i \Big(1 - \frac{\eta\lambda_i}{N}\Big)^{2t}
              \|v_i^\top r_0\|^2 \quad (\text{"mean"}), \qquad
        L_t = \frac12 \sum_i (1 - \eta\lambda_i)^{2t} \|v_i^\top r_0\|^2 \quad (\text{"sum"}),

    with :math:`N` = ``r0.numel()``. It equals running
    :math:`\theta_{t+1} = \theta_t - \eta \nabla L(\theta_t)` on :math:`f = X\theta` with
    :math:`K = XX^\top` (or on any model linearized around its initialization, with
    :math:`K` its NTK). GD diverges where :math:`s\lambda_{\max} > 2`; the formula then
    grows, as GD does.

    Parameters
    ----------
    eigvals : Tensor of shape (n,)
    eigvecs : Tensor of shape (n, n)
        A full orthonormal eigenbasis of :math:`K` (as :func:`kernel_eigh` returns).
    r0 : Tensor of shape (n,) or (n, k)
        Initial residual :math:`f_0 - y` (``-y`` when :math:`f_0 = 0`).
    t : int, sequence of ints or 1-D integer tensor
        Times in steps at ``learning_rate`` (neural-tangents' ``t``), :math:`t \ge 0`.
    learning_rate : float
        :math:`\eta > 0`.
    normalization : {"mean", "sum"}
        Loss normalization (see the module docstring).

    Returns
    -------
    Tensor of shape (T,)
        Float64 losses on ``eigvals``' device, one per time.

    Examples
    --------
    >>> vals = torch.tensor([2.0, 1.0], dtype=torch.float64)
    >>> vecs = torch.eye(2, dtype=torch.float64)
    >>> gd_loss_curve(vals, vecs, torch.tensor([1.0, 1.0]), [0, 1], learning_rate=0.5,
    ...               normalization="sum").tolist()
    [1.0, 0.125]
    """
    norm = _check_normalization(normalization)
    values = _eigvals(eigvals)
    vectors = real_tensor("eigvecs", eigvecs, (2,), shape_text="(n, n)")
    n = values.shape[0]
    if tuple(vectors.shape) != (n, n):
        raise NtklabValueError(
            f"eigvecs: expected a full eigenbasis of shape ({n}, {n}) to match eigvals, got "
            f"{tuple(vectors.shape)}"
        )
    residual = _targets("r0", r0, n).to(values.device)  # shape: (n, k)
    energies = (vectors.detach().to(values.device, torch.float64).T @ residual).square().sum(1)
    n_entries = int(residual.numel())
    step = _step_on_kernel(learning_rate, n_entries, norm)
    times = steps_tensor("t", t, values.device)
    scale = 1.0 / (2 * n_entries) if norm == "mean" else 0.5
    return scale * (_decay(values, times, step) @ energies)


def trace_bound(
    eigvals: Tensor,
    t: int | Tensor | list[int],
    *,
    learning_rate: float,
    loss0: float,
    n_entries: int | None = None,
    normalization: Normalization = "mean",
) -> Tensor:
    r"""Trace prediction of the loss, :math:`c\,\mathrm{tr}[(I - sK)^{2t} K]`, :math:`c` fixed
    at :math:`t = 0`.

    .. math::

        B_t = c\, \mathrm{tr}\big[(I - sK)^{2t} K\big]
            = L_0 \, \frac{\sum_i \lambda_i (1 - s\lambda_i)^{2t}}{\sum_i \lambda_i},
        \qquad c = \frac{L_0}{\mathrm{tr} K},

    with :math:`s = \eta/N` (``"mean"``) or :math:`s = \eta` (``"sum"``) the step acting on
    :math:`K`, the same as in :func:`gd_loss_curve`. Fixing :math:`c` by :math:`B_0 = L_0`
    makes :math:`B_t` independent of the overall scale of :math:`K` in the trace (only
    :math:`sK` matters). It is the exact loss when the residual is aligned,
    :math:`\|v_i^\top r_0\|^2 \propto \lambda_i` (condition 4.2 of "Label-NTK alignments
    and a tighter convergence bound in the NTK regime"; its Theorem 4.5 bounds the loss by a
    multiple of it). Rounding-level negative eigenvalues are set to 0.

    Parameters
    ----------
    eigvals : Tensor of shape (n,)
        Eigenvalues of the kernel on the training inputs (PSD; order irrelevant).
    t : int, sequence of ints or 1-D integer tensor
        Times in steps at ``learning_rate``, :math:`t \ge 0`.
    learning_rate : float
        :math:`\eta > 0`.
    loss0 : float
        :math:`L_0 \ge 0`, the loss at :math:`t = 0`.
    n_entries : int, optional
        :math:`N`, the number of entries of :math:`y` (``n * k``); default ``n`` (one
        output). Only used by ``"mean"``.
    normalization : {"mean", "sum"}

    Returns
    -------
    Tensor of shape (T,)
        Float64, on ``eigvals``' device.

    Examples
    --------
    >>> trace_bound(torch.tensor([2.0, 1.0]), [0, 1], learning_rate=0.5, loss0=3.0,
    ...             normalization="sum").tolist()
    [3.0, 0.25]
    """
    norm = _check_normalization(normalization)
    values = psd_floor("eigvals", _eigvals(eigvals))
    total = float(values.sum())
    if not total > 0:
        raise NtklabValueError("eigvals: expected a kernel with a positive trace, got 0")
    step = _step_on_kernel(learning_rate, _n_entries(n_entries, values.shape[0]), norm)
    start = nonnegative_number("loss0", loss0)
    times = steps_tensor("t", t, values.device)
    return start * (_decay(values, times, step) @ values) / total


def lambda_min_bound(
    eigvals: Tensor,
    t: int | Tensor | list[int],
    *,
    learning_rate: float,
    loss0: float,
    n_entries: int | None = None,
    normalization: Normalization = "mean",
) -> Tensor:
    r"""Classical bound from the smallest eigenvalue, :math:`(1 - s\lambda_{\min})^{2t} L_0`.

    .. math:: L_t \le (1 - s\lambda_{\min})^{2t} L_0 \quad \text{when }
              s(\lambda_{\max} + \lambda_{\min}) \le 2,

    with :math:`s` as in :func:`trace_bound`. A rounding-level negative :math:`\lambda_{\min}`
    is taken as 0 (then the bound stays at :math:`L_0`).

    Parameters
    ----------
    eigvals : Tensor of shape (n,)
    t : int, sequence of ints or 1-D integer tensor
        Times in steps at ``learning_rate``, :math:`t \ge 0`.
    learning_rate : float
        :math:`\eta > 0`.
    loss0 : float
    n_entries : int, optional
        :math:`N` for ``"mean"`` (default ``n``).
    normalization : {"mean", "sum"}

    Returns
    -------
    Tensor of shape (T,)
        Float64, on ``eigvals``' device.

    Examples
    --------
    >>> lambda_min_bound(torch.tensor([2.0, 1.0]), [0, 1], learning_rate=0.5, loss0=3.0,
    ...                  normalization="sum").tolist()
    [3.0, 0.75]
    """
    norm = _check_normalization(normalization)
    values = psd_floor("eigvals", _eigvals(eigvals))
    step = _step_on_kernel(learning_rate, _n_entries(n_entries, values.shape[0]), norm)
    start = nonnegative_number("loss0", loss0)
    times = steps_tensor("t", t, values.device)
    return start * _decay(values.min()[None], times, step)[:, 0]


def generalization_figure(kernel: Tensor) -> float:
    r"""The figure :math:`\mathrm{tr}(K)/n` of the generalization bound of the
    label-alignment paper, "Label-NTK alignments and a tighter convergence bound in the NTK regime".

    .. math:: \frac{\mathrm{tr} K}{n} = \frac1n \sum_{i=1}^n K(x_i, x_i) = \frac1n \sum_i
              \lambda_i .

    Parameters
    ----------
    kernel : Tensor of shape (n, n) or (n,)
        The kernel matrix on the training inputs, or its eigenvalues.

    Returns
    -------
    float

    Examples
    --------
    >>> generalization_figure(torch.tensor([[2.0, 1.0], [1.0, 4.0]]))
    3.0
    """
    matrix = real_tensor("kernel", kernel, (1, 2), shape_text="(n, n) or (n,)").detach()
    if matrix.ndim == 2:
        if matrix.shape[0] != matrix.shape[1]:
            raise NtklabValueError(
                f"kernel: expected a square matrix (n, n) or eigenvalues (n,), got shape "
                f"{tuple(matrix.shape)}"
            )
        return float(matrix.to(torch.float64).diagonal().sum()) / matrix.shape[0]
    return float(matrix.to(torch.float64).sum()) / matrix.shape[0]
