"""The first-order Taylor expansion of a network in its parameters, as a trainable module.

.. math::

    f^{lin}(x; \\theta) = f(x; \\theta_0) + J_\\theta f(x; \\theta_0)\\,(\\theta - \\theta_0)

Trained by gradient descent on the squared loss, this model follows exactly the closed-form
dynamics of :mod:`ntklab.dynamics.function_space` with the *empirical* NTK of the network at
:math:`\\theta_0` (its Jacobian never changes); a wide network follows it approximately (Lee et
al. arXiv:1902.06720). The Jacobian-vector product is one forward-mode pass
(``torch.func.jvp``), about the cost of two to three forward passes, and is differentiable in
the tangent, so any torch optimizer trains the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn
from torch.func import functional_call, jvp

from .._forward_mode import FORWARD_MODE_LOCK
from ..errors import NtklabTypeError, NtklabValueError

__all__ = ["LinearizedModel", "ParameterExpansion", "linearize"]


def _buffer_name(name: str) -> str:
    return "theta0__" + name.replace(".", "__")


class ParameterExpansion(nn.Module):
    """A network expanded in its parameters around :math:`\\theta_0`: the storage shared by
    :class:`LinearizedModel` and :class:`~ntklab.dynamics.taylor.TaylorModel`.

    Its parameters (same names and shapes as the wrapped model's, with dots replaced by
    ``"__"``) start at :math:`\\theta_0`; :math:`\\theta_0` and the wrapped model's buffers are
    frozen copies.

    Attributes
    ----------
    names : tuple of str
        The wrapped model's parameter names, in order.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise NtklabValueError(
                "model: expected a module with trainable parameters to expand, got none"
            )
        if any(isinstance(p, nn.parameter.UninitializedParameter) for _, p in named):
            raise NtklabValueError(
                "model: expected initialized parameters, got a lazy module; call it once on an "
                "input (or pass in_features to to_torch) before expanding it"
            )
        self.names: tuple[str, ...] = tuple(n for n, _ in named)
        # The wrapped model is kept out of the module tree: its own parameters are never used.
        self.__dict__["_model"] = model
        self.params = nn.ParameterDict(
            {n.replace(".", "__"): nn.Parameter(p.detach().clone()) for n, p in named}
        )
        for n, p in named:
            self.register_buffer(_buffer_name(n), p.detach().clone())
        # Frozen parameters and the model's buffers, held fixed (and moved by .to()).
        fixed: list[tuple[str, Tensor]] = [
            (n, p) for n, p in model.named_parameters() if not p.requires_grad
        ]
        fixed += list(model.named_buffers())
        self.fixed_names: tuple[str, ...] = tuple(n for n, _ in fixed)
        for n, b in fixed:
            self.register_buffer("fixed__" + n.replace(".", "__"), b.detach().clone())

    @property
    def model(self) -> nn.Module:
        """The wrapped network (its parameters are not those of this module)."""
        return self.__dict__["_model"]  # type: ignore[no-any-return]

    def theta0(self) -> dict[str, Tensor]:
        """:math:`\\theta_0` by the wrapped model's parameter names."""
        return {n: getattr(self, _buffer_name(n)) for n in self.names}

    def theta(self) -> dict[str, Tensor]:
        """:math:`\\theta`, the trainable parameters, by the wrapped model's names."""
        return {n: self.params[n.replace(".", "__")] for n in self.names}

    def displacement(self) -> dict[str, Tensor]:
        """:math:`\\theta - \\theta_0` by the wrapped model's names (differentiable in
        :math:`\\theta`)."""
        theta0, theta = self.theta0(), self.theta()
        return {n: theta[n] - theta0[n] for n in self.names}

    def function(self, *args: Any, **kwargs: Any) -> Callable[[dict[str, Tensor]], Tensor]:
        """The wrapped model on these inputs as a function of its parameters (by name), the
        frozen parameters and buffers held at their copies."""
        fixed = {n: getattr(self, "fixed__" + n.replace(".", "__")) for n in self.fixed_names}

        def f(params: dict[str, Tensor]) -> Tensor:
            return functional_call(self.model, {**params, **fixed}, args, kwargs)  # type: ignore[no-any-return]

        return f


class LinearizedModel(ParameterExpansion):
    """A module computing :math:`f(\\theta_0) + J(\\theta_0)(\\theta - \\theta_0)`.

    See :class:`ParameterExpansion` for its parameters and buffers. Build it with
    :func:`linearize`.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        f = self.function(*args, **kwargs)
        with FORWARD_MODE_LOCK:  # forward-mode AD levels are process-wide in torch
            out, dout = jvp(f, (self.theta0(),), (self.displacement(),))[:2]
        return out + dout  # type: ignore[no-any-return]


def linearize(model: nn.Module) -> LinearizedModel:
    """Linearize ``model`` around its current parameters.

    Parameters
    ----------
    model : torch.nn.Module
        Any module; its trainable parameters are :math:`\\theta`, the rest is held fixed.

    Returns
    -------
    LinearizedModel
        Same call signature as ``model``; initially equal to it, and linear in its parameters.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> net = nl.serial(nl.Dense(), nl.Tanh(), nl.Dense()).to_torch(16, in_features=3)
    >>> lin = nl.dynamics.linearize(net)
    >>> x = torch.randn(5, 3)
    >>> torch.allclose(lin(x), net(x))
    True
    """
    if not isinstance(model, nn.Module):
        raise NtklabTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    return LinearizedModel(model)
