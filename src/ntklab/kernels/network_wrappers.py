r"""Wrappers that change a network's scale or its initial function, not its architecture.

- :class:`ScaledOutput`: :math:`f_\alpha(x) = \alpha f(x)`, the lazy-training scale of Chizat,
  Oyallon & Bach (arXiv:1812.07956). Trained on the loss :math:`L(\alpha f) / \alpha^2` (what
  :func:`ntklab.nets.train` does when it finds a ``ScaledOutput``), a larger :math:`\alpha`
  gives the same function-space dynamics at leading order while the parameters, hence the
  tangent kernel, move by :math:`O(1/\alpha)`: the lazy (kernel) regime.
- :class:`AntisymmetricPair`: :math:`f(x) = (a(x) - b(x)) / \sqrt{2}` with ``b`` an exact copy
  of ``a`` at initialization (then trained independently): the output is exactly 0 at
  initialization while the empirical NTK at initialization equals that of one half. Lazy
  training with a large :math:`\alpha` needs a bounded initial output
  :math:`\alpha f(x; \theta_0)` (arXiv:1812.07956); this pairing makes it exactly zero.

Both are ordinary ``nn.Module`` objects: ``ntklab.empirical.ntk`` and any optimizer see the
parameters of the wrapped network(s).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter

from ..errors import NtklabTypeError, NtklabValueError

__all__ = ["AntisymmetricPair", "ScaledOutput", "output_scale"]


class ScaledOutput(nn.Module):
    r"""Multiplies the output of ``net`` by a constant :math:`\alpha`.

    .. math:: f_\alpha(x) = \alpha\, f(x; \theta)

    Chizat, Oyallon & Bach, *On Lazy Training in Differentiable Programming*
    (arXiv:1812.07956): training :math:`f_\alpha` on :math:`L(f_\alpha) / \alpha^2` moves
    :math:`f_\alpha` at an :math:`\alpha`-independent rate while :math:`\theta` moves by
    :math:`O(1/\alpha)`, so the relative change of the tangent kernel is :math:`O(1/\alpha)`.
    :func:`ntklab.nets.train` reads :attr:`alpha` and applies the :math:`1/\alpha^2` itself;
    start from a zero output (:class:`AntisymmetricPair`) so that the initial output
    :math:`\alpha f(x; \theta_0)` does not grow with :math:`\alpha`.

    Parameters
    ----------
    net : nn.Module
        The network; its parameters are this module's.
    alpha : float
        The scale, finite and > 0.

    Examples
    --------
    >>> import torch
    >>> net = ScaledOutput(torch.nn.Linear(3, 1), alpha=10.0)
    >>> net.alpha
    10.0
    """

    def __init__(self, net: nn.Module, alpha: float) -> None:
        if not isinstance(net, nn.Module):
            raise NtklabTypeError(f"net: expected a torch.nn.Module, got {type(net).__name__}")
        if isinstance(alpha, bool) or not isinstance(alpha, int | float):
            raise NtklabTypeError(f"alpha: expected a float > 0, got {type(alpha).__name__}")
        if not (math.isfinite(alpha) and alpha > 0):
            raise NtklabValueError(f"alpha: expected a finite float > 0, got {alpha!r}")
        super().__init__()
        self.net = net
        self.alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out * self.alpha

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


def _has_uninitialized(module: nn.Module) -> bool:
    return any(isinstance(p, UninitializedParameter) for p in module.parameters())


class AntisymmetricPair(nn.Module):
    r"""Two copies of a network whose difference starts at exactly zero.

    .. math:: f(x) = \frac{a(x; \theta_a) - b(x; \theta_b)}{\sqrt 2}, \qquad
              \theta_b = \theta_a \text{ at initialization}

    ``b`` is a deep copy of ``a``; afterwards the two halves have their own parameters and
    train independently. At initialization

    - the output is exactly 0 (the same floating-point operations on the same values);
    - the empirical NTK equals that of one half:
      :math:`\Theta = \tfrac12 (\Theta_a + \Theta_b) = \Theta_a`, since the Jacobians of the
      halves enter with signs :math:`\pm 1/\sqrt 2` and are equal.

    So a pair of two networks of width :math:`n/2` has, at initialization, the tangent kernel of
    one network of width :math:`n/2` (which converges to the same infinite-width NTK), with zero
    initial function: the linearized dynamics start from :math:`f_0 = 0` (no initial-output
    variance term).

    In training the gradients of the halves are opposite at first order
    (:math:`\partial f/\partial\theta_b = -\partial f/\partial\theta_a` at initialization), so
    the halves move in opposite directions and the first-order changes of their kernels
    cancel: under lazy scaling (:class:`ScaledOutput`) the kernel drift of a pair is
    :math:`O(1/\alpha^2)` while its weights move by :math:`O(1/\alpha)` (a centered model
    :math:`f(\theta) - f(\theta_0)` drifts by :math:`O(1/\alpha)`); measured in
    ``tests/nets/test_training.py``.

    Parameters
    ----------
    net : nn.Module
        The first half ``a`` (used, not copied). It may be lazy (``nn.LazyLinear``,
        ``DenseLayer(None, ...)``): the copy is then made equal on the first forward call.

    Examples
    --------
    >>> import torch
    >>> pair = AntisymmetricPair(torch.nn.Linear(3, 2))
    >>> bool((pair(torch.randn(5, 3)) == 0).all())
    True
    """

    def __init__(self, net: nn.Module) -> None:
        if not isinstance(net, nn.Module):
            raise NtklabTypeError(f"net: expected a torch.nn.Module, got {type(net).__name__}")
        super().__init__()
        self.first = net
        self.second = copy.deepcopy(net)
        self._pending_copy = _has_uninitialized(net)

    def forward(self, x: Tensor) -> Tensor:
        a: Tensor = self.first(x)
        if self._pending_copy:
            # lazy halves materialize on this first call: make the second an exact copy
            self.second(x)
            with torch.no_grad():
                self.second.load_state_dict(self.first.state_dict())
            self._pending_copy = False
        b: Tensor = self.second(x)
        return (a - b) * (1.0 / math.sqrt(2.0))


def output_scale(model: nn.Module) -> float:
    r"""The :math:`\alpha` of a model: the product of the ``alpha`` of the chain of
    :class:`ScaledOutput` wrappers at its top (1.0 when ``model`` is not one).

    Only the outermost chain counts (``ScaledOutput(ScaledOutput(net, 2), 3)`` has
    :math:`\alpha = 6`); a ``ScaledOutput`` deeper inside another module does not scale the
    model's output as a whole and is ignored.
    """
    alpha = 1.0
    while isinstance(model, ScaledOutput):
        alpha *= model.alpha
        model = model.net
    return alpha
