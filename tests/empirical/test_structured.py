"""The structured empirical NTK against the naive per-example reference of conftest.py."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from conftest import Residual, cnn, naive_ntk
from ntklab.empirical import structured as st
from ntklab.empirical._functional import functional_model
from ntklab.empirical.structured import ntk_structured, structured_flops, structured_peak_bytes
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.nets.modules import DenseLayer

F64 = torch.float64
OUTPUTS = ("trace", "full", "diagonal")
TOL = {"atol": 1e-10, "rtol": 1e-10}


def reduce(full: Tensor, outputs: str) -> Tensor:
    """neural-tangents' conventions from the full (n1, n2, k, k) kernel."""
    if outputs == "full":
        return full
    diag = full.diagonal(dim1=2, dim2=3)
    return diag.mean(-1) if outputs == "trace" else diag


def check(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None,
    outputs: str = "full",
    names: list[str] | None = None,
    **kw: int,
) -> Tensor:
    """Assert agreement with the naive reference; return the structured kernel."""
    got = ntk_structured(functional_model(model, names), x1, x2, outputs, **kw)  # type: ignore[arg-type]
    torch.testing.assert_close(got, reduce(naive_ntk(model, x1, x2, names), outputs), **TOL)
    return got


def _mixed(layer: st._Layer, *args: object) -> str:
    return "pairwise" if isinstance(layer.module, nn.Conv2d) else "per_example"


