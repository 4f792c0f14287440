"""A run has one writer: the telemetry side of the run's lease (store/lease.py, docs/telemetry.md).

:func:`take_lease` runs at ``init()``, before anything of the run is written: a run another live
process writes is refused (:class:`~rlcockpit.errors.RunLeasedError` naming the holder), a lease
whose holder stopped renewing it is taken over (and the takeover recorded as an event), ``force``
takes over a live one. :class:`LeasedWriter` wraps the run's store writer on the writer thread:
each write or heartbeat renews the lease when ``renew_every_s`` has passed; once the lease is found
taken over, the writer writes nothing more (every record counted as dropped, reason
``lease_lost``, one loud warning), never raises into the loop, and its close leaves the run's status
to the new holder. Only the holder changes the run's status; a clean close releases the lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.config import Config, option
from rlcockpit.errors import ConfigError, RlcockpitError
from rlcockpit.records import Batch, EventRecord
from rlcockpit.store.lease import TAKEOVER_EVENT, Acquired, LeaseHolder, LeaseLostError
from rlcockpit.telemetry.drops import DropCounter

logger = logging.getLogger("rlcockpit.telemetry")
LEASE_KINDS = ("sdk", "trainer", "trl", "follower")
_KINDS = ("metrics", "histograms", "samples", "events", "findings", "snapshots", "phases", "checkpoints")
_REPORT = ("telemetry/dropped_total", "telemetry_dropped")  # writer.py's drop report: never counted
CHECK_EVERY_S = 1.0  # backends without an in-transaction fence: check the lease before writes this often


@dataclass(frozen=True)
class LeaseOptions(Config):
    """The run's lease (``rlcockpit.init(..., lease=LeaseOptions(...))``; docs/telemetry.md)."""

    kind: str = option("sdk", choices=LEASE_KINDS,
                       help="Who writes the run, as a second writer's error names it.")
    renew_every_s: float = option(
        10.0, range=(0.05, 600.0),
        help="The writer thread renews the lease at its first write or heartbeat this long after "
             "the last renewal.")
    stale_after_s: float = option(
        45.0, range=(0.5, 86400.0),
        help="A lease not renewed for this long is stale: its holder is taken to be dead and the "
             "next writer takes the run over. At least twice renew_every_s plus the heartbeat interval.")

    def check_cadence(self, heartbeat_interval_s: float) -> None:
        """Renewals must come well within ``stale_after_s``, or a live holder would look dead."""
        need = 2 * (self.renew_every_s + heartbeat_interval_s)
        if self.stale_after_s < need:
            raise ConfigError(
                f"lease stale_after_s={self.stale_after_s} is too short: a holder renews every "
                f"renew_every_s={self.renew_every_s} s at its next write or heartbeat (every "
                f"heartbeat_interval_s={heartbeat_interval_s} s when idle); use at least {need:g} s "
                "or renew more often", details={"key": "stale_after_s"})


class Lease:
    """This process's lease on a run: who took it, why (``acquired.reason``), and whether it was
    taken over since (:attr:`lost`)."""

    def __init__(self, leases: Any, acquired: Acquired, options: LeaseOptions) -> None:
        self.leases = leases
        self.acquired = acquired
        self.options = options
        self.run_id = acquired.lease.run_id
        self.token = acquired.lease.holder.token
        self.lost = False
        self.lost_to = ""  # the holder that took the lease over, as the store described it
        self.renewed_at = time.monotonic()

    def takeover_event(self, step: int) -> EventRecord | None:
        """The ``lease_taken_over`` event of a stale or forced takeover (None for a new lease)."""
        previous = self.acquired.previous
        if previous is None:
            return None
        now = time.time()
        return EventRecord(step=step, kind=TAKEOVER_EVENT, wall_time=now, payload={
            "reason": self.acquired.reason, "previous": previous.public(now),
            "holder": self.acquired.lease.public(now)})

    def renew_if_due(self, drops: DropCounter) -> None:
        if self.lost or time.monotonic() - self.renewed_at < self.options.renew_every_s:
            return
        try:
            held = self.leases.renew(self.run_id, self.token, stale_after_s=self.options.stale_after_s)
        except Exception as exc:  # a missed renewal loses nothing yet: the next one retries
            drops.warn("lease", f"rlcockpit telemetry could not renew the lease of run {self.run_id}: {exc}")
            return
        self.renewed_at = time.monotonic()
        if not held:
            self.mark_lost()

    def mark_lost(self) -> None:
        """The lease is gone: say so once, loudly; from now on nothing of this run is written."""
        if self.lost:
            return
        self.lost = True
        try:
            current = self.leases.get(self.run_id)
        except Exception:  # the message only loses the new holder's name
            current = None
        self.lost_to = current.describe() if current is not None else "another process (it has released it since)"
        logger.error("rlcockpit telemetry: run %s was taken over by %s; this process (%s) no longer "
                     "writes it: its records are dropped (counted, reason lease_lost), the training "
                     "loop goes on, and closing the run will not change its status",
                     self.run_id, self.lost_to, self.acquired.lease.holder.label())


