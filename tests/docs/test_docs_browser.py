"""The built site in a real headless browser (Chromium, network blocked): every page loads
without a failed request or a JavaScript error, its math is typeset by MathJax, its images
are decoded.

Runs where Chromium, chromedriver and selenium are installed (Debian: ``apt-get install
chromium chromium-driver``; ``pip install ".[docs]"``) and is skipped elsewhere, unless
``NTKLAB_REQUIRE_BROWSER=1`` (see ``tests/_browser.py``). It reads the site that
``built_site`` builds once per test session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _browser import chromium, load

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


_STATE = """
const done = arguments[arguments.length - 1];
const errors = [];
const count = () => [document.querySelectorAll('.math').length,
                     document.querySelectorAll('mjx-container').length];
const report = () => {
  const [math, typeset] = count();
  const images = Array.from(document.images).map(i => [i.currentSrc, i.complete, i.naturalWidth]);
  const requests = performance.getEntriesByType('resource').map(r => r.name);
  done({math, typeset, images, requests, errors});
};
// MathJax typesets after it has loaded its components; its startup promise is replaced once
// the page is ready, so wait on whichever promise is current until every math node is
// typeset, or 30 s have passed (then the count says what is missing).
const started = Date.now();
const wait = () => {
  const [math, typeset] = count();
  const promise = (window.MathJax && MathJax.startup && MathJax.startup.promise) || null;
  const limit = promise ? 30000 : 5000;  // no MathJax at all: its script did not load
  if (typeset >= math || Date.now() - started > limit) { report(); return; }
  const again = () => setTimeout(wait, 100);
  if (promise) { promise.then(again, e => { errors.push(String(e)); report(); }); }
  else { again(); }
};
wait();
"""


def test_every_page_loads_with_math_and_images(built_site: Path, browser: Any) -> None:
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) >= 20
    problems: list[str] = []
    math_pages = image_count = 0
    for page in pages:
        rel = page.relative_to(built_site)
        problems += [f"{rel}: {p}" for p in load(browser, page.as_uri())]
        state = browser.execute_async_script(_STATE)
        for entry in browser.get_log("browser"):
            if entry["level"] == "SEVERE":
                problems.append(f"{rel}: console: {entry['message'][:300]}")
        for url in state["requests"]:
            if not url.startswith(("file://", "data:")):
                problems.append(f"{rel}: requested {url}")
        if state["math"]:
            math_pages += 1
            if state["typeset"] < state["math"]:
                problems.append(f"{rel}: {state['math']} math nodes, {state['typeset']} typeset")
        for src, complete, width in state["images"]:
            image_count += 1
            if not (complete and width > 0):
                problems.append(f"{rel}: image not shown: {src}")
        problems.extend(f"{rel}: {error}" for error in state["errors"])
    assert not problems, "\n".join(problems)
    assert math_pages >= 10
    assert image_count >= 1
