"""Run leases in SQLite (schema v7, ``run_leases``): one row per leased run, deleted on release.

Atomic under concurrency: taking a lease reads the row and writes it in one ``BEGIN IMMEDIATE``
transaction (the file's write lock), so of two processes racing for a run exactly one wins and the
other sees its row. Renewing and releasing are conditional on the holder's token, and so is the
final status change (:meth:`SqliteLeases.finish`). :meth:`SqliteLeases.fence` gives the writer a
check that runs inside each batch's own transaction: a writer whose lease was taken over writes
nothing, not even one batch.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

from rlcockpit.errors import RlcockpitError, StoreError
from rlcockpit.store.lease import (
    Acquired,
    LeaseHolder,
    LeaseLostError,
    RunLease,
    decide,
    new_lease,
)
from rlcockpit.store.sqlite_rows import run_not_found

_COLUMNS = "token, kind, host, pid, taken_at, renewed_at, expires_at"


def read_lease(conn: sqlite3.Connection, run_key: int, run_id: str) -> RunLease | None:
    """The lease row of a run (None: nobody holds it); used by the reader too."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM run_leases WHERE run_key = ?", (run_key,)).fetchone()
    if row is None:
        return None
    token, kind, host, pid, taken, renewed, expires = row
    return RunLease(run_id=run_id, holder=LeaseHolder(kind=kind, host=host, pid=int(pid), token=token),
                    taken_at=taken, renewed_at=renewed, expires_at=expires)


class SqliteLeases:
    """Implements :class:`rlcockpit.store.lease.LeaseStore` on its own connection (the telemetry
    takes the lease on the caller's thread, then renews it on its writer thread; one at a time)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def acquire(self, run_id: str, holder: LeaseHolder, *, stale_after_s: float,
                force: bool = False) -> Acquired:
        now = time.time()
        with self._tx("take the lease") as conn:
            run_key = _run_key(conn, run_id)
            current = read_lease(conn, run_key, run_id)
            reason = decide(current, holder, force=force, now=now)
            lease = new_lease(run_id, holder, stale_after_s, now)
            conn.execute(f"INSERT OR REPLACE INTO run_leases (run_key, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (run_key, holder.token, holder.kind, holder.host, holder.pid, lease.taken_at,
                          lease.renewed_at, lease.expires_at))
        return Acquired(lease=lease, reason=reason, previous=current if reason != "new" else None)

    def renew(self, run_id: str, token: str, *, stale_after_s: float) -> bool:
        now = time.time()
        with self._tx("renew the lease") as conn:
            cur = conn.execute("UPDATE run_leases SET renewed_at = ?, expires_at = ? WHERE run_key = "
                               "(SELECT run_key FROM runs WHERE run_id = ?) AND token = ?",
                               (now, now + stale_after_s, run_id, token))
            return cur.rowcount == 1

    def holds(self, run_id: str, token: str) -> bool:
        lease = self.get(run_id)
        return lease is not None and lease.holder.token == token

    def finish(self, run_id: str, token: str, status: str, ended_at: float | None) -> bool:
        with self._tx("end the run") as conn:
            run_key = _run_key(conn, run_id)
            if not _holds(conn, run_key, token):
                return False
            conn.execute("UPDATE runs SET status = ?, ended_at = ? WHERE run_key = ?",
                         (status, None if status == "running" else ended_at, run_key))
            conn.execute("DELETE FROM run_leases WHERE run_key = ?", (run_key,))
        return True

    def release(self, run_id: str, token: str) -> bool:
        with self._tx("release the lease") as conn:
            cur = conn.execute("DELETE FROM run_leases WHERE run_key = (SELECT run_key FROM runs WHERE "
                               "run_id = ?) AND token = ?", (run_id, token))
            return cur.rowcount == 1

    def get(self, run_id: str) -> RunLease | None:
        with self._lock:
            conn = self._connection()
            try:
                return read_lease(conn, _run_key(conn, run_id), run_id)
            except sqlite3.Error as exc:
                raise _error("read the lease", exc) from exc

    def fence(self, token: str) -> Callable[[sqlite3.Connection, int], None]:
        """A check for :attr:`SqliteWriter.fence`: run inside each batch's transaction, it raises
        :class:`LeaseLostError` (the batch is rolled back) once ``token`` no longer holds the run."""

        def check(conn: sqlite3.Connection, run_key: int) -> None:
            if not _holds(conn, run_key, token):
                raise LeaseLostError("this process no longer holds the run's lease; nothing written",
                                     details={"run_key": run_key})

        return check

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ internals

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    @contextlib.contextmanager
    def _tx(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _error(action, exc) from exc


def _holds(conn: sqlite3.Connection, run_key: int, token: str) -> bool:
    row = conn.execute("SELECT token FROM run_leases WHERE run_key = ?", (run_key,)).fetchone()
    return row is not None and row[0] == token


def _run_key(conn: sqlite3.Connection, run_id: str) -> int:
    row = conn.execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise run_not_found(run_id)
    return int(row[0])


def _error(action: str, exc: sqlite3.Error) -> RlcockpitError:
    transient = any(word in str(exc).lower() for word in ("locked", "busy"))
    return StoreError(f"sqlite store could not {action}: {exc}", details={"transient": transient})
