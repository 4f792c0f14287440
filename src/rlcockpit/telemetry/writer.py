"""The background writer thread (tensorboardX's EventFileWriter shape): a bounded queue, one
thread that batches into the store, flush on N records or T seconds, a shutdown item, and a close
that drains. It owns the store writer connection; nothing here raises into the training loop.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from rlcockpit.records import EventRecord, MetricPoint, cap, echo
from rlcockpit.store.base import StoreWriter
from rlcockpit.telemetry import convert
from rlcockpit.telemetry.assembly import Parts, StepAssembler
from rlcockpit.telemetry.delivery import Delivery, StepRanges
from rlcockpit.telemetry.drops import DropCounter
from rlcockpit.telemetry.policy import TokenArrayPolicy, WriterOptions
from rlcockpit.telemetry.spool import Spool

DROPPED_METRIC = "telemetry/dropped_total"
DROPPED_EVENT = "telemetry_dropped"
_DRAIN_MAX = 10_000  # items handled per wake-up before checking the write triggers


class ItemQueue(queue.Queue):
    """The run's bounded queue of items for the writer thread."""

    def put_quietly(self, item: tuple) -> None:
        """Queue ``item`` without waking the writer thread: it takes the item at its next timed
        wake-up (every ``flush_interval_s / 4`` at most), before any later item. Waking it costs the
        training thread a context switch (and, on a loaded machine, sometimes its time slice).
        ``queue.Full`` as ``put_nowait``."""
        with self.mutex:
            if 0 < self.maxsize <= self._qsize():
                raise queue.Full
            self._put(item)
            self.unfinished_tasks += 1


