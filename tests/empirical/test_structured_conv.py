"""Structured derivatives of convolutions (1-d, 2-d, strides, padding, dilation, groups),
BatchNorm (eval) and LayerNorm affine parameters, and the factored contraction, against a
float64 ``torch.func`` Jacobian contraction; blocked equals unblocked; the cost model's
ordering."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, vmap

import ntklab as nl
from ntklab.empirical import _compiled_cotangents as compiled
from ntklab.empirical import cost
from ntklab.empirical import structured as st
from ntklab.empirical import structured_conv as sc
from ntklab.empirical._functional import functional_model
from ntklab.empirical.jacobian import probe
from ntklab.empirical.structured import ntk_structured
from ntklab.errors import NtklabValueError
from ntklab.kernels import _fused

F64 = torch.float64
OUTPUTS = ("trace", "full", "diagonal")
TOL = {"atol": 1e-10, "rtol": 1e-10}


def jacrev_ntk(model: nn.Module, x1: Tensor, x2: Tensor | None = None) -> Tensor:
    """Theta[i, j, a, b] by a float64 torch.func Jacobian contraction: per-example Jacobians
    (vmap of jacrev over examples), one einsum per parameter tensor."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def single(p: dict[str, Tensor], xi: Tensor) -> Tensor:
        return functional_call(model, (p, buffers), (xi.unsqueeze(0),)).reshape(-1)

    jac = vmap(jacrev(single), (None, 0))
    j1 = [j.flatten(2) for j in jac(params, x1).values()]
    j2 = j1 if x2 is None else [j.flatten(2) for j in jac(params, x2).values()]
    return sum(
        (torch.einsum("iap,jbp->ijab", a, b) for a, b in zip(j1, j2, strict=True)),
        torch.zeros(()),
    )


def reduce(full: Tensor, outputs: str) -> Tensor:
    if outputs == "full":
        return full
    diag = full.diagonal(dim1=2, dim2=3)
    return diag.mean(-1) if outputs == "trace" else diag


def check(model: nn.Module, x1: Tensor, x2: Tensor | None, outputs: str, **kw: int) -> Tensor:
    got = ntk_structured(functional_model(model), x1, x2, outputs, **kw)  # type: ignore[arg-type]
    torch.testing.assert_close(got, reduce(jacrev_ntk(model, x1, x2), outputs), **TOL)
    return got


def _force(path: str) -> Callable[..., str]:
    def choose(layer: st._Layer, *args: object) -> str:
        factorable = bool(args[-1]) if len(args) == 7 else False
        if path == "factored":
            return "factored" if factorable else "per_example"
        return path

    return choose


@pytest.fixture(params=["pairwise", "per_example", "factored", "auto"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force every covered layer onto one contraction (factored wherever the cotangents
    factor, per-example elsewhere), or let the cost model choose."""
    if request.param != "auto":
        monkeypatch.setattr(st, "_choose_path", _force(request.param))
        monkeypatch.setattr(st, "_SLAB_ROWS", 1)
    return str(request.param)


def _randomize_norms(net: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters; eval mode."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for mod in net.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                c = mod.num_features
                mod.running_mean.copy_(0.3 * torch.randn(c, generator=gen))  # type: ignore[union-attr]
                mod.running_var.copy_(0.5 + torch.rand(c, generator=gen))  # type: ignore[union-attr]
            if isinstance(mod, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
                if mod.weight is not None:
                    mod.weight.copy_(0.7 + 0.6 * torch.rand(mod.weight.shape, generator=gen))
                if mod.bias is not None:
                    mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=gen))
    return net.eval()


# ----------------------------------------------------------------------------- models


def conv1d_zoo() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
        nn.Tanh(),
        nn.Conv1d(6, 6, 4, padding="same", dilation=2, padding_mode="reflect", bias=False),
        nn.Tanh(),
        nn.Conv1d(6, 6, 3, padding="same", groups=6, padding_mode="circular"),  # depthwise
        nn.Tanh(),
        nn.Conv1d(6, 4, 2, stride=2, padding="valid"),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(4 * 2, 3),
    )


def conv2d_zoo() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), groups=2),
        nn.Tanh(),
        nn.Conv2d(6, 6, 3, dilation=(2, 1), padding="same", padding_mode="replicate"),
        nn.Tanh(),
        nn.Conv2d(6, 6, 3, padding=1, groups=3, padding_mode="circular", bias=False),
        nn.Tanh(),
        nn.Conv2d(6, 3, 2, stride=2, dilation=1, padding=0),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(3 * 2 * 4, 3),
    )


class GapCnn(nn.Module):
    """Two convolutions, global average pooling, a linear readout: the last convolution's
    cotangents factor; a Conv1d branch on the rows makes 1-d and 2-d meet."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3, padding=1)
        self.c2 = nn.Conv2d(6, 8, 3, stride=2, padding=1, groups=2)
        self.row = nn.Conv1d(6, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.c1(x))
        a = torch.relu(self.c2(h)).mean((2, 3))
        b = torch.tanh(self.row(h.mean(3))).mean(2)
        return self.fc(a + b)


class ResBlock(nn.Module):
    """Stem + BatchNorm, a basic block with identity shortcut, GAP, linear readout."""

    def __init__(self, width: int = 4, k: int = 3) -> None:
        super().__init__()
        self.stem = nn.Conv2d(2, width, 3, padding=1)
        self.bn0 = nn.BatchNorm2d(width)
        self.c1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, k)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.bn0(self.stem(x)))
        r = torch.relu(self.bn1(self.c1(h)))
        h = torch.relu(self.bn2(self.c2(r)) + h)
        return self.fc(h.mean((2, 3)))


