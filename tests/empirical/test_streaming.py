"""Streaming the empirical NTK in blocks of input pairs: blocked equals unblocked, the
symmetric kernel computes only the upper blocks and mirrors them, ``out=`` is filled in
place, and ``progress`` rises monotonically to exactly 1.0."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch import Tensor

import ntklab as nl
from conftest import F64, cnn, mlp3, naive_ntk
from ntklab.empirical import structured as st
from ntklab.empirical._functional import functional_model
from ntklab.empirical.ntk import NARROW_COLUMNS
from ntklab.empirical.streaming import fill_blocks, result_shape
from ntklab.errors import NtklabTypeError, NtklabValueError

OUTPUTS = ["trace", "full", "diagonal", "pseudo"]


@pytest.mark.parametrize("outputs", OUTPUTS)
@pytest.mark.parametrize("method", ["structured", "jacobian", "ntk_vp"])
def test_blocked_equals_unblocked(outputs: str, method: str) -> None:
    torch.manual_seed(0)
    model = cnn(3).to(F64)
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(11, 3, 8, 8, dtype=F64, generator=gen)  # ragged against blocks of 4
    x2 = torch.randn(6, 3, 8, 8, dtype=F64, generator=gen)
    for second in (x2, None):
        whole = nl.empirical.ntk(model, x1, second, outputs=outputs, method=method)  # type: ignore[arg-type]
        fractions: list[float] = []
        record = fractions.append
        blocked = nl.empirical.ntk(
            model,
            x1,
            second,
            outputs=outputs,  # type: ignore[arg-type]
            method=method,  # type: ignore[arg-type]
            block_size=4,
            progress=lambda f, _m: record(f),  # noqa: B023 (used within the iteration)
        )
        torch.testing.assert_close(
            blocked, whole, rtol=1e-12, atol=1e-12 * float(whole.abs().max())
        )
        # 3 x 2 blocks, or the 6 blocks on and above the diagonal of a 3 x 3 grid
        assert len(fractions) == 6
        assert all(a < b for a, b in itertools.pairwise(fractions))
        assert fractions[-1] == 1.0


def _reference(n: int, k: int, outputs: str) -> Tensor:
    """A symmetric kernel J J^T with distinct output blocks, in the layout of ``outputs``."""
    jac = torch.randn(n, k, 7, dtype=F64, generator=torch.Generator().manual_seed(5))
    full = torch.einsum("iap,jbp->ijab", jac, jac)
    full = (full + full.permute(1, 0, 3, 2)) / 2  # symmetric to the last bit
    if outputs == "full":
        return full
    diag = full.diagonal(dim1=2, dim2=3)
    return diag if outputs == "diagonal" else diag.mean(-1)


@pytest.mark.parametrize("outputs", ["trace", "full", "diagonal"])
def test_symmetric_fill_computes_upper_blocks_and_mirrors(outputs: str) -> None:
    """A stand-in method that reads blocks off a known kernel and records its calls: only
    blocks on and above the diagonal are asked for, and the mirrored ones (output axes
    swapped for full) complete the kernel exactly."""
    n, k = 10, 3
    ref = _reference(n, k, outputs)
    x = torch.arange(n, dtype=F64)[:, None]  # the "inputs" are their own indices
    calls: list[tuple[int, int, bool]] = []

    def compute(_fm: Any, rows: Tensor, cols: Tensor | None, _outputs: str) -> Tensor:
        i = rows[:, 0].long()
        j = i if cols is None else cols[:, 0].long()
        calls.append((int(i[0]), int(j[0]), cols is None))
        assert int(j[0]) >= int(i[0])
        return ref[i][:, j].clone()

    out = torch.full(result_shape(n, n, k, outputs), float("nan"), dtype=F64)  # type: ignore[arg-type]
    reports: list[tuple[float, str]] = []
    got = fill_blocks(
        compute,
        None,  # type: ignore[arg-type]
        x,
        None,
        outputs,  # type: ignore[arg-type]
        out,
        4,
        3,
        lambda f, m: reports.append((f, m)),
    )
    assert got is out
    assert torch.equal(out, ref)
    # square blocks of min(4, 3) = 3: starts 0, 3, 6, 9 -> 4 diagonal + 6 upper blocks
    assert sorted(calls) == [
        (0, 0, True), (0, 3, False), (0, 6, False), (0, 9, False), (3, 3, True),
        (3, 6, False), (3, 9, False), (6, 6, True), (6, 9, False), (9, 9, True),
    ]  # fmt: skip
    fractions = [f for f, _ in reports]
    written = [9, 27, 45, 51, 60, 78, 84, 93, 99, 100]  # entries after each block
    assert fractions == pytest.approx([w / 100 for w in written[:-1]] + [1.0], abs=0)
    assert "block 10/10" in reports[-1][1]


@pytest.mark.parametrize("outputs", ["trace", "full", "diagonal"])
def test_rectangular_symmetric_fill(outputs: str) -> None:
    """Row blocks of 4 with their square diagonal blocks and column blocks of 3 to their
    right: the kernel exactly, each row block one tensor for its whole row."""
    n, k = 10, 3
    ref = _reference(n, k, outputs)
    x = torch.arange(n, dtype=F64)[:, None]
    calls: list[tuple[int, int, int, bool]] = []
    row_tensors: dict[int, set[int]] = {}

    def compute(_fm: Any, rows: Tensor, cols: Tensor | None, _outputs: str) -> Tensor:
        i = rows[:, 0].long()
        j = i if cols is None else cols[:, 0].long()
        calls.append((int(i[0]), int(j[0]), len(j), cols is None))
        row_tensors.setdefault(int(i[0]), set()).add(id(rows))
        return ref[i][:, j].clone()

    out = torch.full(result_shape(n, n, k, outputs), float("nan"), dtype=F64)  # type: ignore[arg-type]
    reports: list[tuple[float, str]] = []
    fill_blocks(
        compute,
        None,  # type: ignore[arg-type]
        x,
        None,
        outputs,  # type: ignore[arg-type]
        out,
        4,
        3,
        lambda f, m: reports.append((f, m)),
        rectangular=True,
    )
    assert torch.equal(out, ref)
    assert calls == [
        (0, 0, 4, True), (0, 4, 3, False), (0, 7, 3, False),
        (4, 4, 4, True), (4, 8, 2, False),
        (8, 8, 2, True),
    ]  # fmt: skip
    assert all(len(ids) == 1 for ids in row_tensors.values())
    fractions = [f for f, _ in reports]
    assert all(a < b for a, b in itertools.pairwise(fractions)) and fractions[-1] == 1.0
    assert "block 6/6" in reports[-1][1]


def test_structured_plan_wide_rows() -> None:
    """A symmetric structured kernel that must be blocked gets the widest row blocks that
    fit beside narrow column blocks (more rows would not fit), and the blocked kernel is
    the unblocked one."""
    torch.manual_seed(0)
    model = cnn(3).to(F64)
    x = torch.randn(40, 3, 8, 8, dtype=F64, generator=torch.Generator().manual_seed(2))
    fm = functional_model(model)
    whole = nl.empirical.ntk(model, x, method="structured")
    full = nl.empirical.plan(fm, x, None, "trace", "structured")
    budget = full.result_bytes + full.block_bytes // 3
    chosen = nl.empirical.plan(fm, x, None, "trace", "structured", budget)
    assert chosen.block1 < 40 and chosen.block2 == min(chosen.block1, NARROW_COLUMNS)
    peak = st.structured_peak_bytes
    wider = chosen.block1 + 1
    assert peak(fm, wider, min(wider, NARROW_COLUMNS), 3, "trace", x=x) > (
        budget - full.result_bytes
    )
    blocked = nl.empirical.ntk(model, x, method="structured", max_memory=budget)
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12 * float(whole.abs().max()))


def test_out_is_filled_in_place_and_budget_excludes_it() -> None:
    torch.manual_seed(0)
    model = mlp3(3).to(F64)
    x1 = torch.randn(9, 5, dtype=F64)
    x2 = torch.randn(4, 5, dtype=F64)
    whole = nl.empirical.ntk(model, x1, x2, outputs="full")
    big = torch.full((9, 6, 3, 3), float("nan"), dtype=F64)
    view = big[:, 1:5]  # not contiguous
    got = nl.empirical.ntk(model, x1, x2, outputs="full", out=view, block_size=2)
    assert got is view
    torch.testing.assert_close(big[:, 1:5], whole, rtol=1e-12, atol=1e-12)
    assert bool(big[:, 0].isnan().all()) and bool(big[:, 5].isnan().all())
    fractions: list[float] = []
    pseudo = torch.empty(9, 9, dtype=F64)
    nl.empirical.ntk(
        model, x1, outputs="pseudo", out=pseudo, progress=lambda f, _m: fractions.append(f)
    )
    torch.testing.assert_close(pseudo, nl.empirical.ntk(model, x1, outputs="pseudo"))
    assert fractions[-1] == 1.0


def test_out_budget_is_all_scratch() -> None:
    """With ``out`` the result is the caller's: the smallest budget that works without it,
    less the result's bytes, still works with it (and fails without it)."""
    torch.manual_seed(0)
    model = mlp3(3).to(F64)
    x1 = torch.randn(9, 5, dtype=F64)
    x2 = torch.randn(4, 5, dtype=F64)
    fm = nl.empirical.functional_model(model)
    lo, hi = 1, 2**26  # bisection for the least budget that plan accepts
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            nl.empirical.plan(fm, x1, x2, "full", max_memory=mid)
            hi = mid
        except NtklabValueError:
            lo = mid
    result = 9 * 4 * 3 * 3 * 8
    scratch = hi - result
    with pytest.raises(NtklabValueError, match="max_memory"):
        nl.empirical.ntk(model, x1, x2, outputs="full", max_memory=scratch)
    out = torch.empty(9, 4, 3, 3, dtype=F64)
    nl.empirical.ntk(model, x1, x2, outputs="full", out=out, max_memory=scratch)
    torch.testing.assert_close(out, nl.empirical.ntk(model, x1, x2, outputs="full"))


