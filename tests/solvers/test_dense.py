"""``psd_eigh`` clamps rounding-level negative eigenvalues silently and warns beyond rounding."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing import assert_close

import ntklab as nl
from ntklab.errors import NumericalWarning
from ntklab.solvers import cholesky_with_jitter, psd_eigh

F64 = torch.float64


def _with_spectrum(values: torch.Tensor, seed: int = 0) -> torch.Tensor:
    n = values.shape[0]
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=values.dtype))
    return (q * values) @ q.T


def test_warns_on_a_clearly_indefinite_matrix() -> None:
    """Eigenvalue -0.5 next to 10: far beyond n eps max|lambda|. Before, it was clamped to 0
    without a word, while the Cholesky path (t=None) warns on the same matrix."""
    values = torch.linspace(0.1, 10.0, 20, dtype=F64)
    values[0] = -0.5
    a = _with_spectrum(values)
    with pytest.warns(NumericalWarning, match=r"most negative -0\.5\b"):
        eig = psd_eigh(a)
    with pytest.warns(NumericalWarning, match=r"^K: not positive semi-definite beyond rounding"):
        psd_eigh(a, name="K")
    assert eig.clamped == 1 and float(eig.values[0]) == 0.0
    assert_close(eig.values[1:], values[1:], rtol=1e-12, atol=1e-12)
    # the Cholesky path does not accept this matrix silently either
    with pytest.raises(nl.NtklabValueError):
        cholesky_with_jitter(a)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_rounding_level_negatives_stay_silent(dtype: torch.dtype) -> None:
    """A rank-2 PSD matrix: its zero eigenvalues come out of eigh as +-(rounding); clamped,
    but no warning."""
    gen = torch.Generator().manual_seed(1)
    f = torch.randn(40, 2, generator=gen, dtype=dtype)
    a = f @ f.T
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eig = psd_eigh(a)
    assert eig.clamped > 0  # the case is really exercised
    assert bool((eig.values >= 0).all())


def test_threshold_is_n_eps_times_the_largest_eigenvalue() -> None:
    """Just below the threshold n eps max|lambda|: silent; ten times above: a warning."""
    n = 16
    eps = torch.finfo(F64).eps
    threshold = n * eps * 1.0
    for scale, warns in ((0.1, False), (10.0, True)):
        values = torch.linspace(0.0, 1.0, n, dtype=F64)
        values[0] = -scale * threshold
        a = torch.diag(values)  # exact eigenvalues: eigh of a diagonal matrix returns them
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            psd_eigh(a)
        assert any(issubclass(w.category, NumericalWarning) for w in rec) == warns


def test_ordinary_kernels_do_not_warn() -> None:
    """Kernel matrices of the library (ReLU NTK, deep and nearly singular; float32 too) go
    through psd_eigh without a warning, also through the dynamics that call it."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(60, 3, generator=gen, dtype=F64)
    x = torch.cat([x, x[:5] + 1e-9])  # nearly duplicated inputs: singular to rounding
    layers: list[nl.kernels.Layer] = []
    for _ in range(20):
        layers += [nl.Dense(w_std=1.4, b_std=0.1), nl.Relu()]
    arch = nl.serial(*layers, nl.Dense(w_std=1.4, b_std=0.1))
    y = torch.sin(x[:, :1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (torch.float32, F64):
            k = arch.kernel(x.to(dtype))
            for m in (k.nngp, k.ntk):
                psd_eigh(0.5 * (m + m.T))
        k64 = arch.kernel(x).ntk
        nl.dynamics.linearized_dynamics(k64, y).train(torch.tensor([1.0, 10.0], dtype=F64))
