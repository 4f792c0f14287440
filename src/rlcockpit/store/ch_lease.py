"""Run leases in ClickHouse (schema v6, ``run_leases``): best effort, no transactions.

Every change is a new row: one per taking of the lease (``taken_ns``) and one per renewal or
release of it (same ``taken_ns``, newer ``written_ns``). The lease is the newest taking's newest
row, ``argMax`` by ``(taken_ns, written_ns)``: a renewal sent by an old holder after another process
took the lease over carries the old ``taken_ns`` and never wins back the lease.

Taking is read, insert, wait ``SETTLE_S`` (a server: another process's insert may be in flight),
read again: of two processes racing, the later taking wins and the other is refused. The caveat,
documented in docs/store.md: a racer whose second read comes before the other's insert lands
believes it won too, until its next renewal or write, when it finds the lease gone and stops
writing. chDB is one process, where reads follow inserts at once.
"""

from __future__ import annotations

import time
import uuid

from rlcockpit.store.ch_transport import Transport, lit
from rlcockpit.store.ch_writer import TYPES
from rlcockpit.store.lease import Acquired, LeaseHolder, RunLease, decide, held_error, new_lease
from rlcockpit.store.sqlite_rows import run_not_found

SETTLE_S = 0.25  # clickhouse:// only: how long a taker waits before it checks that it won
LEASE_TYPES = {"run_id": "String", "taken_ns": "UInt64", "written_ns": "UInt64", "token": "String",
               "kind": "String", "host": "String", "pid": "Int64", "taken_at": "Float64",
               "renewed_at": "Float64", "expires_at": "Float64", "released": "UInt8"}
_FIELDS = ("token", "kind", "host", "pid", "taken_at", "renewed_at", "expires_at", "released", "taken_ns")


def current_sql(db: str, run_id: str) -> str:
    """The newest taking's newest row of a run's lease (no row: never leased)."""
    picks = ", ".join(f"argMax({f}, (taken_ns, written_ns))" for f in _FIELDS)
    return f"SELECT {picks} FROM {db}.run_leases WHERE run_id = {lit(run_id)} GROUP BY run_id"


def lease_from_rows(run_id: str, found: list[tuple]) -> tuple[RunLease | None, int]:
    """(the live or expired lease, None once released or never taken; its ``taken_ns``)."""
    if not found:
        return None, 0
    token, kind, host, pid, taken, renewed, expires, released, taken_ns = found[0]
    if released:
        return None, int(taken_ns)
    holder = LeaseHolder(kind=kind, host=host, pid=int(pid), token=token)
    return RunLease(run_id=run_id, holder=holder, taken_at=taken, renewed_at=renewed,
                    expires_at=expires), int(taken_ns)


class ClickHouseLeases:
    """Implements :class:`rlcockpit.store.lease.LeaseStore` on a ClickHouse transport."""

    def __init__(self, transport: Transport, *, close_transport: bool = False) -> None:
        self._t = transport
        self._db = transport.database
        self._close_transport = close_transport

    def acquire(self, run_id: str, holder: LeaseHolder, *, stale_after_s: float,
                force: bool = False) -> Acquired:
        self._check_run(run_id)
        now = time.time()
        current, _ = self._current(run_id)
        reason = decide(current, holder, force=force, now=now)
        lease = new_lease(run_id, holder, stale_after_s, now)
        self._write(lease, time.time_ns())
        if self._t.multi_process:
            time.sleep(SETTLE_S)
        winner, _ = self._current(run_id)
        if winner is None or winner.holder.token != holder.token:
            if winner is None:  # taken and released again meanwhile: say who was there
                winner = lease
            raise held_error(winner)
        return Acquired(lease=lease, reason=reason, previous=current if reason != "new" else None)

    def renew(self, run_id: str, token: str, *, stale_after_s: float) -> bool:
        current, taken_ns = self._current(run_id)
        if current is None or current.holder.token != token:
            return False
        now = time.time()
        self._write(RunLease(run_id=run_id, holder=current.holder, taken_at=current.taken_at,
                             renewed_at=now, expires_at=now + stale_after_s), taken_ns)
        return True

    def holds(self, run_id: str, token: str) -> bool:
        current, _ = self._current(run_id)
        return current is not None and current.holder.token == token

    def finish(self, run_id: str, token: str, status: str, ended_at: float | None) -> bool:
        current, taken_ns = self._current(run_id)
        if current is None or current.holder.token != token:
            return False
        types = TYPES["run_status"]
        self._t.insert("run_status", list(types), [[run_id], [time.time_ns()], [status],
                                                   [None if status == "running" else ended_at]],
                       types, {"insert_deduplication_token": uuid.uuid4().hex})
        self._write(current, taken_ns, released=True)
        return True

    def release(self, run_id: str, token: str) -> bool:
        current, taken_ns = self._current(run_id)
        if current is None or current.holder.token != token:
            return False
        self._write(current, taken_ns, released=True)
        return True

    def get(self, run_id: str) -> RunLease | None:
        self._check_run(run_id)
        return self._current(run_id)[0]

    def close(self) -> None:
        if self._close_transport:
            self._t.close()

    # ------------------------------------------------------------------ internals

    def _current(self, run_id: str) -> tuple[RunLease | None, int]:
        return lease_from_rows(run_id, self._t.query(current_sql(self._db, run_id)))

    def _write(self, lease: RunLease, taken_ns: int, *, released: bool = False) -> None:
        h = lease.holder
        row = (lease.run_id, taken_ns, time.time_ns(), h.token, h.kind, h.host, h.pid, lease.taken_at,
               lease.renewed_at, lease.expires_at, int(released))
        self._t.insert("run_leases", list(LEASE_TYPES), [[v] for v in row], LEASE_TYPES)

    def _check_run(self, run_id: str) -> None:
        if not self._t.query(f"SELECT count() FROM {self._db}.runs WHERE run_id = {lit(run_id)}")[0][0]:
            raise run_not_found(run_id)
