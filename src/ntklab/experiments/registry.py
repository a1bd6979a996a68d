"""The registry of named experiments.

An experiment module registers its experiment at import time::

    EXPERIMENT = register(Experiment(name="spectrum-s1", claim_id="A1", ...))

and :mod:`ntklab.experiments` imports every experiment module, so importing the package
fills the registry. Tests register throwaway experiments with ``replace=True`` and remove
them with :func:`unregister`.
"""

from __future__ import annotations

import difflib
import re

from ntklab.errors import NtklabTypeError, NtklabValueError

from .base import Experiment
from .config import resolve_config

__all__ = ["claim_sort_key", "get_experiment", "list_experiments", "register", "unregister"]

_REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment, *, replace: bool = False) -> Experiment:
    """Add ``experiment`` to the registry and return it.

    Every scale of the experiment is resolved once here, so a scale that names an unknown
    field or a value of the wrong type fails at import time rather than at run time.

    Parameters
    ----------
    experiment : Experiment
        The experiment to register.
    replace : bool
        Replace an experiment already registered under the same name (otherwise an error).

    Returns
    -------
    Experiment
        ``experiment`` itself, so that a module can write ``EXPERIMENT = register(...)``.

    Raises
    ------
    NtklabValueError
        When the name is taken (and not ``replace``) or a scale does not resolve.
    """
    if not isinstance(experiment, Experiment):
        raise NtklabTypeError(
            f"experiment: expected an Experiment, received {type(experiment).__name__}"
        )
    if experiment.name in _REGISTRY and not replace:
        raise NtklabValueError(
            f"experiment: the name {experiment.name!r} is already registered; "
            "pass replace=True to replace it"
        )
    for scale in experiment.scales:
        resolve_config(experiment, scale)
    _REGISTRY[experiment.name] = experiment
    return experiment


def unregister(name: str) -> Experiment:
    """Remove the experiment registered as ``name`` and return it.

    Raises
    ------
    NtklabValueError
        When no experiment has that name.
    """
    experiment = get_experiment(name)
    del _REGISTRY[name]
    return experiment


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``.

    Raises
    ------
    NtklabValueError
        When the name is unknown; the message lists the known names.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        pass
    known = sorted(_REGISTRY)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listing = ", ".join(known) if known else "(none registered)"
    raise NtklabValueError(
        f"experiment: unknown experiment {name!r}; expected one of: {listing}.{hint}"
    )


def claim_sort_key(claim_id: str) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key: A2 < A10 < B1."""
    parts = re.findall(r"\d+|\D+", claim_id)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def list_experiments() -> list[Experiment]:
    """Every registered experiment, ordered by claim id (A1, A2, ..., B1) then name."""
    return sorted(_REGISTRY.values(), key=lambda e: (claim_sort_key(e.claim_id), e.name))
