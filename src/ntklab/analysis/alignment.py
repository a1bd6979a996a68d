r"""Label-NTK and residual-NTK alignment: eigenpairs, projections, binned log-log slopes.

The paper "Label-NTK alignments and a tighter convergence bound in the NTK regime"
(claim D1) reports that the squared projections of the
labels on the NTK's eigenvectors scale as a power of the eigenvalues,

.. math::

    (v_i^\top y)^2 \sim \lambda_i^{2}, \qquad (v_i^\top r_0)^2 \sim \lambda_i,

with :math:`r_0 = f_0 - y` the initial residual. This module computes the pieces: the
eigenpairs of a kernel matrix in float64 (:func:`kernel_eigh`), the projections
(:func:`projections`, summed over output columns), their log-binned averages
(:func:`log_binned`), the binned log-log slope over a stated eigenvalue range with a bootstrap
interval (:func:`alignment_slope`), the share of :math:`\|y\|^2` on the top eigenvectors
(:func:`top_energy_share`), and a permuted-label control (:func:`permuted_projections`).

Eigenvalues, eigenvectors and energies are float64 on the input's device; the fits are float64
numpy and their figures Python floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ntklab.errors import NtklabValueError

from .._repr import short_repr
from ._validate import (
    integer,
    positive_number,
    probability,
    real_number,
    real_tensor,
    square_matrix,
)
from .rates import _generator, fit_power_law

__all__ = [
    "AlignmentSlope",
    "KernelEigh",
    "LogBins",
    "alignment_slope",
    "kernel_eigh",
    "log_binned",
    "permuted_projections",
    "projections",
    "top_energy_share",
]

_BOOTSTRAP_BLOCK_ELEMENTS = 1 << 22


class KernelEigh(NamedTuple):
    """Eigenpairs of a symmetric kernel matrix, largest eigenvalue first (float64).

    Attributes
    ----------
    eigenvalues : Tensor of shape (n,)
        :math:`\\lambda_1 \\ge \\dots \\ge \\lambda_n`.
    eigenvectors : Tensor of shape (n, n)
        Column ``i`` is the unit eigenvector :math:`v_i` of ``eigenvalues[i]``.
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


def kernel_eigh(kernel: Tensor, *, symmetry_rtol: float | None = None) -> KernelEigh:
    r"""Eigendecomposition :math:`K = \sum_i \lambda_i v_i v_i^\top` in float64, descending.

    The input is checked to be symmetric, :math:`\max|K - K^\top| \le \text{rtol}\,\max|K|`,
    then symmetrized, :math:`(K + K^\top)/2`, and decomposed with ``torch.linalg.eigh``.
    Eigenvalues are not clamped: a positive semi-definite kernel shows rounding-level negative
    eigenvalues at the bottom of the spectrum (exclude them from fits by an eigenvalue range).

    Parameters
    ----------
    kernel : Tensor of shape (n, n)
        A real symmetric matrix, e.g. an empirical NTK (any floating dtype).
    symmetry_rtol : float, optional
        Allowed relative asymmetry. Default :math:`\sqrt{\epsilon}` of the kernel's dtype
        (``1.5e-8`` for float64, ``3.5e-4`` for float32).

    Returns
    -------
    KernelEigh
        ``(eigenvalues, eigenvectors)``, float64 on the kernel's device.

    Raises
    ------
    NtklabTypeError
        ``kernel`` is not a floating tensor.
    NtklabValueError
        It is not square, finite or symmetric within ``symmetry_rtol``.

    Examples
    --------
    >>> k = torch.tensor([[2.0, 1.0], [1.0, 2.0]])
    >>> vals, vecs = kernel_eigh(k)
    >>> vals.tolist(), vals.dtype
    ([3.0, 1.0], torch.float64)
    """
    matrix = square_matrix("kernel", kernel)
    if symmetry_rtol is None:
        rtol = math.sqrt(torch.finfo(matrix.dtype).eps)
    else:
        rtol = positive_number("symmetry_rtol", symmetry_rtol)
    k64 = matrix.detach().to(torch.float64)
    scale = float(k64.abs().max())
    asymmetry = float((k64 - k64.T).abs().max())
    if asymmetry > rtol * scale:
        raise NtklabValueError(
            f"kernel: expected a symmetric matrix (max |K - K^T| <= {rtol:.3g} * max |K|), got "
            f"max |K - K^T| = {asymmetry:.3g} with max |K| = {scale:.3g}"
        )
    values, vectors = torch.linalg.eigh((k64 + k64.T) / 2)
    return KernelEigh(values.flip(0), vectors.flip(1))