@pytest.fixture(params=["pairwise", "per_example", "mixed", "auto"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force every covered layer onto one contraction, or convolutions onto the pairwise
    one and dense layers onto the other, splitting symmetric full tiles into groups of
    outputs; or let the cost model choose."""
    if request.param in ("pairwise", "per_example"):
        monkeypatch.setattr(st, "_choose_path", lambda *args: request.param)
        monkeypatch.setattr(st, "_SLAB_ROWS", 1)
    elif request.param == "mixed":
        monkeypatch.setattr(st, "_choose_path", _mixed)
        monkeypatch.setattr(st, "_SLAB_ROWS", 12)  # groups of 3 outputs for 5 examples
    return str(request.param)


# ----------------------------------------------------------------------- agreement


@pytest.mark.parametrize("outputs", OUTPUTS)
@pytest.mark.parametrize("given", [True, False], ids=["x2", "x2=None"])
def test_matches_naive(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], outputs: str, given: bool, path: str
) -> None:
    _, model, x1, x2 = model_and_inputs
    got = check(model, x1, x2 if given else None, outputs)
    n2 = x2.shape[0] if given else x1.shape[0]
    assert got.shape[:2] == (x1.shape[0], n2) and got.dtype == F64


@pytest.mark.parametrize("which", ["first", "last"])
def test_parameter_subset(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], which: str, path: str
) -> None:
    _, model, x1, x2 = model_and_inputs
    names = [n for n, _ in model.named_parameters()]
    prefix = names[0 if which == "first" else -1].rsplit(".", 1)[0]
    chosen = [n for n in names if n.rsplit(".", 1)[0] == prefix]
    check(model, x1, x2, "full", chosen)
    check(model, x1, None, "trace", chosen[:1])  # the weight alone


def test_bias_alone_and_fallback_alone(path: str) -> None:
    torch.manual_seed(0)
    model = Residual().to(F64)
    x = torch.randn(4, 6, dtype=F64)
    check(model, x, None, "full", ["inp.bias", "out.bias"])
    check(model, x, x[:3], "diagonal", ["norm.weight", "norm.bias"])  # all fallback


def test_values_override_module(path: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).to(F64)
    other = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).to(F64)
    values = {n: p.detach() for n, p in other.named_parameters()}
    x = torch.randn(4, 3, dtype=F64)
    got = ntk_structured(functional_model(model, values), x, None, "full")
    torch.testing.assert_close(got, naive_ntk(other, x), **TOL)


# ------------------------------------------------------------------- convolutions


def conv_zoo() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(2, 3, 3, stride=(2, 1), padding=(1, 2)),
        nn.Tanh(),
        nn.Conv2d(3, 4, (3, 2), dilation=(2, 1), padding="same", bias=False),
        nn.Tanh(),
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),
        nn.Tanh(),
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="circular", groups=2),
        nn.Tanh(),
        nn.Conv2d(4, 3, 2, stride=2, padding="valid"),
        nn.Tanh(),
        nn.Conv2d(3, 3, 1),
        nn.Flatten(),
        nn.Linear(3 * 2 * 3, 3),
    )


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("outputs", OUTPUTS)
def test_conv_variety(outputs: str, path: str) -> None:
    torch.manual_seed(0)
    model = conv_zoo().to(F64)
    x1, x2 = torch.randn(3, 2, 7, 5, dtype=F64), torch.randn(2, 2, 7, 5, dtype=F64)
    layers = st._covered_layers(functional_model(model))
    assert [layer.name for layer in layers] == ["0", "2", "4", "6", "8", "10", "12"]
    check(model, x1, x2, outputs)
    check(model, x1, None, outputs)


class SharedAndInplace(nn.Module):
    """A convolution applied twice (weights shared across calls), in-place activations,
    and a Linear applied to every position of a sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.act = nn.ReLU(inplace=True)
        self.token = nn.Linear(2, 4)
        self.head = nn.Linear(4 * 12, 2)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.conv(x))
        h = self.act(self.conv(h)) + h  # shape: (n, 2, 3, 4)
        seq = h.flatten(2).transpose(1, 2)  # shape: (n, 12, 2): 12 tokens
        return self.head(torch.tanh(self.token(seq)).flatten(1))


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_shared_calls_tokens_inplace(outputs: str, path: str) -> None:
    torch.manual_seed(0)
    model = SharedAndInplace().to(F64)
    x1, x2 = torch.randn(3, 2, 3, 4, dtype=F64), torch.randn(2, 2, 3, 4, dtype=F64)
    check(model, x1, x2, outputs)
    check(model, x1, None, outputs)


class Tokens(nn.Module):
    """A Linear on every token of a sequence, mean-pooled: P = sequence length."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Linear(3, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.tanh(self.tok(x)).mean(1))


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_sequences_of_different_lengths(outputs: str, path: str) -> None:
    torch.manual_seed(0)
    model = Tokens().to(F64)
    check(model, torch.randn(4, 7, 3, dtype=F64), torch.randn(3, 5, 3, dtype=F64), outputs)


# ------------------------------------------------------------------------ fallback


class Misuse(nn.Module):
    """``lin.weight`` also used outside ``lin.forward``; ``a`` and ``b`` tie one weight;
    ``c`` is fed a tensor without a batch axis; ``unused`` runs but does not matter."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.a = nn.Linear(3, 3, bias=False)
        self.b = nn.Linear(3, 3, bias=False)
        self.b.weight = self.a.weight
        self.c = nn.Linear(3, 3)
        self.unused = nn.Linear(3, 2)
        self.scale = nn.Parameter(torch.tensor(0.7))

    def forward(self, x: Tensor) -> Tensor:
        self.unused(x)
        h = torch.tanh(self.lin(x)) + nn.functional.linear(x, self.lin.weight.T)
        h = torch.tanh(self.b(torch.tanh(self.a(h))))
        return h * self.scale + self.c(torch.ones(3, dtype=x.dtype, device=x.device)).sum()


def test_fallback_rules(path: str) -> None:
    torch.manual_seed(0)
    model = Misuse().to(F64)
    x = torch.randn(4, 3, dtype=F64)
    covered = {layer.name for layer in st._covered_layers(functional_model(model))}
    assert covered == {"lin", "c", "unused"}  # the tied weight is never covered
    check(model, x, x[:2], "full")
    check(model, x, None, "trace")


def test_dense_layer_parameterizations(path: str) -> None:
    gen = torch.Generator().manual_seed(0)
    kw = {"generator": gen, "dtype": F64}
    model = nn.Sequential(
        DenseLayer(4, 6, w_std=1.5, b_std=0.3, **kw),
        nn.Tanh(),  # type: ignore[arg-type]
        DenseLayer(6, 5, w_std=1.2, b_std=0.2, parameterization="standard", **kw),
        nn.Tanh(),  # type: ignore[arg-type]
        DenseLayer(5, 3, w_std=0.9, b_std=None, **kw),  # type: ignore[arg-type]
    )
    x = torch.randn(5, 4, dtype=F64)
    assert len(st._covered_layers(functional_model(model))) == 3
    check(model, x, x[:2], "full")
    check(model, x, None, "trace")


class _MeanPool(nn.Module):
    """Global average pooling over the spatial axes: (n, C, *S) -> (n, C)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(2).mean(2)


CONV_LAYER_CASES = [  # (spatial dims, parameterization, strides, padding, pooled)
    (2, "ntk", 1, "SAME", False),
    (2, "standard", 1, "SAME", True),
    (2, "ntk", 2, "SAME", False),
    (2, "standard", 2, "VALID", True),
    (2, "ntk", 1, "CIRCULAR", True),
    (2, "ntk", 2, 1, False),
    (1, "ntk", 1, "SAME", True),
    (1, "standard", 2, "VALID", False),
]


@pytest.mark.parametrize(("dims", "kind", "stride", "padding", "pooled"), CONV_LAYER_CASES)
def test_conv_layer(
    path: str, dims: int, kind: str, stride: int, padding: object, pooled: bool
) -> None:
    """ntklab's ConvLayer (effective weight ``w_std W / sqrt(C |f|)`` in NTK
    parameterization) and DenseLayer are covered, none of their parameters falls back, and
    the kernel matches the naive per-example reference."""
    from ntklab.nets import ConvLayer

    gen = torch.Generator().manual_seed(0)
    kw = {"generator": gen, "dtype": F64, "parameterization": kind}
    strides = (stride,) * dims
    model = nn.Sequential(
        ConvLayer(2, 4, (3,) * dims, strides=strides, padding=padding, w_std=1.3, b_std=0.2, **kw),  # type: ignore[arg-type]
        nn.Tanh(),
        ConvLayer(4, 3, (2,) * dims, strides=strides, padding=padding, w_std=1.1, b_std=0.3, **kw),  # type: ignore[arg-type]
        nn.Tanh(),
        _MeanPool() if pooled else nn.Flatten(1),
        DenseLayer(None, 3, w_std=0.9, b_std=0.1, **kw),  # type: ignore[arg-type]
    )
    x = torch.randn(5, 2, *(7,) * dims, dtype=F64)
    model(x[:1])  # materialize the lazy DenseLayer
    fm = functional_model(model)
    layers = st._covered_layers(fm)
    assert {p for layer in layers for p in layer.params} == set(fm.params)
    check(model, x, x[:2] + 0.5, "full")
    check(model, x, None, "trace")
    check(model, x, None, "diagonal")


# ---------------------------------------------------------------- chunks and dtypes


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_chunking_identical(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], outputs: str
) -> None:
    _, model, x1, x2 = model_and_inputs
    fm = functional_model(model)
    for other in (x2, None):
        whole = ntk_structured(fm, x1, other, outputs)  # type: ignore[arg-type]
        for chunk in (1, 2, 4):
            got = ntk_structured(fm, x1, other, outputs, chunk_size=chunk)  # type: ignore[arg-type]
            torch.testing.assert_close(got, whole, atol=1e-13, rtol=1e-13)


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_default_capture_chunk(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor],
    outputs: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Capture passes of one example (the default chunk under a tiny element budget), whole
    kernel blocks: the naive reference's kernel; the memory model counts the smaller chunk."""
    _, model, x1, x2 = model_and_inputs
    fm = functional_model(model)
    before = structured_peak_bytes(fm, 4, 4, 3, outputs, x=x1)  # type: ignore[arg-type]
    monkeypatch.setattr(st, "_CAPTURE_ELEMENTS", 1)
    prof = st._profile(fm, x1)
    assert st._capture_chunk(prof, 4, 4, prof.outputs, outputs, False) == 1  # type: ignore[arg-type]
    assert structured_peak_bytes(fm, 4, 4, 3, outputs, x=x1) <= before  # type: ignore[arg-type]
    check(model, x1, x2, outputs)
    check(model, x1, None, outputs)


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_symmetric_tiles_mirrored(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor],
    outputs: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default Gram tiles of 2 rows for a symmetric kernel of 5 inputs: 6 upper tiles of 9
    computed, the others mirrored; the naive reference's kernel."""
    _, model, x1, _ = model_and_inputs
    monkeypatch.setattr(st, "_SYMMETRIC_TILE", 2)
    mirrored: list[tuple[int, int]] = []
    original = st._mirror

    def counted(acc: Tensor, rows: slice, cols: slice, outputs: str) -> None:
        mirrored.append((rows.start, cols.start))
        original(acc, rows, cols, outputs)  # type: ignore[arg-type]

    monkeypatch.setattr(st, "_mirror", counted)
    check(model, x1, None, outputs)
    assert mirrored == [(0, 2), (0, 4), (2, 4)]


