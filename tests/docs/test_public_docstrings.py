"""Every public name of ntklab has a docstring (the docs build refuses to run otherwise).

The public names are ``ntklab.__all__`` and the ``__all__`` of each public module
(``docs/_public_api.py`` says which); a constant or type alias is documented by a ``#:``
comment above its assignment or a string literal below it, as Sphinx's autodoc reads them.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
import _public_api as public


def test_every_public_name_has_a_docstring() -> None:
    assert public.undocumented() == []


def test_the_walk_covers_the_top_level_and_every_public_subpackage() -> None:
    modules = public.public_modules()
    for name in (
        "ntklab",
        "ntklab.kernels",
        "ntklab.empirical",
        "ntklab.dynamics",
        "ntklab.solvers",
        "ntklab.experiments",
        "ntklab.predict",
    ):
        assert name in modules
    assert not any(part.startswith("_") for m in modules for part in m.split("."))
    import ntklab

    assert set(public.public_names("ntklab")) == {
        n for n in ntklab.__all__ if not n.startswith("__")
    }
    total = sum(len(public.public_names(m)) for m in modules)
    assert total > 300


def test_a_dataclass_without_a_docstring_is_undocumented() -> None:
    @dataclasses.dataclass
    class Plain:
        a: int

    @dataclasses.dataclass
    class Written:
        """Written by hand."""

        a: int

    assert Plain.__doc__  # dataclass made one up ...
    assert public._own_docstring(Plain) == ""  # ... which does not count
    assert public._own_docstring(Written) == "Written by hand."
    assert public._own_docstring(lambda: None) == ""


def test_attribute_docstrings_are_read_from_comments_and_literals(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "#: The first.\n#: Two lines.\nA = 1\n\nB = 2\n'''The second.'''\n\nC = 3\n"
        "# an ordinary comment\nD = 4\n"
    )
    docs = public._attribute_docs(str(source))
    assert docs == {"A": "The first.\nTwo lines.", "B": "The second.", "C": "", "D": ""}


def test_an_undocumented_constant_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = importlib.import_module("ntklab.memory")
    monkeypatch.setattr(memory, "__all__", [*memory.__all__, "_PIPE"], raising=True)
    monkeypatch.setattr(memory, "_PIPE", object(), raising=False)
    assert public.undocumented() == ["ntklab.memory._PIPE"]