def _targets(name: str, y: object, n: int) -> Tensor:
    """``y`` as a float64 (n, k) matrix (a vector is one column); integer labels allowed."""
    targets = real_tensor(name, y, (1, 2), shape_text="(n,) or (n, k)", allow_integer=True)
    if targets.shape[0] != n:
        raise NtklabValueError(
            f"{name}: expected {n} rows to match eigvecs' (n, m), got shape {tuple(targets.shape)}"
        )
    targets = targets.detach().to(torch.float64)
    return targets if targets.ndim == 2 else targets[:, None]


def _eigvecs(eigvecs: object) -> Tensor:
    vectors = real_tensor("eigvecs", eigvecs, (2,), shape_text="(n, m)")
    return vectors.detach().to(torch.float64)


def projections(eigvecs: Tensor, y: Tensor) -> Tensor:
    r"""Squared projections of targets on eigenvectors, summed over output columns.

    .. math:: e_i = \sum_{c=1}^{k} (v_i^\top y_{:, c})^2 = \| V^\top Y \|_{i,:}^2,

    so one-hot multi-class labels give the total energy over classes. For a full orthonormal
    basis :math:`\sum_i e_i = \|Y\|_F^2`. Nothing is centered: subtract the mean label first if
    the constant direction should not count.

    Parameters
    ----------
    eigvecs : Tensor of shape (n, m)
        Orthonormal columns :math:`v_i` (e.g. from :func:`kernel_eigh`, or its first ``m``).
    y : Tensor of shape (n,) or (n, k)
        Targets, residuals or labels (integer dtypes such as one-hot ``int64`` are accepted).

    Returns
    -------
    Tensor of shape (m,)
        Float64 energies :math:`e_i` on the eigenvectors' device, in their column order.

    Examples
    --------
    >>> v = torch.eye(3, dtype=torch.float64)
    >>> projections(v, torch.tensor([[1, 0], [0, 1], [1, 1]])).tolist()
    [1.0, 1.0, 2.0]
    """
    vectors = _eigvecs(eigvecs)
    targets = _targets("y", y, int(vectors.shape[0])).to(vectors.device)
    return (vectors.T @ targets).square().sum(dim=1)


def permuted_projections(
    eigvecs: Tensor,
    y: Tensor,
    *,
    n_permutations: int = 1,
    generator: torch.Generator | int | None = None,
) -> Tensor:
    r"""Permuted-label control: :func:`projections` of ``y`` with its rows shuffled.

    .. math:: \bar e_i = \frac1P \sum_{p=1}^{P} \| v_i^\top Y_{\pi_p} \|^2,

    averaged over ``n_permutations`` uniform random permutations :math:`\pi_p` of the samples.
    Shuffling keeps the label marginals (class proportions) and destroys their relation to
    the inputs, so the slope of :math:`\bar e_i` against :math:`\lambda_i` measures alignment
    expected by chance (about 0 for centered labels; the mean label still projects on the
    kernel's constant-like top direction).

    Parameters
    ----------
    eigvecs : Tensor of shape (n, m)
    y : Tensor of shape (n,) or (n, k)
    n_permutations : int
        :math:`P \ge 1`.
    generator : torch.Generator or int or None
        Source of the permutations (an int is a seed; ``None`` means seed 0).

    Returns
    -------
    Tensor of shape (m,)
        Float64 mean energies.
    """
    vectors = _eigvecs(eigvecs)
    targets = _targets("y", y, int(vectors.shape[0]))
    count = integer("n_permutations", n_permutations, 1)
    gen = _generator(generator)
    n = targets.shape[0]
    total = torch.zeros(vectors.shape[1], dtype=torch.float64, device=vectors.device)
    for _ in range(count):
        perm = torch.randperm(n, generator=gen)
        total += (vectors.T @ targets[perm].to(vectors.device)).square().sum(dim=1)
    return total / count


# ------------------------------------------------------------------------------------ binning


