"""Resolving an experiment's config from its scale and the command line, and hashing it.

The config of a run is, in order of precedence: the ``--set key=value`` overrides, the
scale's overrides (``experiment.scales[scale]``), the config class's defaults. The run
folder is keyed by :func:`config_hash` of the result together with the fingerprint of the
code (:mod:`ntklab.experiments.fingerprint`), so a rerun with the same config and the same
code finds and reuses the earlier run, and a code change recomputes.

A config is validated when it is resolved, before anything runs. Besides the field types, the
constraints of the field metadata (``Field(ge=1)``, :data:`~ntklab.experiments.Count`, ...)
and the validators of the config class, every config obeys three generic rules
(:func:`generic_rules`):

- floats are finite, also inside tuples and lists, unless the field allows otherwise
  (``Field(allow_inf_nan=True)``);
- tuples, lists, sets and dicts (grids) are non-empty, unless the field sets its own
  ``min_length``;
- ``seed`` is >= 0 and below :data:`SEED_LIMIT` (:math:`2^{63}`: torch's and numpy's
  generators take 64-bit seeds, and results store it as a JSON integer);
- the config's own estimate of its peak memory (a method ``estimated_bytes()`` of the config
  class, where an experiment's sizes become large tensors) fits ``max_memory`` (default: the
  machine's physical memory, a bound that does not depend on what else runs, so that a config
  is valid or not whatever the load), so that ``--set n_grid=1e11`` is refused before
  compute; the kernels and networks still apply :mod:`ntklab.memory`'s policy when they run.

Every error is one line that names the key, what was expected and what was received.
"""

from __future__ import annotations

import collections.abc
import contextlib
import difflib
import hashlib
import json
import math
import os
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, PydanticUserError, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from ntklab.errors import NtklabValueError
from ntklab.memory import format_bytes, resolve_max_memory

from .base import Experiment, ExperimentConfig

__all__ = [
    "SEED_LIMIT",
    "FieldSpec",
    "check_estimated_memory",
    "config_checks",
    "config_fields",
    "config_hash",
    "describe_field",
    "describe_type",
    "generic_rules",
    "package_version",
    "parse_override",
    "parse_set_options",
    "resolve_config",
]

#: Seeds are below 2**63: torch's and numpy's generators take 64-bit seeds (torch refuses
#: 2**64 and above), and an int64 survives numpy arrays and every JSON reader.
SEED_LIMIT = 2**63

_NONE_WORDS = frozenset({"none", "null"})
#: Validation config of ``--set`` values: floats are finite unless a field allows otherwise.
_FINITE = ConfigDict(allow_inf_nan=False)
_SEQUENCE_ORIGINS = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.Set,
)


@cache
def package_version() -> str:
    """The installed version of ntklab (``"0+unknown"`` when not installed)."""
    try:
        return metadata.version("ntklab")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _split_annotated(annotation: Any) -> tuple[Any, list[Any]]:
    """``(base type, constraint objects)`` of a possibly ``Annotated`` type.

    The metadata of ``Annotated[int, Field(ge=1)]`` is flattened to ``[Ge(ge=1)]``.
    """
    metadata: list[Any] = []
    if typing.get_origin(annotation) is Annotated:
        base, *extra = typing.get_args(annotation)
        for item in extra:
            metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
        return base, metadata
    return annotation, metadata


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(metadata: Iterable[Any]) -> list[str]:
    """The constraints of pydantic field metadata in words: ``">= 1"``, ``"in (0, 1]"``."""
    found: dict[str, Any] = {}
    for item in metadata:
        for attr in ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length"):
            value = getattr(item, attr, None)
            if value is not None:
                found[attr] = value
    out = []
    lower = ("(", found["gt"]) if "gt" in found else ("[", found["ge"]) if "ge" in found else None
    upper = (")", found["lt"]) if "lt" in found else ("]", found["le"]) if "le" in found else None
    if lower and upper:
        out.append(f"in {lower[0]}{_number(lower[1])}, {_number(upper[1])}{upper[0]}")
    elif lower:
        out.append(f"{'>' if lower[0] == '(' else '>='} {_number(lower[1])}")
    elif upper:
        out.append(f"{'<' if upper[0] == ')' else '<='} {_number(upper[1])}")
    if "multiple_of" in found:
        out.append(f"multiple of {_number(found['multiple_of'])}")
    if "min_length" in found:
        out.append(f"length >= {found['min_length']}")
    if "max_length" in found:
        out.append(f"length <= {found['max_length']}")
    return out


