"""Formatting shared by the Markdown and HTML reports."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ntklab.experiments.base import JUDGED_SCALES
from ntklab.experiments.registry import claim_sort_key
from ntklab.experiments.result import VERDICTS, RunResult

__all__ = [
    "VERDICT_LABELS",
    "VERSION_KEYS",
    "code_counts",
    "code_digest",
    "count_scales",
    "count_verdicts",
    "criterion_label",
    "dataset_text",
    "figure_anchor",
    "format_ci",
    "format_value",
    "merged_versions",
    "order_results",
    "section_anchor",
    "verdict_meanings",
]

VERSION_KEYS: tuple[str, ...] = ("ntklab", "torch", "numpy", "python", "platform")

#: How a verdict is shown where it stands alone (a section title).
VERDICT_LABELS: dict[str, str] = {"SMOKE": "SMOKE (smoke run, not judged)"}


def verdict_meanings() -> list[tuple[str, str]]:
    """``(verdict, what it means)`` for every verdict, as the reports explain them."""
    judged = " and ".join(JUDGED_SCALES)
    return [
        (
            "PASS",
            f"at a judged scale ({judged}), the measured figures meet the claim's criterion "
            "as applied to the grid that ran (the criterion shown with the run).",
        ),
        ("FAIL", f"at a judged scale ({judged}), the measured figures miss that criterion."),
        (
            "SMOKE",
            "a smoke run (scale tiny): it shows that the code runs end to end; its grid is "
            "too small for the criterion to mean anything, so it is not judged.",
        ),
        ("ERROR", "the experiment raised; the traceback is kept with the run."),
    ]


def code_digest(result: RunResult) -> str:
    """The digest of the code fingerprint that made ``result`` (``"unknown"`` if none)."""
    return result.code.get("digest") or "unknown"


def code_counts(results: Sequence[RunResult]) -> dict[str, int]:
    """Number of runs per code digest, in order of first appearance."""
    counts: dict[str, int] = {}
    for r in results:
        counts[code_digest(r)] = counts.get(code_digest(r), 0) + 1
    return counts


def criterion_label(result: RunResult) -> str:
    """What the criterion shown with ``result`` is: applied, or not judged at its scale."""
    if result.verdict == "SMOKE":
        return f"Criterion as applied to this grid (not judged at scale {result.scale})"
    return "Criterion as applied to this grid"


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


def count_scales(results: Sequence[RunResult]) -> dict[str, int]:
    """Number of runs per scale, in order of first appearance in ``results``."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.scale] = counts.get(r.scale, 0) + 1
    return counts


def dataset_text(result: RunResult) -> str:
    """The data set a run measured on, or a note that the run did not record it."""
    return result.dataset or "not named (the run records no data set)"


def count_verdicts(results: Sequence[RunResult]) -> dict[str, int]:
    """Number of runs per verdict: PASS, FAIL, ERROR, SMOKE in that order."""
    return {v: sum(r.verdict == v for r in results) for v in VERDICTS}


def figure_anchor(result: RunResult, figure: str) -> str:
    """Id of a figure inside the HTML report."""
    stem = figure.rsplit(".", 1)[0]
    return f"fig-{result.experiment}-{result.scale}-{stem}".replace(" ", "-")


def section_anchor(result: RunResult) -> str:
    """Id of an experiment's section inside the HTML report."""
    return f"run-{result.experiment}-{result.scale}"
