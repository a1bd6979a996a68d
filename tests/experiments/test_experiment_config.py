"""Config resolution, ``--set`` parsing and the config hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from typing import Any, Literal

import pydantic
import pytest

from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    Experiment,
    ExperimentConfig,
    config_hash,
    parse_set_options,
    resolve_config,
)
from ntklab.experiments import config as config_module
from ntklab.experiments.config import parse_override
from ntklab.experiments.testing import FakeConfig, fake_experiment, registered


@pytest.fixture
def fake() -> Iterator[Experiment]:
    with registered(fake_experiment("fake-config")) as (experiment,):
        yield experiment


def test_scale_overrides_apply_over_defaults(fake: Experiment) -> None:
    assert resolve_config(fake, "quick") == FakeConfig()
    tiny = resolve_config(fake, "tiny")
    assert isinstance(tiny, FakeConfig)
    assert (tiny.n, tiny.widths) == (4, (4, 8))
    paper = resolve_config(fake, "paper")
    assert isinstance(paper, FakeConfig)
    assert (paper.n, paper.widths) == (64, (64, 128))


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("n", "16", 16),
        ("n", "3.0", 3),
        ("scale_factor", "1e-3", 1e-3),
        ("scale_factor", "2", 2.0),
        ("use_bias", "false", False),
        ("use_bias", "0", False),
        ("use_bias", "yes", True),
        ("widths", "1,2,4", (1, 2, 4)),
        ("widths", "[1, 2, 4]", (1, 2, 4)),
        ("widths", "16", (16,)),
        ("widths", "", ()),
        ("activation", "erf", "erf"),
        ("dtype", "float32", "float32"),
        ("label", "1,2", "1,2"),
        ("label", "42", "42"),
        ("seed", "7", 7),
    ],
)
def test_set_parses_each_type(fake: Experiment, key: str, text: str, expected: object) -> None:
    config = resolve_config(fake, "tiny", {key: text})
    assert getattr(config, key) == expected
    assert type(getattr(config, key)) is type(expected)


def test_set_accepts_dashes_for_underscores(fake: Experiment) -> None:
    config = resolve_config(fake, "tiny", {"scale-factor": "0.5"})
    assert isinstance(config, FakeConfig)
    assert config.scale_factor == 0.5


def test_set_overrides_the_scale(fake: Experiment) -> None:
    config = resolve_config(fake, "paper", {"n": "5"})
    assert isinstance(config, FakeConfig)
    assert (config.n, config.widths) == (5, (64, 128))


def test_unknown_key_names_it_and_lists_valid_keys(fake: Experiment) -> None:
    with pytest.raises(NtklabValueError) as info:
        resolve_config(fake, "tiny", {"widht": "3"})
    message = str(info.value)
    assert "'widht'" in message
    assert "did you mean 'width" in message
    for key in ("n", "scale_factor", "widths", "use_bias", "activation", "seed", "dtype"):
        assert key in message


@pytest.mark.parametrize(
    ("key", "text", "expected_type"),
    [
        ("n", "3.5", "int"),
        ("n", "abc", "int"),
        ("n", "true", "int"),
        ("scale_factor", "fast", "float"),
        ("use_bias", "maybe", "bool"),
        ("widths", "a,b", "tuple[int, ...]"),
        ("widths", "[1, 2", "tuple[int, ...]"),
        ("activation", "tanh", "one of 'relu', 'erf'"),
        ("dtype", "float16", "one of 'float32', 'float64'"),
    ],
)
def test_wrong_type_names_key_expected_and_received(
    fake: Experiment, key: str, text: str, expected_type: str
) -> None:
    with pytest.raises(NtklabValueError) as info:
        resolve_config(fake, "tiny", {key: text})
    message = str(info.value)
    assert f"--set {key}:" in message
    assert f"expected {expected_type}" in message
    assert f"received {text!r}" in message


def test_unknown_scale_lists_the_scales(fake: Experiment) -> None:
    with pytest.raises(NtklabValueError, match=r"tiny, quick, paper.*'huge'"):
        resolve_config(fake, "huge")


def test_constraints_and_model_validators_are_reported() -> None:
    class Positive(ExperimentConfig):
        n: int = pydantic.Field(default=4, gt=0)

    experiment = dataclasses.replace(fake_experiment(), config_type=Positive)
    with pytest.raises(NtklabValueError, match=r"--set n: expected int, received '-1'.*greater"):
        resolve_config(experiment, "tiny", {"n": "-1"})


def test_config_is_frozen_and_forbids_extra_fields() -> None:
    config = FakeConfig()
    with pytest.raises(pydantic.ValidationError):
        config.n = 3
    with pytest.raises(pydantic.ValidationError):
        FakeConfig(unknown=1)  # type: ignore[call-arg]


def test_parse_set_options() -> None:
    assert parse_set_options(["a=1", "b=x=y", "a=2", " c = 3"]) == {"a": "2", "b": "x=y", "c": " 3"}
    for bad in ("novalue", "=3"):
        with pytest.raises(NtklabValueError, match="key=value"):
            parse_set_options([bad])


def test_hash_is_sha256_of_canonical_json(fake: Experiment) -> None:
    config = resolve_config(fake, "tiny")
    payload = {
        "config": config.model_dump(mode="json"),
        "experiment": fake.name,
        "ntklab": config_module.package_version(),
        "scale": "tiny",
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(text.encode()).hexdigest()[:12]
    assert config_hash(fake, "tiny", config) == expected
    assert config_hash(fake.name, "tiny", config) == expected


def test_hash_is_stable_for_equal_configs(fake: Experiment) -> None:
    a = resolve_config(fake, "tiny", {"widths": "4,8", "n": "4"})
    b = FakeConfig(n=4)
    assert config_hash(fake, "tiny", a) == config_hash(fake, "tiny", b)


def test_hash_changes_with_every_input(fake: Experiment, monkeypatch: pytest.MonkeyPatch) -> None:
    base = FakeConfig()
    reference = config_hash(fake, "quick", base)
    variants = {
        config_hash(fake, "tiny", base),
        config_hash("other-name", "quick", base),
        config_hash(fake, "quick", FakeConfig(seed=1)),
        config_hash(fake, "quick", FakeConfig(scale_factor=1.0 + 1e-12)),
        config_hash(fake, "quick", FakeConfig(widths=(8, 4))),
        config_hash(fake, "quick", FakeConfig(dtype="float32")),
    }
    monkeypatch.setattr(config_module, "package_version", lambda: "999.0")
    variants.add(config_hash(fake, "quick", base))
    assert reference not in variants
    assert len(variants) == 7


@pytest.mark.parametrize(
    ("annotation", "text", "expected"),
    [
        (Literal[1, 2, 4], "2", 2),
        (tuple[Literal[1, 2, 4], ...], "1,4", (1, 4)),
        (list[float], "0.5, 1e-2", [0.5, 0.01]),
        (int | None, "none", None),
        (int | None, "3", 3),
        (dict[str, int], '{"a": 1}', {"a": 1}),
    ],
)
def test_parse_override_beyond_the_fake_config(
    annotation: Any, text: str, expected: object
) -> None:
    assert parse_override(annotation, text) == expected


def test_parse_override_rejects_bool_for_int_and_wrong_literals() -> None:
    for annotation, text in ((int, "true"), (Literal[1, 2], "3"), (int, "none")):
        with pytest.raises(pydantic.ValidationError):
            parse_override(annotation, text)
