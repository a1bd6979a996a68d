"""Fuzzing ``empirical.ntk``: random models, shapes, dtypes and values, asserting "a clear
ntklab error or a finite result equal to the float64 reference", never a raw torch error.

The reference is the naive per-example ``torch.autograd`` Jacobian of the conftest, in
float64 on a float64 copy of the model. Seeded (``derandomize=True``) and bounded (35
examples, a deadline per example).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from conftest import naive_ntk
from ntklab.empirical import ntk
from ntklab.errors import NtklabError

METHODS = ["auto", "structured", "jacobian", "ntk_vp"]
OUTPUTS = ["trace", "full", "diagonal", "pseudo"]


def _model(kind: str, width: int, k: int, dtype: torch.dtype, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if kind == "mlp":
        net: nn.Module = nn.Sequential(
            nn.Linear(3, width), nn.Tanh(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, k)
        )
    elif kind == "mlp_layernorm":
        net = nn.Sequential(
            nn.Linear(3, width), nn.LayerNorm(width), nn.GELU(), nn.Linear(width, k)
        )
    else:  # a small conv net on (2, 5, 5) images
        net = nn.Sequential(
            nn.Conv2d(2, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 3, 3, stride=2),
            nn.Flatten(),
            nn.Linear(3 * 2 * 2, k),
        )
    return net.to(dtype)


def _input_shape(kind: str) -> tuple[int, ...]:
    return (2, 5, 5) if kind == "conv" else (3,)


@st.composite
def _cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["mlp", "mlp_layernorm", "conv"]))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    n1 = draw(st.integers(0, 4))
    n2 = draw(st.one_of(st.none(), st.integers(0, 3)))
    shape = _input_shape(kind)
    corrupt = draw(
        st.sampled_from(
            ["none"] * 6
            + ["nan", "inf", "huge", "wrong_features", "wrong_dtype", "int", "list", "numpy"]
        )
    )
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    return {
        "kind": kind,
        "width": draw(st.integers(1, 6)),
        "k": draw(st.integers(1, 3)),
        "dtype": dtype,
        "seed": draw(st.integers(0, 2**16)),
        "n1": n1,
        "n2": n2,
        "shape": shape,
        "corrupt": corrupt,
        "scale": scale,
        "method": draw(st.sampled_from(METHODS)),
        "outputs": draw(st.sampled_from(OUTPUTS)),
    }


def _inputs(case: dict[str, Any]) -> tuple[object, object]:
    gen = torch.Generator().manual_seed(case["seed"])
    dtype, shape = case["dtype"], case["shape"]
    x1: object = torch.randn(case["n1"], *shape, dtype=dtype, generator=gen) * case["scale"]
    x2: object = None
    if case["n2"] is not None:
        x2 = torch.randn(case["n2"], *shape, dtype=dtype, generator=gen) * case["scale"]
    c = case["corrupt"]
    assert isinstance(x1, Tensor)
    if c in ("nan", "inf") and x1.numel():
        x1 = x1.clone()
        x1.view(-1)[0] = float("nan") if c == "nan" else float("inf")
    elif c == "huge":
        x1 = x1 * torch.finfo(dtype).max / 4
    elif c == "wrong_features":
        x1 = torch.randn(case["n1"], *shape[:-1], shape[-1] + 1, dtype=dtype, generator=gen)
    elif c == "wrong_dtype":
        x1 = x1.to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif c == "int":
        x1 = x1.round().to(torch.int64)
    elif c == "list":
        x1 = x1.tolist()
    elif c == "numpy":
        x1 = x1.numpy()
    return x1, x2


def _reference(model: nn.Module, x1: Tensor, x2: Tensor | None, outputs: str) -> Tensor:
    ref = copy.deepcopy(model).double()
    full = naive_ntk(ref, x1.double(), None if x2 is None else x2.double())  # (n1, n2, k, k)
    if outputs == "full":
        return full
    if outputs == "diagonal":
        return full.diagonal(dim1=2, dim2=3)
    if outputs == "trace":
        return full.diagonal(dim1=2, dim2=3).mean(-1)
    return full.sum((2, 3)) / full.shape[-1]  # the pseudo-NTK


@settings(
    max_examples=35,
    deadline=20_000,  # per example; the first calls warm torch.func up
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=_cases())
def test_ntk_gives_a_clear_error_or_the_float64_reference(case: dict[str, Any]) -> None:
    model = _model(case["kind"], case["width"], case["k"], case["dtype"], case["seed"])
    x1, x2 = _inputs(case)
    try:
        got = ntk(model, x1, x2, method=case["method"], outputs=case["outputs"])  # type: ignore[arg-type]
    except NtklabError as err:
        assert str(err), "an ntklab error must say what was wrong"
        # a clean case must not be refused
        assert case["corrupt"] != "none", f"a valid call was refused: {err}"
        return
    # what was not refused must be valid and right
    assert isinstance(x1, Tensor) and x1.is_floating_point() and x1.dtype == case["dtype"]
    assert bool(torch.isfinite(got).all()), "a non-finite kernel was returned silently"
    assert got.dtype == case["dtype"]
    n1, n2 = x1.shape[0], x1.shape[0] if x2 is None else case["n2"]
    k = case["k"]
    tail = {"trace": (), "full": (k, k), "diagonal": (k,), "pseudo": ()}[case["outputs"]]
    assert got.shape == (n1, n2, *tail)
    if got.numel() == 0:  # an empty batch: an empty kernel, as Architecture.kernel
        return
    ref = _reference(model, x1, x2 if isinstance(x2, Tensor) else None, case["outputs"])
    rtol = 1e-3 if case["dtype"] == torch.float32 else 1e-8
    size = float(ref.abs().max())
    torch.testing.assert_close(got.double(), ref, rtol=rtol, atol=rtol * size + 1e-30)


def test_the_fuzz_inputs_cover_every_kind_of_bad_input() -> None:
    """The strategy itself: each corruption yields the bad input it names (so the fuzz test
    above really drives those paths)."""
    case = {"seed": 0, "dtype": torch.float32, "n1": 2, "n2": None, "shape": (3,), "scale": 1.0}
    kinds = {c: _inputs({**case, "corrupt": c})[0] for c in ["nan", "list", "numpy", "int"]}
    assert bool(torch.isnan(kinds["nan"]).any())  # type: ignore[arg-type]
    assert isinstance(kinds["list"], list) and isinstance(kinds["numpy"], np.ndarray)
    assert kinds["int"].dtype == torch.int64  # type: ignore[union-attr]
    with pytest.raises(NtklabError):
        ntk(_model("mlp", 2, 1, torch.float32, 0), kinds["int"])
