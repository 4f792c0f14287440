"""Getting complete steps into the store: retries, splitting a batch the store refuses, the spool.

What a failed write does depends on why it failed (:func:`store_unavailable`):

- the store cannot be written at all (disk full, I/O error, corruption, a lock held past every
  retry, a ClickHouse outage): the batch goes to the run's spool (telemetry/spool.py), and so does
  every later batch until the store answers again; then the spool is replayed, in order, exactly
  once. When the spool is full (or cannot be written either) the batch is dropped, counted
  (``spool_full``) and its steps named in a ``telemetry_lost`` event;
- the store refuses something in the batch (a value it cannot bind, e.g. a text with a lone
  surrogate): the batch is split in halves — whole steps first, then the records of one step —
  until the pieces that do not fit are single records; those are dropped and counted
  (``unwritable``), everything else is written;
- anything else (the run is gone from the store): the batch is dropped and counted
  (``write_error``).

Every step that is not in the store although it was logged (spooled and not yet replayed, or lost)
is counted in the metric ``telemetry/missing_steps``, written whenever the count changed and the
store takes a write: 0 again once the spool is replayed or a resumed run rewrote the lost steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from rlcockpit.errors import RlcockpitError, StoreError
from rlcockpit.records import EventRecord, MetricPoint, cap
from rlcockpit.telemetry.assembly import STEP_KINDS, Parts
from rlcockpit.telemetry.drops import DropCounter
from rlcockpit.telemetry.policy import WriterOptions
from rlcockpit.telemetry.spool import REPLAYED_EVENT, Spool, step_set

MISSING_METRIC = "telemetry/missing_steps"
LOST_EVENT = "telemetry_lost"


def store_unavailable(exc: BaseException) -> bool:
    """The store cannot be written at all now (spool and retry later), as opposed to refusing
    something in the batch. Stores mark such errors ``details["unavailable"]``."""
    if isinstance(exc, StoreError):
        return bool(exc.details.get("unavailable"))
    return isinstance(exc, OSError)  # a network error of a server's client


def splittable(exc: BaseException) -> bool:
    """A failure that one record can cause (a value the store cannot take): split the batch."""
    if store_unavailable(exc):
        return False
    return isinstance(exc, StoreError) or not isinstance(exc, RlcockpitError)


class StepRanges:
    """A set of steps as sorted, disjoint, inclusive ranges (an outage may lose millions)."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._r: list[tuple[int, int]] = []
        for lo, hi in ranges:
            self._merge([(int(lo), int(hi))])

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self._r)

    def ranges(self) -> list[list[int]]:
        return [[lo, hi] for lo, hi in self._r]

    def add(self, steps: Iterable[int]) -> None:
        self._merge(as_ranges(steps))

    def remove(self, steps: Iterable[int]) -> None:
        if not self._r:
            return
        out = self._r
        for lo, hi in as_ranges(steps):
            kept = []
            for a, b in out:
                if b < lo or a > hi:
                    kept.append((a, b))
                    continue
                if a < lo:
                    kept.append((a, lo - 1))
                if b > hi:
                    kept.append((hi + 1, b))
            out = kept
        self._r = out

    def _merge(self, new: list[tuple[int, int]]) -> None:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(self._r + new):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self._r = merged


