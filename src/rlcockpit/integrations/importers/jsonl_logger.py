"""Metrics from file-logger JSON Lines: one JSON object per logging call.

Shapes read (one per line, mixed freely):

* verl's ``file`` logger backend (``trainer.logger=[...,'file']``, path from
  ``VERL_FILE_LOGGER_PATH``; ``verl/utils/tracking.py``): ``{"step": 3, "data": {"actor/pg_loss": ...}}``;
* a flat dict with the step among the metrics, as a W&B-style logger writes it — the step under
  ``step``, ``global_step``, ``_step`` or OpenRLHF's ``train/global_step``
  (``openrlhf/trainer/ppo_trainer.py`` logs ``{"train/<k>": v, "train/global_step": step}``).

Values may be numbers, booleans (0/1) or the non-finite strings of
:mod:`rlcockpit.integrations.jsoncodec` (Python's bare ``NaN``/``Infinity`` tokens are read too).
Nested dicts are flattened with ``/``; any other value (text, lists) is skipped and counted. The
same step may appear on several lines (verl logs validation metrics separately); a repeated key
keeps its last value.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import (
    ParsedImport,
    add_foreign_steps,
    as_step,
    fail,
    first_object,
    iter_jsonl,
)
from rlcockpit.integrations.jsoncodec import decode_float

FORMAT = "jsonl-logger"
STEP_KEYS = ("step", "global_step", "_step", "train/global_step")
WALL_TIME_KEYS = ("_timestamp", "timestamp", "wall_time")


def sniff(path: Path) -> bool:
    obj = first_object(path)
    if obj is None or isinstance(obj.get("metrics"), Mapping):
        return False
    if isinstance(obj.get("data"), Mapping) and "step" in obj:
        return True
    has_step = any(k in obj for k in STEP_KEYS)
    return has_step and sum(decode_float(v) is not None for v in obj.values()) >= 2


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _split_line(obj: dict[str, Any], path: Path, where: str) -> tuple[int, dict[str, Any], float]:
    """(step, metric values, wall time) of one line, in either shape."""
    if isinstance(obj.get("data"), Mapping):
        if "step" not in obj:
            raise fail(path, where, 'has "data" but no "step"',
                       'verl file-logger lines look like {"step": 3, "data": {...}}')
        return as_step(obj["step"], path, where), _flatten(obj["data"]), 0.0
    step_key = next((k for k in STEP_KEYS if k in obj), None)
    if step_key is None:
        raise fail(path, where, f"has no step (looked for {', '.join(STEP_KEYS)})",
                   'Each line needs the training step, e.g. {"step": 3, "data": {...}}')
    wall = next((decode_float(obj[k]) for k in WALL_TIME_KEYS if k in obj), None) or 0.0
    rest = {k: v for k, v in obj.items() if k not in STEP_KEYS and k not in WALL_TIME_KEYS}
    return as_step(obj[step_key], path, where), _flatten(rest), wall


def read_file(path: Path, source: str | None) -> ParsedImport:
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    lines = 0
    for number, obj in iter_jsonl(path):
        step, values, wall = _split_line(obj, path, f"line {number}")
        row = rows.setdefault(step, {})
        for key, raw in values.items():
            value = decode_float(raw)
            if value is None:
                parsed.skipped[key] += 1
                continue
            row[key] = (value, wall)
        lines += 1
    if not lines:
        raise fail(path, "", "holds no JSON lines", "Pass a non-empty file-logger JSONL file")
    used = add_foreign_steps(parsed, rows, source)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "lines": lines, "steps": len(rows)})
    return parsed
