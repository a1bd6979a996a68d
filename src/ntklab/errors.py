"""The package's exception and warning types.

Every error raised on bad input derives from :class:`NtklabError` and from the matching
built-in (``ValueError`` for values and shapes, ``TypeError`` for types and dtypes), so callers
can catch either. The message names the argument, what was expected and what was received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "ConvergenceError",
    "ConvergenceWarning",
    "NtklabError",
    "NtklabTypeError",
    "NtklabValueError",
    "NumericalWarning",
]


class NtklabError(Exception):
    """Base class of every error ntklab raises on purpose."""


class NtklabValueError(NtklabError, ValueError):
    """A value or a shape is not what a function accepts."""


class NtklabTypeError(NtklabError, TypeError):
    """A type or a dtype is not what a function accepts."""


class ConvergenceError(NtklabError, RuntimeError):
    """An iterative solver stopped before its best iterate met the requested tolerance.

    Raised instead of returning a solution that does not solve the system (the default of
    :func:`ntklab.solvers.conjugate_gradient` and :func:`ntklab.solvers.solve`; pass
    ``on_failure="warn"`` to get the best iterate with a :class:`ConvergenceWarning`). The
    message names the iterations, the relative residual reached and the tolerance.

    Attributes
    ----------
    residual : float
        The relative residual :math:`\\max_j \\|b_j - A x_j\\| / \\|b_j\\|` of ``best``.
    iterations : int
        Iterations done.
    best : Tensor
        The iterate of least residual (per right-hand side), in the shape and dtype the solver
        would have returned.
    """

    def __init__(self, message: str, *, residual: float, iterations: int, best: Tensor) -> None:
        super().__init__(message)
        self.residual = residual
        self.iterations = iterations
        self.best = best


class NumericalWarning(RuntimeWarning):
    """Numerics needed a repair (clamping, jitter) beyond ordinary rounding."""


class ConvergenceWarning(NumericalWarning):
    """An iterative solver stopped at its iteration limit before reaching its tolerance.

    The message names the iterations done and the relative residual reached; the result is
    returned (with ``converged=False``) but does not meet the requested tolerance. Solvers
    warn only when the caller asked for their best effort (``on_failure="warn"``); otherwise
    they raise :class:`ConvergenceError`.
    """
