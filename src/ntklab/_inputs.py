"""Validation of input batches against the kernel they go through.

The tools built on kernels (:func:`ntklab.dynamics.ensemble_dynamics`,
:class:`ntklab.dynamics.KernelRegressor`, :func:`ntklab.solvers.kernel_operator`,
:func:`ntklab.empirical.monte_carlo_kernel`, :func:`ntklab.distributed.kernel_array`, ...) take
whatever ``arch.kernel`` takes: flat batches ``(n, d)`` for an architecture of Dense layers,
channels-first images ``(n, C, L)`` or ``(n, C, H, W)`` for one with spatial layers (Conv,
pooling, Flatten). :func:`check_kernel_inputs` reads that rule off the architecture
(:func:`input_rule`) and checks the batches against it, with messages that name the argument
the caller knows (``x_train``, ``X``, ...), before any kernel is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._checks import check_channels_first, check_precision
from .errors import NtklabTypeError, NtklabValueError
from .kernels.engine import (
    Architecture,
    InputShape,
    Layer,
    architecture_spatial_ndim,
    check_input_shape,
)

__all__ = ["InputRule", "check_kernel_inputs", "input_rule"]

_SHAPES = {2: "(n, d)", 3: "(n, C, L)", 4: "(n, C, H, W)"}


@dataclass(frozen=True)
class InputRule:
    """The input batches a kernel takes.

    Attributes
    ----------
    ndims : tuple of int
        The accepted numbers of axes: ``(2,)`` for an architecture without spatial layers,
        ``(4,)`` for 2-D convolutions, ``(2, 3, 4)`` when the kernel does not say (pooling
        or Flatten alone, a plain kernel function).
    spatial : bool
        Whether the kernel reads images at all (an architecture with a spatial layer, or a
        kernel function whose rule is unknown).
    """

    ndims: tuple[int, ...]
    spatial: bool

    @property
    def shape_text(self) -> str:
        """The accepted shapes, as ``"(n, C, H, W)"`` or ``"(n, d), (n, C, L) or ..."``."""
        shapes = [_SHAPES[d] for d in self.ndims]
        return shapes[0] if len(shapes) == 1 else ", ".join(shapes[:-1]) + " or " + shapes[-1]


_ANY = InputRule(ndims=(2, 3, 4), spatial=True)


def _layers_of(kernel: object) -> tuple[Layer, ...] | None:
    """The layers behind ``kernel`` (an architecture, a layer, a bound ``arch.kernel``, or an
    object holding one in ``.arch``), or None for a plain kernel function."""
    for _ in range(4):  # unwrap a bound method or an ArchitectureKernel, a few levels at most
        if isinstance(kernel, Architecture):
            return kernel.layers
        if isinstance(kernel, Layer):
            return (kernel,)
        inner = getattr(kernel, "__self__", None)
        if inner is None:
            inner = getattr(kernel, "arch", None)
        if inner is None:
            return None
        kernel = inner
    return None


def _input_shape_of(kernel: object) -> InputShape | None:
    """The ``input_shape`` of the architecture behind ``kernel`` (unwrapped as
    :func:`_layers_of` does), or None."""
    for _ in range(4):
        if isinstance(kernel, Architecture):
            return kernel.input_shape
        inner = getattr(kernel, "__self__", None)
        if inner is None:
            inner = getattr(kernel, "arch", None)
        if inner is None:
            return None
        kernel = inner
    return None


def input_rule(kernel: object) -> InputRule:
    """The input batches ``kernel`` takes, read off its layers as ``Architecture.kernel``
    reads them: flat ``(n, d)`` without a spatial layer, ``(n, C, *S)`` with ``len(S)`` the
    dimensionality of its convolutions and pooling, any of ``(n, d)``, ``(n, C, L)``,
    ``(n, C, H, W)`` when nothing fixes it (a plain kernel function, Flatten alone)."""
    layers = _layers_of(kernel)
    if layers is None:
        return _ANY
    if not any(layer.spatial_layer for layer in layers):
        return InputRule(ndims=(2,), spatial=False)
    s = architecture_spatial_ndim(layers)
    return _ANY if s is None else InputRule(ndims=(s + 2,), spatial=True)


def _check_batch(
    name: str, x: object, rule: InputRule, input_shape: InputShape | None = None
) -> Tensor:
    """One batch against ``rule``: a finite float32/float64 tensor with an accepted number
    of axes, not channels-last, with no empty axis; with the architecture's
    ``input_shape``, of its features or channels (which then decide the layout)."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor of shape {rule.shape_text}, got {type(x).__name__}"
        )
    if x.ndim not in rule.ndims:
        hint = ""
        if not rule.spatial and x.ndim > 2:
            hint = (
                "; the architecture has no spatial layer (Conv, AvgPool, GlobalAvgPool, "
                f"Flatten) to read images: flatten them with {name}.flatten(1), or start the "
                "architecture with Conv layers"
            )
        raise NtklabValueError(
            f"{name}: expected a {'/'.join(map(str, rule.ndims))}-D tensor of shape "
            f"{rule.shape_text}, got {x.ndim}-D shape {tuple(x.shape)}{hint}"
        )
    check_precision(name, x)
    if input_shape is not None:
        check_input_shape(name, x, input_shape)
    elif x.ndim > 2:
        check_channels_first(name, x)
    if min(x.shape[1:]) == 0:
        raise NtklabValueError(
            f"{name}: expected non-empty features (channels and positions), got shape "
            f"{tuple(x.shape)}"
        )
    if x.is_meta:
        raise NtklabValueError(f"{name}: expected a tensor with data, got a meta tensor")
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return x