def test_float32_in_float32_out() -> None:
    torch.manual_seed(0)
    model = cnn(3)
    x = torch.randn(4, 3, 8, 8)
    got = ntk_structured(functional_model(model), x, None, "full")
    assert got.dtype == torch.float32 and got.shape == (4, 4, 3, 3)
    ref = naive_ntk(model.to(F64), x.to(F64))
    torch.testing.assert_close(got.to(F64), ref, atol=1e-4, rtol=1e-4)


def test_module_untouched() -> None:
    torch.manual_seed(0)
    model = SharedAndInplace().to(F64)
    before = {n: t.clone() for n, t in model.state_dict().items()}
    ntk_structured(functional_model(model), torch.randn(3, 2, 3, 4, dtype=F64), None, "full")
    for mod in model.modules():
        assert not mod._forward_hooks and not mod._forward_pre_hooks
    for n, t in model.state_dict().items():
        assert torch.equal(t, before[n])


# --------------------------------------------------------------------- bad input


def test_bad_input() -> None:
    torch.manual_seed(0)
    fm = functional_model(nn.Sequential(nn.Linear(3, 2)).to(F64))
    x = torch.randn(4, 3, dtype=F64)
    with pytest.raises(NtklabValueError, match="outputs"):
        ntk_structured(fm, x, None, "diag")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="chunk_size"):
        ntk_structured(fm, x, None, "trace", chunk_size=0)
    with pytest.raises(NtklabTypeError, match="x2"):
        ntk_structured(fm, x, x.float(), "trace")
    with pytest.raises(NtklabValueError, match="x1"):
        ntk_structured(fm, torch.randn(4, 5, dtype=F64), None, "trace")
    train_bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).to(F64)
    with pytest.raises(NtklabValueError, match=r"BatchNorm1d '1'.*batch statistics"):
        ntk_structured(functional_model(train_bn), x, None, "trace")


