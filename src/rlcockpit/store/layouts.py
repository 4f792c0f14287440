"""Saved dashboard layouts, one per project (docs/ui.md, "All metrics and panels"): the panels users
added (any metrics, any runs) and the runs' tags and groups (the runs table), as one JSON document.

A layout is small and rarely written, so both backends keep the newest document per project:
SQLite one row per project (``layouts``, schema v6), ClickHouse a ReplacingMergeTree read with
``argMax`` (the newest write wins). ``get`` of a project never saved is ``None`` (the UI then
shows the default three-row dashboard).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.errors import StoreError

MAX_LAYOUT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Layout:
    """A project's saved layout: ``layout`` is the UI's document (``{"panels": [...]}``)."""

    project: str
    layout: dict[str, Any] = field(default_factory=dict)
    updated_at: float | None = None
    updated_by: str = ""


def encode(layout: dict[str, Any]) -> str:
    """The stored text of ``layout``; refuses what is not a JSON object or is too large."""
    if not isinstance(layout, dict):
        raise StoreError("a layout must be a JSON object such as {\"panels\": []}",
                         details={"type": type(layout).__name__})
    text = json.dumps(layout, ensure_ascii=False, allow_nan=False, sort_keys=True)
    if len(text.encode()) > MAX_LAYOUT_BYTES:
        raise StoreError(f"a layout holds at most {MAX_LAYOUT_BYTES} bytes of JSON (got "
                         f"{len(text.encode())}); remove some panels",
                         details={"bytes": len(text.encode()), "max": MAX_LAYOUT_BYTES})
    return text


class SqliteLayouts:
    """Layouts in the SQLite file; one short connection per call (layouts are rare)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, read_only: bool) -> None:
        self._connect = connect
        self._read_only = read_only

    def get(self, project: str) -> Layout | None:
        conn = self._connect()
        try:
            row = conn.execute("SELECT layout, updated_at, updated_by FROM layouts WHERE project = ?",
                               (project,)).fetchone()
        finally:
            conn.close()
        return None if row is None else Layout(project, json.loads(row[0]), row[1], row[2])

    def put(self, project: str, layout: dict[str, Any], *, by: str = "") -> Layout:
        if self._read_only:
            raise StoreError("the store was opened read-only; cannot save a layout",
                             details={"project": project})
        text, now = encode(layout), time.time()
        conn = self._connect()
        try:
            conn.execute("INSERT INTO layouts (project, layout, updated_at, updated_by) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (project) DO UPDATE SET "
                         "layout = excluded.layout, updated_at = excluded.updated_at, "
                         "updated_by = excluded.updated_by", (project, text, now, by))
        finally:
            conn.close()
        return Layout(project, json.loads(text), now, by)


class ClickHouseLayouts:
    """Layouts in ClickHouse (``layouts``, schema v4): every save is a row; the newest wins."""

    def __init__(self, transport, *, read_only: bool) -> None:
        self._t = transport
        self._read_only = read_only

    def get(self, project: str) -> Layout | None:
        from rlcockpit.store.ch_transport import lit

        rows = self._t.query(
            "SELECT argMax(layout, updated_at), max(updated_at), argMax(updated_by, updated_at), "
            f"count() FROM {self._t.database}.layouts WHERE project = {lit(project)}")
        if not rows or not rows[0][3]:
            return None
        text, at, by, _ = rows[0]
        return Layout(project, json.loads(text), float(at), by)

    def put(self, project: str, layout: dict[str, Any], *, by: str = "") -> Layout:
        if self._read_only:
            raise StoreError("the store was opened read-only; cannot save a layout",
                             details={"project": project})
        text, now = encode(layout), time.time()
        self._t.insert("layouts", ["project", "layout", "updated_at", "updated_by"],
                       [[project], [text], [now], [by]],
                       {"project": "String", "layout": "String", "updated_at": "Float64",
                        "updated_by": "String"})
        return Layout(project, json.loads(text), now, by)
