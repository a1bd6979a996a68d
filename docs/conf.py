"""Sphinx configuration of the ntklab documentation.

Build with ``python -m sphinx -W -b html docs docs/_build/html`` (``pip install ".[docs]"``).
Before each build the API pages, the experiment-settings page and the gallery's table of
contents are written from the code (``docs/_generate.py``); a public name without a docstring
stops the build.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from sphinx.errors import ConfigError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if (ROOT / "src" / "ntklab").is_dir():
    sys.path.insert(0, str(ROOT / "src"))  # document this checkout, not an installed copy

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("NTKLAB_GALLERY_SCALE", "tiny")

import _generate  # noqa: E402
import _public_api  # noqa: E402

import ntklab  # noqa: E402

# -- Project ---------------------------------------------------------------------------------

project = "ntklab"
author = "The ntklab developers"
copyright = "The ntklab developers"
release = ntklab.__version__
version = ".".join(release.split(".")[:2])

# -- Pages written from the code -------------------------------------------------------------

_missing = _public_api.undocumented()
if _missing:
    raise ConfigError(
        "public names without a docstring (a class or function needs its own docstring, a "
        "constant or type alias a '#:' comment above its assignment): " + ", ".join(_missing)
    )

API_MODULES = _generate.write_api_pages(HERE / "api" / "generated")
_generate.write_settings_page(HERE / "guide" / "generated" / "settings.rst")

# -- Extensions ------------------------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static: pages render math offline
]

templates_path: list[str] = []
exclude_patterns = ["_build", "**/README.rst", "api/generated/README.rst"]
root_doc = "index"
default_role = "code"
smartquotes = False  # quotes in values and code-like text stay as typed
nitpicky = False
suppress_warnings: list[str] = []

# autodoc + numpydoc: signatures as written, type hints in the signature only.
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_class_signature = "mixed"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False


_TYPE_LINE = re.compile(r"^(\s*\*{0,2}\w+(?:, \w+)* : )(.*)$")
_STAR_WORD = re.compile(r"(?<![\\*`])\*(?=\w)")


def _escape_type_stars(app, what, name, obj, options, lines):  # type: ignore[no-untyped-def]
    """Shapes in numpydoc's type slots, ``(n, C, *S)``, are text: a ``*`` before a word there
    would start emphasis, so it is escaped (only on ``name : type`` lines)."""
    for i, line in enumerate(lines):
        match = _TYPE_LINE.match(line)
        if match:
            pieces = match.group(2).split("``")  # odd pieces are inline literals
            pieces[::2] = [_STAR_WORD.sub(r"\\*", piece) for piece in pieces[::2]]
            lines[i] = match.group(1) + "``".join(pieces)


def setup(app):  # type: ignore[no-untyped-def]
    # numpydoc parses at priority 500 (the default): run before it, on the raw docstring.
    app.connect("autodoc-process-docstring", _escape_type_stars, priority=100)


# MathJax from the local copy that sphinx-mathjax-offline puts in _static (no network).
mathjax_path = "mathjax/tex-chtml.js"

# No network at build time: intersphinx has no inventories to fetch.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

# -- Example galleries (sphinx-gallery) ------------------------------------------------------

_EXAMPLES = [("../examples/tutorials", "auto_tutorials"), ("../examples/claims", "auto_claims")]
_present = [(src, dst) for src, dst in _EXAMPLES if (HERE / src).is_dir()]

sphinx_gallery_conf = {
    "examples_dirs": [src for src, _ in _present],
    "gallery_dirs": [dst for _, dst in _present],
    "filename_pattern": r"plot_",
    "abort_on_example_error": True,  # a broken example fails the build
    "only_warn_on_example_error": False,
    "image_scrapers": ("matplotlib",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "write_computation_times": False,
    "plot_gallery": "True",
    # sphinx-gallery skips an example whose source has not changed since its last run;
    # NTKLAB_GALLERY_RERUN=1 (the build test) runs every example again.
    "run_stale_examples": os.environ.get("NTKLAB_GALLERY_RERUN") == "1",
}
_generate.write_gallery_page(HERE / "gallery.rst", sphinx_gallery_conf["gallery_dirs"])

# -- HTML ------------------------------------------------------------------------------------

html_theme = "furo"
html_title = f"ntklab {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
