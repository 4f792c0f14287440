"""The ClickHouse write side (``clickhouse://``, ``chdb://``): one batch, one insert per table.

A batch is converted to columns first (a bad record fails the batch before anything is sent),
then inserted table by table with a deduplication token derived from the batch, so a retry of
the same batch is not written twice. The ``steps`` rows go last and the heartbeat after them: a
step a reader sees in ``steps`` has every record of the batch that wrote it. Many writers (ranks,
nodes, a follower) may write one run at once; each writes its own rows and its own heartbeat row.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rlcockpit.errors import NotFoundError, StoreError
from rlcockpit.records import RUN_STATUSES, Batch, RunInfo, SampleRecord
from rlcockpit.store import codec, rollups
from rlcockpit.store import sqlite_rows as rows
from rlcockpit.store.ch_transport import Transport, lit

SAMPLE_COLUMNS = ("run_id", "step", "sample_id", "category", "reward", "prompt_id", "group_id",
                  "has_token_arrays", "flags", "length", "truncated", "uncertainty", "advantage",
                  "value", "kl_sum", "kl_max", "wall_time", "prompt", "response", "components",
                  "tokens", "logprobs", "ref_logprobs", "token_kl")
_F = "Float64"
_NF = "Nullable(Float64)"
_LC = "LowCardinality(String)"
TYPES: dict[str, dict[str, str]] = {
    "samples": dict(zip(SAMPLE_COLUMNS, (
        _LC, "Int64", "Int64", _LC, _F, "String", "Int64", "UInt8", "Array(LowCardinality(String))",
        "Int64", "UInt8", _NF, _NF, _NF, _NF, _NF, _F, "String", "String", "String",
        "Nullable(String)", "Nullable(String)", "Nullable(String)", "Nullable(String)"), strict=True)),
    "metrics": {"run_id": _LC, "name": _LC, "step": "Int64", "value": _F, "wall_time": _F},
    "histograms": {"run_id": _LC, "name": _LC, "step": "Int64", "wall_time": _F,
                   "edges": "Array(Float64)", "counts": "Array(Int64)"},
    "events": {"run_id": _LC, "event_id": "Int64", "step": "Int64", "kind": _LC,
               "payload": "String", "wall_time": _F},
    "findings": {"run_id": _LC, "finding_id": "Int64", "step": "Int64", "detector": _LC,
                 "severity": _LC, "message": "String", "evidence": "String", "patterns": "String",
                 "status": _LC, "wall_time": _F, "incident": "String"},
    "snapshots": {"run_id": _LC, "snapshot_id": "Int64", "step": "Int64", "kind": _LC,
                  "payload": "String", "wall_time": _F, "incident": "String"},
    "phases": {"run_id": _LC, "phase_id": "Int64", "step": "Int64", "phase": _LC, "status": _LC,
               "duration_s": _NF, "progress": _NF, "wall_time": _F},
    "checkpoints": {"run_id": _LC, "checkpoint_id": "Int64", "step": "Int64", "path": "String",
                    "reason": _LC, "wall_time": _F},
    "steps": {"run_id": _LC, "step": "Int64", "wall_time": _F},
    "metric_rollups": {"run_id": _LC, "name": _LC, "size": "UInt32", "bucket": "Int64",
                       "min_step": "Nullable(Int64)", "min_value": _NF, "min_wall": _NF,
                       "max_step": "Nullable(Int64)", "max_value": _NF, "max_wall": _NF,
                       "nan_step": "Nullable(Int64)", "nan_wall": _NF},
    "run_names": {"run_id": _LC, "kind": _LC, "name": "String"},
    "runs": {"run_id": "String", "project": "String", "name": "String", "started_at": _F,
             "config": "String", "created_ns": "UInt64"},
    "run_status": {"run_id": "String", "written_ns": "UInt64", "status": _LC,
                   "ended_at": "Nullable(Float64)"},
    "run_heartbeats": {"run_id": "String", "writer": "String", "written_ns": "UInt64",
                       "heartbeat_at": _F, "last_step": "Nullable(Int64)"},
}
# append-only tables: (table, id column, record -> row without run id and id)
_APPENDS = (
    ("events", "event_id", "events", rows.event_row),
    ("findings", "finding_id", "findings", rows.finding_row),
    ("snapshots", "snapshot_id", "snapshots", rows.snapshot_row),
    ("phases", "phase_id", "phases", rows.phase_row),
    ("checkpoints", "checkpoint_id", "checkpoints", rows.checkpoint_row),
)
IDS_PER_MS = 1024  # row ids: wall-clock ms * 1024 + a counter; stay below 2**53 (JSON-safe)


class ClickHouseWriter:
    """Implements :class:`rlcockpit.store.base.StoreWriter` on a ClickHouse transport."""

    def __init__(self, transport: Transport, *, close_transport: bool = False) -> None:
        self._t = transport
        self._db = transport.database
        self._close_transport = close_transport
        self.writer_id = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._known_runs: set[str] = set()
        self._run_names: set[tuple[str, str, str]] = set()
        self._last_step: dict[str, int | None] = {}  # this writer's max step per run
        self._touched_below: dict[str, int] = {}  # steps <= this may already hold rows
        self._last_id = 0
        # a batch whose write failed: (batch, its dedup token, its rewritten metric names)
        self._pending: tuple[Batch | None, str, set[str]] = (None, "", set())

    # ------------------------------------------------------------------ runs

    def create_run(self, run: RunInfo) -> None:
        _check_status(run.status)
        if self._t.query(f"SELECT count() FROM {self._db}.runs WHERE run_id = {lit(run.run_id)}"
                         )[0][0]:
            raise StoreError(f"a run with id {run.run_id!r} already exists in this store; pass "
                             "resume=True to continue it or choose another run id",
                             details={"run_id": run.run_id})
        now = time.time()
        self._insert("runs", [(run.run_id, run.project, run.name, run.started_at or now,
                               rows.config_json(run.config), time.time_ns())])
        self._insert("run_status", [(run.run_id, time.time_ns(), run.status, run.ended_at)])
        self._known_runs.add(run.run_id)
        self._last_step[run.run_id] = run.last_step
        self._touched_below[run.run_id] = -(2**62)
        self._heartbeat(run.run_id, run.heartbeat_at or now, run.last_step)

    def set_run_status(self, run_id: str, status: str, *, ended_at: float | None = None) -> None:
        _check_status(status)
        self._check_run(run_id)
        self._insert("run_status", [(run_id, time.time_ns(), status,
                                     None if status == "running" else ended_at)])

    def heartbeat(self, run_id: str, wall_time: float, last_step: int | None) -> None:
        self._check_run(run_id)
        self._heartbeat(run_id, wall_time, last_step)

    def _heartbeat(self, run_id: str, wall_time: float, last_step: int | None) -> None:
        known = self._last_step.get(run_id)
        if last_step is not None:
            known = int(last_step) if known is None else max(known, int(last_step))
        self._last_step[run_id] = known
        self._insert("run_heartbeats", [(run_id, self.writer_id, time.time_ns(), float(wall_time),
                                         known)])

    # ------------------------------------------------------------------ data

    def write_batch(self, run_id: str, batch: Batch) -> None:
        """Convert everything first, then insert table by table (steps and heartbeat last)."""
        self._check_run(run_id)
        now = time.time()
        steps: dict[int, float] = {}
        tables = {
            "metrics": self._metric_rows(run_id, batch, steps),
            "histograms": self._histogram_rows(run_id, batch, steps),
            "samples": [_sample_row(run_id, s, now) for s in batch.samples],
        }
        for s in batch.samples:
            steps.setdefault(int(s.step), now)
        for table, _id_col, attr, to_row in _APPENDS:
            records = getattr(batch, attr)
            ids = self._next_ids(len(records))
            tables[table] = [(r[0], i, *r[1:]) for i, r in zip(
                ids, (to_row(run_id, rec, now) for rec in records), strict=True)]
        _check_text(tables)  # a text that is no UTF-8 fails the batch before anything is sent
        names = self._new_run_names(run_id, batch)
        # The telemetry retries a failed write with the same Batch object: the retry reuses the
        # batch's deduplication tokens, so the tables that did land the first time are not
        # written twice, and skips the rewrite check (the first attempt did it; rows it finds
        # now would be this batch's own).
        retry = batch is self._pending[0]
        token = self._pending[1] if retry else uuid.uuid4().hex
        rewritten = self._pending[2] if retry else set()
        self._pending = (batch, token, rewritten)
        if not retry:
            rewritten |= self._replace_rewritten(run_id, tables)
        tables["metric_rollups"] = _rollup_rows(run_id, [r for r in tables["metrics"]
                                                         if r[1] not in rewritten])
        for table, found in tables.items():
            self._insert(table, found, token=f"{token}:{table}")
        self._recompute_rollups(run_id, [r for r in tables["metrics"] if r[1] in rewritten])
        self._insert("run_names", sorted(names), token=f"{token}:run_names")
        self._insert("steps", [(run_id, s, w) for s, w in sorted(steps.items())],
                     token=f"{token}:steps")
        self._pending = (None, "", set())
        self._run_names |= names
        self._note_written(run_id, tables)
        self._heartbeat(run_id, now, _max_step(batch))

    def strip_token_arrays(self, run_id: str, keep: Mapping[int, Collection[int]]) -> None:
        """Rewrite the stripped samples without their arrays (delete + insert of those rows)."""
        self._check_run(run_id)
        for step, ids in keep.items():
            kept = ", ".join(str(int(i)) for i in ids) or "-1"
            where = (f"run_id = {lit(run_id)} AND step = {int(step)} AND has_token_arrays = 1 "
                     f"AND sample_id NOT IN ({kept})")
            # no aliases: ClickHouse would resolve the WHERE's column names to them
            cols = ", ".join("NULL" if c in ("tokens", "logprobs", "ref_logprobs", "token_kl")
                             else "toUInt8(0)" if c == "has_token_arrays" else c
                             for c in SAMPLE_COLUMNS)
            doomed = self._t.query(f"SELECT {cols} FROM {self._db}.samples WHERE {where}")
            if not doomed:
                continue
            self._t.command(f"DELETE FROM {self._db}.samples WHERE {where}")
            self._insert("samples", doomed)

    def check_writable(self, run_id: str) -> None:
        """Setup check before a run is resumed: the run's newest rows of every step table are
        read (a store that cannot answer fails here, at setup, not with every write of the run)."""
        self._check_run(run_id)
        r = lit(run_id)
        for table in ("steps", "metrics", "histograms", "samples", "events"):
            try:
                self._t.query(f"SELECT max(step) FROM {self._db}.{table} WHERE run_id = {r}")
            except StoreError as exc:
                raise StoreError(f"cannot resume run {run_id!r}: its store does not answer "
                                 f"({exc.message}); check the server or the chDB directory",
                                 details={"run_id": run_id, "table": table}) from exc

    def close(self) -> None:
        if self._close_transport:
            self._t.close()

    # ------------------------------------------------------------------ internals

    def _metric_rows(self, run_id: str, batch: Batch, steps: dict[int, float]) -> list[tuple]:
        by_key: dict[tuple[str, int], tuple] = {}
        for m in batch.metrics:
            wall = float(m.wall_time) or time.time()
            step = int(m.step)
            steps.setdefault(step, wall)
            by_key[(str(m.name), step)] = (run_id, str(m.name), step, float(m.value), wall)
        return list(by_key.values())  # last wins within a batch

    def _histogram_rows(self, run_id: str, batch: Batch, steps: dict[int, float]) -> list[tuple]:
        out = {}
        for h in batch.histograms:
            wall = float(h.wall_time) or time.time()
            steps.setdefault(int(h.step), wall)
            out[(str(h.name), int(h.step))] = (run_id, str(h.name), int(h.step), wall,
                                               [float(e) for e in h.edges],
                                               [int(c) for c in h.counts])
        return list(out.values())

    def _new_run_names(self, run_id: str, batch: Batch) -> set[tuple[str, str, str]]:
        names = {(run_id, "metric", str(m.name)) for m in batch.metrics}
        names |= {(run_id, "histogram", str(h.name)) for h in batch.histograms}
        return names - self._run_names

    def _recompute_rollups(self, run_id: str, written: list[tuple]) -> None:
        """Rebuild the rollup rows of every block touched by rewritten metric steps from the
        metrics table (a replaced spike must leave the downsampled curve)."""
        by_name: dict[str, list[int]] = {}
        for r in written:
            by_name.setdefault(r[1], []).append(r[2])
        for name, steps in by_name.items():
            for size in rollups.SIZES:
                lo, hi = min(steps) // size, max(steps) // size
                where = (f"run_id = {lit(run_id)} AND name = {lit(name)}")
                self._t.command(f"DELETE FROM {self._db}.metric_rollups WHERE {where} AND "
                                f"size = {size} AND bucket BETWEEN {lo} AND {hi}")
                points = self._t.query(
                    f"SELECT step, value, wall_time FROM {self._db}.metrics WHERE {where} "
                    f"AND step BETWEEN {lo * size} AND {(hi + 1) * size - 1}")
                self._insert("metric_rollups", [
                    (run_id, name, size, b, *acc)
                    for b, acc in rollups.summarize(points, size).items()])

    def _replace_rewritten(self, run_id: str, tables: dict[str, list[tuple]]) -> set[str]:
        """A step written again (a resumed run re-logging steps) replaces the old rows of the same
        keys. Only batches that reach below what this run may already hold are checked. Returns
        the metric names that had rows replaced."""
        rewritten: set[str] = set()
        keyed = (("metrics", "(name, step)", lambda r: (r[1], r[2])),
                 ("histograms", "(name, step)", lambda r: (r[1], r[2])),
                 ("samples", "(step, sample_id)", lambda r: (r[1], r[2])))
        floor = self._touched_below.get(run_id)
        if floor is None:  # first batch of this writer: what did the run hold before?
            found = self._t.query(f"SELECT max(step) FROM {self._db}.steps "
                                  f"WHERE run_id = {lit(run_id)}")
            top = found[0][0] if found else None
            floor = self._touched_below[run_id] = -(2**62) if top is None else int(top)
        for table, key_sql, key in keyed:
            found = tables[table]
            if not found:
                continue
            lo = min(r[2] if table != "samples" else r[1] for r in found)
            if lo > floor:
                continue
            keys = {key(r) for r in found}
            where = f"run_id = {lit(run_id)} AND {key_sql} IN ({', '.join(lit(k) for k in keys)})"
            if self._t.query(f"SELECT count() FROM {self._db}.{table} WHERE {where}")[0][0]:
                self._t.command(f"DELETE FROM {self._db}.{table} WHERE {where}")
                if table == "metrics":
                    rewritten |= {k[0] for k in keys}
        return rewritten

    def _note_written(self, run_id: str, tables: dict[str, list[tuple]]) -> None:
        """After a successful batch: steps up to its highest now hold rows of this run."""
        top = max((r[2] for r in tables["metrics"] + tables["histograms"]), default=None)
        top_s = max((r[1] for r in tables["samples"]), default=None)
        highest = max((t for t in (top, top_s) if t is not None), default=None)
        if highest is not None:
            self._touched_below[run_id] = max(self._touched_below[run_id], highest)

    def _insert(self, table: str, found: Sequence[tuple], *, token: str | None = None) -> None:
        if not found:
            return
        types = TYPES[table]
        columns = list(types)
        data = [list(col) for col in zip(*found, strict=True)]
        # every insert carries a token: with the tables' deduplication window, an insert without
        # one would be deduplicated by its content (a rewritten, identical step would be dropped)
        settings = {"insert_deduplication_token": token or uuid.uuid4().hex}
        self._t.insert(table, columns, data, types, settings)

    def _next_ids(self, n: int) -> list[int]:
        """Row ids that grow with every write: ``ms * 1024 + counter`` (a random start within the
        millisecond keeps two writers apart)."""
        if not n:
            return []
        base = max(self._last_id + 1, int(time.time() * 1000) * IDS_PER_MS
                   + random.randrange(IDS_PER_MS // 2))
        self._last_id = base + n - 1
        return list(range(base, base + n))

    def _check_run(self, run_id: str) -> None:
        if run_id in self._known_runs:
            return
        if not self._t.query(f"SELECT count() FROM {self._db}.runs WHERE run_id = {lit(run_id)}"
                             )[0][0]:
            raise NotFoundError(f"run {run_id!r} is not in this store; create it first",
                                details={"run_id": run_id})
        self._known_runs.add(run_id)


def _rollup_rows(run_id: str, metric_rows: list[tuple]) -> list[tuple]:
    """This batch's partial rollup rows: per metric, size and block, its extremes and first
    NaN among the batch's points (readers fold the partial rows of a block)."""
    by_name: dict[str, list[tuple[int, float, float]]] = {}
    for _run, name, step, value, wall in metric_rows:
        by_name.setdefault(name, []).append((step, value, wall))
    return [(run_id, name, size, bucket, *acc) for name, points in by_name.items()
            for size in rollups.SIZES for bucket, acc in rollups.summarize(points, size).items()]