def as_ranges(steps: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s in sorted(set(steps)):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def split(parts: Parts) -> tuple[Parts, Parts]:
    """Two halves of ``parts``: whole steps when it holds several (the live records — events,
    findings... — last, as one unit), else the records of its one unit in halves."""
    units: dict[Any, Parts] = {}
    for kind in STEP_KINDS:
        for r in getattr(parts, kind):
            getattr(units.setdefault(int(r.step), Parts()), kind).append(r)
    live = Parts()
    for kind in set(Parts.__dataclass_fields__) - set(STEP_KINDS):
        getattr(live, kind).extend(getattr(parts, kind))
    ordered = [units[s] for s in sorted(units)] + ([live] if len(live) else [])
    if len(ordered) > 1:
        half = len(ordered) // 2
        return _joined(ordered[:half]), _joined(ordered[half:])
    records = [(kind, r) for kind in Parts.__dataclass_fields__ for r in getattr(parts, kind)]
    half = len(records) // 2
    return _of(records[:half]), _of(records[half:])


def _joined(pieces: list[Parts]) -> Parts:
    out = Parts()
    for p in pieces:
        out.extend(p)
    return out


def _of(records: list[tuple[str, Any]]) -> Parts:
    out = Parts()
    for kind, r in records:
        getattr(out, kind).append(r)
    return out


class Delivery:
    """Writes batches for the writer thread; owns the spool and the missing-step count."""

    def __init__(self, *, store: Any, run_id: str, options: WriterOptions, drops: DropCounter,
                 spool: Spool | None, on_written: Callable[[Parts], None],
                 missing: StepRanges | None = None, reported_missing: int = 0) -> None:
        self._store = store
        self._run_id = run_id
        self._opt = options
        self._drops = drops
        self.spool = spool
        self._on_written = on_written
        self.missing = missing if missing is not None else StepRanges()
        self._reported_missing = reported_missing
        self._lost_events: list[EventRecord] = []
        self._last_replay = 0.0

    @property
    def spooling(self) -> bool:
        """Batches wait in the spool: new ones queue behind them until it is replayed."""
        return self.spool is not None and self.spool.pending

    # ------------------------------------------------------------------ writing

    def deliver(self, parts: Parts) -> None:
        if self.spooling:
            self._to_spool(parts, "the store was unavailable and the spool is not replayed yet")
            return
        error = self.attempt(parts, retries=self._opt.write_retries)
        if error is not None:
            self._failed(parts, error)

    def attempt(self, parts: Parts, *, retries: int = 0) -> BaseException | None:
        """Write ``parts`` (retrying an unavailable store ``retries`` times); the error or None."""
        batch = parts.batch()  # one object for every retry (ClickHouse keeps its dedup tokens)
        for n in range(retries + 1):
            try:
                self._store.write_batch(self._run_id, batch)
            except Exception as exc:  # classified by the caller, never raised into the loop
                if n == retries or not store_unavailable(exc):
                    return exc
                time.sleep(self._opt.retry_backoff_s * 2**n)
            else:
                self.missing.remove(step_set(parts))
                self._on_written(parts)
                return None
        return None

    def _failed(self, parts: Parts, error: BaseException) -> None:
        if store_unavailable(error):
            self._to_spool(parts, error)
        elif splittable(error) and len(parts) > 1:
            self._split_write(parts, spool_rest=True)
        else:
            self._drop(parts, "unwritable" if splittable(error) else "write_error", error)

    def _split_write(self, parts: Parts, *, spool_rest: bool) -> bool:
        """Write what the store takes of ``parts``, one half at a time; drop the single records
        it refuses. When the store becomes unavailable meanwhile, the rest is spooled
        (``spool_rest``) or left to the caller: False."""
        stack = list(reversed(split(parts)))
        while stack:
            piece = stack.pop()
            error = self.attempt(piece)
            if error is None:
                continue
            if store_unavailable(error):
                if spool_rest:
                    self._to_spool(_joined([piece, *reversed(stack)]), error)
                return False
            if len(piece) > 1 and splittable(error):
                stack.extend(reversed(split(piece)))
            else:
                self._drop(piece, "unwritable" if splittable(error) else "write_error", error)
        return True

    def _drop(self, parts: Parts, reason: str, error: BaseException) -> None:
        detail = cap(f"{type(error).__name__}: {error}", 300)
        for kind, n in parts.counts().items():
            self._drops.add(kind, n, reason, detail)

    # ------------------------------------------------------------------ the spool

    def _to_spool(self, parts: Parts, error: BaseException | str) -> None:
        if self.spool is None:  # spool_max_mb=0: no spool, as before
            self._drop(parts, "write_error", error if isinstance(error, BaseException)
                       else StoreError(error))
            return
        problem = self.spool.append(parts)
        steps = step_set(parts)
        if problem is None:
            self.missing.add(steps)
            self._drops.warn("spool", f"rlcockpit telemetry: the store of run {self._run_id} "
                                      f"cannot be written ({cap(str(error), 300)}); "
                                      f"{_steps_text(steps)} kept in the spool {self.spool.path} "
                                      f"({self.spool.size} bytes) until it answers again")
            return
        self._lose(parts, steps, problem)

    def _lose(self, parts: Parts, steps: set[int], why: str) -> None:
        for kind, n in parts.counts().items():
            self._drops.add(kind, n, "spool_full", why)
        self.missing.add(steps)
        lost = as_ranges(steps)
        self._lost_events.append(EventRecord(
            step=max(steps) if steps else 0, kind=LOST_EVENT, wall_time=time.time(),
            payload={"steps": [list(r) for r in lost], "records": len(parts),
                     "by_kind": parts.counts(), "reason": why}))
        self._drops.warn("lost", f"rlcockpit telemetry LOST {_steps_text(steps)} of run "
                                 f"{self._run_id}: the store cannot be written and {why}")

    def replay(self, *, force: bool = False) -> None:
        """Write the spooled frames, in order, if the store answers (at most every
        ``spool_retry_s`` unless ``force``); remove the spool once all are in."""
        if not self.spooling:
            return
        now = time.monotonic()
        if not force and now - self._last_replay < self._opt.spool_retry_s:
            return
        self._last_replay = now
        batch, seq, offset = Parts(), 0, 0
        try:
            for seq, parts, offset in self.spool.frames():
                batch.extend(parts)
                if len(batch) >= self._opt.flush_every:
                    if not self._replay_write(batch, seq, offset):
                        return
                    batch = Parts()
        except (OSError, ValueError) as exc:  # the spool itself is unreadable: say it, keep it
            self._drops.warn("spool", f"rlcockpit telemetry cannot read the spool "
                                      f"{self.spool.path}: {cap(str(exc), 300)}")
            return
        if len(batch) and not self._replay_write(batch, seq, offset):
            return
        if self.spool.remove_if_done():
            self._drops.warn("spool", f"rlcockpit telemetry: the store of run {self._run_id} "
                                      f"answers again; the spool is written and removed")

    def _replay_write(self, parts: Parts, seq: int, offset: int) -> bool:
        """One replayed write: the frames' records and the marker that makes it exactly once."""
        steps = step_set(parts)
        marker = EventRecord(step=max(steps) if steps else 0, kind=REPLAYED_EVENT,
                             wall_time=time.time(),
                             payload={"spool": self.spool.spool_id, "seq": seq,
                                      "steps": [min(steps), max(steps)] if steps else [],
                                      "records": len(parts)})
        full = Parts()
        full.extend(parts)
        full.events.append(marker)
        error = self.attempt(full)
        if error is not None:
            if store_unavailable(error):
                return False
            # something in the frames the store refuses: write the rest, then the marker alone
            if not self._split_write(parts, spool_rest=False):
                return False
            marked = Parts(events=[marker])
            if self.attempt(marked) is not None:
                return False
        self.spool.mark_replayed(seq, offset)
        return True

    # ------------------------------------------------------------------ reports

    def report(self, step: int) -> tuple[Parts, Callable[[], None]]:
        """What to tell the store: the missing-step count when it changed, the lost events; and
        the callback to call once that is written."""
        parts = Parts()
        count = len(self.missing)
        if count != self._reported_missing:
            parts.metrics.append(MetricPoint(step=step, name=MISSING_METRIC, value=float(count),
                                             wall_time=time.time()))
        events = list(self._lost_events)
        parts.events.extend(events)

        def done() -> None:
            self._reported_missing = count
            del self._lost_events[:len(events)]
        return parts, done


def _steps_text(steps: set[int]) -> str:
    if not steps:
        return "records without a step"
    lo, hi = min(steps), max(steps)
    return f"step {lo}" if lo == hi else f"steps {lo}-{hi} ({len(steps)} steps)"