# ---------------------------------------------------------------------- cost model


def test_cost_model_chooses_by_positions() -> None:
    lin = st._Layer("0", nn.Linear(512, 512), "0.weight", "0.bias")
    conv = st._Layer("1", nn.Conv2d(16, 32, 3), "1.weight", "1.bias")
    for outputs in OUTPUTS:
        assert st._choose_path(lin, 256, 256, 1, 10, outputs, True) == "pairwise"  # type: ignore[arg-type]
        assert st._choose_path(conv, 256, 256, 64, 10, outputs, True) == "per_example"  # type: ignore[arg-type]


def test_flops_and_peak_bytes() -> None:
    torch.manual_seed(0)
    fm = functional_model(cnn(2).to(F64))
    x = torch.randn(2, 3, 8, 8, dtype=F64)
    blind = structured_flops(fm, 10, 10, 2, "full")  # one position per layer
    assert 0 < blind < structured_flops(fm, 10, 10, 2, "full", x=x)
    small = structured_peak_bytes(fm, 10, 10, 2, "full", x=x)
    big = structured_peak_bytes(fm, 40, 40, 2, "full", x=x)
    chunked = structured_peak_bytes(fm, 40, 40, 2, "full", x=x, chunk_size=5)
    assert big > 8 * 40 * 40 * 4 and small < big and chunked < big
    f1, f2 = (structured_flops(fm, n, n, 2, "trace", x=x) for n in (10, 20))
    assert 2 * f1 < f2 < 5 * f1  # between linear and quadratic in n
    mlp = functional_model(nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)))
    assert structured_peak_bytes(mlp, 8, 8, 3, "trace") > 4 * 64


# ------------------------------------------------------------------------- anchors


def anchor_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(784, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 10),
    )


def anchor_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def best_time(fn: Callable[[], Tensor], repeats: int = 5) -> tuple[float, Tensor]:
    out = fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


@pytest.mark.slow
def test_anchor_timings() -> None:
    """Prints timings on the README's anchor networks (neural-tangents 0.6.5, float32, 2 cores);
    checks only that the traced kernel is the trace of the full one."""
    torch.manual_seed(0)
    cases = [
        ("MLP 784-512x3-10", anchor_mlp(), torch.randn(256, 784), (0.095, 0.31)),
        ("CNN 32x32x3", anchor_cnn(), torch.randn(256, 3, 32, 32), (0.5, 0.9)),
    ]
    for name, model, x, anchors in cases:
        fm = functional_model(model)
        results = {}
        for outputs, anchor in zip(("trace", "full"), anchors, strict=True):
            for x2 in (None, x.clone()):

                def run(o: str = outputs, x1: Tensor = x, x2: Tensor | None = x2) -> Tensor:
                    return ntk_structured(fm, x1, x2, o)  # type: ignore[arg-type]  # noqa: B023

                seconds, results[outputs, x2 is None] = best_time(run)
                print(
                    f"{name} {outputs:5s} n=256 x2={'None ' if x2 is None else 'given'}: "
                    f"{seconds:.3f} s (neural-tangents {anchor} s: {anchor / seconds:.1f}x)"
                )
        torch.testing.assert_close(
            results["trace", True], reduce(results["full", True], "trace"), atol=1e-4, rtol=1e-4
        )
