"""Typed, frozen configuration: dataclasses + YAML + dotted overrides, validated before anything runs.

Every component declares one frozen dataclass whose fields are made with :func:`option` (default,
help text, allowed range or choices). :func:`load_config` builds it from a YAML file plus command-line
overrides such as ``kl.coef=0.05``. Unknown keys, wrong types and out-of-range values raise
:class:`~rlcockpit.errors.ConfigError` naming the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rlcockpit.errors import ConfigError

T = TypeVar("T")
_MISSING = dataclasses.MISSING
_EXPONENT_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def option(
    default: Any = _MISSING,
    *,
    help: str,
    range: tuple[float | None, float | None] | None = None,
    choices: Sequence[Any] | None = None,
    default_factory: Any = _MISSING,
) -> Any:
    """A documented config field. ``range`` bounds are inclusive; ``None`` means unbounded."""
    meta = {"help": help, "range": range, "choices": tuple(choices) if choices else None}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class Config:
    """Mixin for frozen config dataclasses: validates ranges and choices in ``__post_init__``."""

    def __post_init__(self) -> None:
        validate_fields(self)


def validate_fields(obj: Any) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        _check_value(f, value, f.name)


def _check_value(f: dataclasses.Field, value: Any, key: str) -> None:
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {allowed}",
                          details={"key": key, "value": value, "allowed": list(choices)})
    rng = f.metadata.get("range")
    if rng and isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = rng
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value!r} must be a finite number in {_fmt_range(rng)}",
                              details={"key": key, "value": str(value), "range": list(rng)})
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{key}={value!r} is out of range; allowed: {_fmt_range(rng)}",
                              details={"key": key, "value": value, "range": list(rng)})


def _fmt_range(rng: tuple[float | None, float | None]) -> str:
    lo, hi = rng
    lo_s = "-inf" if lo is None else repr(lo)
    hi_s = "+inf" if hi is None else repr(hi)
    return f"[{lo_s}, {hi_s}]"


def check(condition: bool, key: str, value: Any, why: str) -> None:
    """Raise a ConfigError for a cross-field rule in a ``__post_init__``."""
    if not condition:
        raise ConfigError(f"{key}={value!r}: {why}", details={"key": key, "value": value})


# --------------------------------------------------------------------------- building


def from_dict(cls: type[T], data: Mapping[str, Any] | None, *, prefix: str = "") -> T:
    """Build the dataclass ``cls`` from nested plain data, with dotted-key error messages."""
    data = dict(data or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, list(fields), n=1)
        hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
        known = ", ".join(sorted(fields))
        raise ConfigError(f"unknown config key '{prefix}{key}'{hint} (known keys here: {known})",
                          details={"key": prefix + key})
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, prefix + name)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        key = exc.details.get("key")
        if key and prefix and not str(key).startswith(prefix):
            full = prefix + str(key)
            msg = exc.message.replace(f"{key}=", f"{full}=", 1)
            raise ConfigError(msg, details={**exc.details, "key": full}) from None
        raise


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a mapping of sub-keys, got {value!r}", details={"key": key})
        return from_dict(tp, value, prefix=key + ".")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(a, value, key)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if tp is Any:
        return value
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(map(repr, args))}",
                              details={"key": key, "value": value})
        return value
    if origin in (tuple, list, Sequence) or tp in (tuple, list):
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise ConfigError(f"{key} must be a list, got {value!r}", details={"key": key, "value": value})
        item_t = args[0] if args else Any
        return tuple(_coerce(item_t, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp in (dict,):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a mapping, got {value!r}", details={"key": key, "value": value})
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(vt, v, f"{key}.{k}") for k, v in value.items()}
    return _coerce_scalar(tp, value, key)


def _coerce_scalar(tp: Any, value: Any, key: str) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key}={value!r} has the wrong type; expected {expected}",
                           details={"key": key, "value": repr(value), "expected": expected})

    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad("true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise bad("an integer")
        return value
    if tp is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.match(value.strip()):
            return float(value)  # YAML 1.1 reads "1e-4" (no dot) as a string; it is a number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    return value


# --------------------------------------------------------------------------- overrides & YAML


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"kl.coef=0.05"`` → (["kl", "coef"], 0.05); values are parsed as YAML scalars."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key.sub=value", details={"key": text})
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override '{text}' has an empty key part", details={"key": key})
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    out = _deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = {}
                node[p] = nxt
            node = nxt
        node[parts[-1]] = value
    return out


def _deepcopy(d: Any) -> Any:
    if isinstance(d, Mapping):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


def read_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}", details={"path": str(p)})
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}", details={"path": str(p)}) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level", details={"path": str(p)})
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Iterable[str] = ()) -> T:
    data = read_yaml(path) if path else {}
    return from_dict(cls, apply_overrides(data, overrides))


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict (tuples become lists) — what goes into the run's stored config."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, Mapping):
            return {k: conv(x) for k, x in v.items()}
        return v

    return conv(cfg)


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """(dotted key, type, default, help) for every leaf field — used for docs and ``--help``."""
    rows: list[tuple[str, str, Any, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, prefix + f.name + "."))
            continue
        default = f.default if f.default is not _MISSING else (
            f.default_factory() if f.default_factory is not _MISSING else None)
        help_text = f.metadata.get("help", "")
        rng = f.metadata.get("range")
        if rng:
            help_text += f" Range {_fmt_range(rng)}."
        if f.metadata.get("choices"):
            help_text += " One of: " + ", ".join(map(str, f.metadata["choices"])) + "."
        tname = getattr(tp, "__name__", str(tp)).replace("typing.", "")
        rows.append((prefix + f.name, tname, default, help_text))
    return rows
