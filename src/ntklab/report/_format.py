"""Formatting shared by the Markdown and HTML reports."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ntklab.experiments.registry import claim_sort_key
from ntklab.experiments.result import RunResult

__all__ = [
    "VERSION_KEYS",
    "count_verdicts",
    "figure_anchor",
    "format_ci",
    "format_value",
    "merged_versions",
    "order_results",
    "section_anchor",
]

VERSION_KEYS: tuple[str, ...] = ("ntklab", "torch", "numpy", "python", "platform")


def format_value(value: float | None) -> str:
    """A number with 4 significant digits; ``"—"`` for None.

    Examples
    --------
    >>> format_value(-1.98765)
    '-1.988'
    >>> format_value(float("nan"))
    'nan'
    """
    if value is None:
        return "—"
    if math.isnan(value):
        return "nan"
    return f"{value:.4g}"


def format_ci(low: float | None, high: float | None) -> str:
    """``"[low, high]"`` when both bounds are known, else ``"—"``."""
    if low is None or high is None:
        return "—"
    return f"[{format_value(low)}, {format_value(high)}]"


def order_results(results: Sequence[RunResult]) -> list[RunResult]:
    """Results in claim order (A1, A2, ..., B1), then experiment and scale."""
    return sorted(results, key=lambda r: (claim_sort_key(r.claim_id), r.experiment, r.scale))


def merged_versions(results: Sequence[RunResult]) -> dict[str, str]:
    """Each version key with its distinct values across the runs, comma-separated."""
    keys = list(VERSION_KEYS) + sorted({k for r in results for k in r.versions} - set(VERSION_KEYS))
    merged: dict[str, str] = {}
    for key in keys:
        values = list(dict.fromkeys(r.versions[key] for r in results if key in r.versions))
        if values:
            merged[key] = ", ".join(values)
    return merged


def count_verdicts(results: Sequence[RunResult]) -> dict[str, int]:
    """Number of runs per verdict, PASS, FAIL and ERROR in that order."""
    return {v: sum(r.verdict == v for r in results) for v in ("PASS", "FAIL", "ERROR")}


def figure_anchor(result: RunResult, figure: str) -> str:
    """Id of a figure inside the HTML report."""
    stem = figure.rsplit(".", 1)[0]
    return f"fig-{result.experiment}-{result.scale}-{stem}".replace(" ", "-")


def section_anchor(result: RunResult) -> str:
    """Id of an experiment's section inside the HTML report."""
    return f"run-{result.experiment}-{result.scale}"
