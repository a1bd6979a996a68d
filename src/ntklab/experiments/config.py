"""Resolving an experiment's config from its scale and the command line, and hashing it.

The config of a run is, in order of precedence: the ``--set key=value`` overrides, the
scale's overrides (``experiment.scales[scale]``), the config class's defaults. The run
folder is keyed by :func:`config_hash` of the result together with the fingerprint of the
code (:mod:`ntklab.experiments.fingerprint`), so a rerun with the same config and the same
code finds and reuses the earlier run, and a code change recomputes.
"""

from __future__ import annotations

import collections.abc
import contextlib
import difflib
import hashlib
import json
import types
import typing
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import TypeAdapter, ValidationError

from ntklab.errors import NtklabValueError

from .base import Experiment, ExperimentConfig

__all__ = [
    "config_hash",
    "describe_type",
    "package_version",
    "parse_override",
    "parse_set_options",
    "resolve_config",
]

_NONE_WORDS = frozenset({"none", "null"})
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


def describe_type(annotation: Any) -> str:
    """Readable name of a field's type, for error messages.

    Examples
    --------
    >>> describe_type(int)
    'int'
    >>> describe_type(Literal["float32", "float64"])
    "one of 'float32', 'float64'"
    >>> describe_type(list[int])
    'list[int]'
    """
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin is Annotated:
        return describe_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "none"
    if isinstance(annotation, type) and origin is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "")


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
    ``[1, 2, 4]``.

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
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
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


def _first_message(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    return str(errors[0]["msg"]) if errors else str(exc)


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
                f"--set {key}: expected {describe_type(annotation)}, received {text!r} "
                f"({_first_message(exc)})"
            ) from None
    return parsed


def _format_model_error(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        parts.append(f"{loc}: {err['msg']} (received {err.get('input')!r})")
    return f"{source}: " + "; ".join(parts)


def resolve_config(
    experiment: Experiment,
    scale: str = "quick",
    overrides: Mapping[str, str] = MappingProxyType({}),
) -> ExperimentConfig:
    """The config of ``experiment`` at ``scale`` with the command line's overrides.

    Parameters
    ----------
    experiment : Experiment
        The experiment whose ``config_type`` and ``scales`` are used.
    scale : str
        One of ``experiment.scales`` (``"tiny"``, ``"quick"``, ``"paper"``).
    overrides : mapping of str to str
        ``--set key=value`` pairs, values as text (see :func:`parse_override`). Values that
        are not strings are taken as they are.

    Returns
    -------
    ExperimentConfig
        An instance of ``experiment.config_type``.

    Raises
    ------
    NtklabValueError
        Unknown scale (lists the scales), unknown key (names it and lists the valid keys),
        or a value of the wrong type (names the key, the expected type and the text).
    """
    if scale not in experiment.scales:
        raise NtklabValueError(
            f"scale: expected one of {', '.join(experiment.scales)} for experiment "
            f"{experiment.name!r}, received {scale!r}"
        )
    config_type = experiment.config_type
    values = dict(experiment.scales[scale])
    values.update(_parse_overrides(config_type, overrides))
    try:
        return config_type.model_validate(values)
    except ValidationError as exc:
        source = "--set" if overrides else f"scale {scale!r} of experiment {experiment.name!r}"
        raise NtklabValueError(_format_model_error(exc, source)) from None


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
