"""Metrics from a W&B run-history CSV export.

``wandb.Api().run(path).history(samples=N)`` (or ``scan_history``) returns one row per
``wandb.log`` call; ``.to_csv(...)`` of it — the usual way a W&B run leaves W&B — has the columns
``_step`` (the step), ``_runtime`` (seconds since ``wandb.init``), ``_timestamp`` (Unix time) and
one column per logged key, with an empty cell where a row did not log that key. Media and table
cells (JSON text such as ``{"_type": "histogram", ...}``) are skipped and counted. ``_step`` is
W&B's own counter; a run logged with ``define_metric(step_metric=...)`` (OpenRLHF's
``train/global_step``) is read on that key with ``--step-key``.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, as_step, fail
from rlcockpit.integrations.importers._text import parse_number
from rlcockpit.integrations.importers._timing import ClockReading, pop_clock, settle_clock
from rlcockpit.records import decode_float

FORMAT = "wandb-csv"
STEP_COLUMN = "_step"
TIMESTAMP_COLUMN = "_timestamp"
MAX_FIELD = 10_000_000  # characters in one cell (csv's default limit is 131072)


def _header(path: Path) -> list[str] | None:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return next(csv.reader(handle), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def sniff(path: Path, step_key: str | None = None) -> bool:
    header = _header(path)
    return bool(header) and (step_key or STEP_COLUMN) in header


def _cell(raw: str) -> float | None:
    value = decode_float(raw)
    if value is not None:
        return value
    number = parse_number(raw)
    return number[0] if number is not None and not number[1] else None


def _rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    csv.field_size_limit(MAX_FIELD)
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return [(n, row) for n, row in enumerate(csv.DictReader(handle), start=2)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise fail(path, "", f"is not a readable CSV file ({exc})",
                   "Pass the CSV written from a W&B run history (run.history().to_csv())") from exc


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    step_column = step_key or STEP_COLUMN
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    clock: dict[int, ClockReading] = {}
    table = _rows(path)
    for number, row in table:
        where = f"row {number}"
        if row.get(step_column) in (None, ""):
            raise fail(path, where, f"has no {step_column}", f"Every history row has {step_column}")
        step = as_step(_cell(row[step_column]), path, where)
        values: dict[str, Any] = {k: v for k, v in row.items() if k and v not in (None, "")}
        values.pop(step_column, None)
        wall = _cell(values.pop(TIMESTAMP_COLUMN, "")) or 0.0
        reading = pop_clock(values)
        if reading is not None:
            clock[step] = reading
        out = rows.setdefault(step, {})
        for key, raw in values.items():
            value = _cell(raw) if isinstance(raw, str) else None
            if value is None:
                parsed.skipped[key] += 1
            else:
                out[key] = (value, wall)
    if not rows:
        raise fail(path, "", "holds a header but no rows", "Export a run history with at least one row")
    settle_clock(clock, rows, parsed)
    used = add_foreign_steps(parsed, rows, source, key_map)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "records": len(table), "steps": len(rows)})
    return parsed
