"""pytest plugin of ``tools/mutation_check.py``: corrupts what experiments compute.

- ``NTKLAB_MUTATION=invert`` flips every Outcome's ``passed`` as it is built;
- ``NTKLAB_MUTATION=scale`` multiplies every metric's value and interval by
  ``NTKLAB_MUTATION_FACTOR`` (default 1.5);
- ``NTKLAB_MUTATION=kernel`` hands every experiment a wrong NTK: every analytic
  :meth:`Architecture.kernel <ntklab.kernels.Architecture.kernel>` returns
  :math:`1.5\\,\\Theta + 0.5\\,K` (NTK mixed with the NNGP) in place of :math:`\\Theta`, and
  every :func:`ntklab.empirical.ntk` returns :math:`1.5\\,\\hat\\Theta + 0.5\\,f(x) f(x')^T`
  (the empirical NTK mixed with its NNGP-like part, the output covariance of the network,
  :func:`ntklab.empirical.nngp`) in the same ``outputs`` layout.

A test file that still passes under a mutation does not test its experiment's science (for
``kernel``: the claim's dependence on the NTK being the NTK).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import pytest

MODES = ("invert", "scale", "kernel")
#: The wrong kernel: WRONG_NTK * NTK + WRONG_NNGP * NNGP.
WRONG_NTK, WRONG_NNGP = 1.5, 0.5


def _mutate_outcome(mode: str, factor: float) -> None:
    from ntklab.experiments import base

    original = base.Outcome.__post_init__

    def post_init(self: Any) -> None:
        original(self)
        if mode == "invert":
            object.__setattr__(self, "passed", not self.passed)
        else:
            scaled = tuple(
                replace(
                    m,
                    value=m.value * factor,
                    ci_low=None if m.ci_low is None else m.ci_low * factor,
                    ci_high=None if m.ci_high is None else m.ci_high * factor,
                )
                for m in self.metrics
            )
            object.__setattr__(self, "metrics", scaled)

    base.Outcome.__post_init__ = post_init  # type: ignore[method-assign]


def _rebind(original: Any, patched: object) -> None:
    """Point every loaded ``ntklab`` module attribute that is ``original`` at ``patched``
    (names imported with ``from ... import`` are copies of the reference), except in the
    module that defines it (its own recursive or blocked calls stay unmutated)."""
    for name, module in list(sys.modules.items()):
        if not (name == "ntklab" or name.startswith("ntklab.")) or module is None:
            continue
        if name == original.__module__:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                setattr(module, attr, patched)


def _mutate_kernels() -> None:
    import ntklab.empirical
    import ntklab.experiments  # every experiment module, imported now
    from ntklab.empirical import nngp
    from ntklab.kernels import engine
    from ntklab.kernels.kernel import Kernel

    for cls in {engine.Architecture, *engine.Architecture.__subclasses__()}:
        analytic = cls.kernel

        def kernel(self: Any, *args: Any, _analytic: Any = analytic, **kwargs: Any) -> Any:
            k = _analytic(self, *args, **kwargs)
            if not isinstance(k, Kernel):
                return k
            return replace(k, ntk=WRONG_NTK * k.ntk + WRONG_NNGP * k.nngp)

        cls.kernel = kernel  # type: ignore[method-assign]

    empirical = sys.modules["ntklab.empirical.ntk"].ntk

    def wrong_ntk(model: Any, x1: Any, x2: Any = None, **kwargs: Any) -> Any:
        theta = empirical(model, x1, x2, **kwargs)
        outputs = kwargs.get("outputs", "trace")
        layout = "trace" if outputs == "pseudo" else outputs
        cov = nngp(model, x1, x2, outputs=layout)
        if outputs == "pseudo":  # the pseudo-NTK sums all k x k blocks over k
            f1 = model(x1).reshape(x1.shape[0], -1)
            f2 = f1 if x2 is None else model(x2).reshape(x2.shape[0], -1)
            cov = f1.sum(1)[:, None] * f2.sum(1)[None, :] / f1.shape[1]
        return WRONG_NTK * theta + WRONG_NNGP * cov.to(theta.dtype).detach()

    _rebind(empirical, wrong_ntk)
    ntklab.empirical.ntk = wrong_ntk  # type: ignore[assignment]


def _mutate(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"NTKLAB_MUTATION: expected one of {MODES}, received {mode!r}")
    if mode == "kernel":
        _mutate_kernels()
    else:
        _mutate_outcome(mode, float(os.environ.get("NTKLAB_MUTATION_FACTOR", "1.5")))


# The kernel mutation rebinds names that modules copy at import: done when pytest loads this
# plugin (``-p mutation_plugin``), before any conftest or test module imports an experiment.
_MODE = os.environ.get("NTKLAB_MUTATION", "")
if _MODE == "kernel":
    _mutate(_MODE)


def pytest_configure(config: pytest.Config) -> None:
    if _MODE and _MODE != "kernel":
        _mutate(_MODE)