class Norms(nn.Module):
    """BatchNorm1d on vectors and on sequences, LayerNorm on tokens (with and without
    bias) and over two trailing axes."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 6)
        self.bn_vec = nn.BatchNorm1d(6)
        self.tok = nn.Linear(2, 4)
        self.ln_tok = nn.LayerNorm(4)
        self.bn_seq = nn.BatchNorm1d(3)
        self.ln_nobias = nn.LayerNorm(4, bias=False)
        self.ln_2d = nn.LayerNorm((3, 4))
        self.ln_plain = nn.LayerNorm(4, elementwise_affine=False)
        self.out = nn.Linear(6 + 12, 3)

    def forward(self, x: Tensor) -> Tensor:
        v = torch.tanh(self.bn_vec(self.inp(x)))  # shape: (n, 6)
        seq = self.tok(x.reshape(-1, 3, 2))  # shape: (n, 3, 4): 3 tokens
        seq = torch.tanh(self.ln_tok(seq))
        seq = torch.tanh(self.bn_seq(seq))  # channels: the 3 tokens, length 4
        seq = self.ln_plain(self.ln_2d(self.ln_nobias(seq)))
        return self.out(torch.cat([v, seq.flatten(1)], dim=1))


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "conv1d": (conv1d_zoo, (4, 8)),
    "conv2d": (conv2d_zoo, (4, 7, 5)),
    "gap_cnn": (GapCnn, (3, 6, 6)),
    "resblock_bn": (ResBlock, (2, 5, 5)),
    "norms": (Norms, (6,)),
}


@pytest.fixture(params=sorted(MODELS))
def model_and_inputs(request: pytest.FixtureRequest) -> tuple[str, nn.Module, Tensor, Tensor]:
    name = request.param
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = _randomize_norms(factory().to(F64))
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randn(4, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(3, *shape, dtype=F64, generator=gen)
    return name, model, x1, x2


# ----------------------------------------------------------------------- agreement


@pytest.mark.parametrize("outputs", OUTPUTS)
@pytest.mark.parametrize("given", [True, False], ids=["x2", "x2=None"])
def test_matches_jacobian_contraction(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], outputs: str, given: bool, path: str
) -> None:
    _, model, x1, x2 = model_and_inputs
    check(model, x1, x2 if given else None, outputs)


def test_every_layer_covered(model_and_inputs: tuple[str, nn.Module, Tensor, Tensor]) -> None:
    """No parameter of these models falls back to a per-example Jacobian."""
    _, model, x1, _ = model_and_inputs
    fm = functional_model(model)
    prof = st._profile(fm, x1)
    assert prof.fallback == 0
    covered = {p for layer, _, _ in prof.layers for p in layer.params}
    assert covered == set(fm.params)


def test_factorization_detected() -> None:
    """The layers before global average pooling factor, the others do not; auto uses it."""
    torch.manual_seed(0)
    model = _randomize_norms(ResBlock().to(F64))
    x = torch.randn(3, 2, 5, 5, dtype=F64)
    prof = st._profile(functional_model(model), x)
    factorable = {layer.name: f for layer, p, f in prof.layers if p > 1}
    assert factorable == {
        "stem": False,
        "bn0": False,
        "c1": False,
        "bn1": False,
        "c2": True,
        "bn2": True,
    }
    gap = GapCnn().to(F64)
    prof = st._profile(functional_model(gap), torch.randn(2, 3, 6, 6, dtype=F64))
    assert {layer.name: f for layer, p, f in prof.layers if p > 1} == {
        "c1": False,
        "c2": True,
        "row": True,
    }


def test_unfactored_later_chunk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer whose cotangents factor on the first chunk but not on a later one (here: the
    check made to fail from the third chunk of several examples on) is recomputed on
    another path, with the same result."""
    torch.manual_seed(0)
    model = GapCnn().to(F64)
    x = torch.randn(6, 3, 6, 6, dtype=F64)
    seen = {"n": 0}
    real = sc.factor_cotangents

    def flaky(cot: list[Tensor | None], rtol: float | None = None) -> tuple[Tensor, Tensor] | None:
        if next(g for g in cot if g is not None).shape[0] > 1:
            seen["n"] += 1
            if seen["n"] > 2:
                return None
        return real(cot, rtol)

    monkeypatch.setattr(st, "factor_cotangents", flaky)
    monkeypatch.setattr(st, "_choose_path", _force("factored"))
    got = ntk_structured(functional_model(model), x, None, "full", chunk_size=2)
    assert seen["n"] > 2
    torch.testing.assert_close(got, jacrev_ntk(model, x), **TOL)


