"""Pages that ``docs/conf.py`` writes before each build, from the code itself.

- ``api/generated/<module>.rst``: one API page per public module (``_public_api``), every
  name of its ``__all__`` documented where it is defined and linked from the modules that
  re-export it;
- ``guide/generated/settings.rst``: every experiment's settings, read from its pydantic
  config class and its scales (what ``ntklab show NAME`` prints);
- ``gallery.rst``: the table of contents of the example galleries that exist.

Nothing here is hand-copied: a changed default, docstring or scale changes the page.
"""

from __future__ import annotations

import importlib
import inspect
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import _public_api as public

# --------------------------------------------------------------------------------------------
# API pages
# --------------------------------------------------------------------------------------------


def _heading(text: str, char: str, over: bool = False) -> str:
    line = char * len(text)
    return f"{line}\n{text}\n{line}\n" if over else f"{text}\n{line}\n"


def canonical_homes() -> dict[int, str]:
    """For each exported object (by id), the public module whose page documents it.

    A class or function is documented in the public module that is the longest prefix of its
    ``__module__`` (``ntklab.kernels.dense.Dense`` in ``ntklab.kernels``); anything else in the
    first public module (top-level ``ntklab`` last) that exports it.
    """
    exporters: dict[int, list[str]] = {}
    for module_name in public.public_modules():
        module = importlib.import_module(module_name)
        for name in public.public_names(module_name):
            exporters.setdefault(id(getattr(module, name)), []).append(module_name)
    homes: dict[int, str] = {}
    for module_name in public.public_modules():
        module = importlib.import_module(module_name)
        for name in public.public_names(module_name):
            obj = getattr(module, name)
            if id(obj) in homes:
                continue
            candidates = exporters[id(obj)]
            defined_in = getattr(obj, "__module__", None) if public.kind(obj) != "data" else None
            prefixed = [
                c for c in candidates if defined_in and (defined_in + ".").startswith(c + ".")
            ]
            if prefixed:
                homes[id(obj)] = max(prefixed, key=len)
            else:
                others = [c for c in candidates if c != "ntklab"]
                homes[id(obj)] = others[0] if others else candidates[0]
    return homes


def _first_paragraph(doc: str) -> str:
    paragraph = []
    for line in inspect.cleandoc(doc).splitlines():
        if not line.strip():
            break
        paragraph.append(line.strip())
    return " ".join(paragraph)


def _role(obj: object) -> str:
    return {"module": "mod", "class": "class", "function": "func"}.get(public.kind(obj), "data")


def _summary_table(rows: Iterable[tuple[str, str]]) -> str:
    out = [".. list-table::", "   :widths: 30 70", ""]
    for ref, summary in rows:
        out.append(f"   * - {ref}")
        out.append(f"     - {summary or ' '}")
    return "\n".join(out) + "\n"


def _short_repr(value: Any, limit: int = 100) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _entry(module_name: str, name: str, obj: object) -> str:
    kind = public.kind(obj)
    if kind == "class":
        return (
            f".. autoclass:: {name}\n   :members:\n   :show-inheritance:\n"
            "   :exclude-members: model_config, model_fields, model_computed_fields,"
            " set_fit_request, set_predict_request, set_score_request\n"
        )
    if kind == "function":
        return f".. autofunction:: {name}\n"
    if kind == "module":
        return ""
    doc = public.docstring(module_name, name)
    value = _short_repr(obj).replace("\\", "\\\\")
    return f".. py:data:: {name}\n   :value: {value}\n\n" + textwrap.indent(doc, "   ") + "\n"


def api_page(module_name: str, homes: dict[int, str]) -> str:
    """The reST source of one module's API page."""
    module = importlib.import_module(module_name)
    parts = [
        f".. This page is written by docs/_generate.py from {module_name}.__all__; do not edit.\n",
        _heading(f"``{module_name}``", "="),
        f".. automodule:: {module_name}\n   :no-members:\n",
        f".. currentmodule:: {module_name}\n",
    ]
    rows, entries = [], []
    for name in public.public_names(module_name):
        obj = getattr(module, name)
        home = homes[id(obj)]
        summary = _first_paragraph(public.docstring(module_name, name))
        if public.kind(obj) == "module":
            rows.append((f":mod:`{obj.__name__}`", summary))
        elif home == module_name:
            rows.append((f":{_role(obj)}:`{name}`", summary))
            entries.append(_entry(module_name, name, obj))
        else:
            rows.append((f":{_role(obj)}:`{name} <{home}.{name}>`", summary))
    parts.append(_heading("Summary", "-"))
    parts.append(_summary_table(rows))
    if entries:
        parts.append(_heading("Reference", "-"))
        parts.extend(entries)
    return "\n".join(parts)


def write_api_pages(folder: Path) -> list[str]:
    """Write one page per public module into ``folder``; return the module names."""
    folder.mkdir(parents=True, exist_ok=True)
    homes = canonical_homes()
    names = public.public_modules()
    for module_name in names:
        _write_if_changed(folder / f"{module_name}.rst", api_page(module_name, homes))
    for stale in folder.glob("*.rst"):
        if stale.stem not in names:
            stale.unlink()
    return names