def test_single_block_reports_progress_once() -> None:
    model = mlp3(2).to(F64)
    x = torch.randn(5, 5, dtype=F64)
    reports: list[tuple[float, str]] = []
    nl.empirical.ntk(model, x, progress=lambda f, m: reports.append((f, m)))
    assert [f for f, _ in reports] == [1.0]


def test_bad_streaming_arguments() -> None:
    model = mlp3(2).to(F64)
    x = torch.randn(5, 5, dtype=F64)
    with pytest.raises(NtklabValueError, match=r"out: expected the result's shape \(5, 5, 2, 2\)"):
        nl.empirical.ntk(model, x, outputs="full", out=torch.empty(5, 5, dtype=F64))
    with pytest.raises(NtklabTypeError, match=r"out: expected the model's dtype torch\.float64"):
        nl.empirical.ntk(model, x, out=torch.empty(5, 5))
    with pytest.raises(NtklabTypeError, match=r"out: expected a torch\.Tensor"):
        nl.empirical.ntk(model, x, out=[[0.0] * 5] * 5)  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="progress: expected None or a callable"):
        nl.empirical.ntk(model, x, progress=0.5)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="block_size: expected a positive int"):
        nl.empirical.ntk(model, x, block_size=0)
    with pytest.raises(NtklabTypeError, match="block_size: expected a positive int"):
        nl.empirical.ntk(model, x, block_size=2.0)  # type: ignore[arg-type]


