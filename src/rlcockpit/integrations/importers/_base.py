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
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.aliases import UNKNOWN_SOURCE, detect_source, rename_keys
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
    step_key: str | None = None  # the user's --step-key, as applied

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
        for name, count in other.derived.items():
            self.derived[name] = self.derived.get(name, 0) + count

    @property
    def steps(self) -> list[int]:
        return sorted({s for s, _ in self.metrics} | {s.step for s in self.samples})


def add_foreign_steps(parsed: ParsedImport, rows: Mapping[int, Mapping[str, tuple[float, float]]],
                      source: str | None, key_map: Mapping[str, str] | None = None) -> str:
    """Rename foreign keys per step through the user's ``key_map`` and the alias table and add
    them to ``parsed``.

    ``rows`` maps step -> {foreign key: (value, wall time)}. Without ``source`` it is detected from
    the keys the user did not map (see :func:`detect_source`); returns the source used.
    """
    key_map = key_map or {}
    if source is None:
        keys = {k for values in rows.values() for k in values if k not in key_map}
        source = detect_source(keys) or UNKNOWN_SOURCE
    for step in sorted(rows):
        values = rows[step]
        for key, name in rename_keys(values, source, key_map).items():
            value, wall_time = values[key]
            parsed.add_metric(step, name, value, wall_time)
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


def as_step(value: Any, path: Path | str, where: str) -> int:
    """An integer step from an int, an integral float or a digit string (TRL's W&B table)."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise fail(path, where, f"the step {value!r} is not an integer",
                   "Each record needs an integer training step")
    return value


def as_number(value: Any, path: Path | str, where: str, what: str) -> float:
    number = decode_float(value)
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
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(path, f"line {number}", f"is not valid JSON ({exc.msg})",
                       "Each line must be one complete JSON object (JSON Lines)") from exc
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
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
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