class Depthwise(nn.Module):
    """Depthwise convolutions before global average pooling: their cotangents factor
    (per-channel operations only), so ``d1`` lies below ``d2``'s channel-by-channel
    propagation, and ``d3`` is applied twice; padding "same" and dilation."""

    def __init__(self) -> None:
        super().__init__()
        self.c0 = nn.Conv2d(2, 4, 3, padding=1)
        self.mix = nn.Conv2d(4, 4, 1)
        self.d1 = nn.Conv2d(4, 4, 3, padding="same", dilation=2, groups=4)
        self.d2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, bias=False)
        self.d3 = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.tanh(self.mix(torch.tanh(self.c0(x))))
        h = torch.tanh(self.d2(torch.tanh(self.d1(h))))
        h = self.d3(torch.tanh(self.d3(h)))
        return self.fc(h.mean((2, 3)))


@pytest.mark.parametrize("name", ["gap_cnn", "resblock_bn", "depthwise"])
@pytest.mark.parametrize("outputs", OUTPUTS)
def test_channel_by_channel_propagation(
    name: str, outputs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every factored convolution that can be (called once, zero padding) has its input
    cotangents propagated channel by channel; nested or repeated ones are detected and
    propagated by autograd instead; the kernel is unchanged."""
    planned: list[set[str]] = []
    real = st._profile

    def profile(fm: object, x: Tensor | None) -> st._Profile:
        prof = real(fm, x)  # type: ignore[arg-type]
        split = {
            layer.name: 1.0
            for layer, _, factorable in prof.layers
            if factorable and layer.kind == "conv"
        }
        planned.append(set(split))
        return dataclasses.replace(prof, split=split)

    monkeypatch.setattr(st, "_profile", profile)
    torch.manual_seed(0)
    factory, shape = {**MODELS, "depthwise": (Depthwise, (2, 6, 6))}[name]
    model = _randomize_norms(factory().to(F64))
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randn(4, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(3, *shape, dtype=F64, generator=gen)
    check(model, x1, x2, outputs)
    check(model, x1, None, outputs, chunk_size=3)
    expected = {
        "gap_cnn": {"c2", "row"},
        "resblock_bn": {"c2"},
        "depthwise": {"mix", "d1", "d2", "d3"},
    }[name]
    assert planned[-1] == expected


def test_split_around_a_residual_connection_and_never_nested() -> None:
    """The last convolution of a residual block is propagated channel by channel although
    the identity shortcut bypasses it (the second backward passes are seeded at the outputs
    and at its input, so each layer is traversed once per output; the kernel equals the
    Jacobian contraction: ``test_matches_jacobian_contraction``); of nested candidates
    (each depthwise convolution lies below the next) only the one of largest saving is
    cut, and none below it."""
    torch.manual_seed(0)
    block = _randomize_norms(ResBlock().to(F64))
    x = torch.randn(4, 2, 5, 5, dtype=F64)
    assert set(st._profile(functional_model(block), x).split) == {"c2"}
    deep = Depthwise().to(F64)
    fm = functional_model(deep)
    layers = list(st._covered_layers(fm))
    one = torch.randn(1, 2, 6, 6, dtype=F64)
    assert set(st._split_conflicts(fm, layers, one, {"d1": 2.0, "d2": 1.0, "mix": 0.5})) == {"d1"}
    assert set(st._split_conflicts(fm, layers, one, {"d2": 2.0, "d1": 1.0, "mix": 0.5})) == {"d2"}
    assert set(st._split_conflicts(fm, layers, one, {"mix": 2.0, "d3": 1.0})) == {"mix"}


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_chunks_and_blocks_equal_whole(
    model_and_inputs: tuple[str, nn.Module, Tensor, Tensor], outputs: str
) -> None:
    """Chunked capture, and ntk's blocks under a tiny max_memory, equal one piece."""
    _, model, x1, x2 = model_and_inputs
    fm = functional_model(model)
    x = torch.cat([x1, x2])
    whole = ntk_structured(fm, x, None, outputs)  # type: ignore[arg-type]
    for chunk in (1, 3):
        got = ntk_structured(fm, x, None, outputs, chunk_size=chunk)  # type: ignore[arg-type]
        torch.testing.assert_close(got, whole, atol=1e-13, rtol=1e-13)
    k = whole.shape[-1] if outputs != "trace" else int(model(x[:1]).shape[1])
    n = x.shape[0]
    result = 8 * n * n * {"trace": 1, "diagonal": k, "full": k * k}[outputs]
    small = result + st.structured_peak_bytes(fm, 2, 2, k, outputs, x=x)  # type: ignore[arg-type]
    chosen = nl.empirical.plan(fm, x, None, outputs, "structured", small)  # type: ignore[arg-type]
    assert chosen.block1 < n and chosen.block2 < n  # many blocks
    for other in (None, x1):
        blocked = nl.empirical.ntk(
            model, x, other, outputs=outputs, method="structured", max_memory=small
        )  # type: ignore[arg-type]
        plain = nl.empirical.ntk(model, x, other, outputs=outputs, method="structured")  # type: ignore[arg-type]
        torch.testing.assert_close(blocked, plain, atol=1e-12, rtol=1e-12)


def test_float32_factored() -> None:
    torch.manual_seed(0)
    model = _randomize_norms(ResBlock())
    x = torch.randn(5, 2, 5, 5)
    got = ntk_structured(functional_model(model), x, None, "full")
    assert got.dtype == torch.float32
    ref = jacrev_ntk(model.to(F64), x.to(F64))
    torch.testing.assert_close(got.to(F64), ref, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------- formulas


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize(
    "conv",
    [
        nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
        nn.Conv1d(4, 6, 4, padding="same", dilation=2, padding_mode="reflect"),
        nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), groups=2, padding_mode="circular"),
        nn.Conv2d(4, 4, 3, padding="same", dilation=(2, 1), groups=4, padding_mode="replicate"),
        nn.Conv3d(2, 4, 2, stride=(1, 2, 1), padding=1),
    ],
    ids=["1d-groups", "1d-same-dilated", "2d-groups-circular", "2d-depthwise", "3d"],
)
def test_patches_reproduce_the_convolution(conv: nn.Module) -> None:
    """sum_d u[p, g, d] W[g C/G + c, d] + b = the convolution's output."""
    torch.manual_seed(0)
    conv = conv.to(F64)
    dims = conv.weight.ndim - 2
    x = torch.randn(3, conv.in_channels, *([7] * dims), dtype=F64)
    u = sc.conv_patches(conv, x)  # shape: (n, P, G, D)
    groups = conv.groups
    w = conv.weight.reshape(groups, conv.out_channels // groups, -1)
    y = torch.einsum("npgd,gcd->npgc", u, w).reshape(3, u.shape[1], -1) + conv.bias
    torch.testing.assert_close(y, conv(x).reshape(3, conv.out_channels, -1).transpose(1, 2))


def test_per_example_gradients_are_autograd_gradients() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).to(F64)
    x = torch.randn(2, 4, 6, 6, dtype=F64)
    cot = torch.randn(2, 3, 6, 9, dtype=F64)  # shape: (n, k, C, P)
    got = sc.per_example_gradients(cot, sc.conv_patches(conv, x))
    for i in range(2):
        for a in range(3):
            out = conv(x[i : i + 1]).reshape(6, 9)
            (grad,) = torch.autograd.grad(out, conv.weight, cot[i, a])
            torch.testing.assert_close(got[i, a], grad.reshape(6, -1))


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize(
    "conv",
    [
        nn.Conv2d(4, 6, 3, padding=1),
        nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), groups=2),
        nn.Conv1d(4, 6, 4, padding="same", dilation=2),
        nn.Conv2d(4, 4, 3, stride=2, padding="valid", groups=4),
        nn.Conv2d(2, 4, 3, stride=3),  # input positions no output reaches
        nn.Conv3d(2, 4, 2, stride=(1, 2, 1), padding=1),
    ],
    ids=["2d", "2d-groups-strided", "1d-same-dilated", "2d-depthwise", "2d-gaps", "3d"],
)
@pytest.mark.parametrize("k", [3, 13])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("path", ["torch", "compiled"])
def test_input_cotangents_are_autograd_input_gradients(
    conv: nn.Module, path: str, dtype: torch.dtype, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conv^T(sum_c alpha_ac e_c h_c), channel by channel, is autograd's input gradient,
    in torch and in the compiled loop (ungrouped 1-d and 2-d convolutions; more outputs than
    its accumulator registers, ``k = 13``; widths of 8 and 9 positions, one vector and a
    partial one in float32), which is taken wherever it covers the convolution."""
    calls: list[int] = []
    if path == "torch":
        monkeypatch.setattr(compiled, "available", lambda *args: False)
    elif not _fused.available():
        pytest.skip("no C compiler: the compiled loop is unavailable")
    else:
        real = compiled.run

        def counted(*args: object, **kw: object) -> None:
            calls.append(1)
            real(*args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(compiled, "run", counted)
    torch.manual_seed(0)
    conv = conv.to(dtype)
    dims = conv.weight.ndim - 2
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    for size in (8, 9):
        x = torch.randn(2, conv.in_channels, *([size] * dims), dtype=dtype, requires_grad=True)
        y = conv(x)
        n, c = y.shape[:2]
        alpha = torch.randn(n, k, c, dtype=dtype)
        h = torch.randn(n, c, y[0, 0].numel(), dtype=dtype)
        got = sc.input_cotangents(conv, alpha, h, x.shape)  # type: ignore[arg-type]
        into = torch.full_like(got, 7.0)
        sc.input_cotangents(conv, alpha, h, x.shape, out=into)  # type: ignore[arg-type]
        for a in range(k):
            (grad,) = torch.autograd.grad(
                y, x, (alpha[:, a, :, None] * h).view(y.shape), retain_graph=True
            )
            torch.testing.assert_close(got[:, a], grad, **tol)
            torch.testing.assert_close(into[:, a], grad, **tol)
    covered = path == "compiled" and conv.groups == 1 and dims <= 2  # type: ignore[operator]
    assert len(calls) == (4 if covered else 0)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("path", ["torch", "compiled"])
def test_factor_cotangents(dtype: torch.dtype, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank-one cotangents factor (stacked, or one tensor per output with an output that
    ignores the layer), exactly to rounding; one entry off by 1e-3 of the largest, random
    cotangents, or a NaN or infinite entry, do not; all outputs None is refused; in torch
    and in the compiled loop, which is taken where it covers the cotangents."""
    calls: list[int] = []
    if path == "torch":
        monkeypatch.setattr(compiled, "factor_available", lambda like: False)
    elif not _fused.available():
        pytest.skip("no C compiler: the compiled loop is unavailable")
    else:
        real = compiled.factor

        def counted(*args: object) -> object:
            calls.append(1)
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(compiled, "factor", counted)
    gen = torch.Generator().manual_seed(0)
    alpha = torch.randn(3, 4, 5, generator=gen, dtype=dtype)
    h = torch.randn(3, 5, 7, generator=gen, dtype=dtype)
    h[1, 2] = 0.0  # a dead channel of one example
    alpha[:, 2] = 0.0  # an output that ignores the layer
    cot = alpha.unsqueeze(3) * h.unsqueeze(1)  # shape: (n, k, C, P)
    listed = [None if a == 2 else cot[:, a].clone() for a in range(4)]
    for given in (cot, listed):
        found = sc.factor_cotangents(given)
        assert found is not None
        a2, h2 = found
        torch.testing.assert_close(a2.unsqueeze(3) * h2.unsqueeze(1), cot)
    noisy = cot.clone()
    noisy[2, 1, 3, 4] += 1e-3 * cot.abs().max()
    assert sc.factor_cotangents(noisy) is None  # rank two in one channel of one example
    assert sc.factor_cotangents(torch.randn(3, 4, 5, 7, generator=gen, dtype=dtype)) is None
    for bad in (float("nan"), float("inf")):  # never a finite factorization of non-finite ones
        broken = cot.clone()
        broken[0, 1, 0, 3] = bad
        assert sc.factor_cotangents(broken) is None
    assert len(calls) == (6 if path == "compiled" else 0)
    with pytest.raises(NtklabValueError, match=r"cot: expected .* all None"):
        sc.factor_cotangents([None, None])


# ----------------------------------------------------------------------- cost model


def test_path_choice_follows_factorization() -> None:
    conv = st._Layer("c", nn.Conv2d(32, 64, 3), "c.weight", "c.bias")
    for outputs in OUTPUTS:
        free = st._choose_path(conv, 128, 128, 256, 10, outputs, True, False)  # type: ignore[arg-type]
        assert free == "per_example"
        assert st._choose_path(conv, 128, 128, 256, 10, outputs, True, True) == "factored"  # type: ignore[arg-type]
    deep = st._Layer("d", nn.Conv2d(512, 512, 3), "d.weight", None)  # few positions, few inputs
    assert st._choose_path(deep, 4, 4, 16, 10, "trace", True, False) == "pairwise"
    norm = st._Layer("n", nn.BatchNorm2d(16), "n.weight", "n.bias")
    assert st._choose_path(norm, 64, 64, 1024, 10, "trace", True, True) == "per_example"


class Scaled(nn.Module):
    """Parameters that no covered module owns: the structured method falls back to a
    per-example Jacobian of all of them."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(64, 256) / 8)
        self.w2 = nn.Parameter(torch.randn(256, 10) / 16)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.w1) @ self.w2


def test_cost_model_orders_contrasting_shapes() -> None:
    """A CNN with global average pooling: structured derivatives predicted cheaper than
    Jacobian contraction, and chosen; a model with no covered layer: the reverse."""
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    custom = Scaled()
    for model, x, fastest in (
        (cnn, torch.randn(64, 3, 16, 16), "structured"),
        (custom, torch.randn(64, 64), "jacobian"),
    ):
        fm = functional_model(model)
        n = x.shape[0]
        info = probe(fm, x)
        costs = {
            "structured": cost.structured_cost(fm, n, n, 10, "trace", x, info, symmetric=True),
            "jacobian": cost.jacobian_cost(fm, n, n, 10, "trace", info, symmetric=True),
            "ntk_vp": cost.ntk_vp_cost(fm, n, n, 10, "trace", info, symmetric=True),
        }
        order = sorted(costs, key=lambda name: costs[name].equivalent)
        assert order[0] == fastest
        assert order[-1] == "ntk_vp"
        assert nl.empirical.plan(fm, x, None, "trace").method == fastest
        assert all(c.flops > 0 and c.bytes > 0 for c in costs.values())


def test_slowdowns_are_the_committed_benchmark_medians() -> None:
    """``cost.SLOWDOWN`` is, per method, the median (to 0.1) of measured time over the
    unscaled model time ``(flops + w elements) / rate`` in the committed cost-model run
    (``results/cost_model_empirical.json``), and with it the model's pick on every row of
    that run is the fastest method or within 10 % of it."""
    path = Path(__file__).resolve().parents[2] / "results" / "cost_model_empirical.json"
    rows = json.loads(path.read_text())
    ratios: dict[str, list[float]] = {}
    for row in rows:
        itemsize = 4 if row["dtype"] == "float32" else 8
        rate = row["matmul_gflops"] * 1e9
        measured, predicted = {}, {}
        for method, entry in row["methods"].items():
            model = (entry["flops"] + cost.ELEMENTWISE_FLOPS * entry["bytes"] / itemsize) / rate
            predicted[method] = cost.SLOWDOWN[method] * model
            if entry.get("measured_s"):
                measured[method] = entry["measured_s"]
                ratios.setdefault(method, []).append(entry["measured_s"] / model)
        pick = min(predicted, key=lambda m: predicted[m])
        assert measured[pick] <= 1.10 * min(measured.values()), (row["model"], row["dtype"])
    assert len(ratios["structured"]) == len(ratios["jacobian"]) == 6
    for method, values in ratios.items():
        assert cost.SLOWDOWN[method] == pytest.approx(statistics.median(values), abs=0.05)