def test_x2_is_x1_is_the_symmetric_kernel() -> None:
    """Passing x1 as x2 computes only the upper blocks too (6 of a 3 x 3 grid)."""
    torch.manual_seed(0)
    model = mlp3(2).to(F64)
    x = torch.randn(11, 5, dtype=F64)
    fractions: list[float] = []
    got = nl.empirical.ntk(model, x, x, block_size=4, progress=lambda f, _m: fractions.append(f))
    assert len(fractions) == 6
    torch.testing.assert_close(got, nl.empirical.ntk(model, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("symmetric", [True, False], ids=["x2=None", "x2"])
def test_structured_row_blocks_captured_once(
    symmetric: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of 4 of 11 inputs: each row block's factors are formed once and reused for its
    row (3 row blocks, plus 3 column blocks above the diagonal or 3 x 2 of x2), and the
    kernel is the unblocked one."""

    torch.manual_seed(0)
    model = cnn(3).to(F64)
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(11, 3, 8, 8, dtype=F64, generator=gen)
    x2 = None if symmetric else torch.randn(6, 3, 8, 8, dtype=F64, generator=gen)
    whole = nl.empirical.ntk(model, x1, x2, method="structured")
    sizes: list[int] = []
    original = st._batch_factors

    def counted(*args: Any, **kwargs: Any) -> Any:
        sizes.append(int(args[3].shape[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(st, "_batch_factors", counted)
    blocked = nl.empirical.ntk(model, x1, x2, method="structured", block_size=4)
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12 * float(whole.abs().max()))
    assert sizes == ([4, 4, 3, 4, 3, 3] if symmetric else [4, 4, 2, 4, 4, 2, 3, 4, 2])
    assert st._ROWS.entry is None  # nothing kept after the call


def test_reusing_rows_sees_in_place_changes() -> None:
    """Kept factors are not reused once a parameter or the input changed in place, and are
    dropped on leaving the context."""

    torch.manual_seed(0)
    model = mlp3(2).to(F64)
    x1 = torch.randn(5, 5, dtype=F64)
    x2 = torch.randn(3, 5, dtype=F64)
    fm = functional_model(model)
    with st.reusing_rows():
        st.ntk_structured(fm, x1, x2, "trace")
        with torch.no_grad():
            dict(model.named_parameters())["0.weight"].mul_(1.5)
        after_weight = st.ntk_structured(fm, x1, x2, "trace")
        x1.mul_(0.5)
        after_input = st.ntk_structured(fm, x1, x2, "trace")
        assert st._ROWS.entry is not None
    assert st._ROWS.entry is None
    ref = naive_ntk(model, x1, x2).diagonal(dim1=2, dim2=3).mean(-1)
    torch.testing.assert_close(after_input, ref, rtol=1e-12, atol=1e-12)
    x1.mul_(2.0)
    ref2 = naive_ntk(model, x1, x2).diagonal(dim1=2, dim2=3).mean(-1)
    torch.testing.assert_close(after_weight, ref2, rtol=1e-12, atol=1e-12)
