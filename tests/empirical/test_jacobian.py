"""Jacobian contraction and NTK-vector products against the naive per-example reference."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from conftest import mlp3, naive_ntk
from ntklab.empirical._functional import Outputs, functional_model
from ntklab.empirical.jacobian import (
    jacobian_flops,
    jacobian_peak_bytes,
    ntk_jacobian,
    ntk_vp,
    ntk_vp_flops,
    ntk_vp_peak_bytes,
    probe,
)
from ntklab.errors import NtklabTypeError, NtklabValueError

Compute = Callable[..., Tensor]
METHODS: dict[str, Compute] = {"jacobian": ntk_jacobian, "ntk_vp": ntk_vp}
OUTPUTS: tuple[Outputs, ...] = ("trace", "full", "diagonal")
Case = tuple[str, nn.Module, Tensor, Tensor]


def reduce(full: Tensor, outputs: Outputs) -> Tensor:
    """neural-tangents' conventions from the (n1, n2, k, k) kernel."""
    if outputs == "full":
        return full
    diagonal = full.diagonal(dim1=2, dim2=3)
    return diagonal if outputs == "diagonal" else diagonal.mean(-1)


def assert_matches(got: Tensor, want: Tensor) -> None:
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10 * scale)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_agrees_with_naive_reference(model_and_inputs: Case, method: str) -> None:
    _, model, x1, x2 = model_and_inputs
    compute = METHODS[method]
    fm = functional_model(model)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    want_12 = naive_ntk(model, x1, x2)
    want_11 = naive_ntk(model, x1)
    for outputs in OUTPUTS:
        assert_matches(compute(fm, x1, x2, outputs), reduce(want_12, outputs))
        assert_matches(
            compute(fm, x2, x1, outputs), reduce(want_12.transpose(0, 1).transpose(2, 3), outputs)
        )
        assert_matches(compute(fm, x1, None, outputs), reduce(want_11, outputs))
    for name, value in model.state_dict().items():  # the module is left untouched
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize("method", sorted(METHODS))
def test_parameter_subset(model_and_inputs: Case, method: str) -> None:
    _, model, x1, x2 = model_and_inputs
    last = list(dict(model.named_parameters()))[-2:]  # the last layer's weight and bias
    fm = functional_model(model, last)
    want = naive_ntk(model, x1, x2, names=last)
    for outputs in OUTPUTS:
        got = METHODS[method](fm, x1, x2, outputs)
        assert_matches(got, reduce(want, outputs))
    assert_matches(METHODS[method](fm, x1, None, "full"), naive_ntk(model, x1, names=last))


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("outputs", OUTPUTS)
def test_chunking_changes_nothing(method: str, outputs: Outputs) -> None:
    torch.manual_seed(0)
    model = mlp3(3).double()
    fm = functional_model(model)
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(7, 5, dtype=torch.float64, generator=gen)
    x2 = torch.randn(5, 5, dtype=torch.float64, generator=gen)
    compute = METHODS[method]
    for other in (x2, None, x1[:3]):
        whole = compute(fm, x1, other, outputs, chunk_size=100)
        for size in (1, 2, 3):  # 7 = 3 + 3 + 1 and 5 = 3 + 2: ragged last chunks
            torch.testing.assert_close(
                compute(fm, x1, other, outputs, chunk_size=size),
                whole,
                rtol=1e-12,
                atol=1e-12 * float(whole.abs().max()),
            )