def check_kernel_inputs(
    kernel: object,
    x1: object,
    x2: object | None = None,
    *,
    names: tuple[str, str] = ("x1", "x2"),
) -> tuple[Tensor, Tensor | None]:
    """Validate the batches ``x1`` and ``x2`` (optional) against what ``kernel`` takes.

    Parameters
    ----------
    kernel : Architecture, Layer, bound ``arch.kernel``, object with ``.arch``, or callable
        The rule is read off its layers (:func:`input_rule`); a plain kernel function takes
        flat batches and channels-first images.
    x1 : Tensor of shape (n1, d) or (n1, C, *S)
    x2 : Tensor of shape (n2, ...) with the same trailing shape, optional
    names : (str, str)
        The names of ``x1`` and ``x2`` in the caller's signature, used in the messages.

    Returns
    -------
    (Tensor, Tensor or None)
        ``x1`` and ``x2``, unchanged.

    Raises
    ------
    NtklabTypeError
        Not a tensor; not float32/float64; ``x2``'s dtype differs from ``x1``'s.
    NtklabValueError
        A number of axes the kernel does not take (a 4-D batch for an architecture without
        spatial layers), another feature or channel count than the architecture's
        ``input_shape``, a channels-last image batch, an empty axis, NaN or inf, or ``x2``
        whose features (channels and spatial shape) or device differ from ``x1``'s.
    """
    rule = input_rule(kernel)
    shape = _input_shape_of(kernel)
    a = _check_batch(names[0], x1, rule, shape)
    if x2 is None:
        return a, None
    b = _check_batch(names[1], x2, rule, shape)
    if a.shape[1:] != b.shape[1:]:
        if a.ndim == 2 == b.ndim:
            raise NtklabValueError(
                f"{names[1]}: expected the feature dimension of {names[0]} ({a.shape[1]}), "
                f"got shape {tuple(b.shape)}"
            )
        raise NtklabValueError(
            f"{names[1]}: expected the channels and spatial shape of {names[0]}, "
            f"{tuple(a.shape[1:])}, got shape {tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise NtklabTypeError(
            f"{names[1]}: expected the dtype of {names[0]} ({a.dtype}), got {b.dtype}"
        )
    if a.device != b.device:
        raise NtklabValueError(
            f"{names[1]}: expected the device of {names[0]} ({a.device}), got {b.device}"
        )
    return a, b
