"""The ClickHouse read side (``clickhouse://``, ``chdb://``): the same queries for both transports.

ClickHouse aggregates the raw rows fast enough that no rollup tables are kept: a downsampled curve
is one GROUP BY over the metric's contiguous key range, a sample histogram one pass over a column.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence

from rlcockpit.errors import NotFoundError, QueryTimeoutError, StoreError
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
from rlcockpit.store import ch_lease, ch_samples
from rlcockpit.store import sqlite_rows as rows
from rlcockpit.store.base import RunSummary, SampleHistogram, SamplePage, SampleQuery, Series
from rlcockpit.store.ch_samples import _tuple
from rlcockpit.store.ch_transport import Transport, lit
from rlcockpit.store.lease import RunLease

_BIG = 2**62
DROPPED_METRIC = "telemetry/dropped_total"
MISSING_METRIC = "telemetry/missing_steps"  # telemetry/delivery.py: steps logged but not stored
MIN_POINTS = 8
LATEST_WINDOW = 4096  # latest(): look at the last steps first, then name by name
_TAIL = {
    "findings": ("finding_id", rows.FINDING_COLUMNS),
    "phases": ("phase_id", "step, phase, status, duration_s, progress, wall_time"),
    "events": ("event_id", "step, kind, payload, wall_time"),
}
_DECODE = {"findings": rows.finding_from_row, "phases": rows.phase_from_row,
           "events": rows.event_from_row}


class ClickHouseReader:
    """Implements :class:`rlcockpit.store.base.StoreReader` on a ClickHouse transport."""

    def __init__(self, transport: Transport, *, stale_after_s: float,
                 close_transport: bool = False) -> None:
        self._t = transport
        self._db = transport.database
        self.stale_after_s = stale_after_s
        self._close_transport = close_transport
        self._local = threading.local()
        self._known_runs: set[str] = set()

    # ------------------------------------------------------------------ runs

    def _runs(self, where: str = "") -> list[tuple]:
        """Run rows (run_id, project, name, status, started_at, ended_at, config, last_step,
        heartbeat_at): three small aggregations joined here (cheaper than SQL joins in chDB)."""
        db = self._db
        status = {r[0]: (r[1], r[2]) for r in self._q(
            f"SELECT run_id, argMax(status, written_ns), argMax(tuple(ended_at), written_ns) "
            f"FROM {db}.run_status {where} GROUP BY run_id")}
        beats = {r[0]: (r[1], r[2]) for r in self._q(
            f"SELECT run_id, max(last_step), argMax(heartbeat_at, written_ns) "
            f"FROM {db}.run_heartbeats {where} GROUP BY run_id")}
        out = []
        for run_id, project, name, started, config in self._q(
                f"SELECT run_id, project, name, started_at, config FROM {db}.runs {where} "
                "ORDER BY run_id, created_ns LIMIT 1 BY run_id"):
            st, ended = status.get(run_id, ("running", (None,)))
            last_step, heartbeat = beats.get(run_id, (None, None))
            out.append((run_id, project, name, st, started, _tuple(ended)[0], config, last_step,
                        heartbeat))
        return out

    def list_runs(self) -> list[RunInfo]:
        runs = sorted(self._runs(), key=lambda r: (r[4], r[0]), reverse=True)  # newest first
        return [self._run_info(r) for r in runs]

    def get_run(self, run_id: str) -> RunInfo:
        found = self._runs(f"WHERE run_id = {lit(run_id)}")
        if not found:
            raise rows.run_not_found(run_id)
        return self._run_info(found[0])

    def _run_info(self, row: tuple) -> RunInfo:
        run_id, project, name, status, started, ended, config, last_step, heartbeat = row
        ended = None if ended is None or ended != ended else ended
        if status == "running" and heartbeat is not None and \
                time.time() - heartbeat > self.stale_after_s:
            status = "crashed"
        return RunInfo(run_id=run_id, project=project, name=name, status=status or "running",
                       started_at=started, ended_at=ended, config=json.loads(config),
                       last_step=last_step, heartbeat_at=heartbeat)

    def get_lease(self, run_id: str) -> RunLease | None:
        """Who writes the run now (None: nobody holds its lease); store/ch_lease.py."""
        self._check_run(run_id)
        return ch_lease.lease_from_rows(run_id, self._q(ch_lease.current_sql(self._db, run_id)))[0]

    def metric_names(self, run_id: str) -> list[str]:
        return self._names(run_id, "metric")

    def histogram_names(self, run_id: str) -> list[str]:
        return self._names(run_id, "histogram")

    def _names(self, run_id: str, kind: str) -> list[str]:
        self._check_run(run_id)
        return [r[0] for r in self._q(
            f"SELECT DISTINCT name FROM {self._db}.run_names WHERE run_id = {lit(run_id)} "
            f"AND kind = {lit(kind)} ORDER BY name")]

    def summary(self, run_id: str) -> RunSummary:
        run = self.get_run(run_id)
        r = lit(run_id)
        # FINAL drops a step written twice (ReplacingMergeTree); the ends read one granule each
        # in key order (uniqExact / min / max over the steps of a 1M-step run: ~65 ms on chDB)
        steps, first, last = self._q(
            f"SELECT (SELECT count() FROM {self._db}.steps FINAL WHERE run_id = {r}), "
            f"(SELECT step FROM {self._db}.steps WHERE run_id = {r} ORDER BY step LIMIT 1), "
            f"(SELECT step FROM {self._db}.steps WHERE run_id = {r} ORDER BY step DESC LIMIT 1)")[0]
        samples = self._q(f"SELECT count() FROM {self._db}.samples WHERE run_id = {r}")[0][0]
        severities = dict(self._q(f"SELECT toString(severity), count() FROM {self._db}.findings "
                                  f"WHERE run_id = {r} GROUP BY severity"))
        names = self.metric_names(run_id)
        wanted = [n for n in (DROPPED_METRIC, MISSING_METRIC) if n in names]
        found = self.latest(run_id, wanted) if wanted else {}
        dropped, missing = found.get(DROPPED_METRIC), found.get(MISSING_METRIC)
        return RunSummary(run=run, steps=int(steps), first_step=first if steps else None,
                          last_step=last if steps else None,
                          metric_names=tuple(names), samples=int(samples),
                          findings_by_severity=severities,
                          dropped_total=int(dropped[1]) if dropped else 0,
                          missing_steps=int(missing[1]) if missing else 0)

    # ------------------------------------------------------------------ metrics

    def read_series(self, run_id: str, names: Sequence[str], *, step_min: int | None = None,
                    step_max: int | None = None, max_points: int | None = None
                    ) -> dict[str, Series]:
        if max_points is not None and max_points < MIN_POINTS:
            raise StoreError(f"max_points={max_points} must be at least {MIN_POINTS} (or None "
                             "for every point)", details={"max_points": max_points})
        self._check_run(run_id)
        lo, hi = _bounds(step_min, step_max)
        found = ch_samples.series_points(self._q, self._db, run_id, names, lo, hi, max_points)
        out: dict[str, Series] = {}
        for name in names:
            points, down = found[name]
            out[name] = Series(name=name, steps=tuple(p[0] for p in points),
                               values=tuple(p[1] for p in points),
                               wall_times=tuple(p[2] for p in points), downsampled=down)
        return out

    def latest(self, run_id: str, names: Sequence[str] | None = None
               ) -> dict[str, tuple[int, float]]:
        if names is None:
            names = self.metric_names(run_id)
        else:
            self._check_run(run_id)
        if not names:
            return {}
        r = lit(run_id)
        found = self._q(f"SELECT step FROM {self._db}.steps WHERE run_id = {r} "
                        "ORDER BY step DESC LIMIT 1")  # one granule in key order, not max() over all
        top = found[0][0] if found else None
        out: dict[str, tuple[int, float]] = {}
        if top is not None:
            for name, step, value in self._q(
                    f"SELECT toString(name), max(step), argMax(value, step) FROM {self._db}.metrics "
                    f"WHERE run_id = {r} AND name IN ({lit(list(names))}) "
                    f"AND step >= {int(top) - LATEST_WINDOW} GROUP BY name"):
                out[name] = (int(step), float(value))
        for name in names:
            if name not in out:  # a metric not logged recently: read it back from its end
                found = self._q(f"SELECT step, value FROM {self._db}.metrics WHERE run_id = {r} "
                                f"AND name = {lit(name)} ORDER BY step DESC LIMIT 1")
                if found:
                    out[name] = (int(found[0][0]), float(found[0][1]))
        return {n: out[n] for n in names if n in out}

    def read_histograms(self, run_id: str, name: str, *, step_min: int | None = None,
                        step_max: int | None = None, max_points: int | None = None
                        ) -> list[HistogramRecord]:
        self._check_run(run_id)
        lo, hi = _bounds(step_min, step_max)
        where = (f"run_id = {lit(run_id)} AND name = {lit(name)} AND step BETWEEN {lo} AND {hi}")
        if max_points is not None:
            steps = [r[0] for r in self._q(f"SELECT step FROM {self._db}.histograms "
                                           f"WHERE {where} ORDER BY step")]
            steps = rows.evenly_spaced(steps, max_points)
            where += f" AND step IN ({', '.join(str(s) for s in steps) or 'NULL'})"
        found = self._q(f"SELECT step, wall_time, edges, counts FROM {self._db}.histograms "
                        f"WHERE {where} ORDER BY step")
        return [HistogramRecord(step=s, name=name, edges=tuple(e), counts=tuple(c), wall_time=w)
                for s, w, e, c in found]

    # ------------------------------------------------------------------ samples

    def query_samples(self, run_id: str, query: SampleQuery) -> SamplePage:
        self._check_run(run_id)
        return ch_samples.sample_page(self._q, self._db, run_id, query)

    def get_sample(self, run_id: str, step: int, sample_id: int) -> SampleRecord:
        self._check_run(run_id)
        found = ch_samples.samples_by_key(self._q, self._db, run_id, [(step, sample_id)], True)
        if not found:
            raise NotFoundError(f"run {run_id!r} has no sample {sample_id} at step {step}",
                                details={"run_id": run_id, "step": step, "sample_id": sample_id})
        return found[0][0]

    def sample_histogram(self, run_id: str, field: str = "reward", bins: int = 50, *,
                         step_min: int | None = None, step_max: int | None = None
                         ) -> SampleHistogram:
        self._check_run(run_id)
        return ch_samples.sample_histogram(self._q, self._db, run_id, field, bins,
                                           step_min=step_min, step_max=step_max)

    # ------------------------------------------------------------------ events and friends

    def read_events(self, run_id: str, *, kinds: Sequence[str] | None = None,
                    step_min: int | None = None, step_max: int | None = None,
                    limit: int | None = None) -> list[EventRecord]:
        where = self._step_where(run_id, step_min, step_max)
        if kinds is not None:
            where += f" AND kind IN ({lit(list(kinds)) if kinds else 'NULL'})"
        found = self._tail("events", "event_id", "step, kind, payload, wall_time", where, limit)
        return [rows.event_from_row(r) for r in found]

    def read_findings(self, run_id: str, *, step_min: int | None = None,
                      severities: Sequence[str] | None = None,
                      incident: str | None = None) -> list[FindingRecord]:
        where = self._step_where(run_id, step_min, None)
        if severities is not None:
            where += f" AND severity IN ({lit(list(severities)) if severities else 'NULL'})"
        if incident is not None:
            where += f" AND incident = {lit(incident)}"
        found = self._tail("findings", "finding_id", rows.FINDING_COLUMNS, where, None)
        return [rows.finding_from_row(r) for r in found]

    def read_snapshots(self, run_id: str, *, incident: str | None = None,
                       with_payload: bool = False) -> list[SnapshotRecord]:
        where = self._step_where(run_id, None, None)
        if incident is not None:
            where += f" AND incident = {lit(incident)}"
        cols = rows.SNAPSHOT_COLUMNS if with_payload else rows.SNAPSHOT_COLUMNS.replace(
            "payload", "'{}' AS payload")
        found = self._tail("snapshots", "snapshot_id", cols, where, None)
        return [rows.snapshot_from_row(r, with_payload=with_payload) for r in found]

    def get_snapshot(self, run_id: str, snapshot_id: int) -> SnapshotRecord:
        where = self._step_where(run_id, None, None) + f" AND snapshot_id = {int(snapshot_id)}"
        found = self._tail("snapshots", "snapshot_id", rows.SNAPSHOT_COLUMNS, where, None)
        if not found:
            raise NotFoundError(f"snapshot {snapshot_id} is not in run {run_id!r}",
                                details={"run_id": run_id, "snapshot_id": snapshot_id})
        return rows.snapshot_from_row(found[0])

    def read_phases(self, run_id: str, *, limit: int | None = None) -> list[PhaseRecord]:
        where = self._step_where(run_id, None, None)
        found = self._tail("phases", "phase_id", "step, phase, status, duration_s, progress, "
                           "wall_time", where, limit)
        return [rows.phase_from_row(r) for r in found]

    def read_checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        where = self._step_where(run_id, None, None)
        found = self._tail("checkpoints", "checkpoint_id", "step, path, reason, wall_time",
                           where, None)
        return [rows.checkpoint_from_row(r) for r in found]

    # ------------------------------------------------------------------ live tail

    def steps_after(self, run_id: str, after_step: int | None, *, limit: int = 1000
                    ) -> list[tuple[int, float]]:
        self._check_run(run_id)
        lo = -_BIG if after_step is None else int(after_step) + 1
        return [(int(s), float(w)) for s, w in self._q(
            f"SELECT step, min(wall_time) FROM {self._db}.steps WHERE run_id = {lit(run_id)} "
            f"AND step >= {lo} GROUP BY step ORDER BY step LIMIT {int(limit)}")]

    def step_metrics(self, run_id: str, step_min: int, step_max: int
                     ) -> dict[int, dict[str, float]]:
        self._check_run(run_id)
        out: dict[int, dict[str, float]] = {}
        for step, name, value in self._q(
                f"SELECT step, toString(name), value FROM {self._db}.metrics "
                f"WHERE run_id = {lit(run_id)} AND step BETWEEN {int(step_min)} AND {int(step_max)}"):
            out.setdefault(int(step), {})[name] = float(value)
        return {s: dict(sorted(out[s].items())) for s in sorted(out)}

    def rows_after(self, run_id: str, kind: str, after_id: int | None, *, limit: int = 1000
                   ) -> list[tuple[int, FindingRecord | PhaseRecord | EventRecord]]:
        if kind not in _TAIL:
            raise StoreError(f"rows_after kind {kind!r} is not one of {', '.join(_TAIL)}",
                             details={"kind": kind})
        self._check_run(run_id)
        id_col, cols = _TAIL[kind]
        found = self._q(f"SELECT {id_col}, {cols} FROM {self._db}.{kind} "
                        f"WHERE run_id = {lit(run_id)} AND {id_col} > {int(after_id or 0)} "
                        f"ORDER BY {id_col} LIMIT {int(limit)}")
        return [(int(r[0]), _DECODE[kind](r[1:])) for r in found]

    def tail_start_ids(self, run_id: str, after_step: int | None = None
                       ) -> dict[str, int | None]:
        self._check_run(run_id)
        r = lit(run_id)
        n_steps, top = self._q(f"SELECT count(), max(step) FROM {self._db}.steps "
                               f"WHERE run_id = {r}")[0]
        out: dict[str, int | None] = {
            "step": after_step if after_step is not None else (int(top) if n_steps else None)}
        for kind, (id_col, _) in _TAIL.items():
            later = -_BIG if after_step is None else int(after_step)
            last, first_later, n_later = self._q(
                f"SELECT max({id_col}), minIf({id_col}, step > {later}), countIf(step > {later}) "
                f"FROM {self._db}.{kind} WHERE run_id = {r}")[0]
            if after_step is None or not n_later:
                out[kind] = int(last or 0)
            else:
                out[kind] = int(first_later) - 1
        return out

    # ------------------------------------------------------------------ query time limit

    @contextlib.contextmanager
    def deadline(self, seconds: float | None, *, limit_s: float | None = None
                 ) -> Iterator[None]:
        """Queries of this thread that run past ``seconds`` from now stop with
        :class:`QueryTimeoutError` (ClickHouse's ``max_execution_time`` on each query)."""
        if seconds is None:
            yield
            return
        shown = seconds if limit_s is None else limit_s
        if seconds <= 0:
            raise rows.query_timeout(shown)
        previous = getattr(self._local, "deadline", None)
        self._local.deadline = (time.monotonic() + seconds, shown)
        try:
            yield
        finally:
            self._local.deadline = previous

    def close(self) -> None:
        if self._close_transport:
            self._t.close()

    # ------------------------------------------------------------------ internals

    def _q(self, sql: str, **settings) -> list[tuple]:
        deadline = getattr(self._local, "deadline", None)
        if deadline is not None:
            left = deadline[0] - time.monotonic()
            if left <= 0:
                raise rows.query_timeout(deadline[1])
            settings["max_execution_time"] = max(left, 0.001)
        try:
            return self._t.query(sql, settings or None)
        except QueryTimeoutError:
            raise rows.query_timeout(deadline[1] if deadline else 0.0) from None

    def _tail(self, table: str, id_col: str, cols: str, where: str, limit: int | None
              ) -> list[tuple]:
        if limit is None:
            return self._q(f"SELECT {cols} FROM {self._db}.{table} WHERE {where} "
                           f"ORDER BY step, {id_col}")
        if limit < 0:
            raise StoreError(f"limit={limit} must be >= 0", details={"limit": limit})
        found = self._q(f"SELECT {cols} FROM {self._db}.{table} WHERE {where} "
                        f"ORDER BY step DESC, {id_col} DESC LIMIT {int(limit)}")
        return found[::-1]

    def _step_where(self, run_id: str, step_min: int | None, step_max: int | None) -> str:
        self._check_run(run_id)
        lo, hi = _bounds(step_min, step_max)
        return f"run_id = {lit(run_id)} AND step BETWEEN {lo} AND {hi}"

    def _check_run(self, run_id: str) -> None:
        if run_id in self._known_runs:  # runs are never deleted
            return
        if not self._q(f"SELECT count() FROM {self._db}.runs WHERE run_id = {lit(run_id)}"
                       )[0][0]:
            raise rows.run_not_found(run_id)
        self._known_runs.add(run_id)


def _bounds(step_min: int | None, step_max: int | None) -> tuple[int, int]:
    return (-_BIG if step_min is None else int(step_min), _BIG if step_max is None else int(step_max))
