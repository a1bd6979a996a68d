"""The registry and the experiment data types."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from experiment_helpers import fake_experiment, registered
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.experiments import (
    Experiment,
    Metric,
    Outcome,
    RunContext,
    get_experiment,
    list_experiments,
    register,
    unregister,
)


def test_register_get_unregister() -> None:
    experiment = fake_experiment("fake-reg")
    with registered():
        assert register(experiment) is experiment
        assert get_experiment("fake-reg") is experiment
        with pytest.raises(NtklabValueError, match="already registered"):
            register(fake_experiment("fake-reg"))
        replacement = register(fake_experiment("fake-reg", "Z9"), replace=True)
        assert get_experiment("fake-reg") is replacement
        assert unregister("fake-reg") is replacement
        with pytest.raises(NtklabValueError, match="unknown experiment 'fake-reg'"):
            get_experiment("fake-reg")


def test_registered_restores_the_registry() -> None:
    before = [e.name for e in list_experiments()]
    with registered(fake_experiment("fake-tmp")):
        assert "fake-tmp" in [e.name for e in list_experiments()]
    assert [e.name for e in list_experiments()] == before


def test_unknown_name_lists_known_names_and_suggests() -> None:
    with (
        registered(fake_experiment("fake-alpha"), fake_experiment("fake-beta")),
        pytest.raises(NtklabValueError) as info,
    ):
        get_experiment("fake-alpah")
    message = str(info.value)
    assert "'fake-alpah'" in message
    assert "fake-alpha" in message
    assert "fake-beta" in message
    assert "Did you mean 'fake-alpha'" in message


def test_list_is_in_natural_claim_order() -> None:
    with registered(
        fake_experiment("fake-c", "Z10"),
        fake_experiment("fake-a", "Z2"),
        fake_experiment("fake-b", "Y3"),
    ):
        names = [e.name for e in list_experiments() if e.name.startswith("fake-")]
    assert names == ["fake-b", "fake-a", "fake-c"]


def test_experiment_validates_its_fields() -> None:
    base = fake_experiment()
    with pytest.raises(NtklabValueError, match="kebab-case"):
        dataclasses.replace(base, name="Spectrum S1")
    with pytest.raises(NtklabValueError, match=r"missing \['paper'\]"):
        dataclasses.replace(base, scales={"tiny": {}, "quick": {}})
    with pytest.raises(NtklabTypeError, match="subclass of ExperimentConfig"):
        dataclasses.replace(base, config_type=dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        base.scales["tiny"]["n"] = 1  # type: ignore[index]


def test_register_resolves_every_scale() -> None:
    bad = dataclasses.replace(
        fake_experiment("fake-bad"),
        scales={"tiny": {"nn": 3}, "quick": {}, "paper": {}},
    )
    with registered(), pytest.raises(NtklabValueError, match="nn"):
        register(bad)


def test_short_claim_is_the_first_sentence() -> None:
    assert fake_experiment("fake-x").short_claim == "The fake claim of fake-x holds."


def test_metric_converts_numpy_and_torch_scalars() -> None:
    m = Metric("m", np.float32(1.5), ci_low=torch.tensor(1.0), ci_high=2)  # type: ignore[arg-type]
    assert (m.value, m.ci_low, m.ci_high) == (1.5, 1.0, 2.0)
    assert all(type(v) is float for v in (m.value, m.ci_low, m.ci_high))
    assert not Metric("nan", float("nan")).finite
    with pytest.raises(NtklabTypeError, match="received an array of shape"):
        Metric("m", torch.ones(3))  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match="expected a real number"):
        Metric("m", "1.0")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="non-empty"):
        Metric("", 1.0)


def test_outcome_validates_and_freezes() -> None:
    outcome = Outcome(metrics=[Metric("m", 1.0)], passed=np.bool_(True), summary="ok")  # type: ignore[arg-type]
    assert outcome.passed is True
    assert isinstance(outcome.metrics, tuple)
    with pytest.raises(NtklabTypeError, match="expected a bool"):
        Outcome(metrics=(), passed=1, summary="")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"metrics\[0\]"):
        Outcome(metrics=(1.0,), passed=True, summary="")  # type: ignore[arg-type]
    with pytest.raises(NtklabValueError, match="file names"):
        Outcome(metrics=(), passed=True, summary="", figures={"../x": None})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        outcome.arrays["x"] = np.zeros(1)  # type: ignore[index]


def test_context_generators_are_reproducible_and_independent(tmp_path: Path) -> None:
    ctx = RunContext(out_dir=tmp_path, seed=5)
    a = torch.randn(4, generator=ctx.generator("data"))
    torch.testing.assert_close(a, torch.randn(4, generator=ctx.generator("data")))
    assert not torch.equal(a, torch.randn(4, generator=ctx.generator("init")))
    other = RunContext(out_dir=tmp_path, seed=6)
    assert not torch.equal(a, torch.randn(4, generator=other.generator("data")))
    assert 0 <= ctx.stream_seed("data") < 2**63


def test_experiment_is_usable_after_replace_with_same_fields() -> None:
    base = fake_experiment()
    copy = Experiment(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    assert copy.scales["tiny"]["n"] == 4
