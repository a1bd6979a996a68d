"""A failed control makes a judged run an ERROR ("the estimator failed its control"), with
its figures kept; a tiny run stays a SMOKE run; a passing control leaves PASS/FAIL alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from experiment_helpers import fake_experiment, registered
from ntklab.errors import NtklabTypeError
from ntklab.experiments import Judgement, run_experiment, verdict_of
from ntklab.experiments.base import Metrics


def _with_control(name: str, failed: tuple[str, ...], passed: bool = True):  # type: ignore[no-untyped-def]
    base = fake_experiment(name, passed=passed)

    def judge(config: object, metrics: Metrics) -> Judgement:
        j = base.judge(config, metrics)
        return replace(j, controls_failed=failed)

    return replace(base, judge=judge)


@pytest.mark.parametrize("passed", [True, False])
def test_failed_control_turns_a_judged_verdict_into_error(tmp_path: Path, passed: bool) -> None:
    exp = _with_control("fake-control", ("noise control slope 0.4, known 0",), passed)
    with registered(exp):
        result = run_experiment("fake-control", scale="quick", out_root=tmp_path)
    assert result.verdict == "ERROR"
    assert result.summary.startswith("the estimator failed its control")
    assert "noise control slope 0.4" in result.summary
    assert [m.name for m in result.metrics] == ["value", "spread"]  # the figures are kept
    assert result.criterion_met is passed


def test_failed_control_in_a_tiny_run_is_still_smoke(tmp_path: Path) -> None:
    with registered(_with_control("fake-control-tiny", ("off",))):
        result = run_experiment("fake-control-tiny", scale="tiny", out_root=tmp_path)
    assert result.verdict == "SMOKE"


@pytest.mark.parametrize(("passed", "verdict"), [(True, "PASS"), (False, "FAIL")])
def test_passing_controls_leave_the_verdict(tmp_path: Path, passed: bool, verdict: str) -> None:
    with registered(_with_control("fake-control-ok", (), passed)):
        result = run_experiment("fake-control-ok", scale="quick", out_root=tmp_path)
    assert result.verdict == verdict


def test_verdict_of_table() -> None:
    assert verdict_of(True, (), "paper") == "PASS"
    assert verdict_of(False, (), "quick") == "FAIL"
    assert verdict_of(True, ("x",), "paper") == "ERROR"
    assert verdict_of(False, ("x",), "quick") == "ERROR"
    assert verdict_of(True, ("x",), "tiny") == "SMOKE"


def test_controls_failed_must_be_strings() -> None:
    with pytest.raises(NtklabTypeError, match="controls_failed"):
        Judgement(passed=True, summary="s", criterion="c", controls_failed=(1.0,))  # type: ignore[arg-type]
    assert Judgement(True, "s", "c", controls_failed="one line").controls_failed == ("one line",)
