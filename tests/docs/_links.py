"""A no-network checker of the internal links of a built HTML site.

Every ``href`` and ``src`` that is relative (no scheme, not protocol-relative) must name a
file of the site, and its ``#fragment``, if any, an ``id`` (or ``<a name>``) in that file.
"""

from __future__ import annotations

from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id",) + (("name",) if tag == "a" else ()):
            if values.get(key):
                self.anchors.add(str(values[key]))
        for key in ("href", "src"):
            if values.get(key) is not None and tag != "base":
                self.links.append(str(values[key]))


@cache
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """``"page: link (reason)"`` for every internal link of ``site`` that does not resolve."""
    _parse.cache_clear()
    site = site.resolve()
    problems = []
    for page_path in sorted(site.rglob("*.html")):
        for link in _parse(page_path).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (http, mailto, data, javascript): not checked offline
            target = page_path if not parts.path else (page_path.parent / unquote(parts.path))
            target = target.resolve()
            rel = page_path.relative_to(site)
            if not target.is_relative_to(site):
                problems.append(f"{rel}: {link} (outside the site)")
                continue
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{rel}: {link} (no such file)")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in _parse(target).anchors:
                problems.append(f"{rel}: {link} (no anchor #{fragment})")
    return problems