# --------------------------------------------------------------------------------------------
# Experiment settings
# --------------------------------------------------------------------------------------------


def _value_text(value: Any) -> str:
    return repr(value) if isinstance(value, float | str) else _short_repr(value, 200)


def _value_cell(value: Any, own: bool) -> str:
    """A config value: in bold when the scale sets it (reST cannot nest a literal in bold,
    so it is escaped text there), as a literal when it is the default."""
    text = _value_text(value)
    if not text:
        return "—"
    return f"**{_escape(text)}**" if own else f"``{text}``"


def _cell(text: str) -> str:
    return " ".join(str(text).split()) or "—"


def _escape(text: str) -> str:
    """Plain text for reST: no role, emphasis or substitution is read in it."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")


def settings_page() -> str:
    """Every experiment: claim, criterion, where it runs, and its config keys by scale."""
    from ntklab.experiments import JUDGED_SCALES, list_experiments, resolve_config
    from ntklab.experiments.config import config_checks, config_fields

    out = [
        ".. This page is written by docs/_generate.py from the experiments' config classes; "
        "do not edit.\n",
        ".. _experiment-settings:\n",
        _heading("Experiment settings", "="),
        "Every key of every experiment's config, read from its pydantic config class and its "
        "scales when these pages were built (``ntklab show NAME`` prints the same). A key is "
        "set on the command line with ``ntklab run NAME --set key=value``; a value at a scale "
        "in **bold** is the scale's own, the others (in code font) are the config's default. "
        "Constraints are "
        "checked before anything runs: a value that breaks one is refused in one line "
        "(exit status 2).\n",
    ]
    for experiment in list_experiments():
        config_type = experiment.config_type
        specs = config_fields(config_type)
        judged = ", ".join(s for s in JUDGED_SCALES if s in experiment.scales)
        where = "cpu, cuda, mps (``--device``)" if experiment.uses_device else "cpu only"
        if experiment.dtype_field is None:
            precision = f"fixed precision {experiment.fixed_dtype}"
        else:
            precision = f"``--dtype`` sets ``{experiment.dtype_field}``"
        out.append(f".. _settings-{experiment.name}:\n")
        out.append(_heading(f"{experiment.claim_id}: {experiment.name}", "-"))
        out.append(f"**Claim.** {_escape(_cell(experiment.claim))}\n")
        out.append(
            f"**Criterion** (judged at {judged}; each run records it as applied to its grid). "
            f"{_escape(_cell(experiment.criterion))}\n"
        )
        dataset = _escape(_cell(experiment.dataset))
        out.append(f"**Runs on** {where}; {precision}. **Data:** {dataset}.\n")
        if experiment.paper_scale_cost:
            out.append(f"**Paper scale cost.** {_escape(_cell(experiment.paper_scale_cost))}\n")
        values = {scale: dict(resolve_config(experiment, scale)) for scale in experiment.scales}
        scales = list(experiment.scales)
        header = ["key", "type", "constraints", *scales]
        out.append(f"Config class ``{config_type.__module__}.{config_type.__name__}``:\n")
        out.append(".. list-table::\n   :header-rows: 1\n")
        out.append("   * - " + "\n     - ".join(header))
        for spec in specs:
            cells = [f"``{spec.key}``", f"``{spec.type}``"]
            constraints = "; ".join(spec.constraints)
            if spec.description:
                constraints = f"{spec.description} {constraints}".strip()
            cells.append(_escape(_cell(constraints)))
            for scale in scales:
                own = spec.key in experiment.scales[scale]
                cells.append(_value_cell(values[scale].get(spec.key), own))
            out.append("   * - " + "\n     - ".join(cells))
        out.append("")
        checks = config_checks(config_type)
        if checks:
            out.append("Checks across keys:\n")
            out.extend(f"- {_escape(_cell(check))}" for check in checks)
            out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Gallery table of contents
# --------------------------------------------------------------------------------------------


def gallery_page(gallery_dirs: Iterable[str]) -> str:
    dirs = list(gallery_dirs)
    out = [
        ".. This page is written by docs/conf.py; do not edit.\n",
        _heading("Examples", "="),
        "Scripts that run when the documentation is built (at the scale of the "
        "``NTKLAB_GALLERY_SCALE`` environment variable, ``tiny`` by default), with their "
        "output and figures.\n",
    ]
    if dirs:
        out.append(".. toctree::\n   :maxdepth: 2\n")
        out.extend(f"   {d}/index" for d in dirs)
    else:
        out.append("The example sources (``examples/``) are not in this checkout.")
    return "\n".join(out) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    """Write only on change, so that Sphinx's incremental builds stay incremental."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_settings_page(path: Path) -> None:
    _write_if_changed(path, settings_page())


def write_gallery_page(path: Path, gallery_dirs: Iterable[str]) -> None:
    _write_if_changed(path, gallery_page(gallery_dirs))