def describe_type(annotation: Any) -> str:
    """Readable name of a field's type with its constraints, for messages and ``ntklab show``.

    Examples
    --------
    >>> describe_type(int)
    'int'
    >>> describe_type(Literal["float32", "float64"])
    "one of 'float32', 'float64'"
    >>> describe_type(list[int])
    'list[int]'
    >>> from pydantic import Field
    >>> describe_type(tuple[Annotated[float, Field(gt=0, le=1)], ...])
    'tuple[float in (0, 1], ...]'
    """
    base, metadata = _split_annotated(annotation)
    text = _describe_base(base)
    bounds = _bounds(metadata)
    return f"{text} {', '.join(bounds)}" if bounds else text


def _describe_base(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if annotation is type(None):
        return "none"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"tuple[{describe_type(args[0])}, ...]"
    if origin is not None and args and isinstance(origin, type):
        inner = ", ".join(describe_type(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    if isinstance(annotation, type) and origin is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _walk_types(annotation: Any) -> Iterable[tuple[Any, list[Any]]]:
    """Every ``(base type, metadata)`` inside ``annotation``, itself first."""
    base, metadata = _split_annotated(annotation)
    yield base, metadata
    for arg in typing.get_args(base):
        if arg is not Ellipsis and typing.get_origin(base) is not Literal:
            yield from _walk_types(arg)


def _allows_non_finite(annotation: Any) -> bool:
    """Whether ``annotation`` says ``allow_inf_nan=True`` somewhere."""
    return any(
        getattr(item, "allow_inf_nan", None) is True
        for _, metadata in _walk_types(annotation)
        for item in metadata
    )


def _has_float(annotation: Any) -> bool:
    return any(base is float for base, _ in _walk_types(annotation))


def _is_container_type(annotation: Any) -> bool:
    base, _ = _split_annotated(annotation)
    origin = typing.get_origin(base)
    if origin in (typing.Union, types.UnionType):
        return any(_is_container_type(a) for a in typing.get_args(base))
    return _is_sequence_type(base) or origin in (dict, collections.abc.Mapping) or base is dict


def _field_metadata(config_type: type[ExperimentConfig], key: str) -> list[Any]:
    return list(config_type.model_fields[key].metadata)


def _has_lower_bound(metadata: Iterable[Any]) -> bool:
    return any(
        getattr(m, "ge", None) is not None or getattr(m, "gt", None) is not None for m in metadata
    )


def _has_min_length(metadata: Iterable[Any]) -> bool:
    return any(getattr(m, "min_length", None) is not None for m in metadata)


def generic_rules(config_type: type[ExperimentConfig], key: str) -> tuple[str, ...]:
    """The generic rules that field ``key`` of ``config_type`` obeys, in words.

    ``"finite"`` when it holds floats and does not allow ``inf``/``nan``; ``"non-empty"``
    for a tuple, list, set or dict without its own ``min_length``; ``">= 0"`` for ``seed``
    without its own lower bound. (``seed`` is also checked below :data:`SEED_LIMIT`.)

    Examples
    --------
    >>> from ntklab.experiments.base import ExperimentConfig
    >>> class Sizes(ExperimentConfig):
    ...     widths: tuple[int, ...] = (4, 8)
    ...     scale_factor: float = 1.0
    >>> generic_rules(Sizes, "widths"), generic_rules(Sizes, "scale_factor")
    (('non-empty',), ('finite',))
    >>> generic_rules(Sizes, "seed")
    ('>= 0',)
    """
    annotation = _field_annotation(config_type, key)
    metadata = _field_metadata(config_type, key)
    rules = []
    if key == "seed" and not _has_lower_bound(metadata):
        rules.append(">= 0")
    if _is_container_type(annotation) and not _has_min_length(metadata):
        rules.append("non-empty")
    if _has_float(annotation) and not _allows_non_finite(annotation):
        rules.append("finite")
    return tuple(rules)


def describe_field(config_type: type[ExperimentConfig], key: str) -> str:
    """What field ``key`` of ``config_type`` accepts: its type, constraints and generic rules.

    Examples
    --------
    >>> from ntklab.experiments.base import ExperimentConfig
    >>> class Sizes(ExperimentConfig):
    ...     widths: tuple[int, ...] = (4, 8)
    >>> describe_field(Sizes, "widths")
    'tuple[int, ...], non-empty'
    >>> describe_field(Sizes, "seed")
    'int >= 0'
    """
    text = describe_type(_field_annotation(config_type, key))
    rules = list(generic_rules(config_type, key))
    if rules and rules[0] == ">= 0":
        text, rules = f"{text} >= 0", rules[1:]
    return ", ".join([text, *rules])


def _validator_doc(name: str, func: Any) -> str:
    doc = getattr(func, "__doc__", None) or ""
    first = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return first or f"checked by {name.lstrip('_')}"


def _field_validator_docs(config_type: type[ExperimentConfig], key: str) -> list[str]:
    decorators = config_type.__pydantic_decorators__.field_validators
    return [
        _validator_doc(name, dec.func) for name, dec in decorators.items() if key in dec.info.fields
    ]


def config_checks(config_type: type[ExperimentConfig]) -> tuple[str, ...]:
    """The checks across keys of ``config_type`` (its model validators), in words.

    Each is the first paragraph of the validator's docstring (its name when it has none).
    """
    decorators = config_type.__pydantic_decorators__
    found = [_validator_doc(n, d.func) for n, d in decorators.model_validators.items()]
    found += [
        _validator_doc(n, d.func)
        for n, d in decorators.field_validators.items()
        if "*" in d.info.fields
    ]
    return tuple(found)


@dataclass(frozen=True)
class FieldSpec:
    """One key of a config, as ``ntklab show`` lists it.

    Attributes
    ----------
    key : str
        The field's name (what ``--set`` takes).
    type : str
        Its type (constraints of its items included), e.g. ``"tuple[float > 0, ...]"``.
    constraints : tuple of str
        Its own bounds (``">= 1"``), the generic rules (``"non-empty"``, ``"finite"``) and
        the first paragraph of the docstring of each of its field validators.
    default : object
        The default value.
    description : str
        ``Field(description=...)``, empty when there is none.
    """

    key: str
    type: str
    constraints: tuple[str, ...]
    default: Any
    description: str


def config_fields(config_type: type[ExperimentConfig]) -> tuple[FieldSpec, ...]:
    """Every key of ``config_type`` with its type, constraints and default, in field order.

    Examples
    --------
    >>> from ntklab.experiments.base import ExperimentConfig
    >>> class Sizes(ExperimentConfig):
    ...     widths: tuple[int, ...] = (4, 8)
    >>> spec = config_fields(Sizes)[0]
    >>> spec.key, spec.type, spec.constraints, spec.default
    ('seed', 'int', ('>= 0',), 0)
    """
    out = []
    for key, info in config_type.model_fields.items():
        constraints = [
            *_bounds(info.metadata),
            *generic_rules(config_type, key),
            *_field_validator_docs(config_type, key),
        ]
        out.append(
            FieldSpec(
                key=key,
                type=describe_type(info.annotation),
                constraints=tuple(constraints),
                default=info.get_default(call_default_factory=True),
                description=info.description or "",
            )
        )
    return tuple(out)


def _is_sequence_type(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _is_sequence_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_sequence_type(a) for a in typing.get_args(annotation))
    return origin in _SEQUENCE_ORIGINS or annotation in _SEQUENCE_ORIGINS


def _accepts_none(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _accepts_none(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_none(a) for a in typing.get_args(annotation))
    return annotation is None or annotation is type(None)


def _json_number(text: str) -> Any:
    """``text`` as an int or float when it is a JSON number, else ``text`` unchanged."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


def _candidates(annotation: Any, text: str) -> Iterable[tuple[str, Any]]:
    """Ways to read ``text`` as a value of ``annotation``, most natural first.

    Yields ``(mode, value)``; ``mode`` is ``"strings"`` for pydantic's string parsing, or
    ``"python"`` for a value already decoded here.
    """
    stripped = text.strip()
    if stripped.lower() in _NONE_WORDS and _accepts_none(annotation):
        yield "python", None
    if stripped.startswith(("[", "{")):
        with contextlib.suppress(ValueError):
            yield "python", json.loads(stripped)
    if _is_sequence_type(annotation) and not stripped.startswith(("[", "{")):
        items = [] if not stripped else [item.strip() for item in stripped.split(",")]
        yield "python", items
        yield "python", [_json_number(item) for item in items]
    yield "strings", text
    number = _json_number(stripped)
    if number is not stripped:
        yield "python", number


def parse_override(annotation: Any, text: str) -> Any:
    """Read a ``--set`` value for a field of type ``annotation``.

    Accepts what pydantic accepts from strings (ints, floats, booleans such as
    ``true``/``false``/``1``/``0``/``yes``/``no``, string literals), numeric literals,
    ``none``/``null`` for optional fields, and lists written ``1,2,4`` or as JSON
    ``[1, 2, 4]``. Floats must be finite (``nan``, ``inf`` are refused, also inside lists)
    unless the annotation allows them (``Field(allow_inf_nan=True)``).

    Parameters
    ----------
    annotation : type
        The field's type, possibly ``Annotated`` with pydantic constraints.
    text : str
        The text after ``key=``.

    Returns
    -------
    object
        The validated value.

    Raises
    ------
    pydantic.ValidationError
        When no reading of ``text`` is valid; the error of the most natural reading.

    Examples
    --------
    >>> parse_override(list[int], "1,2,4")
    [1, 2, 4]
    >>> parse_override(bool, "false")
    False
    """
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation, config=_FINITE)
    except PydanticUserError:  # a type with its own config (a pydantic model)
        adapter = TypeAdapter(annotation)
    first_error: ValidationError | None = None
    for mode, value in _candidates(annotation, text):
        try:
            if mode == "strings":
                return adapter.validate_strings(value)
            return adapter.validate_python(value)
        except ValidationError as exc:
            first_error = first_error or exc
    assert first_error is not None  # _candidates always yields at least one reading
    raise first_error


def parse_set_options(items: Iterable[str]) -> dict[str, str]:
    """Split the CLI's ``--set key=value`` strings into a mapping (the last one wins).

    Raises
    ------
    NtklabValueError
        When an item has no ``=`` or an empty key.

    Examples
    --------
    >>> parse_set_options(["n=3", "widths=1,2"])
    {'n': '3', 'widths': '1,2'}
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise NtklabValueError(f"--set: expected key=value, received {item!r}")
        out[key.strip()] = value
    return out


def _field_annotation(config_type: type[ExperimentConfig], key: str) -> Any:
    info = config_type.model_fields[key]
    if info.metadata:
        return Annotated[(info.annotation, *info.metadata)]
    return info.annotation


def _resolve_key(config_type: type[ExperimentConfig], key: str) -> str:
    fields = config_type.model_fields
    if key in fields:
        return key
    if key.replace("-", "_") in fields:
        return key.replace("-", "_")
    valid = ", ".join(sorted(fields))
    close = difflib.get_close_matches(key, list(fields), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise NtklabValueError(
        f"--set {key}: unknown config key {key!r} for {config_type.__name__}{hint}; "
        f"valid keys: {valid}"
    )


def _error_detail(error: Mapping[str, Any], depth: int) -> str:
    """Pydantic's message of one error, with the item it is about (``loc`` past ``depth``)."""
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    inner = ".".join(str(p) for p in tuple(error["loc"])[depth:])
    return f"item {inner}: {message}" if inner else message


def _first_detail(exc: ValidationError, depth: int = 0) -> str:
    errors = exc.errors(include_url=False)
    return _error_detail(errors[0], depth) if errors else str(exc)


def _parse_overrides(
    config_type: type[ExperimentConfig], overrides: Mapping[str, str]
) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for raw_key, text in overrides.items():
        key = _resolve_key(config_type, raw_key)
        if not isinstance(text, str):
            parsed[key] = text
            continue
        annotation = _field_annotation(config_type, key)
        try:
            parsed[key] = parse_override(annotation, text)
        except ValidationError as exc:
            raise NtklabValueError(
                f"--set {key}: expected {describe_field(config_type, key)}, received {text!r} "
                f"({_first_detail(exc)})"
            ) from None
    return parsed


def _non_finite(value: object, path: tuple[object, ...] = ()) -> str | None:
    """Where ``value`` holds a float that is not finite: ``"is nan"``, ``"item 1 is inf"``."""
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        where = f"item {'.'.join(str(p) for p in path)} " if path else ""
        return f"{where}is {value}"
    items: Iterable[tuple[object, object]] = ()
    if isinstance(value, tuple | list):
        items = enumerate(value)
    elif isinstance(value, set | frozenset):
        items = enumerate(sorted(value, key=repr))
    elif isinstance(value, Mapping):
        items = value.items()
    for index, item in items:
        found = _non_finite(item, (*path, index))
        if found is not None:
            return found
    return None


def _generic_problem(config_type: type[ExperimentConfig], key: str, value: object) -> str | None:
    """How ``value`` breaks a generic rule of field ``key`` (see :func:`generic_rules`)."""
    rules = generic_rules(config_type, key)
    if ">= 0" in rules and isinstance(value, int | float) and value < 0:
        return "negative"
    if key == "seed" and isinstance(value, int | float) and value >= SEED_LIMIT:
        return f"too large: seeds are < 2**63 = {SEED_LIMIT}, the 64-bit seeds torch takes"
    collection = isinstance(value, collections.abc.Collection) and not isinstance(value, str)
    if "non-empty" in rules and collection and not value:
        return "empty"
    if "finite" in rules:
        return _non_finite(value)
    return None


@dataclass(frozen=True)
class _Sources:
    """Where each value of a config being resolved comes from, to name it in errors."""

    experiment: Experiment
    scale: str
    texts: Mapping[str, str]
    scale_values: Mapping[str, Any]

    def key(self, key: str) -> str:
        if key in self.texts:
            return f"--set {key}"
        if key in self.scale_values:
            return f"scale {self.scale!r} of experiment {self.experiment.name!r}: {key}"
        return f"default of {self.experiment.config_type.__name__}: {key}"

    def received(self, key: str, value: object) -> str:
        return repr(self.texts[key]) if key in self.texts else repr(value)

    def whole(self) -> str:
        where = f"config of experiment {self.experiment.name!r} at scale {self.scale!r}"
        if self.texts:
            where += " with --set " + " ".join(f"{k}={t}" for k, t in self.texts.items())
        return where


def _model_error(exc: ValidationError, sources: _Sources, values: Mapping[str, Any]) -> str:
    config_type = sources.experiment.config_type
    errors = exc.errors(include_url=False)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if not errors:
        return f"{sources.whole()}: {exc}"
    error = errors[0]
    loc = tuple(error["loc"])
    key = str(loc[0]) if loc else ""
    if not key:
        return f"{sources.whole()}: {_error_detail(error, 0)}{more}"
    if key not in config_type.model_fields:
        valid = ", ".join(sorted(config_type.model_fields))
        return (
            f"{sources.key(key)}: unknown config key {key!r} for {config_type.__name__}; "
            f"valid keys: {valid}{more}"
        )
    value = values.get(key, config_type.model_fields[key].get_default(call_default_factory=True))
    return (
        f"{sources.key(key)}: expected {describe_field(config_type, key)}, "
        f"received {sources.received(key, value)} ({_error_detail(error, 1)}){more}"
    )


def resolve_config(
    experiment: Experiment,
    scale: str = "quick",
    overrides: Mapping[str, str] = MappingProxyType({}),
    *,
    max_memory: int | None = None,
) -> ExperimentConfig:
    """The config of ``experiment`` at ``scale`` with the command line's overrides, validated.

    Parameters
    ----------
    experiment : Experiment
        The experiment whose ``config_type`` and ``scales`` are used.
    scale : str
        One of ``experiment.scales`` (``"tiny"``, ``"quick"``, ``"paper"``).
    overrides : mapping of str to str
        ``--set key=value`` pairs, values as text (see :func:`parse_override`). Values that
        are not strings are taken as they are.
    max_memory : int, optional
        Bytes the run may use; the config's ``estimated_bytes()`` (when its class defines
        one) must fit. Default: the machine's physical memory (:func:`machine_memory`), so
        that whether a config is valid does not depend on the machine's load.

    Returns
    -------
    ExperimentConfig
        An instance of ``experiment.config_type``.

    Raises
    ------
    NtklabValueError
        In one line: unknown scale (lists the scales); unknown key, in ``--set`` or in the
        scale (names it and lists the valid keys); a value of the wrong type, out of its
        field's constraints, refused by a validator of the config, or breaking a generic rule
        (:func:`generic_rules`). The message names the key and where it comes from (``--set
        KEY``, the scale, the default), what was expected and what was received. Also a
        config whose estimated peak memory exceeds ``max_memory``
        (:func:`check_estimated_memory`).
    """
    if scale not in experiment.scales:
        raise NtklabValueError(
            f"scale: expected one of {', '.join(experiment.scales)} for experiment "
            f"{experiment.name!r}, received {scale!r}"
        )
    config_type = experiment.config_type
    scale_values = dict(experiment.scales[scale])
    parsed = _parse_overrides(config_type, overrides)
    texts = {_resolve_key(config_type, k): t for k, t in overrides.items() if isinstance(t, str)}
    sources = _Sources(experiment, scale, texts, scale_values)
    values = {**scale_values, **parsed}
    # the generic rules first on the values given (so that a validator of the config never
    # sees an empty grid), then on the validated config (defaults included)
    _check_generic(config_type, values, sources, values)
    try:
        config = config_type.model_validate(values)
    except ValidationError as exc:
        raise NtklabValueError(_model_error(exc, sources, values)) from None
    _check_generic(config_type, dict(config), sources, values)
    check_estimated_memory(config, max_memory, sources=sources)
    return config


def machine_memory() -> int:
    """The machine's physical memory in bytes (``SC_PHYS_PAGES x SC_PAGE_SIZE``), or
    :math:`2^{62}` where the OS does not say (no bound)."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62
    return int(pages * size) if pages > 0 and size > 0 else 1 << 62


def check_estimated_memory(
    config: ExperimentConfig, max_memory: int | None = None, *, sources: _Sources | None = None
) -> None:
    """Refuse, before any compute, a config whose estimated peak memory exceeds the budget.

    A config class declares the estimate by a method ``estimated_bytes(self) -> int`` (the
    bytes of its largest simultaneous tensors, computed from its sizes) and names the keys
    that drive it in ``size_keys(self) -> tuple[str, ...]`` (default: every int field). Config
    classes without ``estimated_bytes`` are not checked.

    Parameters
    ----------
    config : ExperimentConfig
    max_memory : int, optional
        Bytes; default the machine's physical memory (:func:`machine_memory`).

    Raises
    ------
    NtklabValueError
        Naming the size keys and their values, the estimate and the bound.
    """
    estimate = getattr(config, "estimated_bytes", None)
    if not callable(estimate):
        return
    need = int(estimate())
    bound = resolve_max_memory(max_memory, "cpu") if max_memory is not None else machine_memory()
    if need <= bound:
        return
    keys_of = getattr(config, "size_keys", None)
    keys = (
        tuple(keys_of())
        if callable(keys_of)
        else tuple(k for k, v in dict(config).items() if type(v) is int and k != "seed")
    )
    where = sources.whole() if sources is not None else f"config {type(config).__name__}"
    given = sources.texts if sources is not None else {}
    named = ", ".join(
        f"{k} = {getattr(config, k)!r}" + (" (--set)" if k in given else "") for k in keys
    )
    raise NtklabValueError(
        f"{where}: expected a config whose estimated peak memory fits max_memory of "
        f"{format_bytes(bound)}, received one that needs about {format_bytes(need)} "
        f"({named}); lower these sizes, or run where more memory is available"
    )


def _check_generic(
    config_type: type[ExperimentConfig],
    checked: Mapping[str, Any],
    sources: _Sources,
    given: Mapping[str, Any],
) -> None:
    for key, value in checked.items():
        if key not in config_type.model_fields:
            continue  # reported by the model's validation
        problem = _generic_problem(config_type, key, value)
        if problem is not None:
            raise NtklabValueError(
                f"{sources.key(key)}: expected {describe_field(config_type, key)}, "
                f"received {sources.received(key, given.get(key, value))} ({problem})"
            )


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def config_hash(experiment: Experiment | str, scale: str, config: ExperimentConfig) -> str:
    """Stable 12-hex-digit hash of what was asked for: sha256 of (name, scale, config).

    The run folder's key adds the code that ran (:func:`~ntklab.experiments.fingerprint.run_key`).

    Parameters
    ----------
    experiment : Experiment or str
        The experiment or its name.
    scale : str
        The scale name.
    config : ExperimentConfig
        The resolved config.

    Returns
    -------
    str
        The first 12 hex digits of the SHA-256 of the canonical JSON of the above.
    """
    name = experiment.name if isinstance(experiment, Experiment) else str(experiment)
    payload = {
        "experiment": name,
        "scale": scale,
        "config": config.model_dump(mode="json"),
    }
    return hashlib.sha256(canonical_json(payload).encode("ascii")).hexdigest()[:12]
