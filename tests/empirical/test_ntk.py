"""The front door ``ntklab.empirical.ntk``: every method and the blocked evaluation agree
with the naive reference; bad input gets a clear error."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import ntklab as nl
from conftest import F64, mlp3, naive_ntk
from ntklab.empirical import functional_model, plan
from ntklab.errors import NtklabTypeError, NtklabValueError


def _expected(model: nn.Module, x1: Tensor, x2: Tensor | None, outputs: str) -> Tensor:
    full = naive_ntk(model, x1, x2)
    if outputs == "full":
        return full
    diag = full.diagonal(dim1=2, dim2=3)
    return diag if outputs == "diagonal" else diag.mean(-1)


@pytest.mark.parametrize("method", ["auto", "structured", "jacobian", "ntk_vp"])
@pytest.mark.parametrize("outputs", ["trace", "full", "diagonal"])
def test_every_method_matches_the_naive_reference(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], method: str, outputs: str
) -> None:
    _, model, x1, x2 = model_and_inputs
    for second in (x2, None):
        got = nl.empirical.ntk(model, x1, second, outputs=outputs, method=method)  # type: ignore[arg-type]
        want = _expected(model, x1, second, outputs)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))


@pytest.mark.parametrize("outputs", ["trace", "full", "diagonal"])
@pytest.mark.parametrize("method", ["structured", "jacobian", "ntk_vp"])
def test_blocked_evaluation_equals_one_block(outputs: str, method: str) -> None:
    torch.manual_seed(0)
    model = mlp3(3).to(F64)
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(23, 5, dtype=F64, generator=gen)  # ragged against any power-of-two block
    x2 = torch.randn(17, 5, dtype=F64, generator=gen)
    fm = functional_model(model)
    for second in (x2, None):
        whole = nl.empirical.ntk(model, x1, second, outputs=outputs, method=method)  # type: ignore[arg-type]
        unbounded = plan(fm, x1, second, outputs, method)  # type: ignore[arg-type]
        budget = None
        for fraction in (0.3, 0.5, 0.7, 0.9):  # the tightest budget that fits some block
            budget = unbounded.result_bytes + int(unbounded.block_bytes * fraction)
            try:
                chosen = plan(fm, x1, second, outputs, method, budget)  # type: ignore[arg-type]
                break
            except NtklabValueError:
                continue
        assert chosen.block1 < 23 or chosen.block2 < (17 if second is not None else 23)
        blocked = nl.empirical.ntk(
            model,
            x1,
            second,
            outputs=outputs,
            method=method,  # type: ignore[arg-type]
            max_memory=budget,
        )
        torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12)


def test_parameter_subset_and_values() -> None:
    torch.manual_seed(0)
    model = mlp3(2).to(F64)
    x = torch.randn(4, 5, dtype=F64)
    last = ["4.weight", "4.bias"]
    got = nl.empirical.ntk(model, x, params=last, outputs="full")
    torch.testing.assert_close(got, naive_ntk(model, x, names=last), rtol=1e-10, atol=1e-12)
    # the last layer's NTK is feature Gram + 1 on the output diagonal, a closed form
    feats = model[:4](x)
    expected = (feats @ feats.T + 1.0)[:, :, None, None] * torch.eye(2, dtype=F64)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_dtype_is_kept() -> None:
    model = mlp3(2)
    k = nl.empirical.ntk(model, torch.randn(3, 5))
    assert k.dtype == torch.float32 and k.shape == (3, 3)


def test_bad_input() -> None:
    model = mlp3(1).to(F64)
    x = torch.randn(3, 5, dtype=F64)
    with pytest.raises(NtklabValueError, match="model: expected a module with parameters"):
        nl.empirical.ntk(nn.ReLU(), x)
    with pytest.raises(NtklabTypeError, match=r"model: expected a torch\.nn\.Module"):
        nl.empirical.ntk(lambda t: t, x)  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match=r"x1: the model's forward rejected .* \(3, 7\)"):
        nl.empirical.ntk(model, torch.randn(3, 7, dtype=F64))
    with pytest.raises(NtklabValueError, match="x2: expected inputs of the shape of x1's"):
        nl.empirical.ntk(model, x, torch.randn(2, 5, 1, dtype=F64))
    with pytest.raises(NtklabValueError, match="params: expected names of the model's"):
        nl.empirical.ntk(model, x, params=["9.weight"])
    with pytest.raises(NtklabValueError, match=r"params: .* got '9\.bias'"):
        nl.empirical.ntk(model, x, params={"9.bias": torch.zeros(1, dtype=F64)})
    with pytest.raises(NtklabValueError, match=r"params\['4\.bias'\]: expected a tensor of shape"):
        nl.empirical.ntk(model, x, params={"4.bias": torch.zeros(3, dtype=F64)})
    with pytest.raises(NtklabTypeError, match="x1: expected the model's dtype"):
        nl.empirical.ntk(model, x.float())
    with pytest.raises(NtklabValueError, match="x1: expected the model's device"):
        nl.empirical.ntk(model, x.to("meta"))
    with pytest.raises(NtklabValueError, match="outputs: expected one of"):
        nl.empirical.ntk(model, x, outputs="sum")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="method: expected 'auto' or one of"):
        nl.empirical.ntk(model, x, method="fast")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="max_memory: expected more than the 72 bytes"):
        nl.empirical.ntk(model, x, max_memory=64)
    with pytest.raises(NtklabValueError, match="max_memory: expected at least"):
        nl.empirical.ntk(model, x, max_memory=100)
    with pytest.raises(NtklabTypeError, match="max_memory: expected an int"):
        nl.empirical.ntk(model, x, max_memory=1.5e6)  # type: ignore[arg-type]
