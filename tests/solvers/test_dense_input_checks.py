"""``psd_eigh`` and ``cholesky_with_jitter`` name a non-square matrix and NaN/inf entries as
such: before, a non-square matrix raised torch's raw error and a NaN matrix was called "not
positive semi-definite" (or raised LinAlgError from eigh)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.solvers import cholesky_with_jitter, psd_eigh

F64 = torch.float64
FACTORIZATIONS: list[Callable[..., object]] = [psd_eigh, cholesky_with_jitter]


@pytest.mark.parametrize("fn", FACTORIZATIONS)
def test_non_square_is_refused_naming_argument_and_shape(fn: Callable[..., object]) -> None:
    with pytest.raises(NtklabValueError, match=r"k_train: expected a square .* shape \(3, 4\)"):
        fn(torch.ones(3, 4, dtype=F64), name="k_train")
    with pytest.raises(NtklabValueError, match=r"matrix: expected a square .* shape \(5,\)"):
        fn(torch.ones(5, dtype=F64))
    with pytest.raises(NtklabTypeError, match="floating dtype"):
        fn(torch.ones(2, 2, dtype=torch.int64))


@pytest.mark.parametrize("fn", FACTORIZATIONS)
def test_nan_and_inf_are_named_not_called_indefinite(fn: Callable[..., object]) -> None:
    a = torch.eye(3, dtype=F64)
    a[0, 1] = a[1, 0] = float("nan")
    a[2, 2] = float("inf")
    with pytest.raises(
        NtklabValueError, match=r"expected finite values, got 2 NaN and 1 inf"
    ) as info:
        fn(a, name="gram")
    assert "positive semi-definite" not in str(info.value)
    assert str(info.value).startswith("gram: ")
    # a finite PSD matrix still passes
    fn(torch.eye(3, dtype=F64))