def _sample_row(run_id: str, s: SampleRecord, now: float) -> tuple:
    """One ``samples`` row in SAMPLE_COLUMNS order (arrays as the compact blobs of codec.py)."""
    return (run_id, int(s.step), int(s.sample_id), str(s.category), float(s.reward),
            str(s.prompt_id), int(s.group_id), int(s.has_token_arrays),
            [str(f) for f in s.flags], int(s.length), int(bool(s.truncated)),
            _float_or_none(s.uncertainty), _float_or_none(s.advantage), _float_or_none(s.value),
            _float_or_none(s.kl_sum), _float_or_none(s.kl_max), now, str(s.prompt),
            str(s.response),
            json.dumps({str(k): float(v) for k, v in s.components.items()})
            if s.components else "{}",
            codec.encode_tokens(s.tokens), codec.encode_f16(s.logprobs),
            codec.encode_f16(s.ref_logprobs), codec.encode_f16(s.token_kl))


def _check_text(tables: Mapping[str, Sequence[tuple]]) -> None:
    """ValueError naming the column when a text of the batch cannot be encoded as UTF-8 (a lone
    surrogate): found before any table is inserted, so a batch never lands in part."""
    for table, found in tables.items():
        if not found:
            continue
        for i, (column, kind) in enumerate(TYPES[table].items()):
            if "String" not in kind:
                continue
            values = [r[i] for r in found]
            if kind.startswith("Array"):
                values = [x for v in values for x in v]
            text = "".join(v for v in values if type(v) is str)
            if text.isascii():
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"{table}.{column}: a text that is not UTF-8 ({exc.reason})"
                                 ) from None


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _max_step(batch: Batch) -> int | None:
    steps = [r.step for group in (batch.metrics, batch.histograms, batch.samples, batch.events,
                                  batch.findings, batch.phases, batch.checkpoints,
                                  batch.snapshots) for r in group]
    return max(steps) if steps else None


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise StoreError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}",
                         details={"status": status})