@short_repr
@dataclass(frozen=True)
class LogBins:
    """Energies averaged in logarithmically spaced eigenvalue bins (non-empty bins only).

    Attributes
    ----------
    centers : Tensor of shape (b,)
        Geometric mean of the eigenvalues in each bin.
    mean_energy : Tensor of shape (b,)
        Arithmetic mean of the energies in each bin (energy per eigenvector, so the density
        of eigenvalues does not enter the slope).
    counts : Tensor of shape (b,)
        Eigenpairs per bin (int64).
    edges : Tensor of shape (bins + 1,)
        All bin edges, including those of empty bins.
    """

    centers: Tensor
    mean_energy: Tensor
    counts: Tensor
    edges: Tensor


def _pairs(eigvals: object, energies: object) -> tuple[Tensor, Tensor]:
    values = real_tensor("eigvals", eigvals, (1,), shape_text="(n,)")
    energy = real_tensor("energies", energies, (1,), shape_text="(n,)")
    if energy.shape != values.shape:
        raise NtklabValueError(
            f"energies: expected shape {tuple(values.shape)} to match eigvals, got "
            f"{tuple(energy.shape)}"
        )
    if bool((energy < 0).any()):
        raise NtklabValueError(
            f"energies: expected squared projections >= 0, got minimum {float(energy.min())!r}"
        )
    return values.detach().to(torch.float64), energy.detach().to(torch.float64)


def _edges(bins: object, low: float, high: float) -> NDArray[np.float64]:
    if isinstance(bins, Tensor):
        edges = real_tensor("bins", bins, (1,), shape_text="(bins + 1,)")
        array = edges.detach().cpu().double().numpy()
        if (
            array.shape[0] < 2
            or not bool((array > 0).all())
            or not bool((np.diff(array) > 0).all())
        ):
            raise NtklabValueError(
                f"bins: expected at least 2 positive, strictly increasing edges, got "
                f"{array.tolist()}"
            )
        return array
    count = integer("bins", bins, 1)
    if not high > low:  # a single distinct eigenvalue: one bin
        return np.array([low, low])
    return np.geomspace(low, high, count + 1)


def _bin_index(values: NDArray[np.float64], edges: NDArray[np.float64]) -> NDArray[np.int64]:
    """Bin of each value (right edge of the last bin included), -1 outside the edges."""
    index = np.searchsorted(edges, values, side="right") - 1
    index[values == edges[-1]] = edges.shape[0] - 2
    index[(values < edges[0]) | (values > edges[-1])] = -1
    return index.astype(np.int64)


def log_binned(
    eigvals: Tensor,
    energies: Tensor,
    bins: int | Tensor = 20,
    *,
    eig_range: tuple[float, float] | None = None,
) -> LogBins:
    r"""Average energies in log-spaced eigenvalue bins.

    With edges :math:`b_0 < \dots < b_B` (geometric), bin :math:`j` holds the eigenpairs with
    :math:`b_j \le \lambda_i < b_{j+1}` (the last bin includes :math:`b_B`) and reports

    .. math::

        c_j = \exp\Big(\frac{1}{|B_j|}\sum_{i \in B_j} \log \lambda_i\Big), \qquad
        \bar e_j = \frac{1}{|B_j|}\sum_{i \in B_j} e_i .

    Parameters
    ----------
    eigvals : Tensor of shape (n,)
    energies : Tensor of shape (n,)
        Non-negative, e.g. from :func:`projections`.
    bins : int or Tensor of shape (B + 1,)
        Number of bins between the range's ends, or explicit increasing positive edges.
    eig_range : (float, float), optional
        ``(low, high)``, ``0 < low < high``; eigenpairs outside are dropped. Default: the
        smallest and largest positive eigenvalues. Ignored when ``bins`` gives edges.

    Returns
    -------
    LogBins
        Float64 tensors on ``eigvals``' device; empty bins are left out.

    Examples
    --------
    >>> lam = torch.tensor([1.0, 2.0, 10.0, 20.0, 100.0])
    >>> b = log_binned(lam, lam**2, bins=2)
    >>> b.counts.tolist(), [round(c, 6) for c in b.centers.tolist()]
    ([2, 3], [1.414214, 27.144176])
    """
    values, energy = _pairs(eigvals, energies)
    low, high = _range(values, eig_range)
    edges = _edges(bins, low, high)
    lam = values.cpu().numpy()
    index = _bin_index(np.where(lam > 0, lam, -1.0), edges)
    bins_count = edges.shape[0] - 1
    inside = index >= 0
    counts = np.bincount(index[inside], minlength=bins_count)
    log_sum = np.bincount(index[inside], weights=np.log(lam[inside]), minlength=bins_count)
    energy_sum = np.bincount(
        index[inside], weights=energy.cpu().numpy()[inside], minlength=bins_count
    )
    keep = counts > 0
    device = values.device
    return LogBins(
        centers=torch.as_tensor(np.exp(log_sum[keep] / counts[keep]), device=device),
        mean_energy=torch.as_tensor(energy_sum[keep] / counts[keep], device=device),
        counts=torch.as_tensor(counts[keep].astype(np.int64), device=device),
        edges=torch.as_tensor(edges, device=device),
    )


