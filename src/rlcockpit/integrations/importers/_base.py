"""What every importer shares: the parsed result, clear errors, and small value checks.

Importers only *read*: each turns its files into a :class:`ParsedImport` (metric points and sample
records in rlcockpit's names) or raises :class:`ImportFormatError` naming the file, the line or
row, what is wrong and how to fix it. Nothing touches a store until every file has been read, so a
malformed file never leaves a half-imported run behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.aliases import IMPORT_PREFIX, UNKNOWN_SOURCE, detect_source, rename_keys
from rlcockpit.records import MetricPoint, SampleRecord, decode_float


def fail(path: Path | str, where: str, problem: str, fix: str) -> ImportFormatError:
    """An ImportFormatError that says which file (and line/row), what is wrong and how to fix it."""
    location = f"{path}{f' ({where})' if where else ''}"
    return ImportFormatError(f"{location}: {problem}. {fix}", details={"path": str(path), "where": where})


@dataclass
class ParsedImport:
    """Everything read from the files of one import, ready to be written as one run."""

    metrics: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)
    samples: list[SampleRecord] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    skipped: Counter[str] = field(default_factory=Counter)
    unstored_sample_keys: set[str] = field(default_factory=set)
    ignored_files: dict[str, str] = field(default_factory=dict)  # path -> why it was left out
    derived: dict[str, int] = field(default_factory=dict)  # derived catalog name -> steps
    key_map: dict[str, str] = field(default_factory=dict)  # the user's --map, as applied
    logged_keys: dict[str, str] = field(default_factory=dict)  # stored name -> key as logged, if renamed
    step_key: str | None = None  # the user's --step-key, as applied
    notes: list[str] = field(default_factory=list)  # what a reader wants the user to know
    elapsed: dict[int, float] = field(default_factory=dict)  # step -> seconds since the run began
    timing: dict[str, Any] = field(default_factory=dict)  # how wall times were found (_timing.py)

    def add_metric(self, step: int, name: str, value: float, wall_time: float = 0.0) -> None:
        """Last write wins for a repeated (step, name), as in TensorBoard and the file loggers."""
        self.metrics[(step, name)] = (value, wall_time)

    def metric_points(self) -> list[MetricPoint]:
        return [MetricPoint(step=s, name=n, value=v, wall_time=w)
                for (s, n), (v, w) in sorted(self.metrics.items())]

    def merge(self, other: ParsedImport) -> None:
        self.metrics.update(other.metrics)
        self.samples.extend(other.samples)
        self.files.extend(other.files)
        self.sources |= other.sources
        self.skipped.update(other.skipped)
        self.unstored_sample_keys |= other.unstored_sample_keys
        self.ignored_files.update(other.ignored_files)
        self.notes.extend(other.notes)
        self.elapsed.update(other.elapsed)
        self.logged_keys.update(other.logged_keys)
        for name, count in other.derived.items():
            self.derived[name] = self.derived.get(name, 0) + count

    @property
    def steps(self) -> list[int]:
        return sorted({s for s, _ in self.metrics} | {s.step for s in self.samples})


def add_foreign_steps(parsed: ParsedImport, rows: Mapping[int, Mapping[str, tuple[float, float]]],
                      source: str | None, key_map: Mapping[str, str] | None = None,
                      seen: Iterable[str] = ()) -> str:
    """Rename foreign keys per step through the user's ``key_map`` and the alias table and add
    them to ``parsed``.

    ``rows`` maps step -> {foreign key: (value, wall time)}. Without ``source`` it is detected from
    the keys the user did not map (see :func:`detect_source`), with ``seen`` — keys of the records
    that hold no number (ms-swift's ``remaining_time``) or were read as the step or the clock —
    counting too; returns the source used.
    """
    key_map = key_map or {}
    if source is None:
        keys = {k for values in rows.values() for k in values} | set(seen) | set(parsed.skipped)
        source = detect_source(k for k in keys if k not in key_map) or UNKNOWN_SOURCE
    for step in sorted(rows):
        values = rows[step]
        for key, name in rename_keys(values, source, key_map).items():
            value, wall_time = values[key]
            parsed.add_metric(step, name, value, wall_time)
            if name != key and not name.startswith(IMPORT_PREFIX):  # import/<source>/<key> says it
                parsed.logged_keys.setdefault(name, key)  # so a search finds it by either name
    parsed.sources.add(source)
    return source


SEQUENCE_KL = "kl/mean"
TOKEN_KL = "kl/token_mean"
LENGTH_MEAN = "response/length_mean"
SEQUENCE_KL_FORMULA = f"{SEQUENCE_KL} = {TOKEN_KL} x {LENGTH_MEAN}"


def derive_sequence_kl(parsed: ParsedImport) -> int:
    """Add the per-sequence KL ``kl/mean`` = ``kl/token_mean`` x ``response/length_mean`` on every
    step where both were logged and ``kl/mean`` was not; returns the number of steps.

    TRL, verl and OpenRLHF log the KL vs the reference per token, while the KL detectors read the
    per-sequence sum (DESIGN.md §4). The product is exact when the token mean is taken over all
    tokens of the step, and an approximation when the trainer averages per sequence first (older
    TRL, verl's ``actor/reward_kl_penalty``). A logged ``kl/mean`` is never overwritten.
    """
    count = 0
    for (step, name), (token_kl, wall) in list(parsed.metrics.items()):
        if name != TOKEN_KL or (step, SEQUENCE_KL) in parsed.metrics:
            continue
        length = parsed.metrics.get((step, LENGTH_MEAN))
        if length is None:
            continue
        parsed.add_metric(step, SEQUENCE_KL, token_kl * length[0], max(wall, length[1]))
        count += 1
    if count:
        parsed.derived[SEQUENCE_KL] = parsed.derived.get(SEQUENCE_KL, 0) + count
    return count


INT64 = (-(2**63), 2**63 - 1)  # the store's step column (SQLite INTEGER, ClickHouse Int64)
MAX_DEPTH = 64  # nesting a log line may have; deeper input is refused before it is parsed


def as_step(value: Any, path: Path | str, where: str) -> int:
    """An integer step from an int, an integral float, a digit string (TRL's W&B table) or a
    ``"N/M"`` progress string (ms-swift's ``global_step/max_steps``); it must fit in int64."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, str):
        text = value.strip().split("/")[0] if value.count("/") == 1 else value.strip()
        value = int(text) if text.lstrip("-").isdigit() and len(text) < 30 else value
    if not isinstance(value, int):
        raise fail(path, where, f"the step {value!r} is not an integer",
                   "Each record needs an integer training step")
    if not INT64[0] <= value <= INT64[1]:
        raise fail(path, where, f"the step {value} does not fit in a 64-bit integer",
                   "A training step is a count of iterations; check that the step key holds one")
    return value


class _OutOfRange(ValueError):
    """A JSON number that no float can hold (1e400, or an integer of hundreds of digits)."""


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # json.loads would silently turn 1e400 into inf
        raise _OutOfRange(text)
    return value


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 308:  # beyond float64 (and Python's int-parsing digit limit)
        raise _OutOfRange(text[:20] + "...")
    return int(text)


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON or Python-literal text, outside quoted strings.

    Recursive parsers (``json``, ``ast``) overflow the stack on 100k nested brackets; counting
    first lets such input be refused with a message. Lines with few brackets skip the scan.
    """
    if text.count("[") + text.count("{") + text.count("(") <= MAX_DEPTH:
        return 0
    depth = deepest = 0
    quote, escaped = "", False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth -= 1
    return deepest


def loads_json(text: str, path: Path | str, where: str) -> Any:
    """``json.loads`` that fails with an :class:`ImportFormatError` naming ``where`` for bad
    JSON, nesting deeper than :data:`MAX_DEPTH` and numbers beyond the float range."""
    if nesting_depth(text) > MAX_DEPTH:
        raise fail(path, where, f"nests brackets deeper than {MAX_DEPTH} levels",
                   "A training log holds flat or shallow records; pass the trainer's own log file")
    try:
        return json.loads(text, parse_float=_parse_float, parse_int=_parse_int)
    except _OutOfRange as exc:
        raise fail(path, where, f"holds the number {exc}, beyond the range of a float",
                   "Write non-finite values as NaN / Infinity, or fix the value") from exc
    except json.JSONDecodeError as exc:
        raise fail(path, where, f"is not valid JSON ({exc.msg})",
                   "Each line must be one complete JSON object (JSON Lines)") from exc
    except (RecursionError, ValueError) as exc:
        raise fail(path, where, f"cannot be parsed as JSON ({type(exc).__name__})",
                   "Pass the trainer's own log file") from exc


def try_loads_json(text: str) -> Any:
    """The JSON value of ``text``, or None when it is not (safely) parseable; for sniffers."""
    try:
        return loads_json(text, "", "")
    except ImportFormatError:
        return None


_FLOAT_MAX_INT = int(sys.float_info.max)


def metric_value(value: Any, path: Path | str, where: str, key: str) -> float | None:
    """The float of a logged value (:func:`decode_float`), None for text and lists; an integer
    beyond the float range is refused (``float()`` would raise OverflowError mid-import)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX_INT:
        raise fail(path, where, f"{key!r} holds an integer of {len(str(abs(value)))} digits, "
                   "beyond the range of a float", "Fix the value or leave the key out")
    return decode_float(value)


def as_number(value: Any, path: Path | str, where: str, what: str) -> float:
    number = metric_value(value, path, where, what)
    if number is None:
        raise fail(path, where, f"{what} is {value!r}, not a number",
                   'Use a JSON number (NaN/inf as "NaN", "Infinity", "-Infinity")')
    return number


def optional_number(value: Any, path: Path | str, where: str, what: str) -> float | None:
    return None if value is None else as_number(value, path, where, what)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file; unreadable or binary files raise clearly."""
    try:
        with path.open(encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except OSError as exc:
        raise fail(path, "", f"cannot be read ({exc.strerror})", "Check the path and permissions") from exc
    except UnicodeDecodeError as exc:
        raise fail(path, "", "is not UTF-8 text", "Pass a JSON Lines text file") from exc


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line raises with its number."""
    for number, line in _lines(path):
        if not line.strip():
            continue
        obj = loads_json(line, path, f"line {number}")
        if not isinstance(obj, dict):
            raise fail(path, f"line {number}", f"holds a JSON {type(obj).__name__}, not an object",
                       "Each line must be one JSON object")
        yield number, obj


def first_object(path: Path) -> dict[str, Any] | None:
    """The first JSON object of a JSON Lines file, or None when the first line is not one."""
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    obj = try_loads_json(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def message_text(value: Any) -> str | None:
    """Text of a prompt/completion: a string, or a chat (list of {role, content}) as lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) for m in value):
        parts = []
        for message in value:
            content = message.get("content")
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False, default=str)
            parts.append(f"{message.get('role', 'user')}: {content}")
        return "\n".join(parts)
    return None


def prompt_id(prompt: str) -> str:
    """A short stable id for a prompt text (the same text gets the same id in every import)."""
    return hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:12]


class SampleNumbering:
    """sample_id per step (in order of appearance) and group_id per distinct prompt of a step."""

    def __init__(self) -> None:
        self._next_id: dict[int, int] = {}
        self._groups: dict[int, dict[str, int]] = {}

    def next(self, step: int, prompt: str) -> tuple[int, int]:
        sample_id = self._next_id.get(step, 0)
        self._next_id[step] = sample_id + 1
        groups = self._groups.setdefault(step, {})
        group_id = groups.setdefault(prompt, len(groups))
        return sample_id, group_id
