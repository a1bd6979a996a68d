"""Ridge selection on a validation split against a loop of kernel_ridge_regression."""

from __future__ import annotations

import pytest
import torch

from ntklab.dynamics import kernel_ridge_regression
from ntklab.dynamics.model_selection import select_ridge_validation, validation_split
from ntklab.errors import NtklabValueError


def _problem(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(60, 2, generator=gen, dtype=torch.float64)
    k = torch.exp(-torch.cdist(x, x).square() / 0.2)
    y = torch.stack([torch.sin(4 * x[:, 0]), x[:, 1] ** 2], dim=1)
    y = y + 0.3 * torch.randn(60, 2, generator=gen, dtype=torch.float64)
    return k, y


def test_validation_mse_matches_direct_krr_for_every_ridge() -> None:
    k, y = _problem(0)
    fit, val = torch.arange(45), torch.arange(45, 60)
    ridges = [1e-6, 1e-3, 1e-1, 1.0, 10.0]
    sel = select_ridge_validation(k[fit][:, fit], y[fit], k[val][:, fit], y[val], ridges)
    direct = torch.stack(
        [
            (kernel_ridge_regression(k[fit][:, fit], y[fit], k[val][:, fit], ridge=r) - y[val])
            .square()
            .mean(dim=0)
            for r in ridges
        ]
    )
    torch.testing.assert_close(sel.validation_mse, direct, rtol=1e-7, atol=1e-12)
    for col in range(2):
        best = ridges[int(direct[:, col].argmin())]
        assert float(sel.ridge[col]) == pytest.approx(best)
        pred = kernel_ridge_regression(k[fit][:, fit], y[fit, col], k[val][:, fit], ridge=best)
        torch.testing.assert_close(sel.predict(k[val][:, fit])[:, col], pred, rtol=1e-7, atol=1e-9)


def test_one_dimensional_targets_and_a_ridge_that_must_win() -> None:
    k, _ = _problem(1)
    # pure-noise labels: the largest ridge (predict ~0) must win on validation
    noise = torch.randn(60, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    sel = select_ridge_validation(k[:40, :40], noise[:40], k[40:, :40], noise[40:], [1e-8, 1e4])
    assert sel.ridge.shape == ()
    assert float(sel.ridge) == 1e4
    assert sel.validation_mse.shape == (2,)
    assert float(sel.best_mse) == pytest.approx(float(sel.validation_mse.min()))


def test_errors_name_the_argument() -> None:
    k, y = _problem(2)
    with pytest.raises(NtklabValueError, match="ridges"):
        select_ridge_validation(k[:40, :40], y[:40], k[40:, :40], y[40:], [0.0])
    with pytest.raises(NtklabValueError, match="k_val_fit"):
        select_ridge_validation(k[:40, :40], y[:40], k[40:, :30], y[40:], [1.0])
    with pytest.raises(NtklabValueError, match="y_val"):
        select_ridge_validation(k[:40, :40], y[:40], k[40:, :40], y[40:, 0], [1.0])


def test_validation_split_is_a_partition() -> None:
    fit, val = validation_split(50, 0.2, generator=torch.Generator().manual_seed(0))
    assert len(val) == 10 and len(fit) == 40
    assert torch.equal(torch.cat([fit, val]).sort().values, torch.arange(50))
    with pytest.raises(NtklabValueError, match="validation_fraction"):
        validation_split(10, 1.5, generator=torch.Generator())


def test_docstring_examples() -> None:
    import doctest

    import ntklab.dynamics.model_selection as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
