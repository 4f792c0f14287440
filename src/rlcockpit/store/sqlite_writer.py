"""The SQLite write side: one connection, one thread, one transaction per batch."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping

from rlcockpit.errors import NotFoundError, StoreError
from rlcockpit.records import RUN_STATUSES, Batch, RunInfo
from rlcockpit.store import codec, rollups
from rlcockpit.store import sqlite_rows as rows

# SQLite result codes worth a retry: the lock was held longer than busy_timeout.
_TRANSIENT = ("locked", "busy")
_UNAVAILABLE = (sqlite3.OperationalError, sqlite3.DatabaseError, sqlite3.InternalError)
QUICK_CHECK_MAX_BYTES = 256 * 1024 * 1024  # a resumed store up to this size gets a quick_check


class SqliteWriter:
    """Implements :class:`rlcockpit.store.base.StoreWriter`.

    ``write_batch`` also refreshes the run's heartbeat and ``last_step`` inside the same
    transaction. Re-writing a step (a resumed run logging steps again) replaces that step's
    metrics, histograms and samples; events, findings, phases and checkpoints are append-only.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._run_keys: dict[str, int] = {}
        self._name_ids: dict[str, int] = {}
        self._run_names: set[tuple[int, str, int]] = set()
        # the run's lease (store/sqlite_lease.py) sets this: called inside each write_batch
        # transaction before anything is written; what it raises rolls the batch back
        self.fence: Callable[[sqlite3.Connection, int], None] | None = None

    # ------------------------------------------------------------------ runs

    def create_run(self, run: RunInfo) -> None:
        _check_status(run.status)
        now = time.time()
        try:
            self._conn.execute(
                "INSERT INTO runs (run_id, project, name, status, started_at, ended_at, config, "
                "last_step, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run.run_id, run.project, run.name, run.status, run.started_at or now,
                 run.ended_at, rows.config_json(run.config), run.last_step,
                 run.heartbeat_at or now))
        except sqlite3.IntegrityError:
            raise StoreError(f"a run with id {run.run_id!r} already exists in this store; pass "
                             "resume=True to continue it or choose another run id",
                             details={"run_id": run.run_id}) from None
        except sqlite3.Error as exc:
            raise _store_error("create run", exc) from exc

    def set_run_status(self, run_id: str, status: str, *, ended_at: float | None = None) -> None:
        _check_status(status)
        if status == "running":
            ended_at = None
        self._execute_one("UPDATE runs SET status = ?, ended_at = ? WHERE run_key = ?",
                          (status, ended_at, self._run_key(run_id)))

    def heartbeat(self, run_id: str, wall_time: float, last_step: int | None) -> None:
        self._execute_one(
            "UPDATE runs SET heartbeat_at = ?, "
            "last_step = MAX(COALESCE(last_step, ?), COALESCE(?, last_step)) WHERE run_key = ?",
            (wall_time, last_step, last_step, self._run_key(run_id)))

    # ------------------------------------------------------------------ data

    def write_batch(self, run_id: str, batch: Batch) -> None:
        """Write everything in ``batch`` in one transaction (all or nothing)."""
        run_key = self._run_key(run_id)
        new_names: dict[str, int] = {}
        new_run_names: set[tuple[int, str, int]] = set()
        with self._transaction("write batch"):
            if self.fence is not None:
                self.fence(self._conn, run_key)
            self._write_all(run_key, batch, new_names, new_run_names)
        # caches change only after the commit, so a rolled-back batch leaves no stale ids
        self._name_ids.update(new_names)
        self._run_names |= new_run_names

    def strip_token_arrays(self, run_id: str, keep: Mapping[int, Collection[int]]) -> None:
        """For each step in ``keep``, drop the per-token arrays of that step's samples whose
        sample id is not in ``keep[step]`` (the token-array payload policy, docs/store.md)."""
        run_key = self._run_key(run_id)
        params = [(run_key, int(step), json.dumps(sorted(int(i) for i in ids)))
                  for step, ids in keep.items()]
        doomed = ("SELECT payload_id FROM samples WHERE run_key = ? AND step = ? AND "
                  "has_token_arrays = 1 AND sample_id NOT IN (SELECT value FROM json_each(?))")
        with self._transaction("strip token arrays"):
            self._conn.executemany(
                "UPDATE sample_payloads SET tokens = NULL, logprobs = NULL, "
                f"ref_logprobs = NULL, token_kl = NULL WHERE payload_id IN ({doomed})", params)
            self._conn.executemany(
                "UPDATE samples SET has_token_arrays = 0 WHERE run_key = ? AND step = ? AND "
                "has_token_arrays = 1 AND sample_id NOT IN (SELECT value FROM json_each(?))",
                params)

    @contextlib.contextmanager
    def _transaction(self, action: str) -> Iterator[None]:
        """One IMMEDIATE transaction: committed as a whole or rolled back; sqlite errors become
        StoreError naming ``action``."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _store_error(action, exc) from exc

    def check_writable(self, run_id: str) -> None:
        """Setup check before a run is resumed: the store must take the run's writes. A write
        transaction puts a row where the run's next rows go (metrics, steps, events), reading the
        run's newest rows on the way, and is rolled back; a store up to QUICK_CHECK_MAX_BYTES also
        gets SQLite's ``quick_check``. StoreError with the fix when it fails (a full disk, a
        damaged file): resuming would train with every write refused."""
        key = self._run_key(run_id)
        try:
            size = self._conn.execute("PRAGMA page_count").fetchone()[0] * \
                self._conn.execute("PRAGMA page_size").fetchone()[0]
            if size <= QUICK_CHECK_MAX_BYTES:
                found = self._conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if found != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {found}")
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._probe_rows(key)
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot resume run {run_id!r}: its store refuses writes ({' '.join(str(exc).split())}); every step "
                "would be lost. Free disk space, or restore the store from a backup (readable "
                "runs can be copied out with `rlcockpit store copy`)",
                details={"run_id": run_id, "sqlite_error": type(exc).__name__}) from exc

    def _probe_rows(self, key: int) -> None:
        last = self._conn.execute("SELECT MAX(step) FROM steps WHERE run_key = ?", (key,)
                                  ).fetchone()[0]
        step = (last or 0) + 1
        names = [r[0] for r in self._conn.execute(
            "SELECT name_id FROM run_names WHERE run_key = ? AND kind = 'metric'", (key,))]
        for name_id in names:  # the newest row of each curve: the leaf its next row goes to
            self._conn.execute("SELECT value FROM metrics WHERE run_key = ? AND name_id = ? "
                               "ORDER BY step DESC LIMIT 1", (key, name_id)).fetchall()
            self._conn.execute("INSERT OR REPLACE INTO metrics (run_key, name_id, step, value, "
                               "wall_time) VALUES (?, ?, ?, 0.0, 0.0)", (key, name_id, step))
        self._conn.execute("SELECT COUNT(*) FROM samples WHERE run_key = ? AND step >= ?",
                           (key, step - 1)).fetchall()
        self._conn.execute("INSERT OR IGNORE INTO steps (run_key, step, wall_time) "
                           "VALUES (?, ?, 0.0)", (key, step))
        self._conn.execute("INSERT INTO events (run_key, step, kind, payload, wall_time) "
                           "VALUES (?, ?, 'probe', '{}', 0.0)", (key, step))

    def close(self) -> None:
        self._conn.close()

    # ------------------------------------------------------------------ internals

    def _write_all(self, run_key: int, batch: Batch, new_names: dict[str, int],
                   new_run_names: set) -> None:
        now = time.time()
        steps: dict[int, float] = {}
        self._write_metrics(run_key, batch, new_names, new_run_names, steps)
        self._write_histograms(run_key, batch, new_names, new_run_names, steps)
        self._write_samples(run_key, batch, now, steps)
        self._write_appends(run_key, batch, now)
        if new_run_names:
            self._conn.executemany(
                "INSERT OR IGNORE INTO run_names (run_key, kind, name_id) VALUES (?, ?, ?)",
                sorted(new_run_names))
        if steps:
            self._conn.executemany(
                "INSERT OR IGNORE INTO steps (run_key, step, wall_time) VALUES (?, ?, ?)",
                [(run_key, s, w) for s, w in steps.items()])
        last = _max_step(batch)
        self._conn.execute(
            "UPDATE runs SET heartbeat_at = ?, "
            "last_step = MAX(COALESCE(last_step, ?), COALESCE(?, last_step)) WHERE run_key = ?",
            (now, last, last, run_key))

    def _write_metrics(self, run_key, batch, new_names, new_run_names, steps) -> None:
        if not batch.metrics:
            return
        by_name: dict[int, dict[int, tuple[int, float, float]]] = {}
        for m in batch.metrics:
            name_id = self._intern(m.name, new_names)
            self._note_run_name(run_key, "metric", name_id, new_run_names)
            wall = float(m.wall_time) or time.time()
            step = int(m.step)
            steps.setdefault(step, wall)
            by_name.setdefault(name_id, {})[step] = (step, float(m.value), wall)  # last wins
        rewritten = [n for n, points in by_name.items() if self._has_metric_in(
            run_key, n, min(points), max(points))]
        # float('nan') binds as NULL: NULL means NaN in this table (see schema.py)
        self._conn.executemany(
            "INSERT OR REPLACE INTO metrics (run_key, name_id, step, value, wall_time) "
            "VALUES (?, ?, ?, ?, ?)",
            [(run_key, n, *p) for n, points in by_name.items() for p in points.values()])
        for name_id, points in by_name.items():
            if name_id in rewritten:
                rollups.recompute(self._conn, run_key, name_id, min(points), max(points))
            else:
                rollups.merge(self._conn, run_key, name_id, list(points.values()))

    def _has_metric_in(self, run_key: int, name_id: int, lo: int, hi: int) -> bool:
        return bool(self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM metrics WHERE run_key = ? AND name_id = ? AND "
            "step BETWEEN ? AND ?)", (run_key, name_id, lo, hi)).fetchone()[0])

    def _write_histograms(self, run_key, batch, new_names, new_run_names, steps) -> None:
        if not batch.histograms:
            return
        params = []
        for h in batch.histograms:
            name_id = self._intern(h.name, new_names)
            self._note_run_name(run_key, "histogram", name_id, new_run_names)
            wall = float(h.wall_time) or time.time()
            steps.setdefault(int(h.step), wall)
            params.append((run_key, name_id, int(h.step), wall, codec.encode_f64(h.edges),
                           codec.encode_i64(h.counts)))
        self._conn.executemany(
            "INSERT OR REPLACE INTO histograms (run_key, name_id, step, wall_time, edges, counts) "
            "VALUES (?, ?, ?, ?, ?, ?)", params)

    def _write_samples(self, run_key: int, batch: Batch, now: float, steps: dict) -> None:
        if not batch.samples:
            return
        self._delete_rewritten_samples(run_key, batch)
        first_id = self._conn.execute(
            "SELECT COALESCE(MAX(payload_id), 0) + 1 FROM sample_payloads").fetchone()[0]
        narrow, payloads, flags = [], [], []
        for i, s in enumerate(batch.samples):
            n, p = rows.sample_rows(run_key, s, now, first_id + i)
            narrow.append(n)
            payloads.append(p)
            if s.flags:
                flags.extend((run_key, str(f), n[1], n[2]) for f in set(s.flags))
            steps.setdefault(n[1], now)
        self._conn.executemany(
            f"INSERT OR REPLACE INTO samples (run_key, {', '.join(rows.SAMPLE_COLUMNS)}, "
            f"wall_time, payload_id) VALUES ({', '.join('?' * 19)})", narrow)
        self._conn.executemany(
            f"INSERT INTO sample_payloads (payload_id, {', '.join(rows.PAYLOAD_COLUMNS)}) "
            f"VALUES ({', '.join('?' * 8)})", payloads)
        if flags:
            self._conn.executemany(
                "INSERT OR IGNORE INTO sample_flags (run_key, flag, step, sample_id) "
                "VALUES (?, ?, ?, ?)", flags)

    def _delete_rewritten_samples(self, run_key: int, batch: Batch) -> None:
        """A step written again (a resumed run re-logging steps) replaces its old samples: their
        payloads and flags go too. One index probe when nothing is rewritten."""
        lo = min(int(s.step) for s in batch.samples)
        hi = max(int(s.step) for s in batch.samples)
        if not self._conn.execute("SELECT EXISTS (SELECT 1 FROM samples WHERE run_key = ? AND "
                                  "step BETWEEN ? AND ?)", (run_key, lo, hi)).fetchone()[0]:
            return
        keys = [(run_key, int(s.step), int(s.sample_id)) for s in batch.samples]
        where = "run_key = ? AND step = ? AND sample_id = ?"
        self._conn.executemany(
            f"DELETE FROM sample_payloads WHERE payload_id = "
            f"(SELECT payload_id FROM samples WHERE {where})", keys)
        self._conn.executemany(f"DELETE FROM sample_flags WHERE {where}", keys)
        self._conn.executemany(f"DELETE FROM samples WHERE {where}", keys)

    def _write_appends(self, run_key: int, batch: Batch, now: float) -> None:
        tables = (
            ("events (run_key, step, kind, payload, wall_time)", 5, batch.events, rows.event_row),
            ("findings (run_key, step, detector, severity, message, evidence, patterns, status, "
             "wall_time, incident)", 10, batch.findings, rows.finding_row),
            ("snapshots (run_key, step, kind, payload, wall_time, incident)", 6, batch.snapshots,
             rows.snapshot_row),
            ("phases (run_key, step, phase, status, duration_s, progress, wall_time)", 7,
             batch.phases, rows.phase_row),
            ("checkpoints (run_key, step, path, reason, wall_time)", 5, batch.checkpoints,
             rows.checkpoint_row),
        )
        for target, width, records, to_row in tables:
            if records:
                self._conn.executemany(
                    f"INSERT INTO {target} VALUES ({', '.join('?' * width)})",
                    [to_row(run_key, r, now) for r in records])

    def _intern(self, name: str, new_names: dict[str, int]) -> int:
        name_id = self._name_ids.get(name) or new_names.get(name)
        if name_id is None:
            self._conn.execute("INSERT OR IGNORE INTO names (name) VALUES (?)", (name,))
            name_id = self._conn.execute("SELECT name_id FROM names WHERE name = ?",
                                         (name,)).fetchone()[0]
            new_names[name] = name_id
        return name_id

    def _note_run_name(self, run_key: int, kind: str, name_id: int, new_run_names: set) -> None:
        key = (run_key, kind, name_id)
        if key not in self._run_names:
            new_run_names.add(key)

    def _run_key(self, run_id: str) -> int:
        key = self._run_keys.get(run_id)
        if key is None:
            try:
                row = self._conn.execute("SELECT run_key FROM runs WHERE run_id = ?",
                                         (run_id,)).fetchone()
            except sqlite3.Error as exc:
                raise _store_error("look up run", exc) from exc
            if row is None:
                raise NotFoundError(f"run {run_id!r} is not in this store; create it first",
                                    details={"run_id": run_id})
            key = self._run_keys[run_id] = int(row[0])
        return key

    def _execute_one(self, sql: str, params: tuple) -> None:
        try:
            self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise _store_error("update run", exc) from exc


def _max_step(batch: Batch) -> int | None:
    steps = [r.step for group in (batch.metrics, batch.histograms, batch.samples, batch.events,
                                  batch.findings, batch.phases, batch.checkpoints,
                                  batch.snapshots) for r in group]
    return max(steps) if steps else None


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise StoreError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}",
                         details={"status": status})


def _store_error(action: str, exc: sqlite3.Error) -> StoreError:
    transient = any(word in str(exc).lower() for word in _TRANSIENT)
    # the file cannot be written now (full disk, I/O error, corruption, a lock held too long), as
    # opposed to a value it refuses (IntegrityError, DataError...): the telemetry spools the
    # former and splits the batch on the latter (docs/telemetry.md)
    unavailable = type(exc) in _UNAVAILABLE
    return StoreError(f"sqlite store could not {action}: {exc}",
                      details={"transient": transient, "sqlite_error": type(exc).__name__,
                               "unavailable": unavailable})
