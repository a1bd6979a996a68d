"""Writing the reports of a set of runs to a folder."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ntklab.errors import NtklabValueError
from ntklab.experiments.result import RunResult

from .html import render_html
from .markdown import render_markdown

__all__ = ["HTML_REPORT", "MARKDOWN_REPORT", "write_report"]

#: File name of the Markdown report :func:`write_report` writes in a run folder.
MARKDOWN_REPORT = "report.md"
#: File name of the HTML report :func:`write_report` writes in a run folder.
HTML_REPORT = "report.html"


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)  # mkstemp creates 0600; a report is meant to be shared
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_report(
    results: Sequence[RunResult],
    out_dir: Path | str,
    generated_at: dt.datetime | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md`` and a self-contained ``report.html`` of ``results`` in ``out_dir``.

    Parameters
    ----------
    results : sequence of RunResult
        The runs to report.
    out_dir : Path
        Folder of the reports (created if needed); Markdown figure links are relative to it.
    generated_at : datetime, optional
        Time printed in the header (now, in UTC, by default).

    Returns
    -------
    (Path, Path)
        Paths of ``report.md`` and ``report.html``.

    Raises
    ------
    NtklabValueError
        When ``results`` holds something other than RunResult.
    """
    for i, result in enumerate(results):
        if not isinstance(result, RunResult):
            raise NtklabValueError(
                f"results[{i}]: expected a RunResult, received {type(result).__name__}"
            )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    when = generated_at or dt.datetime.now(dt.UTC)
    md_path, html_path = out / MARKDOWN_REPORT, out / HTML_REPORT
    _write_atomic(md_path, render_markdown(results, out, when))
    _write_atomic(html_path, render_html(results, when))
    return md_path, html_path
