"""The rule every empirical kernel relies on: the model evaluates each example on its own.

The empirical NTK :math:`\\Theta(x, x') = J(x) J(x')^\\top` is defined by the per-example
Jacobian :math:`J(x) = \\partial f(x) / \\partial \\theta`, a function of the parameters and of
one input. Every method of :func:`ntklab.empirical.ntk` computes it from per-example
evaluations (``vmap`` over single examples, or a batched backward pass read off per
example), so a forward that is not a deterministic function of one example at a time gives
a kernel that is random or that depends on how the batch was split into blocks:

- a module in training mode whose output is random (``nn.Dropout`` and its variants,
  ``nn.AlphaDropout``, ``nn.FeatureAlphaDropout``, ``nn.RReLU``, attention dropout of
  ``nn.MultiheadAttention``): refused, with the fix ``model.eval()``;
- batch statistics (BatchNorm in training mode, or without running statistics): refused;
- any other forward that mixes examples across the batch axis (a mean over the batch, an
  attention over the batch axis, ...): caught by a probe, two examples evaluated alone and as
  a batch of two, which must agree to rounding (:func:`check_per_example`);
- an output whose first axis is not the input's batch size: refused, naming both
  (:meth:`~ntklab.empirical.FunctionalModel.__call__`).

The walk over the modules costs nothing; the probe costs three forward passes of one or two
examples, once per call of a front door (not once per block).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from ..errors import NtklabValueError
from ._functional import FunctionalModel

__all__ = ["check_modules", "check_per_example", "probe_tolerance"]

_FIX = "call model.eval() before computing its empirical kernels"


def check_modules(module: nn.Module) -> None:
    """Refuse the submodules known to break the one-example-at-a-time rule.

    Parameters
    ----------
    module : nn.Module

    Raises
    ------
    NtklabValueError
        A Dropout-like module with ``p > 0``, an ``nn.RReLU`` or an ``nn.MultiheadAttention``
        with ``dropout > 0`` in training mode (random outputs), or a BatchNorm layer using
        batch statistics (training mode, or ``track_running_stats=False``). The message
        names the module and the fix.
    """
    for name, mod in module.named_modules():
        where = f"{type(mod).__name__} {name or '<root>'!r}"
        if isinstance(mod, _BatchNorm) and (mod.training or mod.running_mean is None):
            raise NtklabValueError(
                f"model: expected a model that treats examples independently, got {where} "
                f"using batch statistics ({_FIX}; a BatchNorm without running statistics, "
                "track_running_stats=False, uses them in eval mode too)"
            )
        if not mod.training:
            continue
        random = (
            (isinstance(mod, _DropoutNd) and float(mod.p) > 0.0)
            or isinstance(mod, nn.RReLU)
            or (isinstance(mod, nn.MultiheadAttention) and float(mod.dropout) > 0.0)
        )
        if random:
            raise NtklabValueError(
                f"model: expected a deterministic model, got {where} in training mode, whose "
                f"output is random (every call would give another kernel): {_FIX}"
            )


def probe_tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance of the probe: the cube root of the dtype's machine epsilon
    (about 5e-3 in float32, 6e-6 in float64), far above the rounding by which a batched and
    a single evaluation may differ (other BLAS kernels, TF32 convolutions on GPUs), far below
    any real mixing of examples."""
    eps = float(torch.finfo(dtype if dtype.is_floating_point else torch.float64).eps)
    return math.pow(eps, 1.0 / 3.0)


def _gap(a: Tensor, b: Tensor) -> tuple[float, float]:
    """The largest difference of ``a`` and ``b`` and the scale it is compared with."""
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    scale = max(float(a64.abs().max()), float(b64.abs().max()), torch.finfo(torch.float64).tiny)
    return float((a64 - b64).abs().max()), scale


def check_per_example(fm: FunctionalModel, x1: Tensor, x2: Tensor | None = None) -> None:
    """Probe that ``fm`` evaluates each example deterministically and on its own.

    With ``u`` the first example of ``x1`` and ``v`` the next one (of ``x1``, else of
    ``x2``; ``u`` again when there is only one), the outputs ``f(u)``, ``f(u)`` again,
    ``f([u, v])`` and ``f(v)`` must satisfy, with :math:`\\tau` of :func:`probe_tolerance`,

    .. math:: \\max |f(u) - f(u)'| \\le \\tau s, \\qquad
              \\max |f([u, v]) - [f(u); f(v)]| \\le \\tau s,

    ``s`` the largest output magnitude. Cost: four forward passes of one or two examples.

    Parameters
    ----------
    fm : FunctionalModel
    x1 : Tensor of shape (n1, ...), n1 >= 1
        Validated inputs (:func:`._functional.check_batch`).
    x2 : Tensor of shape (n2, ...), optional

    Raises
    ------
    NtklabValueError
        The forward is random (two evaluations of one example differ), mixes examples (an
        example's output depends on the other examples of its batch), returns non-finite
        outputs for finite inputs, or returns an output batch other than its input's.
    """
    u = x1[:1]
    v = x1[1:2] if x1.shape[0] > 1 else (x2[:1] if x2 is not None else u)
    tau = probe_tolerance(fm.dtype)
    with torch.no_grad():
        alone = fm(fm.params, u)  # shape: (1, k)
        if not bool(torch.isfinite(alone).all()):
            raise NtklabValueError(
                "model: expected finite outputs for finite inputs, got NaN or inf for the "
                "first example of x1"
            )
        again = fm(fm.params, u)
        gap, scale = _gap(alone, again)
        if not gap <= tau * scale:
            raise NtklabValueError(
                f"model: expected a deterministic forward (one output per input), got two "
                f"evaluations of the first example of x1 differing by {gap:.3g} (outputs of "
                f"size {scale:.3g}): a module in training mode with random behaviour? "
                f"{_FIX}"
            )
        pair = fm(fm.params, torch.cat([u, v]))  # shape: (2, k)
        other = alone if v is u else fm(fm.params, v)
        gap, scale = _gap(pair, torch.cat([alone, other]))
    if not gap <= tau * scale:
        raise NtklabValueError(
            f"model: expected a forward that evaluates each example on its own (an example's "
            f"output the same alone and within a batch), got outputs differing by {gap:.3g} "
            f"(outputs of size {scale:.3g}) between two examples evaluated alone and as a "
            "batch of 2: the model mixes examples across the batch axis (batch statistics, "
            "a mean, a normalization or an attention over the batch axis), which per-example "
            "derivatives cannot represent"
        )
