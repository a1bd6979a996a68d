"""Alignment tools: eigenpairs vs numpy, projections vs loops, binning vs a naive loop,
slopes on synthetic spectra with known exponents, bootstrap coverage, permuted control."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from ntklab.analysis import (
    alignment,
    alignment_slope,
    kernel_eigh,
    log_binned,
    permuted_projections,
    projections,
    top_energy_share,
)
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(alignment)
    assert result.attempted >= 6
    assert result.failed == 0


def random_orthogonal(n: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=gen))
    return q * torch.sign(torch.diagonal(r))


# ---------------------------------------------------------------------------------- eigh
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_eigh_matches_numpy_descending(dtype: torch.dtype, gen: torch.Generator) -> None:
    a = torch.randn(40, 7, dtype=F64, generator=gen)
    kernel = (a @ a.T + 0.1 * torch.eye(40, dtype=F64)).to(dtype)
    vals, vecs = kernel_eigh(kernel)
    assert vals.dtype == F64 and vecs.dtype == F64
    ref = np.linalg.eigvalsh(kernel.double().numpy())[::-1].copy()
    assert_close(vals, torch.from_numpy(ref), rtol=1e-10, atol=1e-10)
    assert bool((vals[:-1] >= vals[1:]).all())
    assert_close(vecs @ torch.diag(vals) @ vecs.T, kernel.double(), rtol=1e-10, atol=1e-10)
    assert_close(vecs.T @ vecs, torch.eye(40, dtype=F64), rtol=0, atol=1e-12)


def test_kernel_eigh_rejects_bad_input() -> None:
    with pytest.raises(NtklabValueError, match="kernel: expected a symmetric"):
        kernel_eigh(torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64))
    with pytest.raises(NtklabValueError, match="kernel: expected a square"):
        kernel_eigh(torch.ones(2, 3))
    with pytest.raises(NtklabTypeError, match=r"kernel: expected a torch\.Tensor"):
        kernel_eigh(np.eye(2))  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="kernel: expected finite"):
        kernel_eigh(torch.tensor([[1.0, math.nan], [math.nan, 1.0]]))
    with pytest.raises(NtklabValueError, match="symmetry_rtol"):
        kernel_eigh(torch.eye(2), symmetry_rtol=0.0)
    # a float32 rounding-level asymmetry passes by default, a looser one does not
    k = torch.tensor([[1.0, 0.5], [0.5 + 1e-6, 1.0]])
    assert kernel_eigh(k).eigenvalues.shape == (2,)
    with pytest.raises(NtklabValueError, match="symmetric"):
        kernel_eigh(k, symmetry_rtol=1e-9)


# ---------------------------------------------------------------------------- projections
def test_projections_sum_over_classes_like_a_loop(gen: torch.Generator) -> None:
    v = random_orthogonal(12, gen)
    labels = torch.randint(0, 3, (12,), generator=gen)
    onehot = torch.nn.functional.one_hot(labels, 3)  # int64
    energies = projections(v, onehot)
    loop = torch.tensor(
        [sum(float(v[:, i] @ onehot[:, c].double()) ** 2 for c in range(3)) for i in range(12)],
        dtype=F64,
    )
    assert_close(energies, loop, rtol=1e-12, atol=1e-12)
    assert float(energies.sum()) == pytest.approx(12.0, rel=1e-12)  # ||Y||_F^2 = n
    assert_close(projections(v[:, :4], labels.double()), (v[:, :4].T @ labels.double()) ** 2)


def test_projections_reject_mismatched_rows() -> None:
    with pytest.raises(NtklabValueError, match="y: expected 3 rows"):
        projections(torch.eye(3), torch.ones(4))
    with pytest.raises(NtklabTypeError, match=r"y: expected a torch\.Tensor"):
        projections(torch.eye(3), [1.0, 2.0, 3.0])  # type: ignore[arg-type]


def test_permuted_projections_average_shuffled_rows(gen: torch.Generator) -> None:
    v = random_orthogonal(10, gen)
    y = torch.randn(10, 2, dtype=F64, generator=gen)
    got = permuted_projections(v, y, n_permutations=3, generator=7)
    g = torch.Generator().manual_seed(7)
    ref = sum(projections(v, y[torch.randperm(10, generator=g)]) for _ in range(3)) / 3
    assert_close(got, ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(NtklabValueError, match="n_permutations"):
        permuted_projections(v, y, n_permutations=0)


# -------------------------------------------------------------------------------- binning
def test_log_binned_matches_a_naive_loop(gen: torch.Generator) -> None:
    lam = torch.rand(300, dtype=F64, generator=gen) ** 6 + 1e-9
    energy = torch.rand(300, dtype=F64, generator=gen)
    binned = log_binned(lam, energy, bins=9)
    edges = np.geomspace(float(lam.min()), float(lam.max()), 10)
    centers, means, counts = [], [], []
    for j in range(9):
        last = j == 8
        inside = [
            i
            for i in range(300)
            if edges[j] <= lam[i] and (lam[i] < edges[j + 1] or (last and lam[i] <= edges[j + 1]))
        ]
        if inside:
            centers.append(math.exp(np.mean([math.log(lam[i]) for i in inside])))
            means.append(float(np.mean([float(energy[i]) for i in inside])))
            counts.append(len(inside))
    assert binned.counts.tolist() == counts
    assert sum(counts) == 300
    assert_close(binned.centers, torch.tensor(centers, dtype=F64), rtol=1e-12, atol=0)
    assert_close(binned.mean_energy, torch.tensor(means, dtype=F64), rtol=1e-12, atol=0)
    assert_close(binned.edges, torch.from_numpy(edges), rtol=1e-12, atol=0)


def test_log_binned_drops_nonpositive_and_out_of_range() -> None:
    lam = torch.tensor([-1e-9, 0.0, 1e-3, 0.01, 0.1, 1.0], dtype=F64)
    binned = log_binned(lam, torch.ones(6, dtype=F64), bins=3, eig_range=(5e-3, 2.0))
    assert int(binned.counts.sum()) == 3
    with pytest.raises(NtklabValueError, match="energies: expected shape"):
        log_binned(lam, torch.ones(5, dtype=F64))
    with pytest.raises(NtklabValueError, match="energies: expected squared projections >= 0"):
        log_binned(lam, -torch.ones(6, dtype=F64))
    with pytest.raises(NtklabValueError, match="bins: expected at least 2 positive"):
        log_binned(lam, torch.ones(6, dtype=F64), bins=torch.tensor([1.0, 0.5]))


# ---------------------------------------------------------------------------------- slope
def test_exact_power_law_gives_exact_slope() -> None:
    lam = torch.logspace(0, -6, 500, dtype=F64)
    fit = alignment_slope(lam, 0.3 * lam**1.5, relative_range=(1e-4, 1.0), bins=12, n_boot=50)
    # bin means of lambda^1.5 vs geometric-mean centers: exact up to a Jensen term of 1e-5
    assert fit.slope == pytest.approx(1.5, abs=1e-4)
    assert fit.ci_low == pytest.approx(1.5, abs=5e-3) and fit.ci_high == pytest.approx(
        1.5, abs=5e-3
    )
    assert fit.interval == "bootstrap"
    assert fit.eig_high == pytest.approx(1.0) and fit.eig_low >= 1e-4
    assert fit.decades == pytest.approx(math.log10(fit.eig_high / fit.eig_low))
    assert fit.n_eigenpairs == int(((lam >= 1e-4) & (lam <= 1.0)).sum())
    assert fit.n_bins == 12 and int(fit.bins.counts.sum()) == fit.n_eigenpairs


def test_slope_of_a_kernel_with_known_alignment(gen: torch.Generator) -> None:
    """Labels built with (v_i^T y)^2 = lambda_i^2 chi^2_1: slope 2; shuffled labels: about 0."""
    n = 600
    v = random_orthogonal(n, gen)
    lam = torch.arange(1, n + 1, dtype=F64) ** -1.5
    kernel = (v * lam) @ v.T
    y = v @ (lam * torch.randn(n, dtype=F64, generator=gen))
    vals, vecs = kernel_eigh(kernel)
    fit = alignment_slope(vals, projections(vecs, y), relative_range=(1e-3, 1.0), generator=1)
    assert fit.ci_low < 2.0 < fit.ci_high
    assert fit.slope == pytest.approx(2.0, abs=0.25)
    assert fit.ols_ci_low < fit.slope < fit.ols_ci_high
    control = permuted_projections(vecs, y, n_permutations=20, generator=2)
    shuffled = alignment_slope(vals, control, relative_range=(1e-3, 1.0), generator=3)
    assert abs(shuffled.slope) < 0.25
    assert top_energy_share(projections(vecs, y), 100) > 0.95


def test_bootstrap_interval_covers_the_true_slope() -> None:
    """90% intervals over synthetic chi^2 scatter cover the exponent most of the time."""
    g = torch.Generator().manual_seed(11)
    lam = torch.logspace(0, -3, 400, dtype=F64)
    hits = 0
    reps = 40
    for r in range(reps):
        energy = lam * torch.randn(400, dtype=F64, generator=g) ** 2
        fit = alignment_slope(lam, energy, bins=10, n_boot=300, confidence=0.9, generator=r)
        hits += fit.ci_low <= 1.0 <= fit.ci_high
    assert hits >= 0.75 * reps


def test_ols_interval_without_bootstrap() -> None:
    lam = torch.logspace(0, -3, 100, dtype=F64)
    energy = lam * (1 + 0.1 * torch.sin(torch.arange(100, dtype=F64)))
    fit = alignment_slope(lam, energy, bins=8, n_boot=0)
    assert fit.interval == "ols" and math.isnan(fit.bootstrap_stderr)
    assert (fit.ci_low, fit.ci_high) == (fit.ols_ci_low, fit.ols_ci_high)


def test_alignment_slope_rejects_bad_ranges() -> None:
    lam = torch.logspace(0, -3, 100, dtype=F64)
    with pytest.raises(NtklabValueError, match="at most one of eig_range and relative_range"):
        alignment_slope(lam, lam, eig_range=(1e-3, 1.0), relative_range=(1e-3, 1.0))
    with pytest.raises(NtklabValueError, match="relative_range: expected 0 < low < high <= 1"):
        alignment_slope(lam, lam, relative_range=(1e-3, 2.0))
    with pytest.raises(NtklabValueError, match="eig_range: expected 0 < low < high"):
        alignment_slope(lam, lam, eig_range=(1.0, 1e-3))
    with pytest.raises(NtklabValueError, match="at least 3 non-empty bins"):
        alignment_slope(lam, lam, eig_range=(0.5, 1.0), bins=2)
    with pytest.raises(NtklabValueError, match="eigvals: expected eigenvalues in the range"):
        alignment_slope(lam, lam, eig_range=(2.0, 3.0))
    with pytest.raises(NtklabValueError, match="confidence"):
        alignment_slope(lam, lam, confidence=1.5)
    with pytest.raises(NtklabTypeError, match="n_boot"):
        alignment_slope(lam, lam, n_boot=2.5)  # type: ignore[arg-type]


def test_top_energy_share() -> None:
    e = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=F64)
    assert top_energy_share(e, 1) == pytest.approx(0.4)
    assert top_energy_share(e, 4) == pytest.approx(1.0)
    assert top_energy_share(e, 2, total=14.0) == pytest.approx(0.5)
    with pytest.raises(NtklabValueError, match="k: expected an int <= 4"):
        top_energy_share(e, 5)
    with pytest.raises(NtklabValueError, match="energies: expected values >= 0"):
        top_energy_share(-e, 1)
    with pytest.raises(NtklabValueError, match="total: expected a positive"):
        top_energy_share(e, 1, total=0.0)
