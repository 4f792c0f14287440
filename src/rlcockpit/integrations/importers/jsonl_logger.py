"""Metrics from file loggers: one JSON object per logging call.

Shapes read (one per line of a JSON Lines file, mixed freely):

* verl's ``file`` logger backend (``trainer.logger=[...,'file']``, path from
  ``VERL_FILE_LOGGER_PATH``; ``verl/utils/tracking.py``): ``{"step": 3, "data": {"actor/pg_loss": ...}}``;
* a flat dict with the step among the metrics, as a W&B-style logger writes it — the step under
  ``step``, ``global_step``, ``_step``, OpenRLHF's ``train/global_step``
  (``openrlhf/trainer/ppo_trainer.py`` logs ``{"train/<k>": v, "train/global_step": step}``) or
  ms-swift's ``global_step/max_steps`` (``"12/500"``, in its ``logging.jsonl``,
  ``swift/trainers/patcher.py``).

Clock keys are read as the run's clock, not as metrics (:mod:`._timing`): ``_timestamp``,
``timestamp``, ``wall_time`` (wall time of the line), W&B's ``_runtime`` and ms-swift's
``elapsed_time`` (seconds since the start).

Values may be numbers, booleans (0/1) or the non-finite strings of
:mod:`rlcockpit.records` (Python's bare ``NaN``/``Infinity`` tokens are read too).
Nested dicts are flattened with ``/``; any other value (text, lists) is skipped and counted. The
same step may appear on several lines (verl logs validation metrics separately); a repeated key
keeps its last value.

A log whose step lives under another key (a custom trainer's ``episode`` or ``iteration``) is read
with ``step_key`` (``rlcockpit import --step-key episode``): that key is the step, and a file
whose first line has it is recognised as a file-logger file.

Also read: the Hugging Face ``Trainer``'s ``trainer_state.json`` (written with every checkpoint,
so every TRL run has one): its ``log_history`` is a list of exactly such flat dicts, one per
``Trainer.log`` call, with ``step`` and the keys as logged (``eval_*`` for evaluation).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import (
    ParsedImport,
    add_foreign_steps,
    as_step,
    fail,
    first_object,
    iter_jsonl,
    loads_json,
    metric_value,
    try_loads_json,
)
from rlcockpit.integrations.importers._timing import ClockReading, pop_clock, settle_clock
from rlcockpit.records import decode_float

FORMAT = "jsonl-logger"
STEP_KEYS = ("step", "global_step", "_step", "train/global_step", "global_step/max_steps",
             "current_steps")  # the last: LLaMA-Factory's trainer_log.jsonl
WALL_TIME_KEYS = ("_timestamp", "timestamp", "wall_time")


def sniff(path: Path, step_key: str | None = None) -> bool:
    if path.suffix == ".json":
        return _log_history(path) is not None
    obj = first_object(path)
    if obj is None or isinstance(obj.get("metrics"), Mapping):
        return False
    if isinstance(obj.get("data"), Mapping) and "step" in obj:
        return True
    has_step = step_key in obj if step_key else any(k in obj for k in STEP_KEYS)
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


def _split_line(obj: dict[str, Any], path: Path, where: str, step_key: str | None = None
                ) -> tuple[int, dict[str, Any], float]:
    """(step, metric values, wall time) of one line, in either shape; ``step_key`` names the
    step when the log keeps it under another key."""
    if isinstance(obj.get("data"), Mapping):
        if "step" not in obj:
            raise fail(path, where, 'has "data" but no "step"',
                       'verl file-logger lines look like {"step": 3, "data": {...}}')
        return as_step(obj["step"], path, where), _flatten(obj["data"]), 0.0
    looked = (step_key,) if step_key else STEP_KEYS
    found = next((k for k in looked if k in obj), None)
    if found is None:
        fix = (f"Pass --step-key with the key that holds the step (this line has "
               f"{', '.join(list(obj)[:8])})" if step_key else
               'Each line needs the training step, e.g. {"step": 3, ...}; a log that keeps it '
               'under another key: pass --step-key KEY')
        raise fail(path, where, f"has no step (looked for {', '.join(looked)})", fix)
    wall = next((decode_float(obj[k]) for k in WALL_TIME_KEYS if k in obj), None) or 0.0
    rest = {k: v for k, v in obj.items()
            if k != found and k not in STEP_KEYS and k not in WALL_TIME_KEYS}
    return as_step(obj[found], path, where), _flatten(rest), wall


def _log_history(path: Path) -> list[Any] | None:
    """The ``log_history`` list of a Trainer state file, or None when the file is not one."""
    try:
        doc = try_loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    history = doc.get("log_history") if isinstance(doc, dict) else None
    return history if isinstance(history, list) else None


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) of every logging call in the file, in either container."""
    if path.suffix != ".json":
        for number, obj in iter_jsonl(path):
            yield f"line {number}", obj
        return
    try:
        doc = loads_json(path.read_text(encoding="utf-8"), path, "")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(path, "", f"cannot be read as UTF-8 text ({exc})", "Pass trainer_state.json") from exc
    history = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise fail(path, "", "is not a Trainer state file (no log_history list)",
                   "Pass trainer_state.json, or a JSON Lines log with the .jsonl suffix")
    for index, obj in enumerate(history):
        if not isinstance(obj, dict):
            raise fail(path, f"log_history[{index}]", "is not an object", "Pass an unmodified trainer_state.json")
        yield f"log_history[{index}]", obj


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    clock: dict[int, ClockReading] = {}
    seen: set[str] = set()  # every key of the records (the step's too), for source detection
    records = 0
    for where, obj in _records(path):
        seen.update(obj)
        step, values, wall = _split_line(obj, path, where, step_key)
        reading = pop_clock(values)
        if reading is not None:
            clock[step] = reading
        row = rows.setdefault(step, {})
        for key, raw in values.items():
            value = metric_value(raw, path, where, key)
            if value is None:
                parsed.skipped[key] += 1
                continue
            row[key] = (value, wall)
        records += 1
    if not records:
        raise fail(path, "", "holds no records", "Pass a non-empty file-logger file")
    settle_clock(clock, rows, parsed)
    used = add_foreign_steps(parsed, rows, source, key_map, seen=seen)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "records": records, "steps": len(rows)})
    return parsed
