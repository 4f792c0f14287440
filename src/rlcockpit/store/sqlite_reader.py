"""The SQLite read side. Each thread gets its own connection (``query_only``), so the server's
thread pool and other processes read while the writer writes (WAL: readers see the last committed
transaction and never block the writer)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from rlcockpit.errors import NotFoundError, StoreError
from rlcockpit.records import (
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    HistogramRecord,
    PhaseRecord,
    RunInfo,
    SampleRecord,
    SnapshotRecord,
)
from rlcockpit.store import codec
from rlcockpit.store import sqlite_rows as rows
from rlcockpit.store.base import RunSummary, SampleHistogram, SamplePage, SampleQuery, Series
from rlcockpit.store.downsample import series_rows
from rlcockpit.store.lease import RunLease
from rlcockpit.store.sqlite_conns import ThreadConnections
from rlcockpit.store.sqlite_lease import read_lease
from rlcockpit.store.sqlite_samples import sample_histogram_query, sample_page_query

_RUN_COLUMNS = ("run_id, project, name, status, started_at, ended_at, config, last_step, "
                "heartbeat_at")
_BIG = 2**62
DROPPED_METRIC = "telemetry/dropped_total"
MISSING_METRIC = "telemetry/missing_steps"  # telemetry/delivery.py: steps logged but not stored
MIN_POINTS = 8  # a downsampled curve has buckets of up to 3 points (min, max, first NaN)
# SQLite calls the deadline check every this many virtual-machine instructions (~0.1 ms of work)
PROGRESS_EVERY = 4096
# the live tail: table, id column and record columns of the rows read by rows_after()
_TAIL_TABLES = {
    "findings": ("finding_id", rows.FINDING_COLUMNS),
    "phases": ("phase_id", "step, phase, status, duration_s, progress, wall_time"),
    "events": ("event_id", "step, kind, payload, wall_time"),
}


class SqliteReader:
    """Implements :class:`rlcockpit.store.base.StoreReader` (and ``sample_histogram``)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, stale_after_s: float) -> None:
        self._conns = ThreadConnections(connect)
        self.stale_after_s = stale_after_s
        self._local = threading.local()  # per-thread query deadline (deadline())
        self._lock = threading.Lock()  # guards the sample-count cache
        self._counts: dict[int, tuple[tuple, int]] = {}  # run key -> (run version, samples)

    # ------------------------------------------------------------------ runs

    def list_runs(self) -> list[RunInfo]:
        """Newest first. A 'running' run whose heartbeat is older than ``stale_after_s`` is
        reported as 'crashed' (its process died without closing the run)."""
        found = self._q(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, run_key DESC")
        return [self._run_info(r) for r in found]

    def get_run(self, run_id: str) -> RunInfo:
        found = self._q(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        if not found:
            raise rows.run_not_found(run_id)
        return self._run_info(found[0])

    def data_version(self) -> int:
        """This thread's connection's ``PRAGMA data_version``: moves when another one commits."""
        return int(self._q("PRAGMA data_version")[0][0])

    def get_lease(self, run_id: str) -> RunLease | None:
        """Who writes the run now (None: nobody holds its lease); store/sqlite_lease.py."""
        key = self._run_key(run_id)
        return self._guard(lambda: read_lease(self._conn(), key, run_id))

    def metric_names(self, run_id: str) -> list[str]:
        return self._names(run_id, "metric")

    def histogram_names(self, run_id: str) -> list[str]:
        return self._names(run_id, "histogram")

    def summary(self, run_id: str) -> RunSummary:
        run = self.get_run(run_id)
        key = self._run_key(run_id)
        # three one-aggregate queries: SQLite answers a lone MIN or MAX with one index seek
        steps = self._q("SELECT COUNT(*) FROM steps WHERE run_key = ?", (key,))[0][0]
        first = self._q("SELECT MIN(step) FROM steps WHERE run_key = ?", (key,))[0][0]
        last = self._q("SELECT MAX(step) FROM steps WHERE run_key = ?", (key,))[0][0]
        samples = self._sample_count(key)
        severities = dict(self._q("SELECT severity, COUNT(*) FROM findings WHERE run_key = ? "
                                  "GROUP BY severity", (key,)))
        found = self.latest(run_id, [DROPPED_METRIC, MISSING_METRIC])
        dropped, missing = found.get(DROPPED_METRIC), found.get(MISSING_METRIC)
        return RunSummary(run=run, steps=steps, first_step=first, last_step=last,
                          metric_names=tuple(self.metric_names(run_id)), samples=samples,
                          findings_by_severity=severities,
                          dropped_total=int(dropped[1]) if dropped else 0,
                          missing_steps=int(missing[1]) if missing else 0)

    # ------------------------------------------------------------------ metrics

    def read_series(self, run_id: str, names: Sequence[str], *, step_min: int | None = None,
                    step_max: int | None = None, max_points: int | None = None
                    ) -> dict[str, Series]:
        """One Series per requested name (empty when the run has no such metric)."""
        if max_points is not None and max_points < MIN_POINTS:
            raise StoreError(f"max_points={max_points} must be at least {MIN_POINTS} (or None "
                             "for every point)", details={"max_points": max_points})
        key = self._run_key(run_id)
        ids = self._name_ids(names)
        lo, hi = _bounds(step_min, step_max)
        out: dict[str, Series] = {}
        conn = self._conn()
        for name in names:
            if name not in ids:
                out[name] = Series(name=name, steps=(), values=())
                continue
            points, down = self._guard(lambda n=name: series_rows(conn, key, ids[n], lo, hi,
                                                                  max_points))
            out[name] = Series(name=name, steps=tuple(p[0] for p in points),
                               values=tuple(p[1] for p in points),
                               wall_times=tuple(p[2] for p in points), downsampled=down)
        return out

    def latest(self, run_id: str, names: Sequence[str] | None = None
               ) -> dict[str, tuple[int, float]]:
        key = self._run_key(run_id)
        if names is None:
            names = self.metric_names(run_id)
        ids = self._name_ids(names)
        out: dict[str, tuple[int, float]] = {}
        for name in names:
            if name in ids:
                found = self._q("SELECT step, value FROM metrics WHERE run_key = ? AND "
                                "name_id = ? ORDER BY step DESC LIMIT 1", (key, ids[name]))
                if found:
                    step, value = found[0]
                    out[name] = (step, float("nan") if value is None else value)
        return out

    def read_histograms(self, run_id: str, name: str, *, step_min: int | None = None,
                        step_max: int | None = None, max_points: int | None = None
                        ) -> list[HistogramRecord]:
        key = self._run_key(run_id)
        ids = self._name_ids([name])
        if name not in ids:
            return []
        lo, hi = _bounds(step_min, step_max)
        where = "run_key = ? AND name_id = ? AND step BETWEEN ? AND ?"
        args: tuple = (key, ids[name], lo, hi)
        if max_points is not None:
            steps = [r[0] for r in self._q(f"SELECT step FROM histograms WHERE {where} "
                                           "ORDER BY step", args)]
            steps = rows.evenly_spaced(steps, max_points)
            where += f" AND step IN ({', '.join('?' * len(steps))})"
            args += tuple(steps)
        found = self._q(f"SELECT step, wall_time, edges, counts FROM histograms WHERE {where} "
                        "ORDER BY step", args)
        return [HistogramRecord(step=s, name=name, edges=codec.decode_f64(e),
                                counts=codec.decode_i64(c), wall_time=w) for s, w, e, c in found]

    # ------------------------------------------------------------------ samples

    def query_samples(self, run_id: str, query: SampleQuery) -> SamplePage:
        key = self._run_key(run_id)
        count_sql, page_sql, args, page_args = sample_page_query(key, query)
        conn = self._conn()

        def run() -> tuple[int, list]:
            conn.execute("BEGIN")  # one snapshot for the total and the page
            try:
                total = (self._sample_count(key) if _unfiltered(query)
                         else conn.execute(count_sql, args).fetchone()[0])
                page = conn.execute(page_sql, args + page_args).fetchall()
            finally:
                conn.execute("COMMIT")
            return total, page

        total, page = self._guard(run)
        width = len(rows.SAMPLE_COLUMNS)
        items = tuple(rows.sample_from_row(r[:width], r[width:]) for r in page)
        has_arrays = rows.SAMPLE_COLUMNS.index("has_token_arrays")
        return SamplePage(items=items, total=total, offset=query.offset, limit=query.limit,
                          has_token_arrays=tuple(bool(r[has_arrays]) for r in page))

    def get_sample(self, run_id: str, step: int, sample_id: int) -> SampleRecord:
        key = self._run_key(run_id)
        found = self._q(
            f"SELECT {rows.columns('s', rows.SAMPLE_COLUMNS)}, "
            f"{rows.columns('p', rows.PAYLOAD_COLUMNS)} FROM samples s JOIN sample_payloads p "
            "ON p.payload_id = s.payload_id "
            "WHERE s.run_key = ? AND s.step = ? AND s.sample_id = ?", (key, step, sample_id))
        if not found:
            raise NotFoundError(f"run {run_id!r} has no sample {sample_id} at step {step}",
                                details={"run_id": run_id, "step": step, "sample_id": sample_id})
        width = len(rows.SAMPLE_COLUMNS)
        return rows.sample_from_row(found[0][:width], found[0][width:])

    def sample_histogram(self, run_id: str, field: str = "reward", bins: int = 50, *,
                         step_min: int | None = None, step_max: int | None = None
                         ) -> SampleHistogram:
        key = self._run_key(run_id)
        return self._guard(lambda: sample_histogram_query(
            self._conn(), key, field, bins, step_min=step_min, step_max=step_max))

    # ------------------------------------------------------------------ events and friends

    def read_events(self, run_id: str, *, kinds: Sequence[str] | None = None,
                    step_min: int | None = None, step_max: int | None = None,
                    limit: int | None = None) -> list[EventRecord]:
        where, args = self._step_where(run_id, step_min, step_max)
        if kinds is not None:
            where += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args += tuple(kinds)
        found = self._tail("events", "event_id", "step, kind, payload, wall_time", where, args,
                           limit)
        return [rows.event_from_row(r) for r in found]

    def read_findings(self, run_id: str, *, step_min: int | None = None,
                      severities: Sequence[str] | None = None,
                      incident: str | None = None) -> list[FindingRecord]:
        where, args = self._step_where(run_id, step_min, None)
        if severities is not None:
            where += f" AND severity IN ({', '.join('?' * len(severities))})"
            args += tuple(severities)
        if incident is not None:
            where += " AND incident = ?"
            args += (incident,)
        found = self._tail("findings", "finding_id", rows.FINDING_COLUMNS, where, args, None)
        return [rows.finding_from_row(r) for r in found]

    def read_snapshots(self, run_id: str, *, incident: str | None = None,
                       with_payload: bool = False) -> list[SnapshotRecord]:
        where, args = self._step_where(run_id, None, None)
        if incident is not None:
            where += " AND incident = ?"
            args += (incident,)
        found = self._tail("snapshots", "snapshot_id", rows.SNAPSHOT_COLUMNS, where, args, None)
        return [rows.snapshot_from_row(r, with_payload=with_payload) for r in found]

    def get_snapshot(self, run_id: str, snapshot_id: int) -> SnapshotRecord:
        where, args = self._step_where(run_id, None, None)
        found = self._tail("snapshots", "snapshot_id", rows.SNAPSHOT_COLUMNS,
                           where + " AND snapshot_id = ?", args + (int(snapshot_id),), None)
        if not found:
            raise NotFoundError(f"snapshot {snapshot_id} is not in run {run_id!r}",
                                details={"run_id": run_id, "snapshot_id": snapshot_id})
        return rows.snapshot_from_row(found[0])

    def read_phases(self, run_id: str, *, limit: int | None = None) -> list[PhaseRecord]:
        where, args = self._step_where(run_id, None, None)
        found = self._tail("phases", "phase_id", "step, phase, status, duration_s, progress, "
                           "wall_time", where, args, limit)
        return [rows.phase_from_row(r) for r in found]

    def read_checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        where, args = self._step_where(run_id, None, None)
        found = self._tail("checkpoints", "checkpoint_id", "step, path, reason, wall_time",
                           where, args, None)
        return [rows.checkpoint_from_row(r) for r in found]

    # ------------------------------------------------------------------ live tail (additive)

    def steps_after(self, run_id: str, after_step: int | None, *, limit: int = 1000
                    ) -> list[tuple[int, float]]:
        """(step, wall_time) of the run's complete steps above ``after_step``, ascending, at
        most ``limit``. A step row is written in the same transaction as the step's records, so
        a listed step is complete."""
        key = self._run_key(run_id)
        lo = -_BIG if after_step is None else int(after_step) + 1
        return self._q("SELECT step, wall_time FROM steps WHERE run_key = ? AND step >= ? "
                       "ORDER BY step LIMIT ?", (key, lo, int(limit)))

    def step_metrics(self, run_id: str, step_min: int, step_max: int
                     ) -> dict[int, dict[str, float]]:
        """Every scalar metric of each step in [step_min, step_max]: {step: {name: value}}."""
        key = self._run_key(run_id)
        found = self._q(
            "SELECT m.step, n.name, m.value FROM run_names r JOIN names n ON n.name_id = r.name_id "
            "JOIN metrics m ON m.run_key = r.run_key AND m.name_id = r.name_id "
            "AND m.step BETWEEN ? AND ? WHERE r.run_key = ? AND r.kind = 'metric'",
            (int(step_min), int(step_max), key))
        out: dict[int, dict[str, float]] = {}
        for step, name, value in found:
            out.setdefault(step, {})[name] = float("nan") if value is None else value
        return {s: dict(sorted(out[s].items())) for s in sorted(out)}

    def rows_after(self, run_id: str, kind: str, after_id: int | None, *, limit: int = 1000
                   ) -> list[tuple[int, FindingRecord | PhaseRecord | EventRecord]]:
        """(row id, record) of the findings, phases or events (``kind``) written after row
        ``after_id``, in write order, at most ``limit``. Row ids grow with every write (one
        writer at a time), so a cursor of the last id seen resumes without gaps."""
        if kind not in _TAIL_TABLES:
            raise StoreError(f"rows_after kind {kind!r} is not one of {', '.join(_TAIL_TABLES)}",
                             details={"kind": kind})
        id_col, cols = _TAIL_TABLES[kind]
        key = self._run_key(run_id)
        found = self._q(f"SELECT {id_col}, {cols} FROM {kind} WHERE run_key = ? AND {id_col} > ? "
                        f"ORDER BY {id_col} LIMIT ?", (key, int(after_id or 0), int(limit)))
        decode = {"findings": rows.finding_from_row, "phases": rows.phase_from_row,
                  "events": rows.event_from_row}[kind]
        return [(r[0], decode(r[1:])) for r in found]

    def tail_start_ids(self, run_id: str, after_step: int | None = None
                       ) -> dict[str, int | None]:
        """Where a live tail starts. Per kind (findings, phases, events), the row id it starts
        after: with ``after_step``, the id just before the first row of a later step (so every
        row about steps above ``after_step`` is delivered); without, the highest id (only rows
        written from now on); 0 when none. ``"step"``: ``after_step``, or else the last complete
        step (the ``steps`` table, not ``runs.last_step``, which phases and events also move)."""
        key = self._run_key(run_id)
        out: dict[str, int | None] = {"step": after_step if after_step is not None else self._q(
            "SELECT MAX(step) FROM steps WHERE run_key = ?", (key,))[0][0]}
        for kind, (id_col, _) in _TAIL_TABLES.items():
            last = self._q(f"SELECT COALESCE(MAX({id_col}), 0) FROM {kind} WHERE run_key = ?",
                           (key,))[0][0]
            first_later = None if after_step is None else self._q(
                f"SELECT MIN({id_col}) FROM {kind} WHERE run_key = ? AND step > ?",
                (key, int(after_step)))[0][0]
            out[kind] = int(last if first_later is None else first_later - 1)
        return out

    # ------------------------------------------------------------------ query time limit

    @contextlib.contextmanager
    def deadline(self, seconds: float | None, *, limit_s: float | None = None
                 ) -> Iterator[None]:
        """Interrupt this thread's queries that run past ``seconds`` from now: they raise
        :class:`QueryTimeoutError` (the server's 504). ``None`` means no limit; ``limit_s`` is
        the limit named in the error (default ``seconds``). Uses SQLite's progress handler on
        the calling thread's connection, so other threads are unaffected."""
        if seconds is None:
            yield
            return
        shown = seconds if limit_s is None else limit_s
        if seconds <= 0:
            raise rows.query_timeout(shown)
        conn = self._conn()
        previous = getattr(self._local, "deadline", None)
        self._local.deadline = time.monotonic() + seconds
        self._local.limit_s = shown
        conn.set_progress_handler(self._past_deadline, PROGRESS_EVERY)
        try:
            yield
        finally:
            self._local.deadline = previous
            if previous is None:
                conn.set_progress_handler(None, PROGRESS_EVERY)
            if conn.in_transaction:  # an interrupted read may leave its snapshot open
                conn.execute("ROLLBACK")

    def _past_deadline(self) -> int:
        at = getattr(self._local, "deadline", None)
        return 1 if at is not None and time.monotonic() > at else 0

    def close(self) -> None:
        self._conns.close()
        self._local = threading.local()

    # ------------------------------------------------------------------ internals

    def _sample_count(self, key: int) -> int:
        """The run's sample count, remembered until the run is written again: every write
        moves ``heartbeat_at``, so a finished run is counted once (a count of 1M samples reads
        the whole run's index, ~50 ms) and a live run on every call."""
        version = self._q("SELECT heartbeat_at, last_step FROM runs WHERE run_key = ?", (key,))[0]
        with self._lock:
            cached = self._counts.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        count = int(self._q("SELECT COUNT(*) FROM samples WHERE run_key = ?", (key,))[0][0])
        with self._lock:
            self._counts[key] = (version, count)
        return count


    def _tail(self, table: str, id_col: str, cols: str, where: str, args: tuple,
              limit: int | None) -> list[tuple]:
        """Rows ascending by (step, insertion); with ``limit`` the most recent ``limit`` rows."""
        if limit is None:
            return self._q(f"SELECT {cols} FROM {table} WHERE {where} ORDER BY step, {id_col}",
                           args)
        if limit < 0:
            raise StoreError(f"limit={limit} must be >= 0", details={"limit": limit})
        found = self._q(f"SELECT {cols} FROM {table} WHERE {where} "
                        f"ORDER BY step DESC, {id_col} DESC LIMIT ?", args + (limit,))
        return found[::-1]

    def _step_where(self, run_id: str, step_min: int | None, step_max: int | None
                    ) -> tuple[str, tuple]:
        lo, hi = _bounds(step_min, step_max)
        return "run_key = ? AND step BETWEEN ? AND ?", (self._run_key(run_id), lo, hi)

    def _names(self, run_id: str, kind: str) -> list[str]:
        key = self._run_key(run_id)
        found = self._q("SELECT n.name FROM run_names r JOIN names n ON n.name_id = r.name_id "
                        "WHERE r.run_key = ? AND r.kind = ? ORDER BY n.name", (key, kind))
        return [r[0] for r in found]

    def _name_ids(self, names: Sequence[str]) -> dict[str, int]:
        if not names:
            return {}
        found = self._q("SELECT name, name_id FROM names WHERE name IN "
                        "(SELECT value FROM json_each(?))", (json.dumps(list(names)),))
        return dict(found)

    def _run_key(self, run_id: str) -> int:
        found = self._q("SELECT run_key FROM runs WHERE run_id = ?", (run_id,))
        if not found:
            raise rows.run_not_found(run_id)
        return int(found[0][0])

    def _run_info(self, row: tuple) -> RunInfo:
        run_id, project, name, status, started, ended, config, last_step, heartbeat = row
        if status == "running" and heartbeat is not None and \
                time.time() - heartbeat > self.stale_after_s:
            status = "crashed"
        return RunInfo(run_id=run_id, project=project, name=name, status=status,
                       started_at=started, ended_at=ended, config=json.loads(config),
                       last_step=last_step, heartbeat_at=heartbeat)

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def _q(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._guard(lambda: self._conn().execute(sql, args).fetchall())

    def _guard(self, fn):
        try:
            return fn()
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and self._past_deadline():
                raise rows.query_timeout(self._local.limit_s) from exc
            raise StoreError(f"sqlite store query failed: {exc}",
                             details={"sqlite_error": type(exc).__name__}) from exc


def _bounds(step_min: int | None, step_max: int | None) -> tuple[int, int]:
    return (-_BIG if step_min is None else int(step_min), _BIG if step_max is None else int(step_max))


def _unfiltered(q: SampleQuery) -> bool:
    """A page of every sample of the run (only order, limit, offset, arrays given)."""
    return (q.step_min is None and q.step_max is None and q.category is None
            and q.reward_min is None and q.reward_max is None and not q.flags
            and q.prompt_id is None and not q.text and q.has_token_arrays is None)
