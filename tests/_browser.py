"""Headless Chromium for the browser tests (docs site, HTML reports), with the network blocked.

``chromium()`` starts Chromium through chromedriver and selenium (the ``docs`` extra). Where
Chromium or chromedriver is absent the test is skipped, unless ``NTKLAB_REQUIRE_BROWSER=1``
(``.ci/run`` sets it once it has installed them): then it fails, so that CI never passes
with the browser tests silently skipped. A Chromium that is installed but does not start
always fails the test.

``page_problems`` loads one page and returns what is wrong with it, as a list of sentences.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

#: The width and height of the phone the pages are checked at (CSS pixels).
PHONE = (390, 844)

# Without the background-networking flags Chromium opens connections of its own, which a
# closed network refuses. No request can leave the machine: no host name resolves and every
# connection goes to a proxy on a closed local port; ``load`` reports each one a page tries.
# (DevTools' Network.setBlockedURLs would not do: its patterns also match the "http://" inside
# a data: URL, such as an inline SVG's xmlns.)
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--allow-file-access-from-files",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)

#: Schemes that never leave the machine (chrome: is the browser's own pages).
_LOCAL = ("file:", "data:", "blob:", "about:", "chrome:")


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("NTKLAB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}, and NTKLAB_REQUIRE_BROWSER=1 requires the browser tests to run")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A selenium driver of headless Chromium, its own empty profile, no network."""
    if not (CHROMIUM and CHROMEDRIVER):
        _unavailable("Chromium and chromedriver are not installed")
    try:
        from selenium import webdriver
    except ImportError:
        _unavailable("selenium is not installed (the docs extra)")
    profile = tempfile.mkdtemp(prefix="ntklab-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    try:
        driver = webdriver.Chrome(options=options, service=service)
        try:
            driver.set_page_load_timeout(60)
            driver.set_script_timeout(60)
            driver.get("about:blank")  # leave the new-tab page, whose requests would be logged
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def load(driver: Any, url: str) -> list[str]:
    """Open ``url``; the requests that failed or left the machine, and console errors."""
    driver.get_log("performance")  # drop what came before
    driver.get_log("browser")
    driver.get(url)
    problems: list[str] = []
    urls: dict[str, str] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            request_url = params["request"]["url"]
            urls[params["requestId"]] = request_url
            if not request_url.startswith(_LOCAL):
                problems.append(f"requested {request_url[:200]}")
        elif message["method"] == "Network.loadingFailed":
            what = params.get("errorText") or params.get("blockedReason") or "failed"
            problems.append(f"request failed ({what}): {urls.get(params['requestId'], '?')[:200]}")
    problems.extend(
        f"console: {entry['message'][:300]}"
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE"
    )
    return problems


def image_problems(driver: Any) -> list[str]:
    """Every <img> decoded, with a non-zero natural and rendered size."""
    images = driver.execute_script(
        "return Array.from(document.images).map(i => [i.currentSrc.slice(0, 80), i.complete,"
        " i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]);"
    )
    return [
        f"image not shown: {src}"
        for src, complete, width, height, shown in images
        if not (complete and width > 0 and height > 0 and shown > 0)
    ]


_OVERFLOW = """
const width = document.documentElement.clientWidth;
const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) {
  const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; }
  return false; };
const wide = [];
for (const el of document.body.querySelectorAll('*')) {
  if (el.getBoundingClientRect().right > width + 1 && !scrolls(el)) {
    wide.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : ''));
  }
}
return [width, document.documentElement.scrollWidth, wide.slice(0, 5)];
"""


def phone_problems(driver: Any) -> list[str]:
    """At a phone's width the page fits: no horizontal scroll of the page as a whole.

    Wide tables may scroll inside their own container. The phone is emulated (mobile
    viewport), so a page without a viewport meta tag is laid out 980 px wide and fails.
    """
    width, height = PHONE
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 3, "mobile": True},
    )
    try:
        client, scroll, wide = driver.execute_script(_OVERFLOW)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    problems = []
    if client != width:
        problems.append(f"at phone width {width} px the page is laid out {client} px wide")
    if scroll > client:
        problems.append(
            f"at phone width {width} px the page scrolls sideways ({scroll} px): {', '.join(wide)}"
        )
    return problems


def print_problems(driver: Any) -> list[str]:
    """``Page.printToPDF`` gives a PDF of at least one page."""
    pdf = base64.b64decode(driver.execute_cdp_cmd("Page.printToPDF", {})["data"])
    if not pdf.startswith(b"%PDF-") or b"/Type /Page" not in pdf:
        return [f"printing gave no PDF page ({len(pdf)} bytes)"]
    return []


@dataclass(frozen=True)
class Expected:
    """What a page must show.

    texts : strings that must be visible in the rendered page (whitespace collapsed)
    table_rows : the number of body rows of each <table>, in page order (None: any number)
    images : the number of <img> elements
    selectors : CSS selectors each matching at least one visible element
    """

    texts: Sequence[str] = ()
    table_rows: Sequence[int | None] = ()
    images: int = 0
    selectors: Sequence[str] = ()


def _squash(text: str) -> str:
    return " ".join(text.split())


def page_problems(driver: Any, url: str, expected: Expected) -> list[str]:
    """Everything wrong with the page at ``url``: requests, images, content, phone, print."""
    from selenium.webdriver.common.by import By

    problems = load(driver, url)
    problems += image_problems(driver)
    body = _squash(driver.find_element(By.TAG_NAME, "body").text)  # visible text only
    problems += [f"not visible: {text!r}" for text in expected.texts if _squash(text) not in body]
    for selector in expected.selectors:
        shown = [e for e in driver.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()]
        if not shown:
            problems.append(f"no visible element {selector}")
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('table')).map("
        "t => t.tBodies.length ? t.tBodies[0].rows.length : 0);"
    )
    want = list(expected.table_rows)
    if len(rows) != len(want) or any(
        w is not None and r != w for r, w in zip(rows, want, strict=True)
    ):
        problems.append(f"table rows {rows}, expected {want}")
    count = len(driver.find_elements(By.TAG_NAME, "img"))
    if count != expected.images:
        problems.append(f"{count} images, expected {expected.images}")
    problems += phone_problems(driver)
    problems += print_problems(driver)
    return problems
