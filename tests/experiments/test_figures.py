"""Every figure an experiment draws labels its axes and has a title.

Run on the experiments whose tiny run takes seconds; the figures of the others are drawn by
their own tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from ntklab.experiments import get_experiment, metrics_by_name, run_experiment
from ntklab.report.figures import figure_titles, unlabelled_axes

FAST = ("spectrum-s1", "rkhs-vs-architecture", "flow-equals-krr")


@pytest.mark.parametrize("name", FAST)
def test_figures_label_their_axes_and_have_a_title(name: str, tmp_path: Path) -> None:
    experiment = get_experiment(name)
    result = run_experiment(name, "tiny", out_root=tmp_path, force=True)
    assert result.verdict == "SMOKE", result.error
    arrays: dict[str, np.ndarray] = {}
    if result.arrays:
        with np.load(result.run_dir / result.arrays, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
    config = experiment.config_type.model_validate(result.config)
    figures = experiment.draw(config, metrics_by_name(result.metrics), arrays)
    assert figures, f"{name} draws no figure"
    for figure_name, figure in figures.items():
        assert unlabelled_axes(figure) == [], figure_name
        assert figure_titles(figure), f"{figure_name} has no title"


def test_the_check_finds_what_is_missing() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [0, 1])
    left.set(xlabel="n", ylabel="error", title="spectrum")
    right.plot([0, 1], [1, 0])
    right.set_ylabel("risk")
    twin = left.twinx()  # shares its x label with `left`, needs its own y label
    twin.plot([0, 1], [2, 3])
    fig.add_subplot(3, 3, 9)  # an axes without data needs no label
    assert unlabelled_axes(fig) == ["axes 1: no x label", "axes 2: no y label"]
    assert figure_titles(fig) == ["spectrum"]
    fig.suptitle("synthetic data")
    assert figure_titles(fig) == ["synthetic data", "spectrum"]
