"""Config resolution, ``--set`` parsing, validation when parsed, and the config hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

import pydantic
import pytest

from experiment_helpers import FakeConfig, fake_experiment, registered
from ntklab.errors import NtklabValueError
from ntklab.experiments import (
    Count,
    Experiment,
    ExperimentConfig,
    NonNegativeCount,
    PositiveFloat,
    config_hash,
    list_experiments,
    parse_set_options,
    resolve_config,
)
from ntklab.experiments.config import (
    config_checks,
    config_fields,
    describe_field,
    describe_type,
    parse_override,
)


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
        ("widths", "", "tuple[int, ...], non-empty"),
        ("widths", "[]", "tuple[int, ...], non-empty"),
        ("scale_factor", "nan", "float, finite"),
        ("scale_factor", "inf", "float, finite"),
        ("scale_factor", "-Infinity", "float, finite"),
        ("seed", "-1", "int >= 0"),
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
    with pytest.raises(
        NtklabValueError, match=r"--set n: expected int > 0, received '-1'.*greater"
    ):
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
    payload = {"config": config.model_dump(mode="json"), "experiment": fake.name, "scale": "tiny"}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(text.encode()).hexdigest()[:12]
    assert config_hash(fake, "tiny", config) == expected
    assert config_hash(fake.name, "tiny", config) == expected


def test_hash_is_stable_for_equal_configs(fake: Experiment) -> None:
    a = resolve_config(fake, "tiny", {"widths": "4,8", "n": "4"})
    b = FakeConfig(n=4)
    assert config_hash(fake, "tiny", a) == config_hash(fake, "tiny", b)


def test_hash_changes_with_every_input(fake: Experiment) -> None:
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
    assert reference not in variants
    assert len(variants) == 6


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


# --- validation when parsed: the field constraints, the validators, the generic rules ---------


class StrictConfig(FakeConfig):
    """The fake config with the constraints an experiment declares."""

    n: Count = 8
    scale_factor: PositiveFloat = 1.0
    widths: tuple[Count, ...] = (4, 8)
    ridges: tuple[float, ...] = (1e-3, 1.0)
    repeats: NonNegativeCount = 0
    fraction: float = pydantic.Field(default=0.5, ge=0, lt=1, description="a fraction")
    bound: float = pydantic.Field(default=math.inf, allow_inf_nan=True)
    extra: Annotated[tuple[int, ...], pydantic.Field(min_length=0)] = ()

    @pydantic.field_validator("widths")
    @classmethod
    def _increasing(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        """Widths strictly increasing."""
        if list(value) != sorted(set(value)):
            raise ValueError(f"widths must be strictly increasing, got {value}")
        return value

    @pydantic.model_validator(mode="after")
    def _n_within_widths(self) -> StrictConfig:
        """n at most the largest width."""
        if self.n > max(self.widths):
            raise ValueError(f"n = {self.n} exceeds the largest width {max(self.widths)}")
        return self


def strict(scales: Mapping[str, Mapping[str, Any]] | None = None) -> Experiment:
    base = fake_experiment("fake-strict")
    return dataclasses.replace(base, config_type=StrictConfig, scales=scales or base.scales)


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("n", "0", "--set n: expected int >= 1, received '0' (Input should be greater than"),
        ("repeats", "-1", "--set repeats: expected int >= 0, received '-1'"),
        ("scale_factor", "0", "--set scale_factor: expected float > 0, finite, received '0'"),
        ("scale_factor", "nan", "--set scale_factor: expected float > 0, finite, received 'nan'"),
        ("ridges", "1,nan", "--set ridges: expected tuple[float, ...], non-empty, finite, "),
        ("ridges", "[1, Infinity]", "received '[1, Infinity]' (item 1: Input should be a finite"),
        ("ridges", "", "--set ridges: expected tuple[float, ...], non-empty, finite, received ''"),
        ("widths", "0,4", "--set widths: expected tuple[int >= 1, ...], non-empty, received '0,4'"),
        ("fraction", "1", "--set fraction: expected float in [0, 1), finite, received '1'"),
        ("widths", "8,4", "received '8,4' (widths must be strictly increasing, got (8, 4))"),
        ("n", "100", "config of experiment 'fake-strict' at scale 'tiny' with --set n=100: "),
        ("n", "100", "n = 100 exceeds the largest width 8"),
    ],
)
def test_constraints_validators_and_generic_rules_in_one_line(
    key: str, text: str, expected: str
) -> None:
    with pytest.raises(NtklabValueError) as info:
        resolve_config(strict(), "tiny", {key: text})
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_a_field_may_allow_non_finite_values_and_empty_grids() -> None:
    config = resolve_config(strict(), "tiny", {"bound": "inf", "extra": ""})
    assert isinstance(config, StrictConfig)
    assert (config.bound, config.extra) == (math.inf, ())
    assert math.isnan(parse_override(Annotated[float, pydantic.Field(allow_inf_nan=True)], "nan"))
    with pytest.raises(pydantic.ValidationError, match="finite"):
        parse_override(float, "nan")
    with pytest.raises(pydantic.ValidationError, match="finite"):
        parse_override(list[float], "1,inf")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"ridges": (1.0, math.nan)}, "ridges: expected tuple[float, ...], non-empty, finite, "
         "received (1.0, nan) (item 1 is nan)"),
        ({"scale_factor": math.inf}, "scale_factor: expected float > 0, finite, received inf"),
        ({"widths": ()}, "widths: expected tuple[int >= 1, ...], non-empty, received () (empty)"),
        ({"seed": -2}, "seed: expected int >= 0, received -2 (negative)"),
        ({"n": -2}, "n: expected int >= 1, received -2"),
        ({"nn": 3}, "nn: unknown config key 'nn' for StrictConfig; "
         "valid keys: activation, bound, dtype"),
    ],
)  # fmt: skip
def test_scale_values_are_validated_the_same_way(values: dict[str, Any], expected: str) -> None:
    experiment = strict({"tiny": values, "quick": {}, "paper": {}})
    with pytest.raises(NtklabValueError) as info:
        resolve_config(experiment, "tiny")
    message = str(info.value)
    assert message.startswith("scale 'tiny' of experiment 'fake-strict': ")
    assert expected in message
    assert "\n" not in message
    resolve_config(experiment, "quick")
    with pytest.raises(NtklabValueError, match="scale 'tiny'"), registered(experiment):
        pass  # registering checks every scale


def test_set_fixes_a_bad_scale_value_and_is_named_when_it_breaks_one() -> None:
    experiment = strict({"tiny": {"ridges": (math.nan,)}, "quick": {}, "paper": {}})
    config = resolve_config(experiment, "tiny", {"ridges": "0.5"})
    assert isinstance(config, StrictConfig)
    assert config.ridges == (0.5,)
    with pytest.raises(NtklabValueError, match=r"^scale 'tiny' .*: ridges: .*received \(nan,\)"):
        resolve_config(experiment, "tiny", {"n": "3"})


def test_a_bad_default_is_named() -> None:
    class BadDefault(FakeConfig):
        rate: float = math.nan

    experiment = dataclasses.replace(fake_experiment(), config_type=BadDefault)
    with pytest.raises(NtklabValueError, match=r"^default of BadDefault: rate: .* received nan"):
        resolve_config(experiment, "quick")


def test_every_registered_experiment_obeys_the_rules_at_every_scale() -> None:
    experiments = list_experiments()
    assert len(experiments) >= 15
    for experiment in experiments:
        for scale in experiment.scales:
            resolve_config(experiment, scale)


def test_describe_field_and_type() -> None:
    assert describe_type(Annotated[float, pydantic.Field(gt=0, le=1)]) == "float in (0, 1]"
    assert describe_type(tuple[Count, ...]) == "tuple[int >= 1, ...]"
    assert describe_type(int | None) == "int or none"
    assert describe_type(tuple[float, float]) == "tuple[float, float]"
    assert describe_field(StrictConfig, "n") == "int >= 1"
    assert describe_field(StrictConfig, "bound") == "float"
    assert describe_field(StrictConfig, "extra") == "tuple[int, ...] length >= 0"
    assert describe_field(StrictConfig, "label") == "str"


def test_config_fields_list_types_constraints_validator_docs_and_defaults() -> None:
    specs = {s.key: s for s in config_fields(StrictConfig)}
    assert list(specs)[:2] == ["seed", "dtype"]
    assert (specs["seed"].type, specs["seed"].constraints) == ("int", (">= 0",))
    assert specs["dtype"].type == "one of 'float32', 'float64'"
    assert (specs["n"].type, specs["n"].constraints, specs["n"].default) == ("int", (">= 1",), 8)
    assert specs["scale_factor"].constraints == ("> 0", "finite")
    assert specs["widths"].type == "tuple[int >= 1, ...]"
    assert specs["widths"].constraints == ("non-empty", "Widths strictly increasing.")
    assert specs["fraction"].constraints == ("in [0, 1)", "finite")
    assert specs["fraction"].description == "a fraction"
    assert specs["bound"].constraints == ()
    assert specs["extra"].constraints == ("length >= 0",)
    assert config_checks(StrictConfig) == ("n at most the largest width.",)
    assert config_checks(FakeConfig) == ()


# ---------------------------------------------------------------------------------------------
# bounds before compute: the seed, and the config's own memory estimate (issue 31)


@pytest.mark.parametrize("seed", [str(2**63), str(10**24)])
def test_a_seed_torch_cannot_take_is_refused_at_validation(fake: Experiment, seed: str) -> None:
    """Before, any seed >= 0 passed and the run died at torch.manual_seed."""
    import torch

    with pytest.raises((RuntimeError, ValueError)):  # what the run met, mid-run
        torch.Generator().manual_seed(10**24)  # torch: "Overflow when unpacking long long"
    with pytest.raises(
        NtklabValueError,
        match=r"--set seed: expected int >= 0, received .* \(too large: seeds are < 2\*\*63",
    ):
        resolve_config(fake, "tiny", {"seed": seed})
    # the largest accepted seed is one torch takes
    top = resolve_config(fake, "tiny", {"seed": str(2**63 - 1)}).seed
    torch.Generator().manual_seed(top)


class _Sized(ExperimentConfig):
    n: Count = 10
    width: Count = 4

    def estimated_bytes(self) -> int:
        return 8 * self.n * self.n * self.width


def test_a_config_over_max_memory_is_refused_naming_keys_values_and_bound() -> None:
    experiment = dataclasses.replace(fake_experiment(), config_type=_Sized)
    assert resolve_config(experiment, "tiny", {"n": "100"}, max_memory=2**20).n == 100
    with pytest.raises(NtklabValueError, match=r"--set n=1e6: expected .* fits max_memory") as info:
        resolve_config(experiment, "tiny", {"n": "1e6"}, max_memory=2**20)
    message = str(info.value)
    assert "max_memory of 1.0 MiB" in message and "n = 1000000 (--set)" in message
    assert "width = 4" in message and "29.1 TiB" in message  # 8 * 1e12 * 4 bytes


def test_attention_kernel_grid_of_1e11_is_refused_before_compute(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe of issue 31: ``--set n_grid=1e11`` tried to allocate its grid of sequences.
    Now the command line refuses it with exit status 2 and one line, nothing run."""
    from ntklab.cli import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["run", "attention-kernel", "--set", "n_grid=1e11", "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "n_grid = 100000000000 (--set)" in err and "max_memory of" in err
    assert not out.exists()
