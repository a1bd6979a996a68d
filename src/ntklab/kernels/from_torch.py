"""Read a ``torch.nn.Module`` into an architecture: its infinite-width NNGP and NTK.

:func:`from_torch` walks nested ``nn.Sequential`` containers and maps each supported module
to a kernel layer. The infinite-width limit is taken along the channels/features of every
hidden layer, with the module's own parameterization:

- ``nn.Linear``, ``nn.Conv1d``, ``nn.Conv2d`` compute :math:`y = W x + b`, the *standard*
  parameterization. Their scales come from torch's default initialization
  (``reset_parameters``: ``kaiming_uniform_(a=sqrt(5))``), whose variances are
  :math:`\\mathrm{Var}\\,W = 1/(3 n_{in})` and :math:`\\mathrm{Var}\\,b = 1/(3 n_{in})`, i.e.
  ``w_std = 1/sqrt(3)`` and ``b_std = 1/sqrt(3 n_in)`` with :math:`n_{in}` the fan-in
  (input features, or input channels times the filter size). Pass ``w_std``/``b_std``
  when the weights were initialized otherwise, e.g. ``nn.init.normal_(W, 0, w_std /
  sqrt(fan_in))``. The NTK of the standard parameterization grows with the widths, which
  are read from the modules.
- ntklab's own finite modules (``DenseLayer``, ``ConvLayer``, ``LayerNormLayer``,
  ``ResidualBlock``, ... what ``Architecture.to_torch`` builds) carry their scales and
  parameterization, which are used as they are.

The kernels are those of Gaussian weights: exact in the limit for Gaussian initializations,
and for torch's uniform default exact from the second layer on (hidden pre-activations are
sums over infinitely many units); the first layer's pre-activations are sums over the
input's fan-in only, so the uniform weights make them Gaussian only approximately (the
relative error of the first activation's dual is of order :math:`1/n_{in}`).

Attention: ntklab's :class:`~ntklab.kernels.SelfAttentionLayer` (what ``to_torch`` builds for
:class:`~ntklab.kernels.GlobalSelfAttention`) is read back with its heads, widths, scaling,
mechanism and positional embeddings, so ``from_torch(arch.to_torch(width))`` has the kernel
of ``arch``. Torch's own attention (``nn.MultiheadAttention``, and the
``nn.TransformerEncoderLayer``/``nn.TransformerEncoder`` built on it, post- or pre-norm, as
well as a ``softmax`` or ``scaled_dot_product_attention`` call in a forward) is refused: its
logits :math:`q \\cdot k / \\sqrt{d_{head}}` with independent query and key weights stay
random (Gaussian) as the width grows, and the expectation of their softmax has no closed
form; the limit of Hron, Bahri, Sohl-Dickstein & Novak (2020) needs logits divided by
:math:`d_{head}` with tied queries and keys ("linear scaling"), or the identity mechanism,
which torch's module does not offer. The kernels are read for channels-first inputs
``(n, C, L)``: a model on channels-last sequences ``(n, L, C)`` (``batch_first`` attention,
``nn.Linear`` per position) is refused at its first ``transpose``/``permute`` (the message
says how to write it channels-first: ``nn.Conv1d(C, C', 1)`` is a per-position
``nn.Linear``).

Dropout is read at inference (``model.eval()``), where it is the identity. A module with its
own ``forward`` is read from its ``torch.fx`` trace as a graph (:mod:`ntklab.kernels.graphs`):
submodules and the functions ``relu``, ``tanh``, ``sigmoid``, ``gelu``, ``erf`` extend a
chain; sums, differences and products of values become ``FanOut``, ``parallel`` and
``FanInSum``/``FanInProd``; ``torch.cat(..., dim=1)`` becomes ``FanInConcat``; constant
factors scale a branch. So ``x + f(x)``, ``x - f(x)``, ``2 * x + f(x)``, ``relu(x + f(x))``,
``torch.cat([f(x), g(x)], 1)`` and ``f(x) * g(x)`` are read. Constants added to a value,
submodules called twice (shared weights), sums or products of values that share all their
weights (``x * x``) and any other function are errors that name the module and its path.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import fx, nn

from ..errors import NtklabTypeError, NtklabValueError
from .activations import (
    Activation,
    Elementwise,
    ElementwiseActivation,
    Erf,
    Gelu,
    Identity,
    LeakyRelu,
    Relu,
    Sigmoid,
    Silu,
    Softplus,
    Tanh,
)
from .attention import GlobalSelfAttention, SelfAttentionLayer
from .conv import (
    Conv,
    ConvLayer,
    ConvLocal,
    ConvLocalLayer,
    ConvTranspose,
    ConvTransposeLayer,
)
from .dense import Dense, DenseLayer
from .dropout import Dropout
from .engine import Architecture, Layer, serial
from .graphs import (
    FanInConcat,
    FanInProd,
    FanInSum,
    FanOut,
    Residual,
    ResidualBlock,
    Scale,
    parallel,
)
from .normalization import LayerNorm, LayerNormLayer
from .pooling import (
    AvgPool,
    AvgPoolLayer,
    Flatten,
    GlobalAvgPool,
    GlobalAvgPoolLayer,
    GlobalSumPool,
    GlobalSumPoolLayer,
    SumPool,
    SumPoolLayer,
)
from .spatial_maps import ImageResize, ImageResizeLayer, IndexLayer, index_entries

__all__ = ["from_torch"]


def _binary_ops() -> dict[object, str]:
    return {
        operator.add: "add",
        torch.add: "add",
        "add": "add",
        operator.sub: "sub",
        torch.sub: "sub",
        "sub": "sub",
        operator.mul: "mul",
        torch.mul: "mul",
        "mul": "mul",
        operator.truediv: "div",
        torch.div: "div",
        "div": "div",
    }


def _unary_ops() -> dict[object, Callable[[], Layer]]:
    return {
        torch.relu: Relu,
        nn.functional.relu: Relu,
        "relu": Relu,
        torch.tanh: Tanh,
        "tanh": Tanh,
        torch.sigmoid: Sigmoid,
        "sigmoid": Sigmoid,
        nn.functional.gelu: Gelu,
        torch.erf: Erf,
        "erf": Erf,
    }


_BINARY = _binary_ops()
_UNARY = _unary_ops()

ScaleOption = float | Mapping[str, float] | None

_SPECIAL_ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.GELU, nn.Sigmoid, nn.SiLU, nn.Softplus)
_GENERIC_ACTIVATIONS = (
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.Mish,
    nn.Hardtanh,
    nn.ReLU6,
    nn.Softsign,
    nn.Tanhshrink,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.LogSigmoid,
)

_MONTE_CARLO = (
    "For such a model, estimate its kernels from finite networks instead: "
    "ntklab.empirical.ntk(model, x1, x2) for one initialization, or the average over "
    "initializations, ntklab.empirical.monte_carlo_kernel(make_model, x1, x2, n_samples=...) "
    "with make_model a function that returns a freshly initialized model."
)

_TORCH_ATTENTION = (
    nn.MultiheadAttention,
    nn.TransformerEncoderLayer,
    nn.TransformerEncoder,
    nn.TransformerDecoderLayer,
    nn.TransformerDecoder,
    nn.Transformer,
)

_SOFTMAX_ATTENTION = (
    "torch's attention is the softmax of logits q.k / sqrt(head_dim) with independent query "
    "and key weights: as the width grows these logits stay random (Gaussian) and the "
    "infinite-width kernel of their softmax has no closed form (Hron, Bahri, Sohl-Dickstein & "
    "Novak, 2020 give one for logits divided by head_dim with tied queries and keys, the "
    "'linear scaling', or for the identity mechanism). For a transformer with a limit, build "
    "ntklab's self-attention: nl.serial(..., nl.kernels.GlobalSelfAttention(), ...)"
    ".to_torch(width) gives SelfAttentionLayer modules on channels-first sequences (n, C, L), "
    "which from_torch reads"
)

_CHANNELS_LAST = (
    "its forward reorders the axes of a value; the kernels are read for channels-first "
    "inputs (n, C, L) and (n, C, H, W), and a model on channels-last sequences (n, L, C) "
    "(batch_first attention) is not mapped: write it channels-first, with "
    "nn.Conv1d(C, C', 1) for a per-position nn.Linear and ntklab's SelfAttentionLayer for "
    "attention"
)


def _attention_reason(mod: nn.Module) -> str:
    """Why a torch attention module has no kernel here."""
    if isinstance(mod, nn.MultiheadAttention):
        return _SOFTMAX_ATTENTION
    return f"its self-attention is an nn.MultiheadAttention: {_SOFTMAX_ATTENTION}"


# spatial rank of the representation while reading: None unknown (at the input), 0 flat,
# 1, 2 or 3 spatial dimensions; "pooled": after AdaptiveAvgPool(1), before Flatten.
_Rank = int | str | None


def from_torch(
    module: nn.Module, *, w_std: ScaleOption = None, b_std: ScaleOption = None
) -> Architecture:
    """The architecture of a torch module, for its infinite-width kernels.

    Parameters
    ----------
    module : nn.Module
        ``nn.Sequential`` (nested) of ``nn.Linear``, ``nn.Conv1d``/``nn.Conv2d`` (groups and
        dilation 1, zero or circular padding), activations (``nn.ReLU``, ``nn.LeakyReLU``,
        ``nn.Tanh``, ``nn.GELU``, ``nn.Sigmoid``, ``nn.SiLU``, ``nn.Softplus``, ``nn.ELU``,
        ...), ``nn.Conv3d``, ``nn.AvgPool1d/2d/3d`` (``divisor_override=1`` is sum pooling),
        ``nn.AdaptiveAvgPool1d/2d/3d(1)``, ``nn.ConvTranspose1d/2d/3d`` (groups and dilation
        1, no output padding), ``nn.Upsample(size=...)`` (``"nearest-exact"``, ``"linear"``,
        ``"bilinear"``, ``"trilinear"``, ``align_corners=False``),
        ``nn.Flatten``, ``nn.LayerNorm`` (over the features of ``(n, d)`` inputs, or over
        ``(C, H, W)`` without affine), ``nn.GroupNorm(1, C)``, ``nn.Dropout``,
        ``nn.Identity``, and ntklab's finite modules (residual blocks are
        :class:`ntklab.nets.ResidualBlock`, self-attention
        :class:`ntklab.kernels.SelfAttentionLayer` on channels-first sequences).
    w_std, b_std : float or mapping of module path to float, optional
        Weight and bias scales of the torch ``nn.Linear``/``nn.Conv`` layers, meaning
        :math:`W \\sim N(0, \\sigma_w^2 / n_{in})` and :math:`b \\sim N(0, \\sigma_b^2)`; a
        mapping gives them per module path (``"0"``, ``"features.3"``, as in
        ``named_modules``), the others keeping the default. Default: torch's initialization
        (see the module docstring).

    Returns
    -------
    Architecture
        Its ``kernel(x1, x2)`` takes the inputs ``module`` takes: ``(n, d)`` or images
        ``(n, C, L)``/``(n, C, H, W)``. Its ``input_shape`` is read from the layers with
        weights that read the input (``in_features`` of the first ``nn.Linear``,
        ``in_channels`` of the first ``nn.Conv``): ``(d,)`` or ``(C, None, None)`` (the
        spatial size is not known from the modules), so a kernel call on another feature or
        channel count, or on a channels-last batch, is refused; ``None`` when no such layer
        reads the input (a ``Flatten`` first, a lazy layer).

    Raises
    ------
    NtklabTypeError
        ``module`` is not a ``torch.nn.Module``.
    NtklabValueError
        A submodule has no infinite-width kernel here (``nn.MaxPool2d``, ``nn.BatchNorm2d``,
        torch's softmax attention ``nn.MultiheadAttention`` and the transformer layers built
        on it, a forward that reorders axes (channels-last), ...) or is used in a way that has none
        (e.g. ``nn.Linear`` on the spatial axes of an image): the message names the module
        and its path and points to the Monte Carlo estimators of :mod:`ntklab.empirical`.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> net = torch.nn.Sequential(
    ...     torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
    ...     torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    >>> arch = nl.kernels.from_torch(net)
    >>> arch.kernel(torch.randn(2, 3, 8, 8, dtype=torch.float64)).ntk.shape
    torch.Size([2, 2])
    """
    if not isinstance(module, nn.Module):
        raise NtklabTypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    reader = _Reader(w_std, b_std)
    layers = reader.read(module, "", None)[0]
    if not layers or not any(layer.has_parameters for layer in layers):
        raise NtklabValueError(
            f"module: expected a network with at least one Linear or Conv layer, got "
            f"{type(module).__name__} without one"
        )
    return serial(*layers, input_shape=reader.input_shape())


def _unsupported(mod: nn.Module, path: str, why: str) -> NtklabValueError:
    where = f"at path {path!r}" if path else "(the model itself)"
    return NtklabValueError(
        f"module: expected layers with a known infinite-width kernel, got "
        f"{type(mod).__name__} {where}: {why}. {_MONTE_CARLO}"
    )


class _Reader:
    def __init__(self, w_std: ScaleOption, b_std: ScaleOption) -> None:
        for name, value in (("w_std", w_std), ("b_std", b_std)):
            if value is not None and not isinstance(value, int | float | Mapping):
                raise NtklabTypeError(
                    f"{name}: expected None, a float or a mapping of module paths to floats, "
                    f"got {type(value).__name__}"
                )
        self.w_std = w_std
        self.b_std = b_std
        # (path, count, spatial rank) of each layer with weights that reads the model's input
        self.readers: list[tuple[str, int, int]] = []

    def note_input(self, path: str, rank: _Rank, count: int | None, ndim: int) -> None:
        """Record that the module at ``path`` reads the model's input (``rank`` still unknown:
        only layers that keep the shape came before it), with ``count`` input features or
        channels (``None`` or 0: lazy, unknown) and ``ndim`` spatial dimensions."""
        if rank is None and count:
            self.readers.append((path, int(count), ndim))

    def input_shape(self) -> tuple[int | None, ...] | None:
        """The per-example input shape the layers reading the input agree on: ``(d,)`` or
        ``(C, None, ...)`` (spatial sizes are not known from the modules); ``None`` when no
        layer with weights reads the input directly."""
        shapes = {(count, ndim) for _, count, ndim in self.readers}
        if not shapes:
            return None
        if len(shapes) > 1:
            seen = ", ".join(f"{c} at path {p!r}" for p, c, _ in self.readers)
            raise NtklabValueError(
                "module: expected the layers that read the input to agree on its features or "
                f"channels, got {seen}"
            )
        count, ndim = shapes.pop()
        return (count, *([None] * ndim))

    def _scale(self, value: ScaleOption, path: str, default: float) -> float:
        if value is None:
            return default
        if isinstance(value, Mapping):
            return float(value.get(path, default))
        return float(value)

    def read(self, mod: nn.Module, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        handler = self._handler(mod)
        if handler is None:
            why = "no infinite-width kernel is implemented for it"
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                why = (
                    "batch normalization couples the inputs of a batch in training mode and "
                    "its statistics are not part of the kernel"
                )
            elif isinstance(mod, _TORCH_ATTENTION):
                why = _attention_reason(mod)
            elif isinstance(mod, nn.MaxPool1d | nn.MaxPool2d | nn.AdaptiveMaxPool2d):
                why = "max pooling has no closed-form kernel"
            elif type(mod).forward is not nn.Module.forward and not isinstance(mod, nn.Sequential):
                traced = _traced_residual(mod)
                if traced is not None:
                    return self._traced(mod, path, rank, *traced)
                graph = _traced_graph(mod)
                if graph is not None:
                    return _GraphReader(self, mod, path).read(graph, rank)
                why = "its forward code cannot be traced by torch.fx to one input and one output"
            raise _unsupported(mod, path, why)
        return handler(mod, path, rank)

    def _handler(
        self, mod: nn.Module
    ) -> Callable[[nn.Module, str, _Rank], tuple[list[Layer], _Rank]] | None:
        if type(mod) is nn.Sequential:
            return self._sequential
        table: list[tuple[tuple[type, ...], Callable[..., tuple[list[Layer], _Rank]]]] = [
            ((DenseLayer,), self._dense_layer),
            ((ConvLayer, ConvLocalLayer, ConvTransposeLayer), self._conv_layer),
            ((AvgPoolLayer, SumPoolLayer), self._avg_pool_layer),
            ((GlobalAvgPoolLayer, GlobalSumPoolLayer), self._global_pool_layer),
            ((ImageResizeLayer, IndexLayer), self._spatial_map_layer),
            ((LayerNormLayer,), self._layer_norm_layer),
            ((SelfAttentionLayer,), self._attention_layer),
            ((ResidualBlock,), self._residual),
            ((ElementwiseActivation,), self._elementwise),
            ((nn.Linear,), self._linear),
            ((nn.Conv1d, nn.Conv2d, nn.Conv3d), self._conv),
            ((nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d), self._conv_transpose),
            ((nn.Upsample,), self._upsample),
            ((nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d), self._avg_pool),
            (
                (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d),
                self._adaptive_pool,
            ),
            ((nn.Flatten,), self._flatten),
            ((nn.LayerNorm,), self._layer_norm),
            ((nn.GroupNorm,), self._group_norm),
            ((nn.Dropout, nn.Dropout1d, nn.Dropout2d), self._dropout),
            ((nn.Identity,), lambda m, p, r: ([], r)),
            (_SPECIAL_ACTIVATIONS + _GENERIC_ACTIVATIONS, self._activation),
        ]
        for kinds, handler in table:
            if type(mod) in kinds:  # exact types: a subclass may have its own forward
                return handler
        return None

    # ------------------------------------------------------------------ containers
    def _sequential(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        layers: list[Layer] = []
        for name, child in mod.named_children():
            sub, rank = self.read(child, f"{path}.{name}" if path else name, rank)
            layers.extend(sub)
        return layers, rank

    def _residual(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        branch_path = f"{path}.branch" if path else "branch"
        branch, out_rank = self.read(mod.branch, branch_path, rank)
        if not branch:
            raise _unsupported(mod, path, "its branch is empty")
        if out_rank != rank and rank is not None:
            raise _unsupported(mod, path, "its branch changes the shape of its input")
        return [Residual(tuple(branch), float(mod.scale))], out_rank

    def _traced(
        self, mod: nn.Module, path: str, rank: _Rank, names: list[str], scale: float
    ) -> tuple[list[Layer], _Rank]:
        """A residual module read from its traced forward: ``x + scale * chain(x)``."""
        layers: list[Layer] = []
        out_rank = rank
        for name in names:
            sub, out_rank = self.read(
                mod.get_submodule(name), f"{path}.{name}" if path else name, out_rank
            )
            layers.extend(sub)
        if not layers:
            raise _unsupported(mod, path, "its residual branch is empty")
        if out_rank != rank and rank is not None:
            raise _unsupported(mod, path, "its branch changes the shape of its input")
        return [Residual(tuple(layers), scale)], out_rank

    # ------------------------------------------------------------------ layers with weights
    def _linear(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        _require_rank(mod, path, rank, (0,), "it acts on the last axis; Flatten the image first")
        fan_in = int(mod.in_features)
        self.note_input(path, rank, fan_in, 0)
        w = self._scale(self.w_std, path, 1.0 / math.sqrt(3.0))
        b = None if mod.bias is None else self._scale(self.b_std, path, (3.0 * fan_in) ** -0.5)
        return [
            Dense(w_std=w, b_std=b, parameterization="standard", width=int(mod.out_features))
        ], 0

    def _conv(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = len(mod.kernel_size)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if mod.groups != 1 or any(d != 1 for d in mod.dilation):
            raise _unsupported(mod, path, "grouped or dilated convolutions are not supported")
        kernel = tuple(int(k) for k in mod.kernel_size)
        stride = tuple(int(s) for s in mod.stride)
        if mod.padding_mode not in ("zeros", "circular"):
            raise _unsupported(mod, path, f"padding_mode={mod.padding_mode!r} is not supported")
        padding: str | tuple[int, ...]
        if isinstance(mod.padding, str):
            padding = mod.padding.upper()
        else:
            padding = tuple(int(p) for p in mod.padding)
        if mod.padding_mode == "circular":
            same = (
                all(
                    s == 1 and k % 2 == 1 and p == k // 2
                    for k, s, p in zip(
                        kernel,
                        stride,
                        padding if isinstance(padding, tuple) else kernel,
                        strict=True,
                    )
                )
                or padding == "SAME"
            )
            if not same:
                raise _unsupported(
                    mod,
                    path,
                    "circular padding is supported only as 'same' (odd filters, "
                    "stride 1, padding = kernel_size // 2)",
                )
            padding = "CIRCULAR"
        fan_in = int(mod.in_channels) * math.prod(kernel)
        self.note_input(path, rank, int(mod.in_channels), ndim)
        w = self._scale(self.w_std, path, 1.0 / math.sqrt(3.0))
        b = None if mod.bias is None else self._scale(self.b_std, path, (3.0 * fan_in) ** -0.5)
        conv = Conv(
            filter_shape=kernel,
            strides=stride,
            padding=padding,  # type: ignore[arg-type]
            w_std=w,
            b_std=b,
            parameterization="standard",
            width=int(mod.out_channels),
        )
        return [conv], ndim

    def _dense_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        _require_rank(mod, path, rank, (0,), "it acts on the last axis; Flatten the image first")
        if mod.parameterization not in ("ntk", "standard"):
            raise _unsupported(
                mod, path, f"the {mod.parameterization!r} parameterization has no kernel limit"
            )
        self.note_input(path, rank, mod.in_features, 0)
        layer = Dense(
            w_std=mod.w_std,
            b_std=mod.b_std,
            parameterization=mod.parameterization,
            width=int(mod.out_features),
        )
        return [layer], 0

    def _attention_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        _require_rank(mod, path, rank, (1, 2, 3), "it attends over the positions of sequences")
        options = mod.options
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        layer = GlobalSelfAttention(
            n_chan_out=mod.n_chan_out,
            n_chan_key=mod.n_chan_key,
            n_chan_val=mod.n_chan_val,
            n_heads=mod.n_heads,
            **fields,
        )
        return [layer], rank

    def _conv_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = len(mod.filter_shape)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        kind = {ConvLocalLayer: ConvLocal, ConvTransposeLayer: ConvTranspose}.get(type(mod), Conv)
        self.note_input(path, rank, getattr(mod, "in_channels", None), ndim)
        conv = kind(
            filter_shape=mod.filter_shape,
            strides=mod.strides,
            padding=mod.padding,
            w_std=mod.w_std,
            b_std=mod.b_std,
            parameterization=mod.parameterization,
            width=mod.out_channels,
        )
        return [conv], ndim

    # ------------------------------------------------------------------ parameter-free
    def _avg_pool(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = {nn.AvgPool1d: 1, nn.AvgPool2d: 2}.get(type(mod), 3)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        divisor = getattr(mod, "divisor_override", None)
        if mod.ceil_mode or divisor not in (None, 1):
            raise _unsupported(
                mod,
                path,
                "only ceil_mode=False and divisor_override None or 1 (sum pooling) are supported",
            )
        window = _tuple(mod.kernel_size, ndim)
        stride = _tuple(mod.stride if mod.stride is not None else mod.kernel_size, ndim)
        padding = _tuple(mod.padding, ndim)
        if divisor == 1:
            return [SumPool(window, stride, padding)], ndim
        return [AvgPool(window, stride, padding, not mod.count_include_pad)], ndim

    def _avg_pool_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = len(mod.window_shape)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if isinstance(mod, SumPoolLayer):
            return [SumPool(mod.window_shape, mod.strides, mod.padding)], ndim
        return [AvgPool(mod.window_shape, mod.strides, mod.padding, mod.normalize_edges)], ndim

    def _spatial_map_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        if isinstance(mod, ImageResizeLayer):
            ndim = len(mod.layer._shape)
            _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
            return [mod.layer], ndim
        if not isinstance(rank, int):
            return [mod.layer], None
        _require_rank(mod, path, rank, (1, 2, 3), "it indexes spatial dimensions")
        ints = sum(isinstance(e, int) for e in index_entries(mod.layer.idx, rank + 2))
        return [mod.layer], rank - ints

    def _conv_transpose(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = {nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2}.get(type(mod), 3)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if (
            mod.groups != 1
            or any(d != 1 for d in mod.dilation)
            or any(p != 0 for p in mod.output_padding)
            or mod.padding_mode != "zeros"
        ):
            raise _unsupported(
                mod,
                path,
                "only groups=1, dilation=1, output_padding=0 and zero padding are supported",
            )
        kernel = tuple(int(k) for k in mod.kernel_size)
        # torch's default initialization reads the fan-in of the weight (C_in, C_out, *k) as
        # C_out |k|: Var W = 1 / (3 C_out |k|), which is w_std^2 / (C_in |k|).
        out_fan = int(mod.out_channels) * math.prod(kernel)
        self.note_input(path, rank, int(mod.in_channels), ndim)
        w = self._scale(self.w_std, path, math.sqrt(mod.in_channels / (3.0 * mod.out_channels)))
        b = None if mod.bias is None else self._scale(self.b_std, path, (3.0 * out_fan) ** -0.5)
        conv = ConvTranspose(
            filter_shape=kernel,
            strides=tuple(int(s) for s in mod.stride),
            padding=tuple(int(p) for p in mod.padding),
            w_std=w,
            b_std=b,
            parameterization="standard",
            width=int(mod.out_channels),
        )
        return [conv], ndim

    def _upsample(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        methods = {
            "nearest-exact": "nearest",
            "linear": "linear",
            "bilinear": "linear",
            "trilinear": "linear",
        }
        if mod.size is None or mod.mode not in methods or mod.align_corners:
            raise _unsupported(
                mod,
                path,
                "only size=... (not scale_factor: the output shape would depend on the "
                "input's, which the kernel layers fix) with mode 'nearest-exact', 'linear', "
                "'bilinear' or 'trilinear' and align_corners=False is supported (torch's "
                "'nearest' is not jax's half-pixel rule: use 'nearest-exact')",
            )
        ndim: _Rank = {"linear": 1, "bilinear": 2, "trilinear": 3}.get(mod.mode)
        if ndim is None:  # nearest-exact: any rank, from the size or the input
            ndim = len(mod.size) if isinstance(mod.size, tuple | list) else rank
        if not isinstance(ndim, int) or ndim not in (1, 2, 3):
            raise _unsupported(
                mod,
                path,
                "an int size with mode 'nearest-exact' needs the rank of its input (1-3 "
                "spatial dimensions after a convolution or pooling); give size as a tuple",
            )
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        size = _tuple(mod.size, ndim)
        return [ImageResize(size, methods[mod.mode], antialias=False)], ndim  # type: ignore[arg-type]

    def _adaptive_pool(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = {nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2}.get(type(mod), 3)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if any(s != 1 for s in _tuple(mod.output_size, ndim)):
            raise _unsupported(
                mod, path, "only output_size=1 (global average pooling) is supported"
            )
        return [GlobalAvgPool()], "pooled"

    def _global_pool_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        _require_rank(mod, path, rank, (1, 2, 3), "it pools over spatial dimensions")
        return [GlobalSumPool() if isinstance(mod, GlobalSumPoolLayer) else GlobalAvgPool()], 0

    def _flatten(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        if mod.start_dim != 1 or mod.end_dim != -1:
            raise _unsupported(mod, path, "only Flatten(start_dim=1, end_dim=-1) is supported")
        return ([] if rank == "pooled" else [Flatten()]), 0

    def _layer_norm(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        dims = len(mod.normalized_shape)
        if dims == 1:
            _require_rank(mod, path, rank, (0,), "it normalizes the last axis only")
            affine = bool(mod.elementwise_affine)
            return [LayerNorm("channel", eps=mod.eps, affine=affine, bias=mod.bias is not None)], 0
        _require_rank(mod, path, rank, (dims - 1,), f"it normalizes {dims} trailing axes")
        if mod.elementwise_affine:
            raise _unsupported(
                mod,
                path,
                "a per-position affine map over (C, H, W) is not supported; use "
                "elementwise_affine=False or nn.GroupNorm(1, C)",
            )
        return [LayerNorm("all", eps=mod.eps)], rank

    def _group_norm(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        if mod.num_groups != 1:
            raise _unsupported(mod, path, "only GroupNorm(1, C) (layer normalization) is supported")
        return [LayerNorm("all", eps=mod.eps, affine=bool(mod.affine))], rank

    def _layer_norm_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        layer = LayerNorm(mod.axes, eps=mod.eps, affine=mod.affine, bias=mod.bias is not None)
        return [layer], rank

    def _dropout(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        return [Dropout(float(mod.p))], rank

    def _activation(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        layer: Activation
        if isinstance(mod, nn.ReLU):
            layer = Relu()
        elif isinstance(mod, nn.LeakyReLU):
            layer = LeakyRelu(float(mod.negative_slope))
        elif isinstance(mod, nn.Tanh):
            layer = Tanh()
        elif isinstance(mod, nn.GELU) and mod.approximate == "none":
            layer = Gelu()
        elif isinstance(mod, nn.Sigmoid):
            layer = Sigmoid()
        elif isinstance(mod, nn.SiLU):
            layer = Silu()
        elif isinstance(mod, nn.Softplus) and mod.beta == 1.0 and mod.threshold >= 20.0:
            layer = Softplus()
        else:
            layer = Elementwise(mod, type(mod).__name__)
        return [layer], rank

    def _elementwise(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        owner = getattr(mod.fn, "__self__", None)
        layer = owner if isinstance(owner, Activation) else Elementwise(mod.fn, mod.name)
        return [layer], rank


def _tuple(value: object, ndim: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * ndim
    return tuple(int(v) for v in value)  # type: ignore[attr-defined]


def _require_rank(
    mod: nn.Module, path: str, rank: _Rank, allowed: tuple[int, ...], why: str
) -> None:
    if rank is None or rank in allowed:
        return
    got = {0: "flat (n, d) features", "pooled": "the (n, C, 1, 1) output of global pooling"}.get(
        rank,
        f"{rank}-D images",
    )
    raise _unsupported(mod, path, f"it receives {got} here and {why}")


def _traced_graph(mod: nn.Module) -> Any:
    """The ``torch.fx`` graph of ``mod.forward`` when it traces to one input and one output,
    else None."""
    try:
        graph = fx.symbolic_trace(mod).graph
    except Exception:
        return None
    nodes = list(graph.nodes)
    if sum(n.op == "placeholder" for n in nodes) != 1 or sum(n.op == "output" for n in nodes) != 1:
        return None
    return graph


_ATTENTION_FUNCTIONS = ("softmax", "scaled_dot_product_attention", "multi_head_attention_forward")
_REORDERS = ("transpose", "permute", "swapaxes", "swapdims", "movedim")


class _GraphReader:
    """Reads a traced forward into a chain of layers with ``FanOut``/``parallel``/``FanIn``.

    Each value of the graph is a function of the input ``x``. A value is the chain of layers
    from the nearest value that every path to it goes through (its dominator): submodules
    and activation functions extend a chain; a sum, difference, product or channel
    concatenation of values is ``FanOut(k)``, one branch per operand from their common
    dominator, and ``FanInSum``/``FanInProd``/``FanInConcat``; a constant factor is a scale
    of its branch. Branches that share a layer (other than through their dominator) are not
    read: their kernels would need the layer's weights in two places.
    """

    def __init__(self, reader: _Reader, mod: nn.Module, path: str) -> None:
        self.reader, self.mod, self.path = reader, mod, path

    def read(self, graph: Any, rank: _Rank) -> tuple[list[Layer], _Rank]:
        nodes = list(graph.nodes)
        self.x = next(n for n in nodes if n.op == "placeholder")
        self.order = {n: i for i, n in enumerate(nodes)}
        called = [str(n.target) for n in nodes if n.op == "call_module"]
        for target in called:
            sub = self.mod.get_submodule(target)
            if isinstance(sub, _TORCH_ATTENTION):
                sub_path = f"{self.path}.{target}" if self.path else target
                raise _unsupported(sub, sub_path, _attention_reason(sub))
        for n in nodes:
            name = getattr(n.target, "__name__", n.target)
            if n.op in ("call_function", "call_method") and name in _ATTENTION_FUNCTIONS:
                raise self.fail(
                    f"its forward calls {name!r} ({n.name}): the softmax of Gaussian values "
                    f"has no closed-form kernel; in attention, {_SOFTMAX_ATTENTION}"
                )
        twice = sorted({t for t in called if called.count(t) > 1})
        if twice:
            raise self.fail(
                f"submodule {twice[0]} is called more than once (shared weights have no "
                "kernel here)"
            )
        out = next(n for n in nodes if n.op == "output").args[0]
        return self.chain(out, self.x, rank)

    def fail(self, why: str) -> NtklabValueError:
        return _unsupported(self.mod, self.path, why)

    def ancestors(self, node: Any, start: Any) -> set[Any]:
        """The values on the paths from ``start`` to ``node`` (both included)."""
        seen: set[Any] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if n in seen or not hasattr(n, "all_input_nodes"):
                continue
            seen.add(n)
            if n is not start:
                stack.extend(n.all_input_nodes)
        if start not in seen:
            raise self.fail(f"its value {node.name} does not depend on the input")
        return seen

    def dominator(self, operands: list[Any], start: Any) -> Any:
        """The latest value that every path from ``start`` to the operands goes through."""
        common = set.intersection(*(self.ancestors(op, start) for op in operands))
        for cand in sorted(common, key=self.order.__getitem__, reverse=True):
            if cand is start or all(self._through(op, cand, start) for op in operands):
                return cand
        return start

    def _through(self, node: Any, cand: Any, start: Any) -> bool:
        """Whether every path from ``start`` to ``node`` passes through ``cand``."""
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if n is cand or n in seen:
                continue
            if n is start:
                return False
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return True

    def chain(self, node: Any, start: Any, rank: _Rank) -> tuple[list[Layer], _Rank]:
        if node is start:
            return [], rank
        if not hasattr(node, "op"):
            raise self.fail(f"its forward returns a constant {node!r}")
        target = node.target
        if node.op == "call_module":
            if len(node.args) != 1 or node.kwargs:
                raise self.fail(f"submodule {target} is called with several arguments")
            layers, r = self.chain(node.args[0], start, rank)
            sub_path = f"{self.path}.{target}" if self.path else str(target)
            own, r = self.reader.read(self.mod.get_submodule(str(target)), sub_path, r)
            return layers + own, r
        unary = _UNARY.get(target) if node.op == "call_function" else _UNARY.get(str(target))
        if unary is not None and len(node.args) == 1 and not node.kwargs:
            layers, r = self.chain(node.args[0], start, rank)
            return [*layers, unary()], r
        if target in (operator.neg, torch.neg, "neg") and len(node.args) == 1:
            layers, r = self.chain(node.args[0], start, rank)
            return [*layers, Scale(-1.0)], r
        if target in _BINARY and len(node.args) == 2 and not node.kwargs:
            kind = _BINARY[target]
            a, b = node.args
            consts = [v for v in (a, b) if isinstance(v, int | float)]
            if consts:
                value = next(v for v in (a, b) if not isinstance(v, int | float))
                c = float(consts[0])
                if kind == "mul" or (kind == "div" and value is a):
                    scale = c if kind == "mul" else 1.0 / c
                    layers, r = self.chain(value, start, rank)
                    return [*layers, Scale(scale)], r
                raise self.fail(
                    f"its forward adds a constant or divides by a value ({node.name}); the "
                    "kernels are those of zero-mean layers"
                )
            if kind == "div":
                raise self.fail(f"its forward divides two values ({node.name})")
            signs = [1.0, -1.0 if kind == "sub" else 1.0]
            fan_in: Layer = FanInProd() if kind == "mul" else FanInSum()
            return self.branches([a, b], signs, fan_in, start, rank)
        if target in (torch.cat, torch.concat, "cat"):
            values = node.args[0] if node.args else node.kwargs.get("tensors")
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            if not isinstance(values, list | tuple) or dim not in (1, -1):
                raise self.fail(
                    f"its forward concatenates along dim={dim!r} ({node.name}); only the "
                    "channel or feature axis (dim=1) is read"
                )
            return self.branches(list(values), [1.0] * len(values), FanInConcat(dim), start, rank)
        name = getattr(target, "__name__", target)
        if name in _REORDERS:
            raise self.fail(f"{_CHANNELS_LAST} ({node.name} calls {name!r})")
        raise self.fail(f"its forward calls {name!r} ({node.name})")

    def branches(
        self, operands: list[Any], signs: list[float], fan_in: Layer, start: Any, rank: _Rank
    ) -> tuple[list[Layer], _Rank]:
        dom = self.dominator(operands, start)
        head, r = self.chain(dom, start, rank)
        inner = [self.ancestors(op, dom) - {dom} for op in operands]
        for i in range(len(inner)):
            for j in range(i):
                if inner[i] & inner[j]:
                    raise self.fail(
                        "two operands of one sum, product or concatenation share a layer "
                        "other than through a common input; their kernels would need its "
                        "weights twice"
                    )
        paths: list[list[Layer]] = []
        ranks = set()
        for op, sign in zip(operands, signs, strict=True):
            layers, out = self.chain(op, dom, r)
            if sign != 1.0:
                layers.append(Scale(sign))
            paths.append(layers or [Identity()])
            ranks.add(out)
        if len(ranks) > 1:
            raise self.fail("the operands of a sum, product or concatenation differ in rank")
        free = [i for i, p in enumerate(paths) if not any(lay.has_parameters for lay in p)]
        if len(free) > 1 and not isinstance(fan_in, FanInConcat):
            raise self.fail(
                "its forward adds or multiplies values that share all their weights (such as "
                "x * x): they are not independent branches, whose kernels the sum or product "
                "would combine"
            )
        return [*head, FanOut(len(paths)), parallel(*paths), fan_in], ranks.pop()


def _traced_residual(mod: nn.Module) -> tuple[list[str], float] | None:
    """``(submodule names, scale)`` when ``mod.forward`` is ``x + scale * m_k(...m_1(x))``.

    The forward is traced symbolically (``torch.fx``); any other graph (several inputs,
    branches that are not a chain of submodules, functions other than the sum and a constant
    scale) gives None.
    """
    try:
        graph = fx.symbolic_trace(mod).graph
    except Exception:
        return None
    nodes = list(graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    outputs = [n for n in nodes if n.op == "output"]
    if len(inputs) != 1 or len(outputs) != 1:
        return None
    x = inputs[0]
    total = outputs[0].args[0]
    if not isinstance(total, fx.Node) or total.target not in (operator.add, torch.add, "add"):
        return None
    if len(total.args) != 2 or total.kwargs:
        return None
    left, right = total.args
    branch = right if left is x else left if right is x else None
    if not isinstance(branch, fx.Node):
        return None
    scale = 1.0
    if branch.op in ("call_function", "call_method") and branch.target in (
        operator.mul,
        torch.mul,
        "mul",
    ):
        a, b = branch.args
        if isinstance(a, int | float) and isinstance(b, fx.Node):
            scale, branch = float(a), b
        elif isinstance(b, int | float) and isinstance(a, fx.Node):
            scale, branch = float(b), a
        else:
            return None
    names: list[str] = []
    node: object = branch
    while node is not x:
        if not isinstance(node, fx.Node) or node.op != "call_module" or len(node.args) != 1:
            return None
        if node.kwargs or len(node.users) != 1:
            return None
        names.append(str(node.target))
        node = node.args[0]
    used = {n for n in nodes if n.op not in ("placeholder", "output")}
    expected = {total} | {n for n in nodes if n.op == "call_module" and str(n.target) in names}
    if branch is not total.args[0] and branch is not total.args[1]:
        expected |= {n for n in nodes if n.target in (operator.mul, torch.mul, "mul")}
    if used != expected:
        return None
    return names[::-1], scale
