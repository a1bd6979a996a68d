"""The Taylor expansion of a network in its parameters, of any degree, as a trainable module.

.. math::

    f_k(x; \\theta) = \\sum_{j=0}^{k} \\frac{1}{j!}\\, D^j_\\theta f(x; \\theta_0)
    [\\theta - \\theta_0]^{\\otimes j}

(neural-tangents' ``taylor_expand``, arXiv:1912.02803). Degree 1 is
:func:`~ntklab.dynamics.linearize`; degree 2 is the quadratic model of wide networks beyond
the kernel regime (Huang and Yau arXiv:1909.08156; Bai and Lee arXiv:1910.01619). The
:math:`j`-th term is :math:`j` nested forward-mode Jacobian-vector products
(``torch.func.jvp``) along :math:`\\delta = \\theta - \\theta_0`: with
:math:`g_0 = f` and :math:`g_j(\\theta) = D g_{j-1}(\\theta)[\\delta]`,
:math:`g_j(\\theta_0) = D^j f(\\theta_0)[\\delta]^{\\otimes j}`. One nested pass returns every
term; its cost grows like :math:`2^k` forward passes, so degrees above 4 or 5 are for small
models. The result is differentiable in :math:`\\theta`, so any torch optimizer (or
:func:`ntklab.nets.train`) trains it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn
from torch.func import jvp

from .._forward_mode import FORWARD_MODE_LOCK
from ..errors import NtklabTypeError, NtklabValueError
from .linearize import ParameterExpansion

__all__ = ["TaylorModel", "taylor_expand"]

Params = dict[str, Tensor]


def _derivatives(
    f: Callable[[Params], Tensor], delta: Params, order: int
) -> Callable[[Params], tuple[Tensor, ...]]:
    """:math:`\\theta \\mapsto (g_0(\\theta), \\dots, g_{order}(\\theta))` (module docstring)."""
    if order == 0:
        return lambda params: (f(params),)
    lower = _derivatives(f, delta, order - 1)

    def g(params: Params) -> tuple[Tensor, ...]:
        values, tangents = jvp(lower, (params,), (delta,))[:2]
        return (*values, tangents[-1])

    return g


class TaylorModel(ParameterExpansion):
    """A module computing the degree-``degree`` Taylor polynomial of a network in its
    parameters around :math:`\\theta_0` (see the module docstring).

    Its parameters and buffers are those of :class:`~ntklab.dynamics.linearize.ParameterExpansion`
    (the wrapped model's parameters starting at :math:`\\theta_0`, which is kept as buffers).
    Build it with :func:`taylor_expand`.

    Attributes
    ----------
    degree : int
    names : tuple of str
    """

    def __init__(self, model: nn.Module, degree: int) -> None:
        super().__init__(model)
        self.degree = degree

    def terms(self, *args: Any, **kwargs: Any) -> tuple[Tensor, ...]:
        """The ``degree + 1`` terms :math:`\\frac{1}{j!} D^j f(\\theta_0)[\\theta -
        \\theta_0]^{\\otimes j}`, each of the shape of the model's output."""
        f = self.function(*args, **kwargs)
        theta0 = self.theta0()
        if self.degree == 0:
            return (f(theta0),)
        with FORWARD_MODE_LOCK:  # forward-mode AD levels are process-wide in torch
            values = _derivatives(f, self.displacement(), self.degree)(theta0)
        return tuple(v / math.factorial(j) for j, v in enumerate(values))

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        terms = self.terms(*args, **kwargs)
        out = terms[0]
        for term in terms[1:]:
            out = out + term
        return out

    def extra_repr(self) -> str:
        return f"degree={self.degree}"


def taylor_expand(model: nn.Module, degree: int) -> TaylorModel:
    """Expand ``model`` to degree ``degree`` in its parameters around their current values.

    Parameters
    ----------
    model : torch.nn.Module
        Any module; its trainable parameters are :math:`\\theta`, the rest is held fixed.
    degree : int
        :math:`k \\ge 0`: 0 is the constant :math:`f(\\theta_0)` (its parameters get no
        gradient), 1 the linearization (:func:`~ntklab.dynamics.linearize`, which computes
        the same in one jvp), 2 the quadratic model.

    Returns
    -------
    TaylorModel
        Same call signature as ``model``; initially equal to it, a polynomial of degree
        ``degree`` in its parameters, exactly ``model`` when that is a polynomial of degree at
        most ``degree`` in its parameters.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)).double()
    >>> quad = nl.dynamics.taylor_expand(net, 2)  # net is bilinear in its two weights
    >>> with torch.no_grad():
    ...     for p in list(net.parameters()) + list(quad.parameters()):
    ...         _ = p.add_(0.5)
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> torch.allclose(quad(x), net(x))
    True
    """
    if not isinstance(model, nn.Module):
        raise NtklabTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(degree, bool) or not isinstance(degree, int):
        raise NtklabTypeError(
            f"degree: expected an int >= 0, got {type(degree).__name__} {degree!r}"
        )
    if degree < 0:
        raise NtklabValueError(f"degree: expected an int >= 0, got {degree}")
    return TaylorModel(model, degree)
