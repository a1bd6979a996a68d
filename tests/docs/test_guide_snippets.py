"""Every Python block of the user guide runs as written (slow ones under ``-m slow``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rst_snippets import guide_snippets

SNIPPETS = guide_snippets()


def test_the_guide_has_snippets() -> None:
    assert len(SNIPPETS) >= 10, [s[0] for s in SNIPPETS]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(code, id=name, marks=[pytest.mark.slow] if slow else [])
        for name, code, slow in SNIPPETS
    ],
)
def test_guide_snippet_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    torch.manual_seed(0)
    exec(compile(code, "<guide snippet>", "exec"), {"__name__": "__guide__"})