class _SumHead(nn.Module):
    """A model returning shape (n,) and holding a parameter its forward never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 4)
        self.unused = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.layer(x)).sum(-1)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_scalar_output_and_unused_parameter(method: str) -> None:
    torch.manual_seed(0)
    model = _SumHead().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    got = METHODS[method](functional_model(model), x, None, "full")
    assert got.shape == (4, 4, 1, 1)
    assert_matches(got, naive_ntk(model, x))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_keeps_float32(method: str) -> None:
    torch.manual_seed(0)
    model = mlp3(2)
    fm = functional_model(model)
    x1, x2 = torch.randn(4, 5), torch.randn(3, 5)
    want = naive_ntk(model.double(), x1.double(), x2.double())
    for outputs in OUTPUTS:
        got = METHODS[method](fm, x1, x2, outputs)
        assert got.dtype == torch.float32
        assert got.device == x1.device
        torch.testing.assert_close(got.double(), reduce(want, outputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_differentiable_in_inputs(method: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    fm = functional_model(model)
    x1 = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    x2 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    compute = METHODS[method]
    assert torch.autograd.gradcheck(lambda a, b: compute(fm, a, b, "full"), (x1, x2))
    assert torch.autograd.gradcheck(lambda a: compute(fm, a, None, "trace", chunk_size=2), (x1,))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_bad_input(method: str) -> None:
    fm = functional_model(mlp3(2).double())
    x = torch.randn(4, 5, dtype=torch.float64)
    compute = METHODS[method]
    with pytest.raises(NtklabValueError, match="outputs"):
        compute(fm, x, None, "trace_axes")
    with pytest.raises(NtklabValueError, match="chunk_size"):
        compute(fm, x, None, "trace", chunk_size=0)
    with pytest.raises(NtklabValueError, match="x2"):
        compute(fm, x, torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(NtklabTypeError, match="x1"):
        compute(fm, x.float())


def test_probe_counts_outputs_activations_and_flops() -> None:
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
    got = probe(functional_model(model), torch.randn(4, 5))
    assert got.n_outputs == 3
    assert got.forward_flops == 2 * (5 * 16 + 16 * 3)
    # saved: the input of each Linear (5, 16) and ReLU's output (16)
    assert got.activations == 5 + 16 + 16


def test_cost_models_follow_the_formulas() -> None:
    fm = functional_model(mlp3(4).double())
    p, f = fm.n_params, 2.0 * fm.n_params
    assert jacobian_flops(fm, 3, 5, 4, "trace") == 8 * 9 * f + 2 * 15 * 4 * p
    assert jacobian_flops(fm, 3, 5, 4, "full") == 8 * 9 * f + 2 * 15 * 16 * p
    assert ntk_vp_flops(fm, 3, 5, 4, "full") == 5 * 9 * f + 3 * f + 2 * 15 * 4 * f
    assert ntk_vp_flops(fm, 3, 5, 4, "trace", forward_flops=10.0) == 5 * 9 * 10 + 30 + 1200

    # jacobian: 3 examples' rows stored (from chunks of 2: S = 2 (10 A + 4 P)), then a chunk of
    # 2 streamed with a (5, 3) block; the result
    def margin(nbytes: int) -> int:
        return math.ceil(1.02 * nbytes) + 2**18

    assert jacobian_peak_bytes(fm, 3, 5, 4, "diagonal", chunk_size=2, activations=7) == margin(
        8 * (3 * 4 * p + max(2 * (10 * 7 + 4 * p), 2 * (4 * p + 10 * 7) + 5 * 3 * 4) + 15 * 4)
    )
    # unchunked: the stored side in one piece (S = 3 * 10 A), streamed chunks of 5
    assert jacobian_peak_bytes(fm, 3, 5, 4, "trace", activations=7) == margin(
        8 * (3 * 4 * p + max(3 * 10 * 7, 5 * (4 * p + 10 * 7) + 5 * 3) + 15)
    )
    assert ntk_vp_peak_bytes(fm, 3, 5, 4, "trace", chunk_size=2, activations=7) == margin(
        8 * (2 * (4 * p + 10 * 7 + 4 * 3 * (7 + 8)) + 3 * 7 + 15)
    )


# Measured peak memory: a fresh interpreter, glibc told to map every allocation >= 64 KiB so
# that the resident set follows the tensors; VmHWM (peak RSS) reset before each call.
_MEASURE = """
import gc, os
import torch
from torch import nn
from ntklab.empirical._functional import functional_model
from ntklab.empirical import jacobian as jac

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(200, 192), nn.ReLU(), nn.Linear(192, 192), nn.ReLU(),
                    nn.Linear(192, 10))
fm = functional_model(net)
x1, x2 = torch.randn(24, 200), torch.randn(40, 200)
info = jac.probe(fm, x1)
for name, compute, model in [("jacobian", jac.ntk_jacobian, jac.jacobian_peak_bytes),
                             ("ntk_vp", jac.ntk_vp, jac.ntk_vp_peak_bytes)]:
    for outputs, chunk, other in [("trace", 8, x2), ("full", 5, x2), ("full", 5, None)]:
        compute(fm, x1[:2], x2[:2], outputs, chunk_size=chunk)  # warm up
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            raise SystemExit("cannot reset the peak resident set size")
        before = rss("VmRSS:")
        out = compute(fm, x1, other, outputs, chunk_size=chunk)
        used = rss("VmHWM:") - before
        n2 = 24 if other is None else 40
        bound = model(fm, 24, n2, 10, outputs, chunk_size=chunk, activations=info.activations)
        print(name, outputs, n2, used, bound)
        del out
"""


def test_peak_bytes_bound_measured_memory() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS measurement reads /proc (Linux)")
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_MEASURE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "cannot reset" in done.stderr:
        pytest.skip("cannot reset the peak resident set size (/proc/self/clear_refs)")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 6
    for line in lines:
        used, bound = map(int, line.split()[3:])
        assert used <= bound <= 3 * used, line