def take_lease(opened: Any, run_id: str, options: LeaseOptions, *, force: bool = False) -> Lease:
    """Take the run's lease in store ``opened`` (RunLeasedError while another live process holds
    it and not ``force``)."""
    leases = opened.leases()
    try:
        acquired = leases.acquire(run_id, LeaseHolder.this_process(options.kind),
                                  stale_after_s=options.stale_after_s, force=force)
    except BaseException:
        leases.close()
        raise
    return Lease(leases, acquired, options)


def refuse_if_held(store: str, run_id: str) -> None:
    """Fail fast, before a long setup (``train --resume`` loads models first), when another live
    process holds run ``run_id``'s lease; reads only. ``init()`` still takes the lease atomically."""
    from rlcockpit.store import open_store
    from rlcockpit.store.lease import held_error

    try:
        reader = open_store(store, create=False, read_only=True).reader()
    except RlcockpitError:  # no store yet, or one to upgrade: init() decides
        return
    try:
        current = reader.get_lease(run_id)
    except RlcockpitError:  # an unknown run: init() says so with its own fix
        return
    finally:
        reader.close()
    if current is not None and current.live():
        raise held_error(current)


class LeasedWriter:
    """The run's :class:`~rlcockpit.store.base.StoreWriter` while this process holds its lease (the
    background writer's store). Never raises because of the lease; counts what it did not write."""

    def __init__(self, inner: Any, lease: Lease, drops: DropCounter) -> None:
        self._inner = inner
        self.lease = lease
        self._drops = drops
        self._checked_at = time.monotonic()
        self._fenced = hasattr(inner, "fence") and hasattr(lease.leases, "fence")
        if self._fenced:  # SQLite: checked inside each batch's own transaction
            inner.fence = lease.leases.fence(lease.token)

    def create_run(self, run: Any) -> None:
        self._inner.create_run(run)

    def write_batch(self, run_id: str, batch: Batch) -> None:
        self.lease.renew_if_due(self._drops)
        self._check_if_due()
        if self.lease.lost:
            self._discard(batch)
            return
        try:
            self._inner.write_batch(run_id, batch)
        except LeaseLostError:
            self.lease.mark_lost()
            self._discard(batch)

    def heartbeat(self, run_id: str, wall_time: float, last_step: int | None) -> None:
        self.lease.renew_if_due(self._drops)
        if not self.lease.lost:
            self._inner.heartbeat(run_id, wall_time, last_step)

    def strip_token_arrays(self, run_id: str, keep: Mapping[int, Collection[int]]) -> None:
        if not self.lease.lost:
            self._inner.strip_token_arrays(run_id, keep)

    def set_run_status(self, run_id: str, status: str, *, ended_at: float | None = None) -> None:
        """The final status (close): set and the lease released in one step, only by its holder."""
        if not self.lease.lost and not self.lease.leases.finish(run_id, self.lease.token, status, ended_at):
            self.lease.mark_lost()
        if self.lease.lost:
            logger.warning("rlcockpit telemetry: run %s not marked %r: %s holds it now", run_id, status,
                           self.lease.lost_to)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self.lease.leases.close()

    def _check_if_due(self) -> None:
        """Backends without a fence (ClickHouse): ask the store at most every CHECK_EVERY_S."""
        if self._fenced or self.lease.lost or time.monotonic() - self._checked_at < CHECK_EVERY_S:
            return
        self._checked_at = time.monotonic()
        try:
            held = self.lease.leases.holds(self.lease.run_id, self.lease.token)
        except Exception as exc:  # cannot tell: write, the next check asks again
            self._drops.warn("lease", f"rlcockpit telemetry could not check the lease of run "
                                      f"{self.lease.run_id}: {exc}")
            return
        if not held:
            self.lease.mark_lost()

    def _discard(self, batch: Batch) -> None:
        if _is_drop_report(batch):
            return
        for kind in _KINDS:
            n = len(getattr(batch, kind))
            if n:
                self._drops.add(kind, n, "lease_lost", quiet=True)


def _is_drop_report(batch: Batch) -> bool:
    """The writer's own drop report (nothing else in the batch): dropping it is not a new drop."""
    others = sum(len(getattr(batch, k)) for k in _KINDS if k not in ("metrics", "events"))
    return (not others and all(m.name == _REPORT[0] for m in batch.metrics)
            and all(e.kind == _REPORT[1] for e in batch.events))
