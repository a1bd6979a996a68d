"""The documentation gallery: claim tables read from the committed results, runs at a small
scale with their figures, and one tutorial and one claim page run end to end."""

from __future__ import annotations

import json
import math
import runpy
import shutil
import sys
from html import escape
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ntklab.errors import NtklabValueError
from ntklab.experiments import get_experiment, list_experiments
from ntklab.experiments.runner import FIGURE_DPI
from ntklab.report import gallery

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
EXAMPLES = REPO / "examples"
TITLES = {"quick": "Quick scale", "paper": "Paper scale"}


def _committed() -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    """The committed JSON files, read with the json module (not with ntklab's reader)."""
    return {
        (path.stem, scale): json.loads(path.read_text())
        for scale in TITLES
        for path in sorted((RESULTS / scale).glob("*.json"))
    }


def test_verdicts_and_headline_figures_are_those_of_the_committed_json() -> None:
    committed = _committed()
    assert len(committed) >= 16
    for experiment in list_experiments():
        table = gallery.claim_table(experiment.name, RESULTS)
        for scale, title in TITLES.items():
            data = committed.get((experiment.name, scale))
            if data is None:
                continue
            assert table.cell("Verdict", title) == data["verdict"], (experiment.name, scale)
            values = {m["name"]: m["value"] for m in data["metrics"]}
            for name in experiment.headline:
                shown = table.cell(name, title)
                if name not in values:
                    assert shown == "—"
                    continue
                number = float(shown.split(" [")[0])  # "value [low, high]"
                assert math.isclose(number, values[name], rel_tol=5e-3, abs_tol=1e-12), (
                    experiment.name,
                    scale,
                    name,
                    shown,
                    values[name],
                )
            assert table.cell("Criterion as applied", title) == data["criterion"]


def test_the_table_names_the_papers_figure_the_claim_and_the_criterion() -> None:
    experiment = get_experiment("spectrum-s1")
    table = gallery.claim_table("spectrum-s1", RESULTS)
    assert experiment.reported
    assert table.cell("Verdict", "Reported (the paper)") == experiment.reported
    text, html = str(table), table._repr_html_()
    for part in (experiment.reported, experiment.criterion):
        assert " ".join(part.split()) in text
        assert escape(" ".join(part.split()), quote=True) in html
    assert "<table" in html and html.count("<tr>") == len(table.rows) + 1


def test_a_scale_without_committed_result_states_its_measured_cost() -> None:
    missing = [e for e in list_experiments() if not (RESULTS / "paper" / f"{e.name}.json").exists()]
    assert missing, "every claim has a committed paper result: pick another case"
    experiment = missing[0]
    table = gallery.claim_table(experiment, RESULTS)
    cell = table.cell("Verdict", "Paper scale")
    assert cell.startswith("not run")
    assert experiment.paper_scale_cost in cell
    assert {table.cell(label, "Paper scale") for label, *_ in table.rows[1:]} == {"—"}


def test_the_table_reads_the_folder_it_is_given(tmp_path: Path) -> None:
    # the committed quick result of double-descent alone in another folder: its verdict, and
    # no paper run; the same file with its verdict inverted is refused (its digest breaks)
    data = json.loads((RESULTS / "quick" / "double-descent.json").read_text())
    (tmp_path / "quick").mkdir()
    (tmp_path / "quick" / "double-descent.json").write_text(json.dumps(data))
    table = gallery.claim_table("double-descent", tmp_path)
    assert table.cell("Verdict", "Quick scale") == data["verdict"]
    assert table.cell("Verdict", "Paper scale") == "not run"
    data["verdict"] = {"PASS": "FAIL", "FAIL": "PASS"}[data["verdict"]]
    (tmp_path / "quick" / "double-descent.json").write_text(json.dumps(data))
    flipped = gallery.claim_table("double-descent", tmp_path)
    assert flipped.cell("Verdict", "Quick scale").startswith("refused: tampered")
    with pytest.raises(NtklabValueError, match="label"):
        table.cell("no such row", "Quick scale")


