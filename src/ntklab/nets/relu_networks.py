r"""Explicit ReLU networks and their size: the "architectural" side of the function-space
dichotomy (Telgarsky 2016, arXiv:1602.04485; Neyshabur, Tomioka & Srebro 2015,
arXiv:1503.00036).

- :func:`tent_network`: the width-2, depth-``L`` ReLU network, written from its weights, that
  computes the iterated tent map :math:`s_L` on :math:`[0, 1]` exactly (it has
  :math:`2^{L-1}` peaks with :math:`6L + 1` parameters);
- :func:`relu_layers`: the affine maps of a ReLU chain (``nn.Linear`` or
  :class:`~ntklab.nets.DenseLayer` layers separated by ReLUs), with their multipliers applied;
- :func:`parameter_count` and :func:`path_norm`: the size of such a network.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_positive_int
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError
from .modules import DenseLayer, ElementwiseActivation

__all__ = ["AffineMap", "parameter_count", "path_norm", "relu_layers", "tent_network"]


def tent_network(
    depth: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> nn.Sequential:
    r"""The width-2, depth-``L`` ReLU network that computes the tent map :math:`s_L` on [0, 1].

    One tent is two ReLUs, :math:`s_1(x) = 2\,\mathrm{relu}(x) - 4\,\mathrm{relu}(x - 1/2)`
    for :math:`x \in [0, 1]`, and :math:`s_L = s_1 \circ s_{L-1}` maps [0, 1] onto itself, so
    stacking ``L`` such blocks (the readout of one merged with the input map of the next)
    gives

    .. math::

        h_1 = \mathrm{relu}\!\left(\begin{pmatrix}1\\1\end{pmatrix} x
              - \begin{pmatrix}0\\1/2\end{pmatrix}\right), \quad
        h_{l+1} = \mathrm{relu}\!\left(\begin{pmatrix}2 & -4\\ 2 & -4\end{pmatrix} h_l
              - \begin{pmatrix}0\\1/2\end{pmatrix}\right), \quad
        s_L(x) = (2, -4)\, h_L,

    ``L`` hidden layers of width 2 and :math:`4 + 6(L - 1) + 3 = 6L + 1` parameters, against
    the :math:`2^L` linear pieces and :math:`2^{L-1}` peaks of :math:`s_L` (Telgarsky 2016,
    arXiv:1602.04485). Every weight is a power of two, so the network is exact up to the
    rounding of its input's dyadic expansion: in float64 it agrees with
    :class:`ntklab.data.TentMap` to about :math:`2^L \epsilon`.

    Parameters
    ----------
    depth : int
        :math:`L \ge 1`, the number of hidden ReLU layers.
    dtype, device
        Of the parameters.

    Returns
    -------
    torch.nn.Sequential
        ``Linear(1, 2), ReLU, [Linear(2, 2), ReLU] * (L - 1), Linear(2, 1)``: inputs of shape
        ``(n, 1)``, outputs of shape ``(n, 1)``.

    Examples
    --------
    >>> net = tent_network(2)
    >>> net(torch.tensor([[0.0], [0.25], [0.5], [0.75], [1.0]], dtype=torch.float64)).flatten()
    tensor([0., 1., 0., 1., 0.], dtype=torch.float64, grad_fn=<ViewBackward0>)
    >>> parameter_count(net)
    13
    """
    depth = check_positive_int("depth", depth)
    kw = {"dtype": dtype, "device": device}
    shift = torch.tensor([0.0, -0.5], **kw)  # type: ignore[arg-type]
    layers: list[nn.Module] = []
    first = nn.Linear(1, 2, **kw)  # type: ignore[arg-type]
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[1.0], [1.0]]))
        first.bias.copy_(shift)
    layers += [first, nn.ReLU()]
    for _ in range(depth - 1):
        hidden = nn.Linear(2, 2, **kw)  # type: ignore[arg-type]
        with torch.no_grad():
            hidden.weight.copy_(torch.tensor([[2.0, -4.0], [2.0, -4.0]]))
            hidden.bias.copy_(shift)
        layers += [hidden, nn.ReLU()]
    readout = nn.Linear(2, 1, **kw)  # type: ignore[arg-type]
    with torch.no_grad():
        readout.weight.copy_(torch.tensor([[2.0, -4.0]]))
        readout.bias.zero_()
    layers.append(readout)
    return nn.Sequential(*layers)


@short_repr
@dataclass(frozen=True)
class AffineMap:
    """One layer of a ReLU chain, :math:`z \\mapsto W z + b`, with multipliers applied.

    Attributes
    ----------
    weight : Tensor of shape (out, in)
        The effective weight (a :class:`~ntklab.nets.DenseLayer`'s ``weight`` times its
        multiplier).
    bias : Tensor of shape (out,) or None
        The effective bias.
    parameters : int
        Number of trainable scalars of the layer (weight and bias entries).
    """

    weight: Tensor
    bias: Tensor | None
    parameters: int


def _is_relu(module: nn.Module) -> bool:
    if isinstance(module, nn.ReLU):
        return True
    return isinstance(module, ElementwiseActivation) and module.name.startswith("Relu")


def _leaves(module: nn.Module) -> Iterator[nn.Module]:
    if isinstance(module, nn.Sequential):
        for child in module:
            yield from _leaves(child)
    else:
        yield module


def relu_layers(model: nn.Module) -> list[AffineMap]:
    """The affine layers of a ReLU chain, in order.

    Parameters
    ----------
    model : nn.Module
        An ``nn.Linear`` / :class:`~ntklab.nets.DenseLayer`, or an ``nn.Sequential`` (nested
        sequentials allowed) of such layers separated by exactly one ReLU (``nn.ReLU`` or the
        ``Relu`` activation of ``to_torch``), starting and ending with an affine layer.

    Returns
    -------
    list of AffineMap

    Raises
    ------
    NtklabTypeError
        For another kind of layer (named, with its position).
    NtklabValueError
        When the chain does not alternate affine layers and ReLUs, or a layer is lazy.
    """
    if not isinstance(model, nn.Module):
        raise NtklabTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    maps: list[AffineMap] = []
    expect_affine = True
    for i, leaf in enumerate(_leaves(model)):
        if isinstance(leaf, nn.Linear):
            if not expect_affine:
                raise NtklabValueError(
                    f"model: expected a ReLU between affine layers, got two affine layers in a "
                    f"row at position {i}"
                )
            if isinstance(leaf, DenseLayer):
                if leaf.has_uninitialized_params():
                    raise NtklabValueError(
                        f"model: expected materialized parameters, got a lazy DenseLayer at "
                        f"position {i} (run a forward pass first)"
                    )
                w_mult, _, b_mult, _ = leaf.scales
            else:
                w_mult, b_mult = 1.0, 1.0
            weight = leaf.weight.detach() * w_mult
            bias = None if leaf.bias is None else leaf.bias.detach() * b_mult
            count = sum(p.numel() for p in leaf.parameters(recurse=False))
            maps.append(AffineMap(weight, bias, count))
            expect_affine = False
        elif _is_relu(leaf):
            if expect_affine:
                raise NtklabValueError(
                    f"model: expected an affine layer at position {i}, got "
                    f"{'a ReLU first' if i == 0 else 'two ReLUs in a row'}"
                )
            expect_affine = True
        else:
            raise NtklabTypeError(
                f"model: expected nn.Linear/DenseLayer layers and ReLUs only, got "
                f"{type(leaf).__name__} at position {i}"
            )
    if not maps:
        raise NtklabValueError("model: expected at least one affine layer, got none")
    if expect_affine:
        raise NtklabValueError("model: expected an affine readout as the last layer, got a ReLU")
    return maps


def parameter_count(model: nn.Module) -> int:
    """Number of scalar weights and biases of a ReLU chain (:func:`relu_layers`).

    Examples
    --------
    >>> parameter_count(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)))
    21
    """
    return sum(layer.parameters for layer in relu_layers(model))


def path_norm(model: nn.Module, p: float = 1.0) -> float:
    r"""The :math:`\ell_p` path norm of a ReLU chain, biases included.

    Sum over every path from an input unit or a bias to the output of the product of the
    absolute weights along it (Neyshabur, Tomioka & Srebro 2015, arXiv:1503.00036), computed
    by one pass of the absolute (``p``-th power) weights:

    .. math::

        v_0 = \mathbf 1, \qquad v_l = |W_l|^{p}\, v_{l-1} + |b_l|^{p}, \qquad
        \|f\|_{\text{path}, p} = \Big(\sum_j (v_L)_j\Big)^{1/p}.

    It is invariant under the rescalings :math:`(W_l, b_l, W_{l+1}) \to (c W_l, c b_l,
    W_{l+1}/c)`, :math:`c > 0`, that leave a ReLU network's function unchanged.

    Parameters
    ----------
    model : nn.Module
        A ReLU chain (see :func:`relu_layers`).
    p : float
        :math:`p \ge 1` (1: the :math:`\ell_1` path norm; 2: the :math:`\ell_2` one).

    Returns
    -------
    float

    Examples
    --------
    >>> path_norm(tent_network(1))  # v_1 = (1, 1.5), 2 * 1 + 4 * 1.5
    8.0
    """
    if isinstance(p, bool) or not isinstance(p, int | float) or not p >= 1:
        raise NtklabValueError(f"p: expected a real number >= 1, got {p!r}")
    layers = relu_layers(model)
    v = torch.ones(layers[0].weight.shape[1], dtype=torch.float64)
    for layer in layers:
        v = layer.weight.double().cpu().abs().pow(p) @ v
        if layer.bias is not None:
            v = v + layer.bias.double().cpu().abs().pow(p)
    return math.pow(float(v.sum()), 1.0 / p)
