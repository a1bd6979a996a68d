"""Fuzz ``Architecture.kernel`` (issue 31): random shapes, dtypes and values, on small dense
and convolutional architectures, with and without ``input_shape``. Every call either raises
a clear ntklab error (:class:`~ntklab.errors.NtklabError`) or returns a finite kernel equal
to the float64 eager reference (the fused paths disabled); never a raw torch error.

Seeded (``derandomize=True``) and bounded in examples and time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch

import ntklab as nl
from ntklab.errors import NtklabError
from ntklab.kernels import Conv, FanInSum, FanOut, Flatten, GlobalAvgPool, parallel

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ARCHS = {
    "relu": lambda: nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5)),
    "erf": lambda: nl.serial(nl.Dense(w_std=1.2, b_std=0.2), nl.Erf(), nl.Dense(w_std=1.0)),
    "fan": lambda: nl.serial(
        nl.Dense(w_std=1.0, width=8),
        FanOut(2),
        parallel(nl.Relu(), [nl.Relu(), nl.Dense(w_std=1.0)]),
        FanInSum(),
        nl.Dense(),
    ),
    "conv": lambda: nl.serial(
        Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.1), nl.Relu(), GlobalAvgPool(), nl.Dense()
    ),
    "conv_flat": lambda: nl.serial(
        Conv(filter_shape=(2, 2), padding="VALID", w_std=1.4), nl.Relu(), Flatten(), nl.Dense()
    ),
    "conv1d": lambda: nl.serial(
        Conv(filter_shape=(3,), w_std=1.4), nl.Relu(), GlobalAvgPool(), nl.Dense()
    ),
}
SHAPES = {  # an input_shape each may carry (None: unknown)
    "relu": (3,),
    "erf": (2,),
    "fan": (4,),
    "conv": (3, None, None),
    "conv_flat": (2, None, None),
    "conv1d": (3, None),
}
DTYPES = [torch.float64, torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64]


@contextlib.contextmanager
def _eager() -> Iterator[None]:
    old = os.environ.get("NTKLAB_DISABLE_FUSED")
    os.environ["NTKLAB_DISABLE_FUSED"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["NTKLAB_DISABLE_FUSED"]
        else:
            os.environ["NTKLAB_DISABLE_FUSED"] = old


@st.composite
def _batch(draw: st.DrawFn, arch: str, n_max: int = 4) -> object:
    kind = draw(st.sampled_from(["tensor"] * 8 + ["list", "numpy", "scalar", "none"]))
    if kind == "scalar":
        return draw(st.sampled_from([1.0, 3, "x"]))
    if kind == "none":
        return None
    flat = int(SHAPES[arch][0] or 1)
    spatial = len(SHAPES[arch]) - 1
    rank = draw(st.sampled_from([spatial + 2] * 4 + [1, 2, 3, 4, 5]))
    sizes = [draw(st.integers(0, n_max))]
    for axis in range(1, rank):
        typical = flat if axis == 1 else draw(st.integers(3, 6))
        sizes.append(draw(st.sampled_from([typical] * 3 + [0, 1, 3, 5])))
    if rank > 2 and draw(st.booleans()):
        sizes = [sizes[0], *sizes[2:], sizes[1]]  # channels-last
    dtype = draw(st.sampled_from(DTYPES[:2] * 3 + DTYPES[2:]))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*sizes, generator=g, dtype=torch.float64)
    special = draw(st.sampled_from([None] * 6 + [float("nan"), float("inf"), 1e300]))
    if special is not None and x.numel():
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = special
    x = x > 0 if dtype == torch.bool else x.to(dtype)
    if kind == "list":
        return x.tolist()
    if kind == "numpy":
        return x.numpy()
    return x


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, bool, object, object]:
    arch = draw(st.sampled_from(sorted(ARCHS)))
    with_shape = draw(st.booleans())
    x1 = draw(_batch(arch))
    x2 = draw(st.one_of(st.none(), _batch(arch)))
    return arch, with_shape, x1, x2


@settings(
    derandomize=True,
    max_examples=35,
    deadline=10_000,  # ms per example: generous on a shared machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
@given(_case())
def test_kernel_gives_an_ntklab_error_or_the_float64_reference(
    case: tuple[str, bool, object, object],
) -> None:
    name, with_shape, x1, x2 = case
    arch = ARCHS[name]()
    if with_shape:
        arch = arch.with_input_shape(SHAPES[name])
    try:
        k = arch.kernel(x1, x2)  # type: ignore[arg-type]
    except NtklabError:
        return
    # accepted: float tensors of an accepted shape, finite
    assert isinstance(x1, torch.Tensor)
    assert x1.dtype in (torch.float32, torch.float64)
    assert x2 is None or isinstance(x2, torch.Tensor)
    b = None if x2 is None else x2.double()
    with _eager():
        ref = arch.kernel(x1.double(), b)
    for field in ("nngp", "ntk"):
        got, want = getattr(k, field), getattr(ref, field)
        assert got.dtype == x1.dtype
        assert bool(torch.isfinite(got).all()), field
        tol = 1e-9 if x1.dtype == torch.float64 else 2e-4
        scale = float(want.abs().max()) if want.numel() else 1.0
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * max(scale, 1e-30))


def test_the_fuzz_cases_reach_both_outcomes() -> None:
    """The strategy is not degenerate: some drawn cases compute, some are refused."""
    outcomes: set[str] = set()

    @settings(derandomize=True, max_examples=35, database=None, deadline=None)
    @given(_case())
    def collect(case: tuple[str, bool, object, object]) -> None:
        name, with_shape, x1, x2 = case
        arch = ARCHS[name]()
        if with_shape:
            arch = arch.with_input_shape(SHAPES[name])
        try:
            arch.kernel(x1, x2)  # type: ignore[arg-type]
            outcomes.add("computed")
        except NtklabError:
            outcomes.add("refused")
        except Exception:  # a raw error: the main test reports it
            outcomes.add("raw")

    collect()
    assert {"computed", "refused"} <= outcomes
    assert "raw" not in outcomes
