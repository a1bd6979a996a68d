"""Top eigenpairs of a kernel operator beyond dense reach, and gradient flow from them.

- ``"lanczos"``: implicitly restarted Lanczos (ARPACK, via :func:`scipy.sparse.linalg.eigsh`)
  on the operator's products; accurate to ``tol``.
- ``"nystrom"``: the randomized Nystrom approximation with a stabilizing shift (Tropp, Yurtsever,
  Udell & Cevher, arXiv:1706.05736, Alg. 3) of a sketch with ``k + oversample`` Gaussian vectors,
  sharpened by a few subspace iterations (Halko, Martinsson & Tropp, arXiv:0909.4061).

:func:`flow_predict` turns the eigenpairs into gradient-flow (or GD) predictions at time ``t``
with the spectral filters of :class:`ntklab.dynamics.descent.Schedule`, truncated to the top-k
eigenspace (Jacot et al., arXiv:1806.07572).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from torch import Tensor

from .._checks import check_positive_int
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from .operator import KernelOperator, LinearOperator, as_operator

if TYPE_CHECKING:
    from ..dynamics.descent import Schedule

__all__ = ["EigenPairs", "flow_predict", "top_eigenpairs"]


@short_repr
@dataclass(frozen=True)
class EigenPairs:
    """Top-k eigenpairs :math:`K \\approx V \\operatorname{diag}(\\lambda) V^T`.

    Attributes
    ----------
    values : Tensor of shape (k,)
        Descending, clamped at 0.
    vectors : Tensor of shape (n, k)
        Orthonormal columns.
    method : str
    """

    values: Tensor
    vectors: Tensor
    method: str


def _lanczos(
    op: LinearOperator, k: int, tol: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    from scipy.sparse.linalg import LinearOperator as ScipyOperator
    from scipy.sparse.linalg import eigsh

    n = op.shape[0]

    def mv(v: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).to(op.device, op.dtype)
        out: np.ndarray = op.matmul(t).to(torch.float64).cpu().numpy()
        return out

    lin = ScipyOperator((n, n), matvec=mv, matmat=mv, dtype=np.float64)
    v0 = torch.randn(n, generator=generator, dtype=torch.float64).numpy()
    vals, vecs = eigsh(lin, k=k, which="LA", tol=tol, v0=v0)
    return torch.from_numpy(vals.copy()), torch.from_numpy(vecs.copy())


def _nystrom(
    op: LinearOperator, k: int, oversample: int, power: int, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    n = op.shape[0]
    r = min(n, k + oversample)
    omega = torch.randn(n, r, generator=generator, dtype=torch.float64)
    omega, _ = torch.linalg.qr(omega)
    for _ in range(power):  # subspace iteration sharpens a slowly decaying spectrum
        omega, _ = torch.linalg.qr(op.matmul(omega.to(op.device, op.dtype)).to(torch.float64).cpu())
    yk = op.matmul(omega.to(op.device, op.dtype)).to(torch.float64).cpu()  # shape: (n, r)
    nu = float(torch.finfo(torch.float64).eps) * float(torch.linalg.matrix_norm(yk)) * n**0.5
    y_nu = yk + nu * omega
    core = omega.T @ y_nu
    chol, info = torch.linalg.cholesky_ex(0.5 * (core + core.T))
    if int(info) != 0:  # rank-deficient sketch: a larger shift
        nu = max(nu, 1e-10 * float(torch.linalg.matrix_norm(yk)))
        y_nu = yk + nu * omega
        core = omega.T @ y_nu
        chol = torch.linalg.cholesky(0.5 * (core + core.T) + nu * torch.eye(r, dtype=core.dtype))
    b = torch.linalg.solve_triangular(chol, y_nu.T, upper=False).T  # B = Y C^{-T}
    u, s, _ = torch.linalg.svd(b, full_matrices=False)
    vals = (s.square() - nu).clamp_min(0.0)
    return vals[:k].flip(0), u[:, :k].flip(1)


def top_eigenpairs(
    operator: object,
    k: int,
    *,
    method: Literal["lanczos", "nystrom"] = "lanczos",
    tol: float = 1e-10,
    oversample: int = 20,
    power_iterations: int = 2,
    generator: torch.Generator | None = None,
) -> EigenPairs:
    """The ``k`` largest eigenvalues and their eigenvectors of a symmetric PSD operator.

    Parameters
    ----------
    operator : KernelOperator, NTKOperator, LinearOperator or Tensor of shape (n, n)
    k : int
        ``1 <= k < n`` for ``"lanczos"``, ``k <= n`` for ``"nystrom"``.
    method : {"lanczos", "nystrom"}
    tol : float
        ARPACK's relative accuracy (``"lanczos"``).
    oversample : int
        Extra sketch columns (``"nystrom"``).
    power_iterations : int
        Subspace iterations before the sketch (``"nystrom"``; each costs one block product).
    generator : torch.Generator, optional
        Start vector / sketch.

    Returns
    -------
    EigenPairs
        Values descending, on the operator's device and dtype.
    """
    op = as_operator("operator", operator)
    n = op.shape[0]
    check_positive_int("k", k)
    if method == "lanczos":
        if k >= n:
            raise NtklabValueError(f"k: expected k < n = {n} for method='lanczos', got {k}")
        vals, vecs = _lanczos(op, k, tol, generator)
    elif method == "nystrom":
        if k > n:
            raise NtklabValueError(f"k: expected k <= n = {n}, got {k}")
        check_positive_int("oversample", oversample)
        if (
            isinstance(power_iterations, bool)
            or not isinstance(power_iterations, int)
            or (power_iterations < 0)
        ):
            raise NtklabValueError(
                f"power_iterations: expected an int >= 0, got {power_iterations!r}"
            )
        vals, vecs = _nystrom(op, k, oversample, power_iterations, generator)
    else:
        raise NtklabValueError(f"method: expected 'lanczos' or 'nystrom', got {method!r}")
    order = torch.argsort(vals, descending=True)
    vals = vals[order].clamp_min(0.0)
    vecs = vecs[:, order]
    return EigenPairs(
        values=vals.to(op.device, op.dtype), vectors=vecs.to(op.device, op.dtype), method=method
    )


def flow_predict(
    eig: EigenPairs,
    y: Tensor,
    t: float | Tensor,
    schedule: Schedule,
    *,
    cross: KernelOperator | None = None,
) -> Tensor:
    """Predictions of gradient flow / GD from :math:`f_0 = 0` at times ``t``, on the top-k
    eigenspace.

    On the training points :math:`f_t = V \\operatorname{diag}(1 - D_t(\\lambda)) V^T y`; at new
    points :math:`f_t(x) = K(x, X) V \\operatorname{diag}((1 - D_t(\\lambda))/\\lambda) V^T y`,
    with :math:`D_t` the schedule's residual factor (:class:`~ntklab.dynamics.descent.Schedule`).

    Parameters
    ----------
    eig : EigenPairs
    y : Tensor of shape (n,) or (n, c)
    t : float or Tensor of shape (T,)
        Time(s) in steps at the schedule's ``learning_rate`` (the flow time is
        ``learning_rate * t``), as in :mod:`ntklab.dynamics`.
    schedule : Schedule
    cross : KernelOperator of shape (n_test, n), optional
        ``train_operator.cross(x_test)`` for test predictions.

    Returns
    -------
    Tensor of shape (T, n or n_test[, c])
    """
    from ..dynamics.descent import Schedule

    if not isinstance(schedule, Schedule):
        raise NtklabTypeError(f"schedule: expected a Schedule, got {type(schedule).__name__}")
    n = eig.vectors.shape[0]
    if not isinstance(y, Tensor) or y.ndim not in (1, 2) or y.shape[0] != n:
        raise NtklabValueError(f"y: expected a tensor of shape ({n},) or ({n}, c)")
    vector = y.ndim == 1
    y2 = y[:, None] if vector else y
    tt = torch.as_tensor(t, dtype=eig.values.dtype, device=eig.values.device).reshape(-1)
    schedule.check_times(tt)
    z = eig.vectors.T @ y2.to(eig.vectors.dtype)  # shape: (k, c)
    if cross is None:
        filt = 1.0 - schedule.residual(eig.values, tt)  # shape: (T, k)
        out = eig.vectors @ (filt[..., None] * z)  # shape: (T, n, c)
    else:
        filt = schedule.integrated(eig.values, tt)
        coef = eig.vectors @ (filt[..., None] * z)  # shape: (T, n, c)
        tn, _, c = coef.shape
        flat = coef.permute(1, 0, 2).reshape(n, tn * c)
        out = cross.matmul(flat).reshape(-1, tn, c).permute(1, 0, 2)
    return out[..., 0] if vector else out