def _range(values: Tensor, eig_range: object) -> tuple[float, float]:
    """The explicit ``(low, high)`` or the extent of the positive eigenvalues."""
    if eig_range is None:
        positive = values[values > 0]
        if positive.numel() == 0:
            raise NtklabValueError(
                f"eigvals: expected some positive eigenvalues, got maximum {float(values.max())!r}"
            )
        return float(positive.min()), float(positive.max())
    return _check_range("eig_range", eig_range, upper=None)


def _check_range(name: str, value: object, upper: float | None) -> tuple[float, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise NtklabValueError(f"{name}: expected a pair (low, high), got {value!r}")
    low = positive_number(f"{name}[0]", value[0])
    high = positive_number(f"{name}[1]", value[1])
    if not low < high or (upper is not None and high > upper):
        bound = "" if upper is None else f" <= {upper}"
        raise NtklabValueError(f"{name}: expected 0 < low < high{bound}, got {tuple(value)!r}")
    return low, high


# -------------------------------------------------------------------------------------- slope


@dataclass(frozen=True)
class AlignmentSlope:
    r"""Binned log-log slope of energies against eigenvalues, :math:`\bar e \approx C
    \lambda^{s}`.

    Attributes
    ----------
    slope : float
        :math:`s`, least squares of :math:`\log \bar e_j` on :math:`\log c_j` over the bins.
    intercept : float
        :math:`\log C`.
    ci_low, ci_high : float
        The interval that goes with the slope: the bootstrap percentile interval when
        ``n_boot > 0``, else the OLS t-interval.
    interval : {"bootstrap", "ols"}
        Which interval ``ci_low``/``ci_high`` are.
    ols_ci_low, ols_ci_high, stderr : float
        OLS t-interval and standard error over the bins (ignores the scatter within bins).
    bootstrap_stderr : float
        Standard deviation of the bootstrap slopes (NaN when ``n_boot == 0``).
    r2 : float
        Coefficient of determination of the binned fit.
    eig_low, eig_high : float
        Smallest and largest eigenvalue actually used.
    decades : float
        :math:`\log_{10}(\text{eig\_high} / \text{eig\_low})`.
    n_eigenpairs : int
        Eigenpairs in the range.
    n_bins : int
        Non-empty bins fitted.
    bins : LogBins
        The binned points.
    confidence : float
    n_boot : int
    """

    slope: float
    intercept: float
    ci_low: float
    ci_high: float
    interval: str
    ols_ci_low: float
    ols_ci_high: float
    stderr: float
    bootstrap_stderr: float
    r2: float
    eig_low: float
    eig_high: float
    decades: float
    n_eigenpairs: int
    n_bins: int
    bins: LogBins
    confidence: float
    n_boot: int


def alignment_slope(
    eigvals: Tensor,
    energies: Tensor,
    *,
    eig_range: tuple[float, float] | None = None,
    relative_range: tuple[float, float] | None = None,
    bins: int = 20,
    n_boot: int = 1000,
    confidence: float = 0.95,
    generator: torch.Generator | int | None = None,
) -> AlignmentSlope:
    r"""Log-log slope of projections against eigenvalues, binned, with a bootstrap interval.

    The eigenpairs with :math:`\lambda_i` in the range are grouped by :func:`log_binned`
    into ``bins`` geometric bins, and :math:`\log \bar e_j = \log C + s \log c_j` is fitted
    by least squares over the non-empty bins (:func:`~ntklab.analysis.fit_power_law`). For
    the claim of the label-alignment paper, :math:`s = 2` for labels and :math:`s = 1` for
    the initial residual.

    The bootstrap resamples the eigenpairs in the range with replacement ``n_boot`` times,
    re-bins them on the same edges, refits, and reports the :math:`(1 \mp c)/2` quantiles
    (bins left empty by a resample are dropped from that refit). It accounts for the scatter
    of the energies within bins, which the OLS interval over the bin means ignores.

    Parameters
    ----------
    eigvals : Tensor of shape (n,)
        Eigenvalues (e.g. :func:`kernel_eigh`); non-positive ones are never used.
    energies : Tensor of shape (n,)
        Non-negative energies of the same eigenpairs (:func:`projections`).
    eig_range : (float, float), optional
        Absolute range ``(low, high)`` of eigenvalues used, ``0 < low < high``.
    relative_range : (float, float), optional
        Range relative to the largest eigenvalue, ``(low, high)`` with
        ``0 < low < high <= 1``: :math:`\lambda \in [\text{low}\,\lambda_1,
        \text{high}\,\lambda_1]`. Give at most one of the two; the default is
        ``relative_range=(1e-5, 1.0)``, five decades (the bottom of a float32 kernel's
        spectrum, below about :math:`10^{-6}\lambda_1`, is rounding noise). State the range
        with the result (``eig_low``, ``eig_high``, ``decades``); a fit over only the top
        decade says little.
    bins : int
        Number of geometric bins over the range (>= 3 non-empty ones are needed).
    n_boot : int
        Bootstrap resamples; 0 reports the OLS interval instead.
    confidence : float
        Nominal coverage of the interval, in (0, 1).
    generator : torch.Generator or int or None
        Source of the resampling (an int is a seed; ``None`` means seed 0, reproducible).

    Returns
    -------
    AlignmentSlope

    Raises
    ------
    NtklabValueError
        Both ranges given; fewer than 3 non-empty bins in the range; a bin whose energies
        are all zero (its log is undefined).

    Examples
    --------
    >>> lam = torch.logspace(0, -4, 200, dtype=torch.float64)
    >>> fit = alignment_slope(lam, 3 * lam**2, bins=10, n_boot=0)
    >>> round(fit.slope, 10), fit.n_bins, fit.n_eigenpairs
    (2.0, 10, 200)
    """
    values, energy = _pairs(eigvals, energies)
    confidence = probability("confidence", confidence)
    boots = integer("n_boot", n_boot, 0)
    bins = integer("bins", bins, 1)
    if eig_range is not None and relative_range is not None:
        raise NtklabValueError(
            f"relative_range: expected at most one of eig_range and relative_range, got "
            f"eig_range={eig_range!r} and relative_range={relative_range!r}"
        )
    top = float(values.max())
    if eig_range is not None:
        low, high = _check_range("eig_range", eig_range, upper=None)
    else:
        rel_low, rel_high = _check_range(
            "relative_range", (1e-5, 1.0) if relative_range is None else relative_range, 1.0
        )
        if not top > 0:
            raise NtklabValueError(f"eigvals: expected a positive largest eigenvalue, got {top!r}")
        low, high = rel_low * top, rel_high * top

    lam = values.cpu().numpy()
    e = energy.cpu().numpy()
    used = (lam >= low) & (lam <= high)
    lam, e = lam[used], e[used]
    if lam.shape[0] == 0:
        raise NtklabValueError(
            f"eigvals: expected eigenvalues in the range [{low:.6g}, {high:.6g}], got none "
            f"(largest {top:.6g})"
        )
    eig_low, eig_high = float(lam.min()), float(lam.max())
    edges = _edges(bins, eig_low, eig_high)
    binned = log_binned(torch.as_tensor(lam), torch.as_tensor(e), torch.as_tensor(edges))
    if binned.centers.shape[0] < 3:
        raise NtklabValueError(
            f"bins: expected at least 3 non-empty bins to fit a slope with an interval, got "
            f"{binned.centers.shape[0]} from {lam.shape[0]} eigenpairs in "
            f"[{eig_low:.6g}, {eig_high:.6g}] (widen the range or use more bins)"
        )
    fit = fit_power_law(binned.centers, binned.mean_energy, confidence=confidence)

    boot_low = boot_high = boot_sd = math.nan
    if boots > 0:
        slopes = _bootstrap_slopes(lam, e, edges, boots, _generator(generator))
        slopes = slopes[np.isfinite(slopes)]
        if slopes.shape[0] < 2:
            raise NtklabValueError(
                "n_boot: expected bootstrap resamples with at least 2 non-empty bins, got "
                f"{slopes.shape[0]} usable of {boots}"
            )
        boot_low, boot_high = (
            float(q) for q in np.quantile(slopes, [0.5 - confidence / 2, 0.5 + confidence / 2])
        )
        boot_sd = float(slopes.std(ddof=1))
    device = values.device
    binned = LogBins(
        centers=binned.centers.to(device),
        mean_energy=binned.mean_energy.to(device),
        counts=binned.counts.to(device),
        edges=binned.edges.to(device),
    )
    return AlignmentSlope(
        slope=fit.slope,
        intercept=fit.intercept,
        ci_low=boot_low if boots > 0 else fit.ci_low,
        ci_high=boot_high if boots > 0 else fit.ci_high,
        interval="bootstrap" if boots > 0 else "ols",
        ols_ci_low=fit.ci_low,
        ols_ci_high=fit.ci_high,
        stderr=fit.stderr,
        bootstrap_stderr=boot_sd,
        r2=fit.r2,
        eig_low=eig_low,
        eig_high=eig_high,
        decades=math.log10(eig_high / eig_low),
        n_eigenpairs=int(lam.shape[0]),
        n_bins=int(binned.centers.shape[0]),
        bins=binned,
        confidence=confidence,
        n_boot=boots,
    )


def _bootstrap_slopes(
    lam: NDArray[np.float64],
    energy: NDArray[np.float64],
    edges: NDArray[np.float64],
    n_boot: int,
    gen: torch.Generator,
) -> NDArray[np.float64]:
    """Slopes of ``n_boot`` eigenpair resamples binned on ``edges`` (NaN: < 2 usable bins)."""
    m = lam.shape[0]
    n_bins = edges.shape[0] - 1
    index = _bin_index(lam, edges)  # all inside: the edges span lam
    log_lam = np.log(lam)
    draws = torch.randint(0, m, (n_boot, m), generator=gen).numpy()
    slopes = np.empty(n_boot)
    block = max(1, _BOOTSTRAP_BLOCK_ELEMENTS // m)
    for start in range(0, n_boot, block):
        rows = draws[start : start + block]  # shape: (b, m)
        b = rows.shape[0]
        flat = (np.arange(b)[:, None] * n_bins + index[rows]).ravel()
        size = b * n_bins
        counts = np.bincount(flat, minlength=size).reshape(b, n_bins)
        log_sum = np.bincount(flat, weights=log_lam[rows].ravel(), minlength=size)
        e_sum = np.bincount(flat, weights=energy[rows].ravel(), minlength=size)
        e_sum = e_sum.reshape(b, n_bins)
        usable = (counts > 0) & (e_sum > 0)
        safe = np.where(usable, counts, 1)
        u = log_sum.reshape(b, n_bins) / safe
        v = np.log(np.where(usable, e_sum, 1.0) / safe)
        w = usable.astype(np.float64)
        n_used = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            u_bar = (w * u).sum(axis=1) / n_used
            v_bar = (w * v).sum(axis=1) / n_used
            du = (u - u_bar[:, None]) * w
            slope = (du * (v - v_bar[:, None])).sum(axis=1) / (du * du).sum(axis=1)
        slope[n_used < 2] = np.nan
        slopes[start : start + b] = slope
    return slopes


def top_energy_share(energies: Tensor, k: int, *, total: float | None = None) -> float:
    r"""Share of the energy on the first ``k`` eigenvectors,
    :math:`\sum_{i \le k} e_i / \sum_i e_i`.

    Parameters
    ----------
    energies : Tensor of shape (n,)
        Non-negative energies ordered as the eigenvalues, largest first (as
        :func:`kernel_eigh` orders them).
    k : int
        ``1 <= k <= n``.
    total : float, optional
        The denominator; default the sum of ``energies``, which is :math:`\|y\|_F^2` when they
        come from a full orthonormal basis. Pass :math:`\|y\|_F^2` when only some eigenvectors
        were projected on.

    Returns
    -------
    float

    Examples
    --------
    >>> top_energy_share(torch.tensor([6.0, 3.0, 1.0]), 2)
    0.9
    """
    energy = real_tensor("energies", energies, (1,), shape_text="(n,)").detach().double()
    if bool((energy < 0).any()):
        raise NtklabValueError(
            f"energies: expected values >= 0, got minimum {float(energy.min())!r}"
        )
    top = integer("k", k, 1)
    if top > energy.shape[0]:
        raise NtklabValueError(
            f"k: expected an int <= {energy.shape[0]} (len(energies)), got {top}"
        )
    denominator = float(energy.sum()) if total is None else real_number("total", total)
    if not denominator > 0:
        raise NtklabValueError(f"total: expected a positive total energy, got {denominator!r}")
    return float(energy[:top].sum()) / denominator
