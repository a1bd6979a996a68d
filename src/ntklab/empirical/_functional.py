"""A ``torch.nn.Module`` as a pure function of (a subset of) its parameters.

Every empirical-kernel method works on a :class:`FunctionalModel`: the differentiated
parameters are passed explicitly, the others and the buffers (BatchNorm statistics, ...) are
held fixed, and the output is flattened to ``(n, k)``. The module itself is never modified.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import NtklabError, NtklabTypeError, NtklabValueError

__all__ = [
    "MODULE_CALL_LOCK",
    "FunctionalModel",
    "Outputs",
    "ParamSelection",
    "check_batch",
    "functional_model",
]

#: Held around every call of a module through :class:`FunctionalModel`.
#: ``torch.func.functional_call`` swaps the module's parameters and buffers for the given
#: tensors during the call and swaps the originals back after it; two threads calling one
#: module at once swap each other's tensors back, which leaves the module holding detached
#: copies of its parameters (``requires_grad=False``). Dask's threaded schedulers
#: (:mod:`ntklab.distributed`) or a user's thread pool may call ntklab on one module at once,
#: so the forward passes are serialized; the
#: backward passes, which read only the autograd graph, are not. Re-entrant.
MODULE_CALL_LOCK = threading.RLock()

Outputs = Literal["trace", "full", "diagonal"]
ParamSelection = Mapping[str, Tensor] | Iterable[str] | None


@dataclass(frozen=True)
class FunctionalModel:
    """``f(params, x) -> (n, k)`` for a module, differentiating only ``names``.

    Attributes
    ----------
    module : nn.Module
        The model (left untouched).
    params : dict of str to Tensor
        Detached values of the differentiated parameters, by their qualified names.
    frozen : dict of str to Tensor
        Every other parameter and every buffer, held fixed.
    """

    module: nn.Module
    params: dict[str, Tensor]
    frozen: dict[str, Tensor]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.params)

    @property
    def n_params(self) -> int:
        """Number of differentiated scalar parameters."""
        return sum(p.numel() for p in self.params.values())

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.params.values())).dtype

    @property
    def device(self) -> torch.device:
        return next(iter(self.params.values())).device

    def __call__(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Outputs of shape ``(n, k)`` (``k = 1`` for a model returning ``(n,)``)."""
        with MODULE_CALL_LOCK:
            out = torch.func.functional_call(self.module, {**self.frozen, **params}, (x,))
        if not isinstance(out, Tensor):
            raise NtklabTypeError(
                f"model: expected forward to return a Tensor, got {type(out).__name__}"
            )
        if out.ndim == 0 or out.shape[0] != x.shape[0]:
            raise NtklabValueError(
                f"model: expected an output with the input's batch size on its first axis "
                f"(one output per example), got an output of shape {tuple(out.shape)} for an "
                f"input batch of {x.shape[0]} (input batch size {x.shape[0]}, output batch "
                f"size {out.shape[0] if out.ndim else 'none: a scalar'})"
            )
        return out.reshape(x.shape[0], -1)

    def single(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Outputs ``(k,)`` of one input ``x`` (without batch axis): the form vmap needs."""
        return self(params, x.unsqueeze(0))[0]


def functional_model(model: nn.Module, params: ParamSelection = None) -> FunctionalModel:
    """Wrap ``model`` as a function of the parameters in ``params``.

    Parameters
    ----------
    model : nn.Module
        Any module whose forward is a function of its parameters and buffers.
    params : mapping of str to Tensor, iterable of str, or None
        Which parameters to differentiate: ``None`` means every parameter with
        ``requires_grad``; names select those parameters; a mapping gives names and values
        (the values replace the module's, e.g. a trained checkpoint).

    Raises
    ------
    NtklabTypeError
        ``model`` is not an ``nn.Module``, or a value is not a tensor.
    NtklabValueError
        The model has no parameters, or ``params`` names one the model lacks.
    """
    if not isinstance(model, nn.Module):
        raise NtklabTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    with MODULE_CALL_LOCK:  # not while another thread's call has swapped them
        named = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
    if not named:
        raise NtklabValueError(
            f"model: expected a module with parameters, got {type(model).__name__} with none"
        )
    if params is None:
        chosen = {n: p.detach() for n, p in named.items() if p.requires_grad}
        if not chosen:
            raise NtklabValueError(
                "model: expected at least one parameter with requires_grad=True, got none "
                "(pass params=... to choose parameters explicitly)"
            )
    else:
        items = params.items() if isinstance(params, Mapping) else ((n, None) for n in params)
        chosen = {}
        for name, value in items:
            if not isinstance(name, str) or name not in named:
                raise NtklabValueError(
                    f"params: expected names of the model's parameters (e.g. "
                    f"{', '.join(list(named)[:4])}), got {name!r}"
                )
            if value is None:
                chosen[name] = named[name].detach()
            elif not isinstance(value, Tensor) or value.shape != named[name].shape:
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise NtklabValueError(
                    f"params[{name!r}]: expected a tensor of shape {tuple(named[name].shape)}, "
                    f"got {got}"
                )
            else:
                chosen[name] = value.detach()
        if not chosen:
            raise NtklabValueError("params: expected at least one parameter name, got none")
    frozen = {n: p.detach() for n, p in named.items() if n not in chosen}
    frozen.update(buffers)
    dtypes = {p.dtype for p in chosen.values()}
    devices = {p.device for p in chosen.values()}
    if len(dtypes) > 1 or len(devices) > 1:
        raise NtklabTypeError(
            f"params: expected one dtype and one device for all differentiated parameters, got "
            f"dtypes {sorted(map(str, dtypes))} and devices {sorted(map(str, devices))}"
        )
    return FunctionalModel(model, chosen, frozen)


def check_batch(name: str, x: object, fm: FunctionalModel, *, allow_empty: bool = False) -> Tensor:
    """Validate a batch of inputs for ``fm``: a tensor with a batch axis, on the model's
    device and dtype, finite, and accepted by the model's forward.

    ``allow_empty``: a batch of ``n = 0`` inputs is accepted when the model's forward accepts
    one input of its shape (an input of zeros is run)."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or (x.shape[0] == 0 and not allow_empty):
        raise NtklabValueError(
            f"{name}: expected a batch of inputs (first axis n >= 1), got shape {tuple(x.shape)}"
        )
    if x.device != fm.device:
        raise NtklabValueError(f"{name}: expected the model's device {fm.device}, got {x.device}")
    if x.is_floating_point() and x.dtype != fm.dtype:
        raise NtklabTypeError(f"{name}: expected the model's dtype {fm.dtype}, got {x.dtype}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise NtklabValueError(f"{name}: expected finite values, got NaN or inf")
    try:
        with torch.no_grad():
            fm(fm.params, x[:1] if x.shape[0] else x.new_zeros((1, *x.shape[1:])))
    except NtklabError:
        raise
    except Exception as err:  # the model's own error, restated with the shapes
        raise NtklabValueError(
            f"{name}: the model's forward rejected a batch of shape {tuple(x.shape)} "
            f"({type(err).__name__}: {err})"
        ) from err
    return x
