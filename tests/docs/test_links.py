"""The internal-link checker itself: it finds what is broken and passes what is not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _links import broken_links


def _site(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "x.js").write_text("")
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#sec">ok</a> <a href="#top">self</a> <p id="top"></p>'
        '<script src="_static/x.js"></script> <a href="https://example.org/#x">external</a>'
        '<a href="sub/">a folder with index.html</a>'
    )
    (tmp_path / "sub" / "page.html").write_text('<h2 id="sec">S</h2><a href="../index.html">up</a>')
    (tmp_path / "sub" / "index.html").write_text('<a name="old">named</a>')
    return tmp_path


def test_a_sound_site_has_no_broken_links(tmp_path: Path) -> None:
    assert broken_links(_site(tmp_path)) == []


def test_missing_files_anchors_and_escapes_are_reported(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "sub" / "page.html").write_text(
        '<h2 id="sec"></h2><a href="../missing.html">1</a> <a href="../index.html#nope">2</a>'
        '<img src="../../outside.png"> <a href="#gone">3</a> <a href="index.html#old">4</a>'
    )
    problems = broken_links(site)
    assert problems == [
        "sub/page.html: ../missing.html (no such file)",
        "sub/page.html: ../index.html#nope (no anchor #nope)",
        "sub/page.html: ../../outside.png (outside the site)",
        "sub/page.html: #gone (no anchor #gone)",
    ]
