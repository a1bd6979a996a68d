"""The documentation builds with warnings as errors, gallery included (at tiny scale), and
the built site is whole: internal links resolve, every public name has its API entry, math
is served locally, every example and every experiment setting has its page.

Building takes two to seven minutes on a 2-core machine (every gallery example runs, at tiny
scale); the README's test command installs ``.[docs]`` so that CI builds the site once per
session. Skipped where Sphinx is not installed (``pip install ".[docs]"``).
"""

from __future__ import annotations

import re
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "docs"))
from _links import broken_links  # noqa: E402


def _inventory(site: Path) -> dict[str, str]:
    """``name -> uri`` of the Python objects in Sphinx's ``objects.inv``."""
    raw = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    entries = {}
    for line in zlib.decompress(raw[header_end:]).decode().splitlines():
        match = re.match(r"(?x)(.+?)\s+(\S+):(\S+)\s+(-?\d+)\s+(\S+)\s+(.*)", line)
        if match and match.group(2) == "py":
            uri = match.group(5)
            entries[match.group(1)] = uri[:-1] + match.group(1) if uri.endswith("$") else uri
    return entries


def test_no_internal_link_is_broken(built_site: Path) -> None:
    assert broken_links(built_site) == []


def test_every_public_name_has_an_api_entry(built_site: Path) -> None:
    import importlib

    import _generate
    import _public_api as public

    inventory = _inventory(built_site)
    homes = _generate.canonical_homes()
    missing = []
    for module_name in public.public_modules():
        if module_name not in inventory:
            missing.append(module_name)
        module = importlib.import_module(module_name)
        for name in public.public_names(module_name):
            obj = getattr(module, name)
            target = obj.__name__ if public.kind(obj) == "module" else f"{homes[id(obj)]}.{name}"
            if target not in inventory:
                missing.append(f"{module_name}.{name} (as {target})")
    assert missing == []
    assert len(inventory) > 300


def test_math_is_rendered_by_a_local_mathjax(built_site: Path) -> None:
    mathjax = built_site / "_static" / "mathjax" / "tex-chtml.js"
    assert mathjax.is_file() and mathjax.stat().st_size > 100_000
    pages_with_math = 0
    for page in built_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        for src in re.findall(r'<script[^>]*\bsrc="([^"]+)"', text):
            assert not re.match(r"(https?:)?//", src), f"{page}: remote script {src}"
        if 'class="math' in text:
            pages_with_math += 1
            assert "_static/mathjax/tex-chtml.js" in text, page
    assert pages_with_math >= 10


def test_every_example_has_its_page(built_site: Path) -> None:
    for source, gallery in (("tutorials", "auto_tutorials"), ("claims", "auto_claims")):
        for script in sorted((ROOT / "examples" / source).glob("plot_*.py")):
            page = built_site / gallery / f"{script.stem}.html"
            assert page.is_file(), page
            assert "sphx-glr" in page.read_text(encoding="utf-8")


def test_every_experiment_setting_is_listed(built_site: Path) -> None:
    import html

    import _generate

    from ntklab.experiments import list_experiments, resolve_config

    page = (built_site / "guide" / "generated" / "settings.html").read_text(encoding="utf-8")
    for experiment in list_experiments():
        start = page.index(f'id="settings-{experiment.name}"')
        section = page[start : page.find('<section id="', start + 30)]
        for key in experiment.config_type.model_fields:
            assert f'<span class="pre">{key}</span>' in section, (experiment.name, key)
        for scale, overrides in experiment.scales.items():
            config = dict(resolve_config(experiment, scale))
            for key in overrides:  # the scale's own values, in bold
                shown = html.escape(_generate._value_text(config[key]), quote=False)
                assert f"<strong>{shown}</strong>" in section, (experiment.name, scale, key)
