"""The ``.. code-block:: python`` blocks of the user guide's reST sources.

A block preceded (directly, or with blank lines between) by the comment ``.. snippet: slow``
is marked slow: the default test run skips it.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide"
_BLOCK = re.compile(
    r"(?P<slow>\.\. snippet: slow\s*\n\s*)?^\.\. code-block:: python[^\n]*\n"
    r"(?P<options>(?:[ ]+:[^\n]*\n)*)\n(?P<body>(?:(?:[ ]{3,}[^\n]*)?\n)+)",
    re.M,
)


def guide_snippets() -> list[tuple[str, str, bool]]:
    """``(id, code, slow)`` for every Python block of ``docs/guide/*.rst``."""
    out = []
    for path in sorted(GUIDE.glob("*.rst")):
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            line = text[: match.start("body")].count("\n") + 1
            code = textwrap.dedent(match.group("body"))
            out.append((f"{path.stem}:{line}", code, bool(match.group("slow"))))
    return out
