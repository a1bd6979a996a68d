"""``ntk_operator``: products, diagonal and dense form against the naive reference."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from conftest import F64, mlp3, naive_ntk
from ntklab.empirical.operator import NTKOperator, ntk_operator
from ntklab.errors import NtklabTypeError, NtklabValueError


def close(actual: Tensor, expected: Tensor) -> None:
    assert_close(actual, expected, rtol=1e-10, atol=1e-10)


def dense_reference(model: nn.Module, x: Tensor, names: list[str] | None = None) -> Tensor:
    """The naive (n, n, k, k) kernel as the (n k, n k) matrix with entry [i k + a, j k + b]."""
    theta = naive_ntk(model, x, names=names)
    n, k = theta.shape[0], theta.shape[2]
    return theta.permute(0, 2, 1, 3).reshape(n * k, n * k)


def largest_op_input(fn: object) -> int:
    """The largest number of elements of any tensor that an aten op received while ``fn`` ran."""
    with torch.profiler.profile(record_shapes=True) as prof:
        fn()  # type: ignore[operator]
    sizes = [1]
    for event in prof.events():
        for shape in event.input_shapes:
            if isinstance(shape, list) and shape and all(isinstance(s, int) for s in shape):
                sizes.append(int(torch.tensor(shape).prod()))
    return max(sizes)


def test_matmul_equals_dense_kernel_times_vector(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor],
) -> None:
    _, model, x, _ = model_and_inputs
    op = ntk_operator(model, x)
    dense = dense_reference(model, x)
    n, k = x.shape[0], op.n_outputs
    assert op.shape == (n * k, n * k) == tuple(dense.shape)
    v = torch.randn(n, k, dtype=F64, generator=torch.Generator().manual_seed(2))
    expected = (dense @ v.reshape(-1)).reshape(n, k)
    close(op.matmul(v), expected)
    close(op @ v.reshape(-1), expected.reshape(-1))  # flattened layout


def test_matmul_of_a_block_of_vectors(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor],
) -> None:
    _, model, x, _ = model_and_inputs
    op = ntk_operator(model, x)
    dense = dense_reference(model, x)
    n, k, m = x.shape[0], op.n_outputs, 4
    block = torch.randn(n, k, m, dtype=F64, generator=torch.Generator().manual_seed(3))
    expected = dense @ block.reshape(n * k, m)  # shape: (n k, m)
    close(op @ block, expected.reshape(n, k, m))
    close(op @ block.reshape(n * k, m), expected)
    assert (op @ block[..., :0]).shape == (n, k, 0)


def test_diagonal_and_dense_form(model_and_inputs: tuple[str, nn.Module, Tensor, Tensor]) -> None:
    _, model, x, _ = model_and_inputs
    op = ntk_operator(model, x)
    dense = dense_reference(model, x)
    n, k = x.shape[0], op.n_outputs
    expected_diag = dense.diagonal().reshape(n, k)
    close(op.diagonal(), expected_diag.squeeze(1) if k == 1 else expected_diag)
    close(op.to_dense(), dense)


def test_small_memory_budget_gives_chunks_with_the_same_result() -> None:
    torch.manual_seed(0)
    model = mlp3(3).to(F64)
    x = torch.randn(7, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    dense = dense_reference(model, x)
    n_params = sum(p.numel() for p in model.parameters())
    # room for about 2 examples of the diagonal's Jacobians and 2 unit vectors of to_dense:
    op = ntk_operator(model, x, max_memory=2 * 3 * n_params * 8 * 4)
    close(op.diagonal(), dense.diagonal().reshape(7, 3))
    close(op.to_dense(), dense)  # 21 columns: ragged last block


def test_parameter_subset_and_values() -> None:
    torch.manual_seed(0)
    model = mlp3(2).to(F64)
    x = torch.randn(6, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    last = ["4.weight", "4.bias"]
    op = ntk_operator(model, x, params=last)
    v = torch.randn(6, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    dense = dense_reference(model, x, names=last)
    close(op @ v, (dense @ v.reshape(-1)).reshape(6, 2))
    # a mapping gives the values; the module keeps its own
    values = {name: p.detach() * 2.0 for name, p in model.named_parameters()}
    before = [p.detach().clone() for p in model.parameters()]
    op = ntk_operator(model, x, params=values)
    scaled = mlp3(2).to(F64)
    scaled.load_state_dict(values)
    close(op @ v, (dense_reference(scaled, x) @ v.reshape(-1)).reshape(6, 2))
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, q)


def test_n300_without_forming_theta_or_jacobian() -> None:
    """n = 300 for a small MLP: correct, and no op ever sees an (n, n) or (n, P) tensor."""
    torch.manual_seed(0)
    model = mlp3(1).to(F64)
    n = 300
    x = torch.randn(n, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    n_params = sum(p.numel() for p in model.parameters())  # 313: n P ~ n^2
    op = ntk_operator(model, x, max_memory=16 * n_params * 8 * 3)  # diagonal in chunks of 16
    v = torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(2))
    dense = dense_reference(model, x)
    close(op @ v, dense @ v)
    close(op.diagonal(), dense.diagonal())
    limit = n * n_params // 8  # far below both n^2 = 90,000 and n P = 93,900
    assert largest_op_input(lambda: op @ v) < limit
    assert largest_op_input(op.diagonal) < limit


def test_attributes_keep_dtype_and_device() -> None:
    torch.manual_seed(0)
    model = mlp3(10)  # float32
    x = torch.randn(4, 5)
    op = ntk_operator(model, x)
    assert isinstance(op, NTKOperator)
    assert (op.shape, op.n_outputs, op.n_inputs) == ((40, 40), 10, 4)
    assert op.dtype == torch.float32 and op.device == x.device
    assert (op @ torch.ones(4, 10)).dtype == torch.float32
    assert op.diagonal().shape == (4, 10)
    assert "shape=(40, 40)" in repr(op)
    with pytest.raises(AttributeError):  # frozen
        op.n_outputs = 3  # type: ignore[misc]


# ---------------------------------------------------------------------------------- bad input
@pytest.fixture
def op() -> NTKOperator:
    torch.manual_seed(0)
    return ntk_operator(mlp3(2).to(F64), torch.randn(4, 5, dtype=F64))


@pytest.mark.parametrize("shape", [(4,), (4, 3), (8, 2, 1), (3, 2, 5), (2, 4), ()])
def test_vector_of_wrong_shape(op: NTKOperator, shape: tuple[int, ...]) -> None:
    with pytest.raises(NtklabValueError, match=r"v: expected a vector of shape \(4, 2\) or \(8,\)"):
        op @ torch.zeros(shape, dtype=F64)


def test_vector_of_wrong_type_dtype_or_device(op: NTKOperator) -> None:
    with pytest.raises(NtklabTypeError, match="v: expected"):
        op.matmul([0.0] * 8)  # type: ignore[arg-type]
    with pytest.raises(
        NtklabTypeError,
        match=r"v: expected the operator's dtype torch\.float64, got torch\.float32",
    ):
        op @ torch.zeros(4, 2)
    with pytest.raises(NtklabValueError, match="v: expected the operator's device cpu, got meta"):
        op @ torch.zeros(4, 2, dtype=F64, device="meta")


def test_bad_model_and_inputs() -> None:
    x = torch.randn(4, 5, dtype=F64)
    with pytest.raises(NtklabValueError, match="model: expected a module with parameters"):
        ntk_operator(nn.ReLU(), x)
    with pytest.raises(NtklabTypeError, match=r"model: expected a torch\.nn\.Module"):
        ntk_operator(lambda t: t, x)  # type: ignore[arg-type]
    model = mlp3(1).to(F64)
    with pytest.raises(NtklabValueError, match=r"x: the model's forward rejected .* \(4, 6\)"):
        ntk_operator(model, torch.randn(4, 6, dtype=F64))
    with pytest.raises(NtklabTypeError, match=r"x: expected the model's dtype torch\.float64"):
        ntk_operator(model, x.float())
    with pytest.raises(NtklabValueError, match="x: expected the model's device cpu, got meta"):
        ntk_operator(model, x.to("meta"))
    with pytest.raises(NtklabValueError, match="params: expected names of the model's"):
        ntk_operator(model, x, params=["9.weight"])
    with pytest.raises(NtklabValueError, match="max_memory: expected a positive"):
        ntk_operator(model, x, max_memory=0)