def test_results_root_is_found_from_a_subfolder_and_missing_is_an_error(tmp_path: Path) -> None:
    assert gallery.find_results_root(EXAMPLES / "claims") == RESULTS
    with pytest.raises(NtklabValueError, match="results"):
        gallery.find_results_root(tmp_path)


def test_gallery_scale_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gallery.SCALE_ENV, raising=False)
    assert gallery.gallery_scale() == "tiny"
    monkeypatch.setenv(gallery.SCALE_ENV, "quick")
    assert gallery.gallery_scale() == "quick"
    monkeypatch.setenv(gallery.SCALE_ENV, "huge")
    with pytest.raises(NtklabValueError, match=gallery.SCALE_ENV):
        gallery.gallery_scale()


def test_run_claim_keeps_the_figures_at_their_saved_size() -> None:
    run = gallery.run_claim("double-descent", "tiny")
    assert run.result.verdict == "SMOKE"
    assert not run.result.run_dir.exists()  # the temporary folder is gone
    assert set(run.images) == set(run.result.figures) == {"double_descent.png"}
    image = run.images["double_descent.png"]
    assert image.shape[:2] == (504, 1320)  # the figure's 11 x 4.2 inches at 120 dpi
    assert image.ndim == 3 and image.shape[2] in (3, 4) and float(image.std()) > 0
    figures = run.show()
    try:
        assert len(figures) == 1
        width, height = figures[0].get_size_inches() * figures[0].dpi
        assert (round(height), round(width)) == image.shape[:2]
        assert figures[0].dpi == FIGURE_DPI
        figures[0].canvas.draw()  # drawn pixel for pixel: the saved PNG comes back unchanged
        drawn = np.asarray(figures[0].canvas.buffer_rgba())[..., : image.shape[2]] / 255.0
        assert np.abs(drawn - image).max() < 2 / 255
    finally:
        for figure in figures:
            plt.close(figure)
    assert "SMOKE" in str(run) and "double-descent" in str(run)
    # one line that names the images' shapes instead of printing their pixels
    assert "\n" not in repr(run) and "ndarray(504, 1320, 4)" in repr(run)


def _run_script(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run ``path`` as sphinx-gallery does (in its folder, no ``__file__``); its figures."""
    monkeypatch.setenv(gallery.SCALE_ENV, "tiny")
    monkeypatch.chdir(path.parent)
    monkeypatch.setattr(sys, "argv", [str(path)])
    plt.close("all")
    code = compile(path.read_text(), str(path), "exec")
    with torch.random.fork_rng(devices=[]):  # the script seeds torch's global generator
        exec(code, {"__name__": "__main__"})
    figures = plt.get_fignums()
    plt.close("all")
    return figures


def test_the_getting_started_tutorial_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(_run_script(EXAMPLES / "tutorials" / "plot_1_getting_started.py", monkeypatch)) == 2


def test_a_claim_page_runs_from_its_folder_and_needs_the_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = EXAMPLES / "claims" / "plot_c1_double_descent.py"
    assert len(_run_script(script, monkeypatch)) == 1
    assert "C1 double-descent, scale tiny: SMOKE" in capsys.readouterr().out
    # a copy run from a folder with no results/ above it, nor above the script
    copy = tmp_path / script.name
    shutil.copy(script, copy)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(copy)])
    with pytest.raises(NtklabValueError, match="results"):
        runpy.run_path(str(copy), run_name="__main__")


def test_every_registered_claim_has_its_page() -> None:
    pages = {path: path.read_text() for path in (EXAMPLES / "claims").glob("plot_*.py")}
    for experiment in list_experiments():
        found = [p for p, text in pages.items() if f'claim_table("{experiment.name}")' in text]
        assert len(found) == 1, (experiment.name, found)
        text = pages.pop(found[0])
        assert f'run_claim("{experiment.name}")' in text
        title = text.split('"""', 2)[1].strip().splitlines()[0]
        assert title.startswith(f"{experiment.claim_id}: "), (experiment.name, title)
    assert not pages, f"pages of no registered experiment: {sorted(p.name for p in pages)}"
