"""Results that check themselves: the content digest, the judge applied again on reading,
and reuse that recomputes whatever does not check out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    RunContext,
    RunResult,
    run_experiment,
)
from ntklab.experiments.result import DIGEST_FIELD, check_result_file, content_digest

MIN_SLOPE = -2.1


class SlopeConfig(ExperimentConfig):
    slope: float = -2.0


def slope_experiment(name: str = "fake-slope", min_slope: float = MIN_SLOPE) -> Experiment:
    """An experiment whose verdict follows from its metric: slope >= min_slope."""
    calls = []

    def measure(config: SlopeConfig, ctx: RunContext) -> Measurement:
        calls.append(1)
        return Measurement(metrics=(Metric("slope", config.slope),))

    def judge(config: SlopeConfig, metrics: Metrics) -> Judgement:
        slope = metrics["slope"].value
        return Judgement(
            passed=slope >= min_slope,
            summary=f"slope {slope:.2f}",
            criterion=f"slope >= {min_slope}",
        )

    exp = Experiment(
        name=name,
        claim_id="Z9",
        claim="The slope is at least -2.1.",
        criterion="slope >= -2.1",
        config_type=SlopeConfig,
        scales={"tiny": {}, "quick": {}, "paper": {}},
        measure=measure,
        judge=judge,
        draw=lambda config, metrics, arrays: {},
    )
    object.__setattr__(exp, "_calls", calls)  # a frozen dataclass: count the measures
    return exp


def calls(exp: Experiment) -> int:
    return len(exp._calls)  # type: ignore[attr-defined]


def edit(path: Path, change: Any, reseal: bool = False) -> None:
    """Edit a result.json in place (``change(data)``), keeping or recomputing its digest."""
    data = json.loads(path.read_text())
    change(data)
    if reseal:
        data[DIGEST_FIELD] = content_digest(data)
    path.write_text(json.dumps(data, indent=2))


def set_slope(value: float) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["metrics"][0]["value"] = value

    return change


def set_verdict(value: str) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["verdict"] = value
        data["criterion_met"] = value == "PASS"

    return change


def test_a_result_is_sealed_by_a_digest_of_its_content(tmp_path: Path) -> None:
    exp = slope_experiment()
    result = run_experiment(exp, "quick", out_root=tmp_path)
    data = json.loads((result.run_dir / "result.json").read_text())
    assert data[DIGEST_FIELD] == content_digest(data)
    assert data[DIGEST_FIELD].startswith("sha256:") and len(data[DIGEST_FIELD]) == 7 + 64
    # every field is covered: change any one and the digest changes
    for key in ("metrics", "verdict", "criterion", "config", "code", "scale", "summary"):
        changed = {**data, key: "x"}
        assert content_digest(changed) != data[DIGEST_FIELD], key
    check = check_result_file(result.run_dir / "result.json", exp)
    assert (check.status, check.problem) == ("valid", "")
    assert check.result == result


@pytest.mark.parametrize("reseal", [False, True])
def test_an_edited_metric_is_refused_and_reuse_recomputes(tmp_path: Path, reseal: bool) -> None:
    exp = slope_experiment()
    first = run_experiment(exp, "quick", out_root=tmp_path)
    assert (first.verdict, calls(exp)) == ("PASS", 1)
    path = first.run_dir / "result.json"
    edit(path, set_slope(-7.5), reseal=reseal)  # the criterion needs >= -2.1
    check = check_result_file(path, exp)
    if reseal:  # the digest holds; the judge on -7.5 says FAIL, the file says PASS
        assert check.status == "inconsistent"
        assert 'verdict: expected "FAIL"' in check.problem and 'found "PASS"' in check.problem
    else:
        assert check.status == "tampered"
        assert "tampered or damaged" in check.problem
        with pytest.raises(NtklabValueError, match="tampered or damaged"):
            RunResult.from_json(path)
    assert not check.tabled and check.refused
    again = run_experiment(exp, "quick", out_root=tmp_path)
    assert (again.reused, calls(exp), again.verdict) == (False, 2, "PASS")
    assert again.metrics[0].value == -2.0
    assert check_result_file(path, exp).status == "valid"  # replaced by the recomputed run


@pytest.mark.parametrize("reseal", [False, True])
def test_a_fail_edited_to_pass_is_refused_and_reuse_recomputes(
    tmp_path: Path, reseal: bool
) -> None:
    exp = slope_experiment()
    first = run_experiment(exp, "quick", {"slope": "-7.5"}, out_root=tmp_path)
    assert first.verdict == "FAIL"
    path = first.run_dir / "result.json"
    edit(path, set_verdict("PASS"), reseal=reseal)
    assert check_result_file(path, exp).status == ("inconsistent" if reseal else "tampered")
    again = run_experiment(exp, "quick", {"slope": "-7.5"}, out_root=tmp_path)
    assert (again.reused, calls(exp), again.verdict) == (False, 2, "FAIL")


def test_a_truncated_result_is_damaged_and_recomputed(tmp_path: Path) -> None:
    exp = slope_experiment()
    path = run_experiment(exp, "quick", out_root=tmp_path).run_dir / "result.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    check = check_result_file(path, exp)
    assert check.status == "damaged" and "expected a JSON result file" in check.problem
    assert run_experiment(exp, "quick", out_root=tmp_path).reused is False
    assert calls(exp) == 2


def test_a_result_judged_by_another_criterion_is_stale(tmp_path: Path) -> None:
    """A result made before its experiment's criterion changed is not tampering: it is
    stale, never a current verdict, and rerun rather than reused."""
    old = slope_experiment()
    path = run_experiment(old, "quick", out_root=tmp_path).run_dir / "result.json"
    stricter = slope_experiment(min_slope=-1.5)  # the same run key: same config and code
    check = check_result_file(path, stricter)
    assert check.status == "stale" and not check.tabled and not check.refused
    assert "recorded 'slope >= -2.1', current 'slope >= -1.5'" in check.problem
    assert check.current_criterion == "slope >= -1.5"
    rerun = run_experiment(stricter, "quick", out_root=tmp_path)
    assert (rerun.reused, rerun.verdict, rerun.criterion) == (False, "FAIL", "slope >= -1.5")


def test_a_result_whose_metrics_the_judge_no_longer_reads_is_stale(tmp_path: Path) -> None:
    exp = slope_experiment()
    path = run_experiment(exp, "quick", out_root=tmp_path).run_dir / "result.json"

    def rename(data: dict[str, Any]) -> None:
        data["metrics"][0]["name"] = "old_slope"

    edit(path, rename, reseal=True)
    check = check_result_file(path, exp)
    assert check.status == "stale" and "KeyError" in check.problem


def test_a_result_without_digest_is_unsealed_tabled_but_not_reused(tmp_path: Path) -> None:
    exp = slope_experiment()
    path = run_experiment(exp, "quick", out_root=tmp_path).run_dir / "result.json"
    edit(path, lambda data: data.pop(DIGEST_FIELD))
    check = check_result_file(path, exp)
    assert check.status == "unsealed" and check.tabled and "no content digest" in check.problem
    assert run_experiment(exp, "quick", out_root=tmp_path).reused is False
    # an unsealed file is still judged again: its verdict must follow from its metrics
    edit(path, lambda data: (data.pop(DIGEST_FIELD), set_verdict("FAIL")(data)))
    assert check_result_file(path, exp).status == "inconsistent"


def test_smoke_runs_are_judged_again_too(tmp_path: Path) -> None:
    """A tiny run records the judge's answer; editing it is caught as well."""
    exp = slope_experiment()
    path = run_experiment(exp, "tiny", out_root=tmp_path).run_dir / "result.json"
    assert check_result_file(path, exp).status == "valid"
    edit(path, lambda data: data.update(criterion_met=False), reseal=True)
    check = check_result_file(path, exp)
    assert check.status == "inconsistent" and "criterion_met" in check.problem


def test_an_unregistered_experiment_cannot_judge_its_results(tmp_path: Path) -> None:
    exp = dataclasses.replace(slope_experiment(), name="fake-never-registered")
    path = run_experiment(exp, "quick", out_root=tmp_path).run_dir / "result.json"
    check = check_result_file(path)
    assert check.status == "stale" and "not registered" in check.problem
