"""The Fashion-MNIST kernel-regression benchmark's committed rows: read, tabled, plotted.

``benchmarks/bench_fashion_mnist.py`` writes one row per (method, depth, features, n) to
``results/fashion_mnist.json``: test accuracy of kernel ridge regression with an exact
kernel or with random features, its wall and CPU time and peak memory. This module reads
that file (validated by :class:`BenchmarkRow`), prints the README's table
(:func:`markdown_table`) and draws the figure of accuracy against n and against time
(:func:`accuracy_figure`), for the benchmark script and for the documentation's gallery
alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ntklab.errors import NtklabValueError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "COLUMNS",
    "FILE_NAME",
    "BenchmarkRow",
    "accuracy_figure",
    "markdown_table",
    "read_rows",
    "row_cells",
]

#: The file the benchmark writes its rows to, under ``results/``.
FILE_NAME = "fashion_mnist.json"

#: Columns of :func:`markdown_table`, one per :func:`row_cells` entry.
COLUMNS = (
    "method",
    "depth",
    "F",
    "n",
    "n_test",
    "r",
    "acc %",
    "kernel s",
    "total s",
    "CPU s",
    "MiB",
)


class BenchmarkRow(BaseModel):
    """One row: a method fitted on ``n`` training images and scored on ``n_test``.

    ``num_features`` is 0 for an exact kernel; ``ridge_rel`` the chosen relative ridge;
    times in seconds (``kernel_s`` the kernel or the features, ``total_s`` with the
    solves, ``cpu_s`` the process's CPU time over all its threads; absent in rows written
    before it was recorded), ``peak_rss_mib`` the process's peak resident memory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str
    n: int = Field(gt=0)
    n_test: int = Field(gt=0)
    num_features: int = Field(ge=0)
    depth: int = Field(gt=0)
    seed: int
    accuracy: float = Field(ge=0.0, le=1.0)
    ridge_rel: float = Field(gt=0.0)
    kernel_s: float = Field(ge=0.0)
    solve_s: float
    total_s: float = Field(ge=0.0)
    cpu_s: float | None = Field(default=None, ge=0.0)
    peak_rss_mib: float = Field(ge=0.0)
    threads: int = Field(gt=0)

    @property
    def label(self) -> str:
        """``method dDEPTH`` and ``FNUM`` for features: one line of the figure."""
        name = f"{self.method} d{self.depth}"
        return f"{name} F{self.num_features}" if self.num_features else name


def read_rows(path: Path | str) -> list[BenchmarkRow]:
    """The rows of a benchmark JSON (``{"rows": [...]}``), validated.

    Raises
    ------
    NtklabValueError
        The file is missing, is not JSON of that shape, or a row lacks a field or holds a
        value out of range (the message names the row and the field).
    """
    path = Path(path)
    if not path.is_file():
        raise NtklabValueError(f"path: expected the benchmark's JSON file, got {str(path)!r}")
    try:
        payload = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise NtklabValueError(f"path: expected JSON, got {err} in {str(path)!r}") from err
    if not isinstance(payload, dict) or not isinstance(payload.get("rows"), list):
        raise NtklabValueError(
            f"path: expected an object with a list 'rows', got {type(payload).__name__} "
            f"in {str(path)!r}"
        )
    rows = []
    for i, raw in enumerate(payload["rows"]):
        try:
            rows.append(BenchmarkRow.model_validate(raw))
        except ValidationError as err:
            raise NtklabValueError(f"rows[{i}] of {str(path)!r}: {err}") from err
    return rows


def row_cells(row: BenchmarkRow) -> list[str]:
    """The row as the strings of :data:`COLUMNS`."""
    return [
        row.method,
        str(row.depth),
        str(row.num_features or "exact"),
        str(row.n),
        str(row.n_test),
        f"{row.ridge_rel:g}",
        f"{100 * row.accuracy:.2f}",
        f"{row.kernel_s:.1f}",
        f"{row.total_s:.1f}",
        "-" if row.cpu_s is None else f"{row.cpu_s:.0f}",
        f"{row.peak_rss_mib:.0f}",
    ]


def markdown_table(rows: Sequence[BenchmarkRow]) -> str:
    """The rows as a Markdown table, ordered by method, depth, features and n."""
    ordered = sorted(rows, key=lambda r: (r.method, r.depth, r.num_features, r.n, r.n_test))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in ordered]
    return "\n".join(lines)


def accuracy_figure(rows: Sequence[BenchmarkRow], fig: Figure | None = None) -> Figure:
    """Test accuracy against the training images n and against wall seconds (log axes),
    one line per method, depth and feature count, drawn on ``fig`` (default: a new
    10 x 4 inch figure outside pyplot; pass ``plt.figure(...)`` to have pyplot show it)."""
    if fig is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2, sharey=True)
    for label in dict.fromkeys(r.label for r in rows):
        mine = sorted((r for r in rows if r.label == label), key=lambda r: r.n)
        accuracy = [100 * r.accuracy for r in mine]
        left.plot([r.n for r in mine], accuracy, "o-", label=label)
        right.plot([r.total_s for r in mine], accuracy, "o-", label=label)
    for ax, name in ((left, "training images n"), (right, "wall seconds")):
        ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    left.set_ylabel("test accuracy %")
    right.legend(fontsize=8)
    fig.suptitle("Fashion-MNIST, kernel ridge regression")
    fig.tight_layout()
    return fig
