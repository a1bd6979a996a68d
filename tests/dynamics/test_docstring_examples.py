"""The examples in the docstrings of ntklab.dynamics and ntklab.predict run and are right."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "ntklab.predict",
        "ntklab.dynamics.function_space",
        "ntklab.dynamics.inference",
        "ntklab.dynamics.linearize",
        "ntklab.dynamics.taylor",
        "ntklab.dynamics.estimator",
        "ntklab.dynamics.early_stopping",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0
    assert result.failed == 0
