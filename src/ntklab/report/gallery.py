"""What the documentation's executed gallery (``examples/``) shows of a claim.

Each claim page of the gallery (``examples/claims/plot_*.py``, run by sphinx-gallery when the
documentation is built, or as a plain script) does two things with this module:

- :func:`claim_table`: the claim, its criterion, the figure the paper reports and the
  committed quick and paper results beside it, read from ``results/<scale>/<name>.json``
  (:func:`~ntklab.report.claims.read_committed`), as an object that sphinx-gallery shows as
  an HTML table (``_repr_html_``) and ``print`` as a Markdown table;
- :func:`run_claim`: the experiment run at a small scale (``tiny`` by default, or the scale
  named by the environment variable :data:`SCALE_ENV`) into a temporary folder by the
  runner (:func:`~ntklab.experiments.run_experiment`), with its figures read back;
  :meth:`GalleryRun.show` draws them as pyplot figures, which sphinx-gallery's matplotlib
  scraper puts on the page.

The tutorials read :func:`gallery_scale` to size their data, so that the documentation build
stays within a CI budget at ``tiny`` and shows larger runs at ``quick``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ntklab.errors import NtklabValueError
from ntklab.experiments.base import REQUIRED_SCALES, Experiment, Metric
from ntklab.experiments.result import RunResult

from .._repr import short_repr
from ._format import dataset_text
from .claims import (
    COMMITTED_SCALES,
    claim_rows,
    duration_text,
    not_run_text,
    number_text,
    untabled_text,
)

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_SCALE",
    "SCALE_ENV",
    "ClaimTable",
    "GalleryRun",
    "claim_table",
    "find_results_root",
    "gallery_scale",
    "run_claim",
]

#: The environment variable that sets the scale of the gallery's runs.
SCALE_ENV = "NTKLAB_GALLERY_SCALE"
#: The scale of the gallery's runs when :data:`SCALE_ENV` is not set: seconds per page.
DEFAULT_SCALE = "tiny"

_SCALE_TITLES = {"quick": "Quick scale", "paper": "Paper scale"}


def gallery_scale() -> str:
    """The scale the gallery runs at: :data:`SCALE_ENV`, else :data:`DEFAULT_SCALE`.

    Returns
    -------
    str
        One of ``"tiny"``, ``"quick"``, ``"paper"``.

    Raises
    ------
    NtklabValueError
        When the variable names another scale.

    Examples
    --------
    >>> gallery_scale() in ("tiny", "quick", "paper")
    True
    """
    scale = os.environ.get(SCALE_ENV, "").strip() or DEFAULT_SCALE
    if scale not in REQUIRED_SCALES:
        raise NtklabValueError(
            f"{SCALE_ENV}: expected one of {list(REQUIRED_SCALES)} (or unset for "
            f"{DEFAULT_SCALE!r}), received {scale!r}"
        )
    return scale


def _has_results(folder: Path) -> bool:
    results = folder / "results"
    return any((results / scale).is_dir() for scale in COMMITTED_SCALES)


def find_results_root(start: Path | str | None = None) -> Path:
    """The repository's ``results/`` folder (committed results), found by walking up.

    sphinx-gallery runs an example in the example's folder without setting ``__file__``, so
    the folder is looked for from ``start``, by default from the working directory and then
    from the folder of the running script (``sys.argv[0]``, which sphinx-gallery sets to the
    example): the first of them or their parents that holds ``results/quick`` or
    ``results/paper``.

    Parameters
    ----------
    start : Path or str, optional
        Where to start looking.

    Returns
    -------
    Path
        The ``results`` folder.

    Raises
    ------
    NtklabValueError
        When no such folder is found (e.g. ntklab installed without its repository).
    """
    if start is not None:
        starts = [Path(start)]
    else:
        starts = [Path.cwd()]
        if sys.argv and sys.argv[0]:
            starts.append(Path(sys.argv[0]).resolve().parent)
    for origin in starts:
        origin = origin.resolve()
        for folder in (origin, *origin.parents):
            if _has_results(folder):
                return folder / "results"
    where = ", ".join(str(s) for s in starts)
    raise NtklabValueError(
        "results: expected a folder 'results' holding 'quick/' or 'paper/' (the committed "
        f"results of the repository) in or above {where}, found none; run from a checkout "
        "of the repository or pass its results folder"
    )


def _experiment(name: str | Experiment) -> Experiment:
    if isinstance(name, Experiment):
        return name
    from ntklab.experiments import get_experiment

    return get_experiment(name)


# --- the claim and its committed results ------------------------------------------------


def _headline_value(result: RunResult, name: str) -> str:
    metric: Metric | None = next((m for m in result.metrics if m.name == name), None)
    if metric is None:
        return "—"
    text = number_text(metric.value)
    if metric.ci_low is not None and metric.ci_high is not None:
        text += f" [{number_text(metric.ci_low)}, {number_text(metric.ci_high)}]"
    return text


def _result_rows(experiment: Experiment) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [("Verdict", lambda r: r.verdict)]
    rows += [(name, lambda r, name=name: _headline_value(r, name)) for name in experiment.headline]
    rows += [
        ("Measured", lambda r: r.summary),
        ("Criterion as applied", lambda r: r.criterion),
        ("Data set", dataset_text),
        ("Wall time", lambda r: duration_text(r.wall_time_s)),
        ("Date", lambda r: r.started_at),
    ]
    return rows


@short_repr
@dataclass(frozen=True)
class ClaimTable:
    """A claim with the paper's reported figure beside its committed quick and paper results.

    Shown by sphinx-gallery (and Jupyter) as HTML (:meth:`_repr_html_`); ``str`` gives the
    same content in Markdown.

    Attributes
    ----------
    experiment : Experiment
        The claim's experiment (claim, criterion, reported figure, headline metrics).
    header : tuple of str
        ``("", "Reported (the paper)", "Quick scale", "Paper scale")``.
    rows : tuple of tuple of str
        One row per line of the comparison: its label, the reported figure (first row
        only, empty below), and the value at each committed scale. A scale without a
        committed result says ``"not run"`` in its first row (with the measured paper-scale
        cost, where the experiment states one) and ``"—"`` below.
    results_root : Path
        The folder the results were read from.
    """

    experiment: Experiment
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    results_root: Path

    def cell(self, label: str, column: str) -> str:
        """The cell of the row ``label`` in the column ``column`` (a header name).

        Raises
        ------
        NtklabValueError
            When the row or the column does not exist.
        """
        if column not in self.header:
            raise NtklabValueError(
                f"column: expected one of {list(self.header)}, received {column!r}"
            )
        for row in self.rows:
            if row[0] == label:
                return row[self.header.index(column)]
        raise NtklabValueError(
            f"label: expected one of {[r[0] for r in self.rows]}, received {label!r}"
        )

    def _intro(self) -> list[tuple[str, str]]:
        exp = self.experiment
        return [
            ("Claim", exp.claim),
            ("Criterion", exp.criterion),
            ("Reported figure (the paper)", exp.reported or "not stated"),
            ("Run it", f"ntklab run {exp.name} --scale quick"),
        ]

    def __str__(self) -> str:
        def cell(text: str) -> str:
            return " ".join(text.split()).replace("|", "\\|")

        exp = self.experiment
        lines = [f"{exp.claim_id} {exp.name}", ""]
        lines += [f"**{label}.** {' '.join(text.split())}" for label, text in self._intro()]
        lines += ["", "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def _repr_html_(self) -> str:
        def e(text: object) -> str:
            return escape(str(text), quote=True)

        intro = "".join(
            f"<p><strong>{e(label)}.</strong> "
            + (f"<code>{e(text)}</code>" if label == "Run it" else e(" ".join(text.split())))
            + "</p>"
            for label, text in self._intro()
        )
        head = "".join(f"<th>{e(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>"
            + f"<th>{e(row[0])}</th>"
            + "".join(f"<td>{e(c)}</td>" for c in row[1:])
            + "</tr>"
            for row in self.rows
        )
        table = (
            '<table class="docutils align-default">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )
        return f'<div class="ntklab-claim">{intro}{table}</div>'


def claim_table(name: str | Experiment, results_root: Path | str | None = None) -> ClaimTable:
    """The claim of experiment ``name`` beside its committed quick and paper results.

    Parameters
    ----------
    name : str or Experiment
        A registered experiment (``"spectrum-s1"``) or the experiment itself.
    results_root : Path or str, optional
        The folder of committed results (``quick/``, ``paper/``); by default the
        repository's (:func:`find_results_root`).

    Returns
    -------
    ClaimTable

    Raises
    ------
    NtklabValueError
        When the experiment is unknown, the results folder is not found, or a committed
        file is not a valid result.

    Examples
    --------
    >>> table = claim_table("spectrum-s1")  # doctest: +SKIP
    >>> table.cell("Verdict", "Quick scale")  # doctest: +SKIP
    'PASS'
    """
    experiment = _experiment(name)
    root = find_results_root() if results_root is None else Path(results_root)
    if not root.is_dir():
        raise NtklabValueError(
            f"results_root: expected a folder of committed results, received {str(root)!r} "
            "(not a folder)"
        )
    (row,) = claim_rows(root, [experiment])
    header = ("", "Reported (the paper)", *(_SCALE_TITLES[s] for s in COMMITTED_SCALES))
    rows = []
    for i, (label, value) in enumerate(_result_rows(experiment)):
        cells = [label, (experiment.reported or "not stated") if i == 0 else ""]
        for scale in COMMITTED_SCALES:
            result = row.runs.get(scale)
            if result is None:
                untabled = row.untabled(scale)  # a stale or refused committed result
                missing = (
                    not_run_text(experiment, scale) if untabled is None else untabled_text(untabled)
                )
                cells.append(missing if i == 0 else "—")
            else:
                cells.append(value(result))
        rows.append(tuple(cells))
    return ClaimTable(experiment, header, tuple(rows), root)


# --- the experiment at a small scale ----------------------------------------------------


@short_repr
@dataclass(frozen=True)
class GalleryRun:
    """A run of an experiment made for the gallery, with its figures held in memory.

    Attributes
    ----------
    result : RunResult
        The run's record (its ``run_dir`` was a temporary folder, removed since).
    images : mapping of str to ndarray
        ``figure name -> RGBA image`` of shape (height, width, 4), float32 in [0, 1], as the
        runner saved it (PNG at :data:`~ntklab.experiments.runner.FIGURE_DPI`).
    """

    result: RunResult
    images: Mapping[str, np.ndarray[Any, Any]] = field(default_factory=dict)

    def __str__(self) -> str:
        r = self.result
        lines = [
            f"{r.claim_id} {r.experiment}, scale {r.scale}: {r.verdict} in {r.wall_time_s:.1f} s",
            f"measured: {r.summary}",
            f"data set: {dataset_text(r)}",
        ]
        if r.verdict == "SMOKE":
            lines.append(
                f"(a {r.scale} run is a smoke run: its grid is too small for the criterion, "
                "so it is not judged; the committed quick and paper results are)"
            )
        if r.error:
            lines.append(r.error.rstrip())
        return "\n".join(lines)

    def show(self, names: Sequence[str] | None = None) -> list[Figure]:
        """Draw the run's figures as pyplot figures, at their saved size in pixels.

        sphinx-gallery's matplotlib scraper collects the open pyplot figures after each
        cell, so the figures appear on the page where this is called.

        Parameters
        ----------
        names : sequence of str, optional
            The figures to draw (file names such as ``"spectrum_s1.png"``); default all.

        Returns
        -------
        list of Figure
        """
        import matplotlib.pyplot as plt

        from ntklab.experiments.runner import FIGURE_DPI

        chosen = list(self.images) if names is None else list(names)
        figures = []
        for name in chosen:
            if name not in self.images:
                raise NtklabValueError(
                    f"names: expected figures among {list(self.images)}, received {name!r}"
                )
            image = self.images[name]
            height, width = image.shape[:2]
            fig = plt.figure(figsize=(width / FIGURE_DPI, height / FIGURE_DPI), dpi=FIGURE_DPI)
            ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
            ax.imshow(image, interpolation="none")
            ax.set_axis_off()
            # an invisible title: sphinx-gallery makes the image's alt text from the titles
            title = f"{self.result.experiment} ({self.result.scale}): {name}"
            ax.set_title(title, visible=False)
            figures.append(fig)
        return figures


def run_claim(name: str | Experiment, scale: str | None = None) -> GalleryRun:
    """Run experiment ``name`` at ``scale`` into a temporary folder and keep its figures.

    The run goes through :func:`~ntklab.experiments.run_experiment` (seeded, timed, its
    figures saved as PNG with their caption); the folder is removed once the figures are
    read back.

    Parameters
    ----------
    name : str or Experiment
        A registered experiment or the experiment itself.
    scale : str, optional
        Default :func:`gallery_scale` (``tiny`` unless :data:`SCALE_ENV` says otherwise).

    Returns
    -------
    GalleryRun
        Its verdict is ``ERROR`` (with the traceback) when the experiment raised.
    """
    import matplotlib.image as mpimg

    from ntklab.experiments import run_experiment

    experiment = _experiment(name)
    chosen = gallery_scale() if scale is None else scale
    with tempfile.TemporaryDirectory(prefix="ntklab-gallery-") as folder:
        result = run_experiment(experiment, chosen, out_root=Path(folder))
        images = {figure: mpimg.imread(result.run_dir / figure) for figure in result.figures}
    return GalleryRun(result, MappingProxyType(images))
