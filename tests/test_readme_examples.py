"""Every ```python block of the README runs as written.

A block preceded by a line ``<!-- readme-test: skip REASON -->`` is reported as skipped with
that reason (for a block that needs data this machine may not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(
    r"(?:<!-- readme-test: skip (?P<skip>.*?) -->\n)?```python\n(?P<code>.*?)```", re.S
)


def _blocks() -> list[tuple[str, str, str | None]]:
    text = README.read_text()
    out = []
    for match in _BLOCK.finditer(text):
        heading = re.findall(r"^#+ (.*)$", text[: match.start()], re.M)
        name = (
            f"{heading[-1] if heading else 'top'} (line {text[: match.start()].count(chr(10)) + 1})"
        )
        out.append((name, match.group("code"), match.group("skip")))
    return out


BLOCKS = _blocks()


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3, [name for name, _, _ in BLOCKS]


@pytest.mark.parametrize(("name", "code", "skip"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_readme_block_runs(name: str, code: str, skip: str | None, capsys) -> None:  # type: ignore[no-untyped-def]
    if skip:
        pytest.skip(skip)
    torch.manual_seed(0)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(code, f"README.md: {name}", "exec"), namespace)
    printed = capsys.readouterr().out
    # every print of the block printed something (a block whose comment promises an
    # output must produce one)
    assert code.count("print(") <= printed.count("\n"), printed
