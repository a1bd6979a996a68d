"""pytest plugin of ``tools/mutation_check.py``: corrupts every experiment Outcome as it is built.

``NTKLAB_MUTATION=invert`` flips ``passed``; ``NTKLAB_MUTATION=scale`` multiplies every
metric's value and interval by ``NTKLAB_MUTATION_FACTOR`` (default 1.5). A test file that
still passes under either mutation does not test its experiment's science.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest


def _mutate_outcome(mode: str, factor: float) -> None:
    from ntklab.experiments import base

    original = base.Outcome.__post_init__

    def post_init(self: Any) -> None:
        original(self)
        if mode == "invert":
            object.__setattr__(self, "passed", not self.passed)
        elif mode == "scale":
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
        else:
            raise ValueError(f"NTKLAB_MUTATION: expected 'invert' or 'scale', received {mode!r}")

    base.Outcome.__post_init__ = post_init  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    mode = os.environ.get("NTKLAB_MUTATION", "")
    if mode:
        _mutate_outcome(mode, float(os.environ.get("NTKLAB_MUTATION_FACTOR", "1.5")))
