"""A run's lease: which process writes the run (docs/store.md, "One writer per run").

Whoever writes a run through the telemetry (the trainer, ``rlcockpit.init``, the TRL callback, a
follower) holds the run's lease: who it is (kind, host, pid, a random token), when it took the
lease, and an expiry its heartbeat pushes forward. A second writer is refused while the lease is
live; a lease whose holder stopped renewing it (expired: the process was killed) is taken over;
``force`` takes over a live one. Each backend keeps the lease in its own ``run_leases`` table
(:mod:`.sqlite_lease`, :mod:`.ch_lease`); this module holds what they share.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rlcockpit.errors import RunLeasedError, StoreError

TAKEOVER_EVENT = "lease_taken_over"


class LeaseLostError(StoreError):
    """This process's lease on the run was taken over: it must not write the run any more."""

    code = "lease_lost"
    http_status = 409


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds (or wants) a lease. ``token`` tells two holders apart, also in one process."""

    kind: str  # trainer | sdk | follower | trl
    host: str
    pid: int
    token: str

    @classmethod
    def this_process(cls, kind: str) -> LeaseHolder:
        return cls(kind=kind, host=socket.gethostname(), pid=os.getpid(), token=secrets.token_hex(8))

    def label(self) -> str:
        return f"{self.kind} pid {self.pid} on host {self.host}"


@dataclass(frozen=True)
class RunLease:
    """The lease of run ``run_id`` as the store holds it. Live until ``expires_at``."""

    run_id: str
    holder: LeaseHolder
    taken_at: float
    renewed_at: float
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.expires_at

    def describe(self, now: float | None = None) -> str:
        """``trainer pid 1234 on host h since 12:00:03 (lease renewed 3 s ago)``."""
        now = time.time() if now is None else now
        since = time.strftime("%H:%M:%S", time.localtime(self.taken_at))
        state = "" if self.live(now) else f", expired {max(0.0, now - self.expires_at):.0f} s ago"
        return (f"{self.holder.label()} since {since} (lease renewed "
                f"{max(0.0, now - self.renewed_at):.0f} s ago{state})")

    def public(self, now: float | None = None) -> dict[str, Any]:
        """What readers show (``rlcockpit runs``, the server's run JSON): never the token."""
        now = time.time() if now is None else now
        return {"kind": self.holder.kind, "host": self.holder.host, "pid": self.holder.pid,
                "taken_at": self.taken_at, "renewed_at": self.renewed_at,
                "expires_at": self.expires_at, "age_s": round(max(0.0, now - self.taken_at), 3),
                "renewed_ago_s": round(max(0.0, now - self.renewed_at), 3),
                "live": self.live(now)}


@dataclass(frozen=True)
class Acquired:
    """A lease just taken: ``reason`` is ``new`` (the run had none), ``stale`` (its holder stopped
    renewing it) or ``forced``; ``previous`` is the lease taken over."""

    lease: RunLease
    reason: str
    previous: RunLease | None = None


def held_error(current: RunLease, now: float | None = None) -> RunLeasedError:
    """The refusal a second writer gets, naming the holder and the way out."""
    return RunLeasedError(
        f"run {current.run_id} is being written by {current.describe(now)}; wait for it to "
        "finish, or pass --force / force=True to take over a lease you know is dead",
        details={"run_id": current.run_id, "holder": current.public(now)})


def new_lease(run_id: str, holder: LeaseHolder, stale_after_s: float, now: float) -> RunLease:
    return RunLease(run_id=run_id, holder=holder, taken_at=now, renewed_at=now,
                    expires_at=now + stale_after_s)


def decide(current: RunLease | None, holder: LeaseHolder, *, force: bool, now: float) -> str:
    """Why ``holder`` may take the lease (``new`` / ``stale`` / ``forced``); raises
    :class:`RunLeasedError` when another live holder has it and ``force`` is not given."""
    if current is None or current.holder.token == holder.token:
        return "new"
    if not current.live(now):
        return "stale"
    if force:
        return "forced"
    raise held_error(current, now)


@runtime_checkable
class LeaseStore(Protocol):
    """A backend's lease operations (``store.leases()``). Only the holder (its token) renews,
    releases or ends a run; every call says whether it still held the lease."""

    def acquire(self, run_id: str, holder: LeaseHolder, *, stale_after_s: float,
                force: bool = False) -> Acquired:
        """Take the run's lease (NotFoundError for an unknown run, RunLeasedError while another
        live holder has it and not ``force``)."""

    def renew(self, run_id: str, token: str, *, stale_after_s: float) -> bool:
        """Push the expiry forward; False when ``token`` no longer holds the lease."""

    def holds(self, run_id: str, token: str) -> bool: ...

    def finish(self, run_id: str, token: str, status: str, ended_at: float | None) -> bool:
        """Set the run's final status and release the lease, only if ``token`` holds it."""

    def release(self, run_id: str, token: str) -> bool: ...

    def get(self, run_id: str) -> RunLease | None: ...

    def close(self) -> None: ...
