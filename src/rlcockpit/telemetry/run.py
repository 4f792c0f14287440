"""``Run``: what a training script calls. Every logging call copies its arguments into one queue
item and returns; a background thread does the rest (see writer.py). Nothing here raises into the
training loop after :func:`init` returned; setup errors (bad store URI, unwritable path, unknown
run to resume) raise at :func:`init`.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from rlcockpit.errors import ConfigError
from rlcockpit.records import INT64, RunInfo, SampleRecord, cap, echo
from rlcockpit.telemetry import convert
from rlcockpit.telemetry.drops import DropCounter
from rlcockpit.telemetry.lease import Lease, LeasedWriter, LeaseOptions
from rlcockpit.telemetry.policy import TokenArrayPolicy, WriterOptions
from rlcockpit.telemetry.recovery import Recovery, recover
from rlcockpit.telemetry.start import new_run_id, start_or_resume
from rlcockpit.telemetry.writer import BackgroundWriter, ItemQueue

DEFAULT_STORE = "sqlite:///rlcockpit.db"


class Run:
    """A live run. Create it with :func:`rlcockpit.init`; use it as a context manager or call
    :meth:`close` (also called at interpreter exit)."""

    def __init__(self, info: RunInfo, *, store_uri: str, store_writer: Any,
                 options: WriterOptions, token_arrays: TokenArrayPolicy,
                 lease: Lease | None = None, recovery: Recovery | None = None) -> None:
        self.run_id = info.run_id
        self.info = info
        self.store_uri = store_uri
        self.options = options
        self.token_arrays = token_arrays
        self._drops = DropCounter(options.warn_interval_s)
        self.lease = lease  # this process's lease on the run (telemetry/lease.py): one writer per run
        if lease is not None:
            store_writer = LeasedWriter(store_writer, lease, self._drops)
        self._items = ItemQueue(maxsize=options.queue_size)
        self._closed = self._closing = False
        self._control: Any = None  # the loop's control link: rlcockpit.init(live_params=..., control=...)
        self._last_step: Any = info.last_step or 0
        self._held: list[tuple] | None = None  # items held by deferred() in the thread self._holder
        self._holder: int | None = None
        self._hold_lock = threading.Lock()
        self._close_lock = threading.Lock()
        recovery = recovery or Recovery(spool=None)  # the spool and missing steps: recovery.py
        self._thread = BackgroundWriter(store=store_writer, run_id=self.run_id, items=self._items,
                                        options=options, policy=token_arrays, drops=self._drops,
                                        spool=recovery.spool, missing=recovery.missing,
                                        reported_missing=recovery.reported_missing)
        self._thread.start()
        atexit.register(self._at_exit)

    # ------------------------------------------------------------------ logging (never raises)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log scalar metrics of ``step`` (catalog names, e.g. ``reward/mean``)."""
        metrics = dict(metrics)
        if self._control is not None:
            self._observe("observe", step, metrics)
        self._put("metrics", step, metrics, len(metrics))

    def log_histogram(self, step: int, name: str, values: Any, bins: int | Sequence[float] = 64
                      ) -> None:
        """Log the distribution of ``values`` (list, numpy array or tensor); binned off-thread.
        ``bins``: 1..10,000 bins or 2..10,001 edges (another value is dropped and counted)."""
        problem = convert.bins_problem(bins)
        if problem:
            self._drops.add("histograms", 1, "invalid", f"histogram {echo(name)}: {problem}")
            return
        if hasattr(values, "detach"):  # a tensor: copy on its device (async on a GPU), read later
            values = values.detach().clone()
        elif hasattr(values, "copy"):
            values = values.copy()
        else:
            values = list(values)
        self._put("histograms", step, (name, values, bins), 1)

    def log_samples(self, step: int, samples: Iterable[SampleRecord | Mapping[str, Any]]) -> None:
        """Log rollout samples of ``step`` (SampleRecord or dicts with its field names)."""
        items = [dict(s) if isinstance(s, Mapping) else s for s in samples]
        if self._control is not None:
            self._observe("observe_samples", step, items)
        self._put("samples", step, items, len(items))

    def event(self, step: int, kind: str, payload: Mapping[str, Any] | None = None) -> None:
        self._put("events", step, (kind, dict(payload or {})), 1)

    def finding(self, *, step: int, detector: str, severity: str, message: str,
                evidence: Mapping[str, Any] | None = None, patterns: Sequence[str] = (),
                status: str = "raised", incident: str = "") -> None:
        self._put("findings", step, {
            "detector": detector, "severity": severity, "message": message,
            "evidence": dict(evidence or {}), "patterns": tuple(patterns), "status": status,
            "incident": incident}, 1)

    def snapshot(self, step: int, kind: str, payload: Mapping[str, Any], *,
                 incident: str = "") -> None:
        """Store a diagnostic snapshot (JSON payload) linked to an incident; written at once."""
        self._put("snapshots", step, (kind, dict(payload), incident), 1)

    def phase(self, step: int, phase: str, status: str, duration_s: float | None = None,
              progress: float | None = None) -> None:
        self._put("phases", step, (phase, status, duration_s, progress), 1)

    def checkpoint(self, step: int, path: str, reason: str = "periodic") -> None:
        self._put("checkpoints", step, (str(path), reason), 1)

    def commit(self, step: int) -> None:
        """Declare ``step`` complete: its records are written together at the next write."""
        # when the queue is full nothing is lost: the step completes on the next step or when idle
        if self._held is not None and self._holder == threading.get_ident():
            self._held.append(("commit", step, None, 0.0))
            return
        with contextlib.suppress(queue.Full):
            self._items.put_nowait(("commit", step, None, 0.0))

    def mark_missing(self, steps: Iterable[int]) -> None:
        """Steps of this run the store lacks that the caller knows of (a resumed trainer that
        found a gap): counted in ``telemetry/missing_steps`` until they are logged again."""
        with contextlib.suppress(queue.Full):
            self._items.put_nowait(("missing", None, [int(s) for s in steps], 0.0))

    @property
    def first_missing_step(self) -> int | None:
        """The first step logged but not in the store (spooled or lost), None when there is none."""
        ranges = self._thread.delivery.missing.ranges()
        return ranges[0][0] if ranges else None

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hand what this thread logs inside the block to the writer as one queue item at its end,
        without waking the writer thread: it takes the item at its next timed wake-up (at most
        ``flush_interval_s / 4`` later; ``flush`` and ``close`` take it at once).

        Each item queued otherwise wakes the writer, which costs the training thread a context
        switch and then competes with it for the GIL; a step boundary that logs its metrics,
        samples, findings and commit inside ``deferred()`` costs one locked append instead. The
        items keep their order and their wall times (a full queue drops the block's records,
        counted)."""
        if not self._hold_lock.acquire(blocking=False):  # nested (the outer block hands over), or
            yield  # another thread holds its own items: log as usual
            return
        self._held, self._holder = [], threading.get_ident()
        try:
            yield
        finally:
            self.hand_over()
            self._hold_lock.release()

    def hand_over(self) -> None:
        """Queue now what :meth:`deferred` holds for this thread (one ``batch`` item), e.g. before
        the loop blocks (a pause); later calls in the block queue as usual."""
        if self._held is None or self._holder != threading.get_ident():
            return
        held, self._held, self._holder = self._held, None, None
        reason = "closed" if self._closed else None
        if held and reason is None:
            try:
                self._items.put_quietly(("batch", None, held, 0.0))  # taken at the writer's next wake-up
                return
            except queue.Full:
                reason = "queue_full"
        for kind, _, payload, _ in held:
            if kind != "commit":
                self._drops.add(kind, _count(kind, payload), reason,
                                "logged after close()" if reason == "closed" else "")

    # ------------------------------------------------------------------ tickets and commands

    def pending_changes(self, step: int) -> Iterator[Any]:
        """The approved tickets to carry out at the boundary after ``step`` (docs/integrations.md)::

            for change in run.pending_changes(step):
                if change.name == "lr":
                    set_lr(change.value)
                    change.applied()
                else:
                    change.failed("not supported by this loop")

        Parameter changes and the ``checkpoint`` / ``rollback`` commands come to the loop; a pause
        blocks here until it is resumed or stopped, a stop sets :attr:`stop_requested`. Needs a run
        started with ``rlcockpit.init(..., live_params={...})`` or ``control=True`` (ConfigError
        otherwise: a setup mistake); after that it never raises (store errors are logged)."""
        if self._control is None:
            raise ConfigError("this run takes no tickets: start it with rlcockpit.init(..., live_params="
                              "{'lr': (1e-3, 1e-5, 1e-1)}) or rlcockpit.init(..., control=True) for commands "
                              "only", details={"key": "live_params"})
        if self.lease is not None and self.lease.lost:  # another process writes the run now
            return iter(())
        return self._control.pending(step)

    @property
    def stop_requested(self) -> bool:
        """True once an approved ``stop`` command reached the loop (at a ``pending_changes`` boundary)."""
        return bool(self._control is not None and self._control.stop_requested)

    @property
    def live_params(self) -> dict[str, Any]:
        """The current values of the live parameters (after the changes the loop applied)."""
        return dict(self._control.values) if self._control is not None else {}

    def attach_control(self, control: Any) -> None:
        """Give the run its control link (``rlcockpit.integrations.loop_control.attach`` does)."""
        self._control = control

    # ------------------------------------------------------------------ control

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until everything logged so far is written (True) or ``timeout`` passed (False)."""
        if self._closed or not self._thread.is_alive():
            return not self._thread.is_alive()
        self.hand_over()
        done = threading.Event()
        deadline = time.monotonic() + timeout
        try:
            self._items.put(("flush", None, done, 0.0), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(max(0.0, deadline - time.monotonic()))

    @property
    def dropped_total(self) -> int:
        """Records that could not be written (queue full, invalid, write failed after retries)."""
        return self._drops.total

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped records by kind (metrics, histograms, samples, events...)."""
        return self._drops.by_kind()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, status: str = "finished", timeout: float | None = None) -> None:
        """Write everything still queued, mark the run ``status`` and stop the writer thread.
        Idempotent; waits at most ``timeout`` (default ``options.close_timeout_s``)."""
        with self._close_lock:
            if self._closing:
                return
            self._closing = True
        self.hand_over()
        if self._control is not None:
            status = self._close_control(status)
        self._closed = True
        atexit.unregister(self._at_exit)
        timeout = self.options.close_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            self._items.put(("close", None, status, 0.0), timeout=timeout)
        except queue.Full:
            self._drops.warn("close", f"rlcockpit telemetry: run {self.run_id} could not be "
                                      f"closed within {timeout}s (writer stuck); queued records "
                                      f"may be lost")
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._drops.warn("close", f"rlcockpit telemetry: writer of run {self.run_id} did not "
                                      f"finish within {timeout}s")
            return
        self._count_unwritten()

    def _close_control(self, status: str) -> str:
        """A stop the loop obeyed ends the run as ``stopped``; what the control link still holds is
        settled (effects measured, unreachable tickets failed) while the writer still runs."""
        control, self._control = self._control, None
        if self.lease is not None and self.lease.lost:  # the run's tickets are the new holder's
            return status
        if status == "finished" and control.stop_requested:
            status = "stopped"
        try:
            control.close(status)
        except Exception as exc:  # fail soft: the run's own records matter more
            self._drops.warn("control", f"rlcockpit telemetry: closing the control link of run "
                                        f"{self.run_id} failed: {exc!r}")
        return status

    def _observe(self, method: str, step: Any, payload: Any) -> None:
        try:
            getattr(self._control, method)(step, payload)
        except Exception as exc:  # fail soft: the effect measurement misses a step, nothing else
            self._drops.warn("control", f"rlcockpit telemetry: control link of run {self.run_id} "
                                        f"could not observe step {step}: {exc!r}")

    def _count_unwritten(self) -> None:
        """Items another thread enqueued while close() was running came after the shutdown
        item and were never written: count them instead of losing them silently."""
        while True:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                return
            for kind, _, payload, _ in (item[2] if item[0] == "batch" else [item]):
                if kind == "missing":
                    continue
                if kind == "flush":
                    payload.set()  # nothing more will be written: do not keep the caller waiting
                elif kind not in ("commit", "close"):
                    self._drops.add(kind, _count(kind, payload), "closed", "logged while closing")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close("finished")
            return
        status = "stopped" if issubclass(exc_type, KeyboardInterrupt) else "failed"
        self.event(self._last_step, "run_" + status,
                   {"exception": exc_type.__name__, "message": str(exc)[:2000]})
        self.close(status)

    def __repr__(self) -> str:
        return f"Run(run_id={self.run_id!r}, store={self.store_uri!r}, closed={self._closed})"

    # ------------------------------------------------------------------ internals

    def _put(self, kind: str, step: Any, payload: Any, n: int) -> None:
        if self._closed:
            self._drops.add(kind, n, "closed", "logged after close()")
            return
        if type(step) is not int or not INT64[0] <= step <= INT64[1]:  # refused here, counted
            try:
                step = convert.as_step(step)
            except (TypeError, ValueError) as exc:
                self._drops.add(kind, n, "invalid", f"step {echo(step)}: {cap(str(exc))}")
                return
        self._last_step = step
        if self._held is not None and self._holder == threading.get_ident():
            self._held.append((kind, step, payload, time.time()))
            return
        try:
            self._items.put_nowait((kind, step, payload, time.time()))
        except queue.Full:
            self._drops.add(kind, n, "queue_full")

    def _at_exit(self) -> None:
        self.close("failed" if _uncaught.seen else "finished")


def _count(kind: str, payload: Any) -> int:
    """How many records a queue item holds (metrics and samples: one per entry)."""
    return len(payload) if kind in ("metrics", "samples") else 1


class _UncaughtException:
    """Remembers whether the program is ending on an uncaught exception, so the at-exit close
    marks the run "failed" instead of "finished". Chains to the previous ``sys.excepthook``."""

    def __init__(self) -> None:
        self.seen = False
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        previous = sys.excepthook

        def hook(exc_type, exc, tb):
            self.seen = True
            previous(exc_type, exc, tb)

        sys.excepthook = hook


_uncaught = _UncaughtException()


def init(project: str = "default", name: str | None = None, store: Any = DEFAULT_STORE,
         config: Mapping[str, Any] | None = None, run_id: str | None = None,
         resume: bool = False, token_arrays: TokenArrayPolicy | None = None,
         queue_size: int = 4096, flush_every: int = 2000, flush_interval_s: float = 1.0,
         force: bool = False, lease: LeaseOptions | None = None, **options: Any) -> Run:
    """Start (or, with ``resume=True`` and ``run_id``, continue) a run and its writer thread.

    ``store`` is a URI, a path, or a store already opened with ``open_store``.
    Raises at once — before training starts — for a bad store URI, an unwritable path, a corrupt
    store, an unknown run to resume, an existing run id without ``resume``, or bad options; and
    (``RunLeasedError``, naming the holder) for a run another live process writes: the run's lease
    (``lease``: LeaseOptions) is taken here, a stale one taken over, ``force=True`` takes a live one.
    Further ``WriterOptions`` (heartbeat_interval_s, write_retries, retry_backoff_s,
    close_timeout_s, warn_interval_s) may be passed as keywords.
    """
    from rlcockpit.store import open_store

    unknown = set(options) - set(WriterOptions.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown telemetry option(s) {sorted(unknown)}; known: "
                          f"{sorted(WriterOptions.__dataclass_fields__)}",
                          details={"key": sorted(unknown)[0]})
    opts = WriterOptions(queue_size=queue_size, flush_every=flush_every,
                         flush_interval_s=flush_interval_s, **options)
    policy = token_arrays if token_arrays is not None else TokenArrayPolicy()
    if not isinstance(policy, TokenArrayPolicy):
        raise ConfigError(f"token_arrays must be a TokenArrayPolicy, got {policy!r}",
                          details={"key": "token_arrays"})
    lease_options = lease if lease is not None else LeaseOptions()
    lease_options.check_cadence(opts.heartbeat_interval_s)
    opened = store if hasattr(store, "writer") else open_store(store)
    writer = opened.writer()
    run_id = run_id or (None if resume else new_run_id())
    try:
        # before the run is touched: a spool left by an earlier process, an unwritable store
        recovery = recover(opened, writer, run_id, opts, resume=resume) if run_id else None
        info, held = start_or_resume(opened, writer, project, name, config, run_id, resume,
                                      lease_options, force)
    except BaseException:
        writer.close()
        raise
    _uncaught.install()
    return Run(info, store_uri=opened.uri, store_writer=writer, options=opts,
               token_arrays=policy, lease=held, recovery=recovery)
