"""The claims table: committed results read back and tabled, the README block replaced."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from experiment_helpers import fake_experiment
from ntklab.errors import NtklabValueError
from ntklab.experiments import run_experiment
from ntklab.report.claims import (
    TABLE_BEGIN,
    TABLE_END,
    claims_table,
    commit_result,
    config_changes,
    read_committed,
    replace_table,
)


def _experiment(name: str, passed: bool = True):  # type: ignore[no-untyped-def]
    return dataclasses.replace(
        fake_experiment(name, passed=passed, figure=False),
        reported="value 4 (the paper's Table 1)",
        headline=("value",),
        dataset="synthetic: Gaussian noise",
    )


def test_committed_results_are_tabled_with_the_reported_figure(tmp_path: Path) -> None:
    good, bad = _experiment("fake-good"), _experiment("fake-bad", passed=False)
    quick = run_experiment(good, "quick", out_root=tmp_path / "runs")
    paper = run_experiment(bad, "paper", out_root=tmp_path / "runs")
    root = tmp_path / "results"
    assert commit_result(quick, root) == root / "quick" / "fake-good.json"
    assert (root / "quick" / "fake-good.json").stat().st_mode & 0o777 == 0o644
    commit_result(paper, root)
    back = read_committed(root, [good, bad])
    assert set(back) == {("fake-good", "quick"), ("fake-bad", "paper")}
    assert back[("fake-good", "quick")].metrics == quick.metrics
    lines = claims_table(root, [good, bad]).splitlines()
    assert lines[0].startswith("| claim | reported figure | quick")
    good_row = next(line for line in lines if "fake-good" in line)
    bad_row = next(line for line in lines if "fake-bad" in line)
    # quick: the fake's value is n = 8 with interval [7, 9]; paper: n = 64 and FAIL
    assert "value 8 [7, 9]; **PASS**" in good_row
    assert "value (the paper's Table 1)" not in good_row  # reported figure is its own cell
    assert "| value 4 (the paper's Table 1) |" in good_row
    assert good_row.count("not run") == 1  # no paper run
    assert "value 64 [63, 65]; **FAIL**" in bad_row
    assert "synthetic: Gaussian noise" in good_row


def test_smoke_and_error_runs_are_not_committed(tmp_path: Path) -> None:
    smoke = run_experiment(_experiment("fake-smoke"), "tiny", out_root=tmp_path)
    with pytest.raises(NtklabValueError, match="scale"):
        commit_result(smoke, tmp_path / "results")
    broken = fake_experiment("fake-err", error=RuntimeError("x"))
    error = run_experiment(broken, "quick", out_root=tmp_path)
    with pytest.raises(NtklabValueError, match="ERROR"):
        commit_result(error, tmp_path / "results")


def test_a_misfiled_result_is_refused(tmp_path: Path) -> None:
    result = run_experiment(_experiment("fake-a"), "quick", out_root=tmp_path / "runs")
    path = commit_result(result, tmp_path / "results")
    path.rename(path.with_name("fake-b.json"))
    with pytest.raises(NtklabValueError, match="fake-b"):
        read_committed(tmp_path / "results")


def test_replace_table_keeps_the_text_around_it() -> None:
    text = f"intro\n{TABLE_BEGIN}\nold | table\n{TABLE_END}\noutro\n"
    out = replace_table(text, "| new |\n")
    assert out == f"intro\n{TABLE_BEGIN}\n| new |\n{TABLE_END}\noutro\n"
    with pytest.raises(NtklabValueError, match="markers"):
        replace_table("no markers", "| new |\n")


def test_a_paper_scale_cost_stands_in_for_a_missing_paper_run(tmp_path: Path) -> None:
    cost = "about 2 days on 2 cores; needs a GPU"
    costly = dataclasses.replace(_experiment("fake-costly"), paper_scale_cost=cost)
    root = tmp_path / "results"
    commit_result(run_experiment(costly, "quick", out_root=tmp_path / "runs"), root)
    row = next(line for line in claims_table(root, [costly]).splitlines() if "fake-costly" in line)
    assert f"| not run: {cost} |" in row  # the paper cell
    assert row.count("not run") == 1  # the quick cell has its result
    commit_result(run_experiment(costly, "paper", out_root=tmp_path / "runs"), root)
    row = next(line for line in claims_table(root, [costly]).splitlines() if "fake-costly" in line)
    assert "not run" not in row and cost not in row  # a result replaces the cost


def test_every_experiment_states_its_paper_scale() -> None:
    """What the README promises: each claim's paper scale either ran (its result is
    committed under results/paper/, or under results/history/paper/ when it ran under the
    criterion before the current one and awaits its rerun) or states what it would take, and
    its module docstring has a "Paper scale" paragraph with the measured time or cost."""
    import sys

    from ntklab.experiments import list_experiments

    results = Path(__file__).resolve().parents[2] / "results" / "paper"
    for exp in list_experiments():
        committed = (results / f"{exp.name}.json").exists()
        committed |= (results.parent / "history" / "paper" / f"{exp.name}.json").exists()
        assert committed or exp.paper_scale_cost, exp.name
        doc = sys.modules[exp.measure.__module__].__doc__ or ""
        assert "Paper scale" in doc, exp.name


def test_a_result_of_another_config_says_what_it_ran_with(tmp_path: Path) -> None:
    """A committed result made with ``--set`` overrides (or before the scale's config
    changed) is tabled with the fields it ran with beside the current ones; a result of the
    current config is not."""
    exp = _experiment("fake-changed")
    current = run_experiment(exp, "quick", out_root=tmp_path / "runs")
    assert config_changes(exp, current) == {}
    other = run_experiment(exp, "quick", out_root=tmp_path / "runs", overrides={"n": "12"})
    assert config_changes(exp, other) == {"n": (12, 8)}
    root = tmp_path / "results"
    commit_result(other, root)
    row = next(line for line in claims_table(root, [exp]).splitlines() if "fake-changed" in line)
    assert "value 12 [11, 13]; **PASS** (ran with n=12 (current: 8))" in row
    commit_result(current, root)
    row = next(line for line in claims_table(root, [exp]).splitlines() if "fake-changed" in line)
    assert "ran with" not in row


def _with_criterion(name: str, passed: bool, criterion: str, change: str = ""):  # type: ignore[no-untyped-def]
    base = _experiment(name, passed=passed)

    def judge(config, metrics):  # type: ignore[no-untyped-def]
        return dataclasses.replace(base.judge(config, metrics), criterion=criterion)

    return dataclasses.replace(base, judge=judge, criterion_change=change)


def test_a_changed_criterion_keeps_the_previous_verdict_beside_the_new_one(
    tmp_path: Path,
) -> None:
    """Committing a result judged by a new criterion moves the old one to history/; the
    table shows the new verdict and, beside it, the old one with the reason for the change.
    A rerun under the same criterion replaces the result and keeps no history."""
    root = tmp_path / "results"
    old = _with_criterion("fake-crit", False, "value below n")
    commit_result(run_experiment(old, "quick", out_root=tmp_path / "a"), root)
    same = run_experiment(old, "quick", out_root=tmp_path / "b", force=True)
    commit_result(same, root)
    assert not (root / "history").exists()  # same criterion: replaced, no history

    why = "2026-12-04: the old criterion did not test the claim"
    new = _with_criterion("fake-crit", True, "value equals n", why)
    commit_result(run_experiment(new, "quick", out_root=tmp_path / "c"), root)
    kept = root / "history" / "quick" / "fake-crit.json"
    assert kept.is_file()
    row = next(line for line in claims_table(root, [new]).splitlines() if "fake-crit" in line)
    assert "value 8 [7, 9]; **PASS**; previously **FAIL** under an earlier criterion" in row
    assert why in row
    # the current result is judged by the current criterion, the previous one is history
    assert read_committed(root, [new])[("fake-crit", "quick")].verdict == "PASS"
