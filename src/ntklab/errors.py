"""The package's exception and warning types.

Every error raised on bad input derives from :class:`NtklabError` and from the matching
built-in (``ValueError`` for values and shapes, ``TypeError`` for types and dtypes), so callers
can catch either. The message names the argument, what was expected and what was received.
"""

from __future__ import annotations

__all__ = [
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


class NumericalWarning(RuntimeWarning):
    """Numerics needed a repair (clamping, jitter) beyond ordinary rounding."""


class ConvergenceWarning(NumericalWarning):
    """An iterative solver stopped at its iteration limit before reaching its tolerance.

    The message names the iterations done and the relative residual reached; the result is
    returned (with ``converged=False``) but does not meet the requested tolerance.
    """
