"""Data sets and results print on one line: shapes and dtypes, never the numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import ntklab as nl
from ntklab._repr import short_repr, summarize
from ntklab.data.datasets import Dataset
from ntklab.data.targets import random_trig_polynomial

F64 = torch.float64


def _check(obj: object, name: str, *fragments: str) -> str:
    text = repr(obj)
    assert "\n" not in text and len(text) < 400, text
    assert text.startswith(f"{name}("), text
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    return text


def test_summaries_name_shape_and_dtype() -> None:
    assert summarize(torch.zeros(300, 64, dtype=F64)) == "Tensor(300, 64) float64"
    assert summarize(torch.tensor(2.5)) == "tensor(2.5, float32)"
    assert summarize({f"k{i}": i for i in range(10)}) == "{10 entries}"
    assert summarize(list(range(100))) == "list of 100"
    assert summarize("x" * 500).endswith("...") and len(summarize("x" * 500)) == 60

    @short_repr
    @dataclasses.dataclass(frozen=True)
    class Box:
        x: torch.Tensor
        scale: float
        inner: object = None

    box = Box(torch.ones(1000, 3), 0.25, Box(torch.ones(2), 1.0))
    assert repr(box) == (
        "Box(x=Tensor(1000, 3) float32, scale=0.25, "
        "inner=Box(x=Tensor(2,) float32, scale=1, inner=None))"
    )


def test_a_data_set_prints_one_line() -> None:
    ds = Dataset(torch.zeros(300, 1, 8, 8), torch.zeros(300, dtype=torch.int64), 10, "digits")
    _check(ds, "Dataset", "'digits'", "(300, 1, 8, 8)", "10 classes")
    target = random_trig_polynomial(8, generator=torch.Generator().manual_seed(0))
    _check(target, type(target).__name__, "Tensor(")


def test_training_results_print_one_line() -> None:
    arch = nl.serial(nl.Dense(w_std=1.0, b_std=0.1), nl.Erf(), nl.Dense(w_std=1.0, b_std=0.1))
    x, y = torch.randn(300, 3, dtype=F64), torch.randn(300, 1, dtype=F64)
    net = arch.to_torch(16, in_features=3, dtype=F64)
    run = nl.nets.train(net, x, y, learning_rate=0.1, t=3, log_every=1)
    _check(run, "TrainingRun", "history=TrainingHistory(step=Tensor(4,) int64", "steps=3")
    ens = nl.nets.ensemble(arch, 50, 8, in_features=3, dtype=F64)
    _check(ens, "MLPEnsemble", "n_samples=50")
    trained = nl.nets.train_ensemble(ens, x, y, learning_rate=0.1, t=2, x_test=x[:5])
    _check(trained, "EnsembleTraining", "test_outputs=Tensor(2, 50, 5, 1) float64")


def test_dynamics_and_solver_results_print_one_line() -> None:
    arch = nl.serial(nl.Dense(w_std=1.0, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.0, b_std=0.1))
    x, y = torch.randn(30, 3, dtype=F64), torch.randn(30, 1, dtype=F64)
    k = arch.kernel(x)
    _check(nl.dynamics.linearized_dynamics(k.ntk, y), "LinearizedDynamics", "(30, 1)")
    g = nl.dynamics.ensemble_dynamics(arch, x, y).predict(1.0, x[:4], "ntk", compute_cov=True)
    _check(g, "Gaussian", "mean=Tensor(4, 1) float64", "covariance=Tensor(4, 4) float64")
    sol = nl.solvers.solve(k.ntk, y, 1.0, method="cholesky")
    _check(sol, type(sol).__name__, "Tensor(30, 1) float64")


@pytest.mark.parametrize("size", [10, 100_000])
def test_the_length_does_not_grow_with_the_data(size: int) -> None:
    ds = Dataset(torch.zeros(size, 4), torch.zeros(size, dtype=torch.int64), 2, "toy")
    assert len(repr(ds)) < 80
