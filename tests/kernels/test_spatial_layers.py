"""Sum pooling, edge-normalized average pooling, resizing, indexing, locally connected and
transposed convolutions: parity with neural-tangents, naive references, Monte Carlo of the
finite modules, and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ntklab as nl
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels import (
    AvgPool,
    Conv,
    ConvLocal,
    ConvTranspose,
    Flatten,
    GlobalAvgPool,
    GlobalSumPool,
    ImageResize,
    Index,
    Slice,
    SumPool,
)
from ntklab.kernels.spatial_maps import resize_matrix

F64 = torch.float64
REFERENCE = Path(__file__).parent.parent / "data" / "nt_reference_spatial.json"


def _conv(layer: dict[str, Any]) -> nl.kernels.Layer:
    kind = {"Conv": Conv, "ConvLocal": ConvLocal, "ConvTranspose": ConvTranspose}[layer["layer"]]
    standard = layer["parameterization"] == "standard"
    return kind(  # type: ignore[no-any-return]
        layer["width"] if standard else None,
        tuple(layer["filter"]),
        tuple(layer["strides"]),
        layer["padding"],
        layer["w_std"],
        layer["b_std"],
        parameterization=layer["parameterization"],
    )


def _index(entries: list[Any]) -> Index:
    spatial = [e if isinstance(e, int) else slice(*e) for e in entries]
    return Index((slice(None), slice(None), *spatial))


def build(spec: list[dict[str, Any]]) -> list[nl.kernels.Layer]:
    """ntklab layers from the JSON architecture spec of make_nt_spatial_reference.py."""
    layers: list[nl.kernels.Layer] = []
    for layer in spec:
        kind = layer["layer"]
        if kind in ("Conv", "ConvLocal", "ConvTranspose"):
            layers.append(_conv(layer))
        elif kind == "Dense":
            layers.append(
                nl.Dense(
                    w_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                    width=layer["width"],
                )
            )
        elif kind == "AvgPool":
            window, strides = tuple(layer["window"]), tuple(layer["strides"])
            layers.append(AvgPool(window, strides, layer["padding"], layer["normalize_edges"]))
        elif kind == "SumPool":
            window, strides = tuple(layer["window"]), tuple(layer["strides"])
            layers.append(SumPool(window, strides, layer["padding"]))
        elif kind == "ImageResize":
            layers.append(ImageResize(tuple(layer["shape"]), layer["method"], layer["antialias"]))
        elif kind == "Index":
            layers.append(_index(layer["spatial"]))
        else:
            simple = {
                "GlobalSumPool": GlobalSumPool,
                "GlobalAvgPool": GlobalAvgPool,
                "Flatten": Flatten,
                "Relu": nl.Relu,
                "Erf": nl.Erf,
            }
            layers.append(simple[kind]())
    return layers


def _cases() -> list[dict[str, Any]]:
    return json.loads(REFERENCE.read_text())["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_parity_with_neural_tangents(case: dict[str, Any]) -> None:
    """Float64 NNGP and NTK agree with neural-tangents 0.6.5 to 1e-6 relative (reference
    values from ``tests/data/make_nt_spatial_reference.py``)."""
    arch = nl.serial(*build(case["architecture"]))
    x1 = torch.tensor(case["x1"], dtype=F64)
    x2 = None if case["x2"] is None else torch.tensor(case["x2"], dtype=F64)
    k = arch.kernel(x1, x2)
    torch.testing.assert_close(k.nngp, torch.tensor(case["nngp"], dtype=F64), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(k.ntk, torch.tensor(case["ntk"], dtype=F64), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ naive references


def _images(n: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(n, *shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _readout_kernel(layers: list[nl.kernels.Layer], top: nl.kernels.Layer) -> nl.Architecture:
    return nl.serial(*layers, top, nl.Dense(w_std=1.3, b_std=0.0))


@pytest.mark.parametrize(
    ("window", "strides", "padding"),
    [((2, 2), (2, 2), "VALID"), ((3, 2), (1, 2), "SAME"), ((2, 3), (1, 1), "CIRCULAR"), (3, 2, 1)],
)
def test_sum_pool_is_window_size_squared_times_avg_pool(
    window: Any, strides: Any, padding: Any
) -> None:
    """Without bias after it, SumPool's NNGP and NTK are |f|^2 times AvgPool's."""
    ndim = 1 if isinstance(window, int) else 2
    size = math.prod((window,) if isinstance(window, int) else window)
    x1, x2 = _images(3, (2, 7) if ndim == 1 else (2, 6, 5), 0), None
    first = Conv(filter_shape=(3,) * ndim, w_std=1.4, b_std=0.2)
    for top in (Flatten(), GlobalAvgPool()):
        avg = _readout_kernel([first, nl.Relu(), AvgPool(window, strides, padding)], top)
        sums = _readout_kernel([first, nl.Relu(), SumPool(window, strides, padding)], top)
        ka, ks = avg.kernel(x1, x2), sums.kernel(x1, x2)
        torch.testing.assert_close(ks.nngp, size**2 * ka.nngp)
        torch.testing.assert_close(ks.ntk, size**2 * ka.ntk)


def test_global_sum_pool_is_positions_squared_times_global_avg_pool() -> None:
    x = _images(3, (2, 6, 5), 1)
    body = [Conv(filter_shape=(3, 3), w_std=1.4, b_std=0.2), nl.Relu()]
    ka = _readout_kernel(body, GlobalAvgPool()).kernel(x)
    ks = _readout_kernel(body, GlobalSumPool()).kernel(x)
    torch.testing.assert_close(ks.nngp, 30**2 * ka.nngp)
    torch.testing.assert_close(ks.ntk, 30**2 * ka.ntk)


LINEAR_MAPS = [
    pytest.param(SumPool((2, 3), (1, 2), "SAME"), id="sum_pool"),
    pytest.param(GlobalSumPool(), id="global_sum_pool"),
    pytest.param(AvgPool((3, 3), (2, 1), (1, 1), normalize_edges=True), id="avg_pool_edges"),
    pytest.param(AvgPool((3, 2), (2, 2), "SAME", normalize_edges=True), id="avg_pool_edges_same"),
    pytest.param(ImageResize((9, 4)), id="resize_linear"),
    pytest.param(ImageResize((3, -1), "linear", antialias=False), id="resize_no_antialias"),
    pytest.param(ImageResize((4, 7), "nearest"), id="resize_nearest"),
    pytest.param(Index(Slice[:, :, 1:5, ::-2]), id="index_slices"),
    pytest.param(Index(Slice[..., -2]), id="index_int"),
    pytest.param(Index(Slice[:, :, 3, 1]), id="index_all_axes"),
]


@pytest.mark.parametrize("layer", LINEAR_MAPS)
def test_linear_map_kernel_equals_the_kernel_of_its_mapped_images(layer: nl.kernels.Layer) -> None:
    """A parameter-free linear layer M: the kernel of [M, readout] on x is the kernel of the
    readout on M(x) (its finite module), through the diagonal (Flatten) and the full
    (GlobalAvgPool) layouts."""
    x1, x2 = _images(3, (4, 6, 5), 2), _images(2, (4, 6, 5), 3)
    module = layer.module(None, None, generator=None, dtype=F64, device=None)
    m1, m2 = module(x1), module(x2)
    for top in (Flatten(), GlobalAvgPool()):
        k = _readout_kernel([layer], top).kernel(x1, x2)
        readout = [top] if m1.ndim > 2 else []  # a flat M(x) goes straight to the Dense
        reference = nl.serial(*readout, nl.Dense(w_std=1.3, b_std=0.0)).kernel(m1, m2)
        torch.testing.assert_close(k.nngp, reference.nngp)


def test_avg_pool_edges_module_matches_torch_count_include_pad_false() -> None:
    x = _images(2, (3, 6, 5), 4)
    ours = AvgPool((3, 3), (2, 1), (1, 1), normalize_edges=True).module(
        None, None, generator=None, dtype=F64, device=None
    )
    torch.testing.assert_close(
        ours(x), nn.AvgPool2d((3, 3), (2, 1), (1, 1), count_include_pad=False)(x)
    )


@pytest.mark.parametrize("size", [(9, 8), (4, 3), (13, 2), (3, 7)])
def test_resize_matrices_match_torch_interpolate(size: tuple[int, int]) -> None:
    """jax.image.resize's matrices equal torch's half-pixel interpolation: bilinear
    (align_corners=False, with and without antialias) and nearest-exact."""
    x = _images(2, (3, 6, 5), 5)
    for method, antialias, mode in (
        ("linear", True, "bilinear"),
        ("linear", False, "bilinear"),
        ("nearest", True, "nearest-exact"),
    ):
        rows = resize_matrix(6, size[0], method, antialias)  # type: ignore[arg-type]
        cols = resize_matrix(5, size[1], method, antialias)  # type: ignore[arg-type]
        ours = torch.einsum("ncij,hi,wj->nchw", x, rows, cols)
        kwargs = {"align_corners": False, "antialias": antialias} if mode == "bilinear" else {}
        torch.testing.assert_close(
            ours, nn.functional.interpolate(x, size=size, mode=mode, **kwargs)
        )


@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_resize_after_a_conv_commutes_with_it(method: str) -> None:
    """A 1x1 Conv (no bias) commutes with resizing, so [Conv, ImageResize] on x has the
    kernel of [Conv] on the resized x. (neural-tangents 0.6.5 gets this case wrong: its
    ImageResize reads a full-layout kernel in input axis order after a shared Conv has
    reversed it.)"""
    x = _images(3, (2, 6, 5), 6)
    layer = ImageResize((9, 3), method)  # type: ignore[arg-type]
    resized = layer.module(None, None, generator=None, dtype=F64, device=None)(x)
    conv = Conv(filter_shape=(1, 1), w_std=1.2, b_std=0.0)
    top = [GlobalAvgPool(), nl.Dense(w_std=1.1, b_std=0.1)]
    k = nl.serial(conv, layer, *top).kernel(x)
    reference = nl.serial(conv, *top).kernel(resized)
    torch.testing.assert_close(k.nngp, reference.nngp)
    torch.testing.assert_close(k.ntk, reference.ntk)


def test_index_keeps_the_diagonal_layout_and_resize_nearest_too() -> None:
    """Selecting positions runs on the spatial diagonal (no full covariance needed), linear
    resizing does not."""
    assert not Index(Slice[:, :, 1:]).mixes_space
    assert not ImageResize((9, 9), "nearest").mixes_space
    assert ImageResize((9, 9), "linear").mixes_space
    assert not ImageResize((-1, -1), "linear").mixes_space


# ------------------------------------------------------------------ finite modules


def _output_covariance(arch: nl.Architecture, x: torch.Tensor, nets: int) -> tuple[Any, Any]:
    """Mean and standard error over ``nets`` networks of the per-network average of
    ``f(x) f(x)^T`` over 16 readout units."""
    gen = torch.Generator().manual_seed(0)
    draws = []
    with torch.no_grad():
        for _ in range(nets):
            net = arch.to_torch(12, 16, generator=gen, dtype=F64)
            out = net(x)  # shape: (n, 16)
            draws.append(out @ out.T / out.shape[1])
    stack = torch.stack(draws)
    return stack.mean(0), stack.std(0) / math.sqrt(nets)


MONTE_CARLO = [
    # a linear layer after the only nonlinearity: the output covariance is exact at any width
    pytest.param(
        [
            Conv(None, (3, 3), w_std=1.4, b_std=0.1),
            nl.Relu(),
            ConvLocal(None, (3, 2), w_std=1.3, b_std=0.2),
            GlobalAvgPool(),
        ],
        id="conv_local_full_layout",
    ),
    pytest.param(
        [ConvLocal(None, (2, 3), (2, 1), "CIRCULAR", 1.5, 0.3), nl.Relu(), Flatten()],
        id="conv_local_first_circular",
    ),
    pytest.param(
        [
            Conv(None, (3, 3), w_std=1.4, b_std=0.1),
            nl.Relu(),
            ConvTranspose(None, (2, 3), (2, 1), "SAME", 1.2, 0.2),
            GlobalAvgPool(),
        ],
        id="conv_transpose_same_full_layout",
    ),
    pytest.param(
        [
            Conv(None, (3, 3), w_std=1.4, b_std=0.1),
            nl.Relu(),
            ConvTranspose(None, (3, 3), (2, 2), "CIRCULAR", 1.2, None),
            GlobalAvgPool(),
        ],
        id="conv_transpose_circular",
    ),
    pytest.param(
        [ConvTranspose(None, (2,), (3,), "VALID", 1.2, 0.1), nl.Relu(), Flatten()],
        id="conv_transpose_1d_small_filter",
    ),
    pytest.param(
        [ConvTranspose(None, (3, 3), (2, 2), 1, 1.2, 0.1), nl.Relu(), Flatten()],
        id="conv_transpose_int_padding",
    ),
    pytest.param(
        [Conv(None, (2, 3, 2), (1, 2, 1), "SAME", 1.4, 0.1), nl.Relu(), GlobalAvgPool()],
        id="conv3d",
    ),
    pytest.param(
        [
            Conv(None, (2, 2, 2), w_std=1.4, b_std=0.1),
            nl.Relu(),
            ConvTranspose(None, (2, 1, 2), (2, 1, 1), "VALID", 1.2, 0.2),
            Flatten(),
        ],
        id="conv_transpose_3d",
    ),
    pytest.param(
        [
            Conv(None, (2, 2, 2), w_std=1.4, b_std=0.1),
            nl.Relu(),
            ImageResize((3, 5, 2)),
            Flatten(),
        ],
        id="resize_3d",
    ),
]


@pytest.mark.parametrize("layers", MONTE_CARLO)
def test_finite_networks_output_covariance_matches_nngp(layers: list[nl.kernels.Layer]) -> None:
    """The average of f(x) f(x)^T over 200 random finite networks (``to_torch``) is the
    NNGP within 4 standard errors, and twice the NNGP is not."""
    ndim = len(layers[0].filter_shape)  # type: ignore[attr-defined]
    x = _images(3, {1: (2, 7), 2: (2, 5, 4), 3: (2, 4, 3, 3)}[ndim], 7)
    arch = nl.serial(*layers, nl.Dense(w_std=1.1, b_std=0.1))
    nngp = arch.kernel(x).nngp
    mean, se = _output_covariance(arch, x, 200)
    assert bool(((mean - nngp).abs() <= 4 * se + 1e-12).all()), (mean, nngp, se)
    assert bool(((mean - 2 * nngp).abs() > 4 * se).any())


def test_conv_transpose_module_has_torch_geometry() -> None:
    """With int pads (VALID when f >= s), ConvTransposeLayer is torch's conv_transpose2d
    with the NTK scale."""
    x = _images(2, (3, 5, 4), 8)
    for padding, torch_pad in (("VALID", 0), (1, 1), ((2, 0), (2, 0))):
        mod = ConvTranspose(4, (3, 2), (2, 2), padding, 1.3, None).module(
            None, None, generator=torch.Generator().manual_seed(0), dtype=F64, device=None
        )
        out = mod(x)
        ref = nn.functional.conv_transpose2d(x, mod.weight, stride=(2, 2), padding=torch_pad)
        torch.testing.assert_close(out, ref * 1.3 / math.sqrt(3 * 6))


def test_conv_local_module_has_independent_filters_per_position() -> None:
    """A ConvLocalLayer whose filters are all set to one filter is that convolution."""
    x = _images(2, (3, 6, 5), 9)
    local = ConvLocal(4, (3, 2), (2, 1), "SAME", 1.3, 0.2).module(
        None, None, generator=torch.Generator().manual_seed(0), dtype=F64, device=None
    )
    shared = Conv(4, (3, 2), (2, 1), "SAME", 1.3, 0.2).module(
        None, None, generator=torch.Generator().manual_seed(0), dtype=F64, device=None
    )
    local(x), shared(x)
    with torch.no_grad():
        local.weight.copy_(shared.weight.reshape(4, -1).expand_as(local.weight))
        local.bias.copy_(shared.bias[:, None, None].expand_as(local.bias))
    torch.testing.assert_close(local(x), shared(x))
    with pytest.raises(NtklabValueError, match="spatial shape"):
        local(_images(2, (3, 8, 5), 9))


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: SumPool((2, 2, 2, 2)), NtklabValueError, "window_shape"),
        (lambda: Conv(8, (2, 2, 2, 2)), NtklabValueError, "filter_shape"),
        (lambda: SumPool((2, 2), padding="FULL"), NtklabValueError, "padding"),
        (lambda: AvgPool((2, 2), normalize_edges=1), NtklabTypeError, "normalize_edges"),
        (lambda: ImageResize((4, 4), "cubic"), NtklabValueError, "linear' or 'nearest"),
        (lambda: ImageResize((4, 4), "area"), NtklabValueError, "method"),
        (lambda: ImageResize((-1, -1, 4, 4)), NtklabValueError, "spatial axes only"),
        (lambda: ImageResize((0, 4)), NtklabValueError, "shape"),
        (lambda: ImageResize(2.5), NtklabTypeError, "shape"),
        (lambda: ImageResize((4, 4), antialias="yes"), NtklabTypeError, "antialias"),
        (lambda: Index(Slice[:, 1:]), NtklabValueError, "infinite-width"),
        (lambda: Index(Slice[::2]), NtklabValueError, "batch"),
        (lambda: Index(Slice[..., 1.5]), NtklabTypeError, "ints, slices"),
        (lambda: Index(Slice[..., 0, ...]), NtklabValueError, "Ellipsis"),
        (lambda: ConvLocal(8, (3, 3, 3)), NtklabValueError, "filter_shape"),
        (lambda: ConvTranspose(8, (3, 3), padding="FULL"), NtklabValueError, "padding"),
        (lambda: ConvTranspose(-1, (3, 3)), NtklabValueError, "width"),
    ],
)
def test_bad_arguments_are_refused(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    ("layers", "x_shape", "match"),
    [
        ([Index(Slice[:, :, 9]), Flatten()], (2, 6, 5), "index in"),
        ([Index(Slice[:, :, 7:]), Flatten()], (2, 6, 5), "at least one position"),
        ([Index(Slice[:, :, :, :, 1]), Flatten()], (2, 6, 5), "at most 4 entries"),
        ([Index(Slice[..., 1]), nl.Dense()], (6,), "Index: expected images"),
        ([ImageResize((4,)), Flatten()], (2, 6, 5), "3-D tensor"),
        ([ConvTranspose(None, (2, 2), padding=3), Flatten()], (2, 3, 3), "output position"),
        ([ConvLocal(None, (3,)), Flatten()], (2, 6, 5), "3-D tensor"),
    ],
)
def test_bad_inputs_are_refused(layers: list[Any], x_shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(NtklabValueError, match=match):
        nl.serial(*layers, nl.Dense()).kernel(_images(2, x_shape, 0))


# ------------------------------------------------------------------ from_torch


@pytest.mark.parametrize(
    ("module", "x_shape"),
    [
        (nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 6, 5)),
        (nn.AvgPool2d(2, divisor_override=1), (2, 6, 5)),
        (nn.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 7)),
        (nn.Upsample(size=(9, 7), mode="bilinear"), (2, 6, 5)),
        (nn.Upsample(size=(4, 3), mode="bilinear"), (2, 6, 5)),
        (nn.Upsample(size=(4, 11), mode="nearest-exact"), (2, 6, 5)),
        (nn.Upsample(size=11, mode="linear"), (2, 7)),
        (nn.Upsample(size=(3, 5, 4), mode="trilinear"), (2, 4, 3, 2)),
        (nn.Upsample(size=(2, 5, 3), mode="nearest-exact"), (2, 3, 4, 2)),
        (nn.Upsample(size=(9,), mode="nearest-exact"), (2, 7)),
    ],
)
def test_from_torch_reads_pooling_and_upsampling_as_torch_computes_them(
    module: nn.Module, x_shape: tuple[int, ...]
) -> None:
    """[M, Flatten, Linear] read by from_torch has the kernel of [Flatten, Linear] on the
    torch output M(x)."""
    x = _images(3, x_shape, 10)
    mx = module(x)
    features = math.prod(mx.shape[1:])
    arch = nl.kernels.from_torch(nn.Sequential(module, nn.Flatten(), nn.Linear(features, 1)))
    reference = nl.kernels.from_torch(nn.Sequential(nn.Flatten(), nn.Linear(features, 1)))
    flat = mx.flatten(1)  # Flatten's average over channels and positions, for 3-D images too
    torch.testing.assert_close(arch.kernel(x).nngp, reference.kernel(flat).nngp)
    torch.testing.assert_close(arch.kernel(x).ntk, reference.kernel(flat).ntk)


@pytest.mark.parametrize("ndim", [2, 3])
def test_from_torch_conv_transpose_has_the_variance_of_torch_initialization(ndim: int) -> None:
    """Output covariance of torch-initialized nn.ConvTranspose2d/3d layers (linear, so exact
    in expectation for their uniform weights) is the NNGP that from_torch reads."""
    x = _images(3, (4, 4, 3) if ndim == 2 else (4, 3, 2, 3), 11)

    def make() -> nn.Module:
        if ndim == 2:
            return nn.ConvTranspose2d(4, 64, (3, 2), stride=2, padding=1)
        return nn.ConvTranspose3d(4, 64, (2, 3, 2), stride=(2, 1, 2), padding=(0, 1, 1))

    with torch.random.fork_rng():
        torch.manual_seed(0)
        layers = [make().double() for _ in range(40)]
    arch = nl.kernels.from_torch(nn.Sequential(layers[0], nn.Flatten()))
    nngp = arch.kernel(x).nngp
    with torch.no_grad():
        draws = []
        for layer in layers:
            out = layer(x).flatten(1)  # channels and positions: the average Flatten takes
            draws.append(out @ out.T / out.shape[1])
    stack = torch.stack(draws)
    mean, se = stack.mean(0), stack.std(0) / math.sqrt(len(draws))
    assert bool(((mean - nngp).abs() <= 4 * se).all()), (mean, nngp, se)
    assert bool(((mean - 1.5 * nngp).abs() > 4 * se).any())


def test_from_torch_round_trips_the_new_finite_modules() -> None:
    arch = nl.serial(
        ConvLocal(8, (3, 3)),
        nl.Relu(),
        ConvTranspose(4, (2, 2), (2, 2)),
        SumPool((2, 2)),
        ImageResize((5, 5)),
        Index(Slice[..., 1:]),
        AvgPool((2, 2), (1, 1), "SAME", normalize_edges=True),
        GlobalSumPool(),
        nl.Dense(1),
    )
    net = arch.to_torch(8, dtype=F64)
    net(_images(2, (2, 5, 5), 12))  # materialize the lazy modules
    assert nl.kernels.from_torch(net).layers == arch.layers


@pytest.mark.parametrize(
    "module",
    [
        nn.Upsample(scale_factor=2, mode="bilinear"),
        nn.Upsample(size=(4, 4), mode="nearest"),
        nn.Upsample(size=(4, 4), mode="bilinear", align_corners=True),
        nn.ConvTranspose2d(2, 4, 3, output_padding=1, stride=2),
        nn.AvgPool2d(2, divisor_override=3),
    ],
)
def test_from_torch_refuses_what_has_no_counterpart(module: nn.Module) -> None:
    with pytest.raises(NtklabValueError, match=type(module).__name__):
        nl.kernels.from_torch(nn.Sequential(nn.Conv2d(2, 2, 1), module))


def test_from_torch_nearest_upsample_of_an_int_size_takes_the_rank_of_its_input() -> None:
    after_conv = nl.kernels.from_torch(
        nn.Sequential(nn.Conv3d(2, 2, 1), nn.Upsample(size=5, mode="nearest-exact"))
    )
    assert after_conv.layers[1] == ImageResize((5, 5, 5), "nearest", antialias=False)
    with pytest.raises(NtklabValueError, match="give size as a tuple"):
        nl.kernels.from_torch(nn.Sequential(nn.Upsample(size=5, mode="nearest-exact")))


def test_from_torch_reads_3d_convolutions_and_pooling() -> None:
    net = nn.Sequential(
        nn.Conv3d(2, 4, 3, padding=1),
        nn.ReLU(),
        nn.AvgPool3d(2, divisor_override=1),
        nn.Flatten(),
        nn.Linear(4 * 8, 1),
    )
    arch = nl.kernels.from_torch(net)
    s3 = 1 / math.sqrt(3)
    assert arch.layers[:3] == (
        Conv(4, (3, 3, 3), (1, 1, 1), (1, 1, 1), s3, (3 * 54) ** -0.5, parameterization="standard"),
        nl.Relu(),
        SumPool((2, 2, 2), (2, 2, 2), (0, 0, 0)),
    )
    assert arch.kernel(_images(2, (2, 4, 4, 4), 13)).ntk.shape == (2, 2)
    pooled = nl.kernels.from_torch(
        nn.Sequential(nn.Conv3d(2, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten())
    )
    assert pooled.layers[2:] == (GlobalAvgPool(),)  # the Flatten after it is read as none


# ------------------------------------------------------------------ memory blocks


def test_memory_blocks_are_sized_at_the_largest_image_of_the_chain() -> None:
    """Upsampling layers enlarge the carried covariance: blocks are sized at the largest
    spatial shape (ConvTranspose's before its CIRCULAR fold), and blocked kernels equal the
    unblocked one."""
    from ntklab.kernels.engine import block_bytes, peak_spatial_shape

    up = [
        Conv(filter_shape=(3, 3)),
        nl.Relu(),
        ConvTranspose(None, (3, 3), (2, 2), "CIRCULAR"),
        ImageResize((20, -1)),
        nl.Relu(),
        GlobalAvgPool(),
        nl.Dense(),
    ]
    assert peak_spatial_shape(up, (5, 4)) == (20, 9)  # VALID (11, 9), folded (10, 8), resized
    x1, x2 = _images(3, (2, 5, 4), 14), _images(2, (2, 5, 4), 15)
    arch = nl.serial(*up)
    one_pair = block_bytes(x1, 1, 1, True, (20, 9))
    assert one_pair > 30 * block_bytes(x1, 1, 1, True)  # (22 * 11)^2 / (7 * 6)^2 positions
    with pytest.raises(NtklabValueError, match=f"at least {one_pair} bytes"):
        arch.kernel(x1, x2, max_memory=one_pair - 1)
    whole = arch.kernel(x1, x2)
    blocked = arch.kernel(x1, x2, max_memory=2 * one_pair)
    torch.testing.assert_close(blocked.ntk, whole.ntk)


def test_kernels_are_differentiable_in_inputs_and_scales() -> None:
    """gradcheck through every new layer, in the inputs and in a tensor-valued w_std; float32
    inputs give float32 kernels."""
    arch = nl.serial(
        ConvLocal(None, (2, 2), w_std=1.3, b_std=0.1),
        nl.Erf(),
        ConvTranspose(None, (2, 2), (2, 1), "CIRCULAR", 1.2, 0.1),
        SumPool((2, 2), (1, 1)),
        ImageResize((5, 4)),
        Index(Slice[..., ::-1]),
        AvgPool((2, 2), (1, 1), "SAME", normalize_edges=True),
        GlobalSumPool(),
        nl.Dense(w_std=1.1, b_std=0.1),
    )
    x1 = _images(2, (2, 3, 3), 16).requires_grad_()
    x2 = _images(2, (2, 3, 3), 17)
    assert torch.autograd.gradcheck(lambda a: arch.kernel(a, x2).ntk, (x1,))
    w = torch.tensor(1.3, dtype=F64, requires_grad=True)

    def ntk_of(w_std: torch.Tensor) -> torch.Tensor:
        layers = [
            ConvTranspose(None, (2, 2), (2, 1), "SAME", w_std, 0.1),
            nl.Erf(),
            ConvLocal(None, (2, 2), w_std=w_std),
            GlobalAvgPool(),
            nl.Dense(),
        ]
        return nl.serial(*layers).kernel(x2).ntk

    assert torch.autograd.gradcheck(ntk_of, (w,))
    assert arch.kernel(x2.float()).ntk.dtype == torch.float32
