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

Dropout is read at inference (``model.eval()``), where it is the identity. A module with its
own ``forward`` is read when ``torch.fx`` traces it to a residual block, ``x + branch(x)`` or
``x + c * branch(x)`` with ``branch`` a chain of submodules (each read as above); any other
forward code is an error that names the module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from ..errors import NtklabTypeError, NtklabValueError
from .activations import (
    Activation,
    Elementwise,
    ElementwiseActivation,
    Gelu,
    LeakyRelu,
    Relu,
    Sigmoid,
    Silu,
    Softplus,
    Tanh,
)
from .conv import Conv, ConvLayer
from .dense import Dense, DenseLayer
from .dropout import Dropout
from .engine import Architecture, Layer, serial
from .graphs import Residual, ResidualBlock
from .normalization import LayerNorm, LayerNormLayer
from .pooling import AvgPool, AvgPoolLayer, Flatten, GlobalAvgPool, GlobalAvgPoolLayer

__all__ = ["from_torch"]

Scale = float | Mapping[str, float] | None

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

# spatial rank of the representation while reading: None unknown (at the input), 0 flat,
# 1 or 2 spatial dimensions; "pooled": after AdaptiveAvgPool(1), before Flatten.
_Rank = int | str | None


def from_torch(module: nn.Module, *, w_std: Scale = None, b_std: Scale = None) -> Architecture:
    """The architecture of a torch module, for its infinite-width kernels.

    Parameters
    ----------
    module : nn.Module
        ``nn.Sequential`` (nested) of ``nn.Linear``, ``nn.Conv1d``/``nn.Conv2d`` (groups and
        dilation 1, zero or circular padding), activations (``nn.ReLU``, ``nn.LeakyReLU``,
        ``nn.Tanh``, ``nn.GELU``, ``nn.Sigmoid``, ``nn.SiLU``, ``nn.Softplus``, ``nn.ELU``,
        ...), ``nn.AvgPool1d/2d`` (``count_include_pad=True``), ``nn.AdaptiveAvgPool1d/2d(1)``,
        ``nn.Flatten``, ``nn.LayerNorm`` (over the features of ``(n, d)`` inputs, or over
        ``(C, H, W)`` without affine), ``nn.GroupNorm(1, C)``, ``nn.Dropout``,
        ``nn.Identity``, and ntklab's finite modules (residual blocks are
        :class:`ntklab.nets.ResidualBlock`).
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
        ``(n, C, L)``/``(n, C, H, W)``.

    Raises
    ------
    NtklabTypeError
        ``module`` is not a ``torch.nn.Module``.
    NtklabValueError
        A submodule has no infinite-width kernel here (``nn.MaxPool2d``, ``nn.BatchNorm2d``,
        attention, a module with its own ``forward``, ...) or is used in a way that has none
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
    return serial(*layers)


def _unsupported(mod: nn.Module, path: str, why: str) -> NtklabValueError:
    where = f"at path {path!r}" if path else "(the model itself)"
    return NtklabValueError(
        f"module: expected layers with a known infinite-width kernel, got "
        f"{type(mod).__name__} {where}: {why}. {_MONTE_CARLO}"
    )


class _Reader:
    def __init__(self, w_std: Scale, b_std: Scale) -> None:
        for name, value in (("w_std", w_std), ("b_std", b_std)):
            if value is not None and not isinstance(value, int | float | Mapping):
                raise NtklabTypeError(
                    f"{name}: expected None, a float or a mapping of module paths to floats, "
                    f"got {type(value).__name__}"
                )
        self.w_std = w_std
        self.b_std = b_std

    def _scale(self, value: Scale, path: str, default: float) -> float:
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
            elif isinstance(mod, nn.MultiheadAttention | nn.TransformerEncoderLayer):
                why = "attention is not supported yet"
            elif isinstance(mod, nn.MaxPool1d | nn.MaxPool2d | nn.AdaptiveMaxPool2d):
                why = "max pooling has no closed-form kernel"
            elif type(mod).forward is not nn.Module.forward and not isinstance(mod, nn.Sequential):
                traced = _traced_residual(mod)
                if traced is not None:
                    return self._traced(mod, path, rank, *traced)
                why = (
                    "it has its own forward code, which cannot be read (only x + branch(x) and "
                    "x + c * branch(x) with a chain of submodules are)"
                )
            raise _unsupported(mod, path, why)
        return handler(mod, path, rank)

    def _handler(
        self, mod: nn.Module
    ) -> Callable[[nn.Module, str, _Rank], tuple[list[Layer], _Rank]] | None:
        if type(mod) is nn.Sequential:
            return self._sequential
        table: list[tuple[tuple[type, ...], Callable[..., tuple[list[Layer], _Rank]]]] = [
            ((DenseLayer,), self._dense_layer),
            ((ConvLayer,), self._conv_layer),
            ((AvgPoolLayer,), self._avg_pool_layer),
            ((GlobalAvgPoolLayer,), self._global_pool_layer),
            ((LayerNormLayer,), self._layer_norm_layer),
            ((ResidualBlock,), self._residual),
            ((ElementwiseActivation,), self._elementwise),
            ((nn.Linear,), self._linear),
            ((nn.Conv1d, nn.Conv2d), self._conv),
            ((nn.AvgPool1d, nn.AvgPool2d), self._avg_pool),
            ((nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d), self._adaptive_pool),
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
        w = self._scale(self.w_std, path, 1.0 / math.sqrt(3.0))
        b = None if mod.bias is None else self._scale(self.b_std, path, (3.0 * fan_in) ** -0.5)
        return [
            Dense(w_std=w, b_std=b, parameterization="standard", width=int(mod.out_features))
        ], 0

    def _conv(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = 1 if isinstance(mod, nn.Conv1d) else 2
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
        layer = Dense(
            w_std=mod.w_std,
            b_std=mod.b_std,
            parameterization=mod.parameterization,
            width=int(mod.out_features),
        )
        return [layer], 0

    def _conv_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = len(mod.filter_shape)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        conv = Conv(
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
        ndim = 1 if isinstance(mod, nn.AvgPool1d) else 2
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if mod.ceil_mode or not mod.count_include_pad or getattr(mod, "divisor_override", None):
            raise _unsupported(
                mod,
                path,
                "only ceil_mode=False, count_include_pad=True and no divisor_override "
                "are supported",
            )
        window = _tuple(mod.kernel_size, ndim)
        stride = _tuple(mod.stride if mod.stride is not None else mod.kernel_size, ndim)
        return [AvgPool(window, stride, _tuple(mod.padding, ndim))], ndim

    def _avg_pool_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = len(mod.window_shape)
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        return [AvgPool(mod.window_shape, mod.strides, mod.padding)], ndim

    def _adaptive_pool(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        ndim = 1 if isinstance(mod, nn.AdaptiveAvgPool1d) else 2
        _require_rank(mod, path, rank, (ndim,), f"it expects {ndim} spatial dimension(s)")
        if any(s != 1 for s in _tuple(mod.output_size, ndim)):
            raise _unsupported(
                mod, path, "only output_size=1 (global average pooling) is supported"
            )
        return [GlobalAvgPool()], "pooled"

    def _global_pool_layer(self, mod: Any, path: str, rank: _Rank) -> tuple[list[Layer], _Rank]:
        _require_rank(mod, path, rank, (1, 2), "it pools over spatial dimensions")
        return [GlobalAvgPool()], 0

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


def _traced_residual(mod: nn.Module) -> tuple[list[str], float] | None:
    """``(submodule names, scale)`` when ``mod.forward`` is ``x + scale * m_k(...m_1(x))``.

    The forward is traced symbolically (``torch.fx``); any other graph (several inputs,
    branches that are not a chain of submodules, functions other than the sum and a constant
    scale) gives None.
    """
    import operator

    import torch
    from torch import fx

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
