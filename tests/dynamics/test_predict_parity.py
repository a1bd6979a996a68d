"""``ntklab.predict`` against neural-tangents 0.6.5 (tests/data/nt_reference_kernels.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import ntklab as nl
from ntklab import predict

REF = json.loads((Path(__file__).parents[1] / "data" / "nt_reference_kernels.json").read_text())[
    "predict"
]
F64 = torch.float64


def t_(v: object) -> torch.Tensor:
    return torch.tensor(v, dtype=F64)


def arch() -> nl.Architecture:
    layers = []
    for spec in REF["architecture"]:
        if spec["layer"] == "Dense":
            layers.append(
                nl.Dense(
                    w_std=spec["w_std"],
                    b_std=spec["b_std"],
                    parameterization=spec["parameterization"],
                )
            )
        else:
            layers.append(getattr(nl, spec["layer"])())
    return nl.serial(*layers)


def close(actual: torch.Tensor, expected: object) -> None:
    torch.testing.assert_close(actual, t_(expected), rtol=1e-6, atol=1e-9)


def test_reference_kernels_are_ntklab_kernels() -> None:
    a = arch()
    x_train, x_test = t_(REF["x_train"]), t_(REF["x_test"])
    close(a.kernel(x_train).ntk, REF["k_train_train"]["ntk"])
    close(a.kernel(x_test, x_train).nngp, REF["k_test_train"]["nngp"])


@pytest.mark.parametrize(
    "case",
    REF["gradient_descent_mse"]["results"],
    ids=lambda c: f"{c['diag_reg_name']}-{c['init']}-t{c['t']}",
)
def test_gradient_descent_mse(case: dict) -> None:
    fn = predict.gradient_descent_mse(
        t_(REF["k_train_train"]["ntk"]),
        t_(REF["y_train"]),
        learning_rate=REF["learning_rate"],
        diag_reg=case["diag_reg"],
        diag_reg_absolute_scale=case["diag_reg_absolute_scale"],
    )
    if case["init"] == "random":
        f0_train, f0_test = t_(REF["fx_train_0"]), t_(REF["fx_test_0"])
    else:
        f0_train, f0_test = 0.0, 0.0
    train, test = fn(case["t"], f0_train, f0_test, t_(REF["k_test_train"]["ntk"]))
    close(train, case["fx_train_t"])
    close(test, case["fx_test_t"])


@pytest.mark.parametrize(
    "case",
    REF["gradient_descent_mse_ensemble"]["results"],
    ids=lambda c: f"{c['get']}-t{c['t']}-{c['x_test']}",
)
def test_gradient_descent_mse_ensemble(case: dict) -> None:
    fn = predict.gradient_descent_mse_ensemble(
        arch(),
        t_(REF["x_train"]),
        t_(REF["y_train"]),
        learning_rate=REF["learning_rate"],
        diag_reg=REF["gradient_descent_mse_ensemble"]["diag_reg"],
    )
    x_test = t_(REF["x_test"]) if case["x_test"] == "x_test" else None
    out = fn(t=case["t"], x_test=x_test, get=case["get"], compute_cov=True)
    close(out.mean, case["mean"])
    close(out.covariance, case["covariance"])


@pytest.mark.parametrize("case", REF["gp_inference"]["results"], ids=lambda c: c["get"])
def test_gp_inference(case: dict) -> None:
    a = arch()
    x_train, x_test = t_(REF["x_train"]), t_(REF["x_test"])
    fn = predict.gp_inference(a.kernel(x_train), t_(REF["y_train"]), diag_reg=1e-3)
    out = fn(
        get=case["get"], k_test_train=a.kernel(x_test, x_train), k_test_test=a.kernel(x_test).nngp
    )
    close(out.mean, case["mean"])
    close(out.covariance, case["covariance"])


def test_get_tuple_returns_both() -> None:
    fn = predict.gradient_descent_mse_ensemble(
        arch(), t_(REF["x_train"]), t_(REF["y_train"]), diag_reg=1e-3
    )
    both = fn(t=1.0, x_test=t_(REF["x_test"]))
    torch.testing.assert_close(both.ntk, fn(t=1.0, x_test=t_(REF["x_test"]), get="ntk"))
    torch.testing.assert_close(both.nngp, fn(t=1.0, x_test=t_(REF["x_test"]), get="nngp"))
