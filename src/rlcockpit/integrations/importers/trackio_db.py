"""Metrics from a Trackio project database (``~/.cache/huggingface/trackio/<project>.db``).

Trackio (``trackio/sqlite_storage.py``) keeps one SQLite file per project; every ``trackio.log``
call is a row of its ``metrics`` table::

    metrics(id INTEGER PRIMARY KEY, timestamp TEXT, run_name TEXT, step INTEGER, metrics TEXT)

(older releases also had a ``project_name`` column). ``metrics`` is a JSON object of the logged
values, with NaN and infinities written as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
``timestamp`` is the ISO time of the call and becomes the points' wall time. One import reads one
run: a file with several runs needs ``--source-run NAME``, and the error lists the runs it holds.
Media and table values (nested objects with a ``_type``) are skipped and counted. The file is
opened read-only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import (
    ParsedImport,
    add_foreign_steps,
    as_step,
    fail,
    loads_json,
    metric_value,
)
from rlcockpit.integrations.importers._text import flatten

FORMAT = "trackio"
SQLITE_MAGIC = b"SQLite format 3\x00"
REQUIRED = ("run_name", "step", "metrics")


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")  # a damaged page: no UnicodeError
    return conn


def _columns(conn: sqlite3.Connection) -> list[str]:
    return [row[1] for row in conn.execute("PRAGMA table_info(metrics)")]


def sniff(path: Path) -> bool:
    if not _is_sqlite(path):
        return False
    try:
        conn = _connect(path)
        try:
            return all(c in _columns(conn) for c in REQUIRED)
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError):
        return False


def _runs(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT DISTINCT run_name FROM metrics ORDER BY run_name")
    return [str(row[0]) for row in rows if row[0] is not None]


def _choose_run(path: Path, runs: list[str], run_name: str | None) -> str:
    if run_name is not None:
        if run_name not in runs:
            raise fail(path, "", f"has no run {run_name!r} (runs: {', '.join(runs) or 'none'})",
                       "Pass --source-run with one of the run names listed")
        return run_name
    if len(runs) != 1:
        raise fail(path, "", f"holds {len(runs)} runs ({', '.join(runs) or 'none'})",
                   "Pass --source-run NAME to choose the run to import")
    return runs[0]


def _wall(timestamp: Any) -> float:
    if not isinstance(timestamp, str):
        return 0.0
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return 0.0


def _read(path: Path, run_name: str | None) -> tuple[str, list[tuple[Any, Any, Any]]]:
    try:
        conn = _connect(path)
        try:
            if not all(c in _columns(conn) for c in REQUIRED):
                raise fail(path, "", "is a SQLite file without Trackio's metrics table",
                           "Pass a Trackio project database (<project>.db)")
            run = _choose_run(path, _runs(conn), run_name)
            has_time = "timestamp" in _columns(conn)
            rows = conn.execute(f"SELECT step, {'timestamp' if has_time else 'NULL'}, metrics "
                                "FROM metrics WHERE run_name = ? ORDER BY step, rowid", (run,)).fetchall()
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise fail(path, "", f"cannot be read as a SQLite database ({type(exc).__name__}: {exc})",
                   "Pass an intact Trackio project database") from exc
    return run, rows


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              run_name: str | None = None) -> ParsedImport:
    run, table = _read(path, run_name)
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    for index, (raw_step, timestamp, text) in enumerate(table, start=1):
        where = f"run {run!r}, row {index}"
        step = as_step(raw_step, path, where)
        values = loads_json(text, path, where) if isinstance(text, str) else None
        if not isinstance(values, dict):
            raise fail(path, where, "holds no JSON object of metrics", "Pass an intact Trackio database")
        wall = _wall(timestamp)
        out = rows.setdefault(step, {})
        for key, raw in flatten(values).items():
            value = metric_value(raw, path, where, key)
            if value is None:
                parsed.skipped[key.split("/_type")[0]] += 1
            else:
                out[key] = (value, wall)
    if not rows:
        raise fail(path, "", f"holds no rows for run {run!r}", "Choose a run that logged metrics")
    used = add_foreign_steps(parsed, rows, source, key_map)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "run": run, "records": len(table), "steps": len(rows)})
    return parsed