class BackgroundWriter(threading.Thread):
    """Consumes queue items ``(kind, step, payload, wall_time)`` and writes whole steps."""

    def __init__(self, *, store: StoreWriter, run_id: str, items: ItemQueue,
                 options: WriterOptions, policy: TokenArrayPolicy, drops: DropCounter,
                 spool: Spool | None = None, missing: StepRanges | None = None,
                 reported_missing: int = 0) -> None:
        super().__init__(name=f"rlcockpit-telemetry-{run_id}", daemon=True)
        self._store = store
        self._run_id = run_id
        self._items = items
        self._opt = options
        self._policy = policy
        self._drops = drops
        self._asm = StepAssembler()
        self._last_write = 0.0
        self._last_heartbeat = time.monotonic()
        self._newest_written: int | None = None
        self._reported_drops = 0
        self._arrays_pending: dict[int, set[int]] = {}
        self.delivery = Delivery(store=store, run_id=run_id, options=options, drops=drops,
                                 spool=spool, on_written=self._after_write, missing=missing,
                                 reported_missing=reported_missing)
        self._handlers: dict[str, Callable] = {
            "metrics": self._on_metrics, "histograms": self._on_histogram,
            "samples": self._on_samples, "events": self._live("events", convert.event),
            "findings": self._live("findings", convert.finding),
            "phases": self._live("phases", convert.phase),
            "checkpoints": self._live("checkpoints", convert.checkpoint),
            "snapshots": self._live("snapshots", convert.snapshot),
        }

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        stop = False
        while not stop:
            try:
                stop = self._wake()
            except Exception:  # a bug here must not end telemetry silently: say it, go on
                self._drops.warn("internal", "rlcockpit telemetry writer error", exc_info=True)

    def _wake(self) -> bool:
        """Wait for items, handle what is queued, write if due. True after the shutdown item."""
        stop = False
        try:
            item = self._items.get(timeout=self._wait_s())
        except queue.Empty:
            item = None
        if item is not None:
            stop = self._handle(item)
            for _ in range(_DRAIN_MAX):
                if stop:
                    break
                try:
                    stop = self._handle(self._items.get_nowait())
                except queue.Empty:
                    break
        if not stop:
            self._tick()
        return stop

    def _wait_s(self) -> float:
        return min(self._opt.flush_interval_s / 4, self._opt.heartbeat_interval_s)

    def _tick(self) -> None:
        now = time.monotonic()
        self._asm.complete_if_idle(now, self._opt.flush_interval_s)
        waiting = len(self._asm.ready)
        if waiting and (waiting >= self._opt.flush_every
                        or now - self._last_write >= self._opt.flush_interval_s):
            self._write_ready()
        elif self.delivery.spooling:  # nothing new: see whether the store answers again
            self.delivery.replay()
            self._report_drops()
        if now - self._last_heartbeat >= self._opt.heartbeat_interval_s:
            self._heartbeat()

    def _handle(self, item: tuple) -> bool:
        """Handle one queue item; True when it was the shutdown item."""
        kind, step, payload, wall = item
        if kind == "batch":  # Run.deferred(): the items one block logged, in order
            for held in payload:
                try:
                    self._handle(held)
                except Exception:  # one bad item must not lose the rest of the block
                    self._drops.warn("internal", "rlcockpit telemetry writer error", exc_info=True)
        elif kind == "commit":
            self._asm.commit(step)
        elif kind == "missing":  # Run.mark_missing: steps the caller knows the store lacks
            self.delivery.missing.add(payload)
        elif kind == "flush":
            try:
                self._flush()
            finally:
                payload.set()
        elif kind == "close":
            try:
                self._finish(payload)
            except Exception:  # the thread ends anyway; say what went wrong
                self._drops.warn("internal", "rlcockpit telemetry close failed", exc_info=True)
            return True
        else:
            self._on_record(kind, step, payload, wall)
        return False

    # ------------------------------------------------------------------ records

    def _on_record(self, kind: str, step, payload, wall: float) -> None:
        try:
            step = convert.as_step(step)
        except (TypeError, ValueError) as exc:
            n = len(payload) if kind in ("metrics", "samples") else 1
            self._drops.add(kind, n, "invalid", f"step {echo(step)}: {cap(str(exc))}")
            return
        try:
            self._handlers[kind](step, payload, wall)
        except (TypeError, ValueError, KeyError, RuntimeError, OverflowError) as exc:
            self._drops.add(kind, 1, "invalid", f"step {step}: {cap(str(exc))}")

    def _on_metrics(self, step: int, metrics, wall: float) -> None:
        records = convert.metric_points(step, metrics, wall, self._drops)
        self._asm.add_step_records(step, "metrics", records, time.monotonic())

    def _on_histogram(self, step: int, payload, wall: float) -> None:
        record = convert.histogram(step, payload, wall)
        self._asm.add_step_records(step, "histograms", [record], time.monotonic())

    def _on_samples(self, step: int, samples, wall: float) -> None:
        records = []
        for raw in samples:
            try:
                records.append(convert.sample(step, raw))
            except (TypeError, ValueError, KeyError, RuntimeError, OverflowError) as exc:
                self._drops.add("samples", 1, "invalid", f"step {step}: {cap(str(exc))}")
        self._asm.add_step_records(step, "samples", records, time.monotonic())

    def _live(self, kind: str, build: Callable) -> Callable:
        def handler(step: int, payload, wall: float) -> None:
            self._asm.add_live_records(kind, [build(step, payload, wall)])
        return handler

    # ------------------------------------------------------------------ writing

    def _flush(self) -> None:
        self._asm.complete_all()
        self._write_ready()

    def _write_ready(self) -> None:
        """Write the complete steps (telemetry/delivery.py: retries, splitting, the spool)."""
        parts = self._asm.take_ready()
        self._last_write = time.monotonic()
        self.delivery.replay()  # what waits in the spool goes first (due at once after init)
        if len(parts):
            self.delivery.deliver(parts)
        self._report_drops()

    def _after_write(self, parts: Parts) -> None:
        """A batch (or a piece of one) is in the store."""
        self._last_heartbeat = time.monotonic()
        steps = [r.step for kind in ("metrics", "histograms", "samples")
                 for r in getattr(parts, kind)]
        if steps:
            self._newest_written = max(steps + [self._newest_written or steps[0]])
        for s in parts.samples:
            if s.has_token_arrays:
                self._arrays_pending.setdefault(s.step, set()).add(s.sample_id)
        self._thin_token_arrays()

    def _thin_token_arrays(self) -> None:
        """Token-array policy: steps older than the K most recent keep arrays only for the
        seeded subset (docs/telemetry.md)."""
        if self._newest_written is None:
            return
        cutoff = self._newest_written - self._policy.recent_steps
        due = sorted(s for s in self._arrays_pending if s <= cutoff)
        if not due:
            return
        keep = {s: self._policy.kept_subset(s, self._arrays_pending[s]) for s in due}
        strip = {s: ids for s, ids in keep.items() if len(ids) < len(self._arrays_pending[s])}
        try:
            if strip:
                self._store.strip_token_arrays(self._run_id, strip)
        except Exception as exc:  # arrays stay (more data, not less); retried after next write
            self._drops.warn("thin", f"rlcockpit telemetry could not thin token arrays: {exc}")
            return
        for s in due:
            del self._arrays_pending[s]

    def _report_drops(self) -> None:
        """Write the drop count as the metric telemetry/dropped_total and a telemetry_dropped
        event whenever it changed since the last report, with the missing-step count and the
        lost-step events of the delivery (not while the store is unavailable: the spool holds
        the data, the report follows it)."""
        if self.delivery.spooling:
            return
        step = self._newest_written if self._newest_written is not None else (
            self._asm.newest_step or 0)
        parts, reported = self.delivery.report(step)
        total = self._drops.total
        if total != self._reported_drops:
            now = time.time()
            parts.metrics.append(MetricPoint(step=step, name=DROPPED_METRIC,
                                             value=float(total), wall_time=now))
            parts.events.append(EventRecord(
                step=step, kind=DROPPED_EVENT, wall_time=now,
                payload={"dropped_total": total, "new": total - self._reported_drops,
                         "by_kind": self._drops.by_kind(), "by_reason": self._drops.by_reason()}))
        if not len(parts):
            return
        error = self.delivery.attempt(parts)
        if error is not None:
            self._drops.warn("report", f"rlcockpit telemetry could not record its drop count: "
                                       f"{cap(str(error), 300)}")
            return
        self._reported_drops = total
        reported()

    def _heartbeat(self) -> None:
        self._last_heartbeat = time.monotonic()
        try:
            self._store.heartbeat(self._run_id, time.time(), self._asm.newest_step)
        except Exception as exc:  # a missed heartbeat loses no data; say so and go on
            self._drops.warn("heartbeat", f"rlcockpit telemetry heartbeat failed: {exc}")

    def _finish(self, status: str) -> None:
        self._flush()
        self.delivery.replay(force=True)
        self._report_drops()
        spool = self.delivery.spool
        if self.delivery.spooling and spool is not None:
            self._drops.warn("closing", f"rlcockpit telemetry: the store of run {self._run_id} "
                                        f"still cannot be written; {len(self.delivery.missing)} "
                                        f"step(s) stay in the spool {spool.path} and are written "
                                        f"when the run is resumed (rlcockpit.init(run_id="
                                        f"{self._run_id!r}, resume=True), train --resume)")
        for attempt in range(self._opt.write_retries + 1):
            try:
                self._store.set_run_status(self._run_id, status, ended_at=time.time())
                break
            except Exception as exc:  # reported; the reader will show a stale heartbeat
                if attempt == self._opt.write_retries:
                    self._drops.warn("status", f"rlcockpit telemetry could not mark run "
                                               f"{self._run_id} {status!r}: {exc}")
                else:
                    time.sleep(self._opt.retry_backoff_s * 2**attempt)
        try:
            self._store.close()
        except Exception as exc:  # closing a connection that already failed; nothing left to save
            self._drops.warn("close", f"rlcockpit telemetry store close failed: {exc}")
