"""The control plane's tables in SQLite (schema v5): users, live parameters, tickets, audit.

Every connection belongs to one thread (a thread-local cache), so the server's worker threads and
a trainer's HOTFIX can share one :class:`SqliteControlStore`. Each state change is one
``BEGIN IMMEDIATE`` transaction that also appends its audit entry: the entry is chained to the
last one *inside* the write lock, so two processes appending at once still form one chain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcockpit.errors import NotFoundError, StoreError
from rlcockpit.records import (
    AUDIT_GENESIS,
    AuditEntry,
    LiveParamsRecord,
    TicketRecord,
    UserRecord,
    json_safe,
    state_digest,
)
from rlcockpit.store.sessions import SessionRecord
from rlcockpit.store.sqlite_conns import ThreadConnections

_USER_COLS = ("user_id", "name", "role", "key_id", "salt", "token_hash", "created_at", "created_by",
              "revoked_at")
_TICKET_JSON = ("value", "previous", "effect")
_TICKET_COLS = tuple(f.name for f in dataclasses.fields(TicketRecord))
# entries that vouch for a user's row (details.name)
USER_ACTIONS = ("user_added", "user_revoked", "user_token_rotated")
_SESSION_COLS = tuple(f.name for f in dataclasses.fields(SessionRecord))
_AUDIT_COLS = ("seq", "at", "actor", "action", "outcome", "run_id", "ticket_id", "details", "prev_hash",
               "hash")


def _dumps(value: Any) -> str:
    # NaN / inf become None so every stored JSON is strict (and audit hashes are reproducible)
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False)


class SqliteControlStore:
    """Implements :class:`rlcockpit.store.base.ControlStore`.

    ``signal``: a file beside the database (``<store>-tickets``) that every process appends one byte
    to after it commits a ticket change, so a training loop can tell with one ``stat`` whether its
    tickets may have changed (:meth:`tickets_version`) instead of querying the store each step."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], signal: Path | None = None) -> None:
        self._conns = ThreadConnections(connect)
        self._signal = signal
        self._signal_fd: int | None = None

    # ------------------------------------------------------------------ the tickets signal

    def tickets_version(self) -> tuple[int, int] | None:
        """A value that changes whenever a process using this store created or changed a ticket
        since (None: cannot tell, ask the store). The signal file is opened (created if need be)
        once and then only ``fstat``-ed: no path lookup per call."""
        if self._signal is None:
            return None
        try:
            if self._signal_fd is None:
                self._signal_fd = os.open(self._signal, os.O_RDONLY | os.O_CREAT, 0o644)
            st = os.fstat(self._signal_fd)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    def _tickets_changed(self) -> None:
        """After a committed ticket change: one byte more in the signal file. Fail soft — readers
        still ask the store at least every second (LoopControl)."""
        if self._signal is None:
            return
        with contextlib.suppress(OSError), open(self._signal, "ab") as f:
            f.write(b".")

    # ------------------------------------------------------------------ connections

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    @contextlib.contextmanager
    def _tx(self, action: str) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"control store: {action} failed: {exc}", details={"action": action}) from exc

    def close(self) -> None:
        self._conns.close()
        fd, self._signal_fd = self._signal_fd, None
        if fd is not None:
            os.close(fd)

    # ------------------------------------------------------------------ users

    def add_user(self, user: UserRecord, audit: AuditEntry) -> UserRecord:
        try:
            with self._tx("add user") as conn:
                cur = conn.execute(
                    "INSERT INTO users (name, role, key_id, salt, token_hash, created_at, created_by, revoked_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (user.name, user.role, user.key_id, user.salt, user.token_hash, user.created_at,
                     user.created_by, user.revoked_at))
                self._append(conn, audit)
        except sqlite3.IntegrityError:
            raise StoreError(f"a user named {user.name!r} already exists; choose another name "
                             "(`rlcockpit users list` shows them)", details={"name": user.name}) from None
        return dataclasses.replace(user, user_id=cur.lastrowid)

    def find_user(self, *, key_id: str | None = None, name: str | None = None) -> UserRecord | None:
        column, value = ("key_id", key_id) if key_id is not None else ("name", name)
        row = self._conn().execute(f"SELECT {', '.join(_USER_COLS)} FROM users WHERE {column} = ?",
                                   (value,)).fetchone()
        return _user(row) if row else None

    def list_users(self) -> list[UserRecord]:
        rows = self._conn().execute(f"SELECT {', '.join(_USER_COLS)} FROM users ORDER BY user_id").fetchall()
        return [_user(r) for r in rows]

    def revoke_user(self, name: str, at: float, audit: AuditEntry) -> UserRecord:
        with self._tx("revoke user") as conn:
            cur = conn.execute("UPDATE users SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ?", (at, name))
            if cur.rowcount == 0:
                raise NotFoundError(f"no user named {name!r}; `rlcockpit users list` shows them",
                                    details={"name": name})
            self._append(conn, audit)
        return self.find_user(name=name)  # type: ignore[return-value]

    def count_active_users(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM users WHERE revoked_at IS NULL").fetchone()[0])

    def find_user_by_id(self, user_id: int) -> UserRecord | None:
        row = self._conn().execute(f"SELECT {', '.join(_USER_COLS)} FROM users WHERE user_id = ?",
                                   (int(user_id),)).fetchone()
        return _user(row) if row else None

    def rotate_user(self, name: str, key_id: str, salt: str, token_hash: str, at: float,
                    audit: AuditEntry) -> UserRecord:
        with self._tx("rotate token") as conn:
            cur = conn.execute("UPDATE users SET key_id = ?, salt = ?, token_hash = ? WHERE name = ? AND "
                               "revoked_at IS NULL", (key_id, salt, token_hash, name))
            if cur.rowcount == 0:
                raise NotFoundError(f"no active user named {name!r}; `rlcockpit users list` shows them",
                                    details={"name": name})
            conn.execute("UPDATE sessions SET revoked_at = ? WHERE revoked_at IS NULL AND user_id = "
                         "(SELECT user_id FROM users WHERE name = ?)", (at, name))
            self._append(conn, audit)
        return self.find_user(name=name)  # type: ignore[return-value]

    # ------------------------------------------------------------------ sign-in codes, sessions

    def add_session(self, record: SessionRecord, audit: AuditEntry | None) -> SessionRecord:
        with self._tx("add session") as conn:
            session_id = self._insert_session(conn, record)
            if audit is not None:
                self._append(conn, audit)
        return dataclasses.replace(record, session_id=session_id)

    def find_session(self, key_id: str) -> SessionRecord | None:
        row = self._conn().execute(f"SELECT {', '.join(_SESSION_COLS)} FROM sessions WHERE key_id = ?",
                                   (key_id,)).fetchone()
        return SessionRecord(**dict(zip(_SESSION_COLS, row, strict=True))) if row else None

    def redeem_signin(self, key_id: str, at: float, session: SessionRecord, audit: AuditEntry
                      ) -> SessionRecord | None:
        with self._tx("redeem sign-in code") as conn:
            cur = conn.execute("UPDATE sessions SET used_at = ? WHERE key_id = ? AND kind = 'signin' AND "
                               "used_at IS NULL AND revoked_at IS NULL AND expires_at > ?", (at, key_id, at))
            if cur.rowcount == 0:
                return None
            session_id = self._insert_session(conn, session)
            self._append(conn, audit)
        return dataclasses.replace(session, session_id=session_id)

    def revoke_sessions(self, user_id: int, at: float, *, key_id: str | None = None,
                        audit: AuditEntry | None = None) -> int:
        sql, args = "UPDATE sessions SET revoked_at = ? WHERE revoked_at IS NULL AND user_id = ?", [at, user_id]
        if key_id is not None:
            sql, args = sql + " AND key_id = ?", [*args, key_id]
        with self._tx("revoke sessions") as conn:
            count = conn.execute(sql, args).rowcount
            if audit is not None and count:
                self._append(conn, audit)
        return count

    @staticmethod
    def _insert_session(conn: sqlite3.Connection, record: SessionRecord) -> int:
        cols = [c for c in _SESSION_COLS if c != "session_id"]
        cur = conn.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                           [getattr(record, c) for c in cols])
        return int(cur.lastrowid or 0)

    # ------------------------------------------------------------------ live parameters

    def publish_live_params(self, record: LiveParamsRecord) -> LiveParamsRecord:
        with self._tx("publish live parameters") as conn:
            run_key = _run_key(conn, record.run_id)
            version = conn.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM live_params WHERE run_key = ?",
                                   (run_key,)).fetchone()[0]
            wall = record.wall_time or time.time()
            conn.execute("INSERT INTO live_params (run_key, version, step, source, params, specs, wall_time) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_key, version, int(record.step), record.source, _dumps(record.values),
                          _dumps(record.specs), wall))
        return dataclasses.replace(record, version=int(version), wall_time=wall)

    def read_live_params(self, run_id: str, *, limit: int | None = None) -> list[LiveParamsRecord]:
        conn = self._conn()
        run_key = _run_key(conn, run_id)
        sql = ("SELECT version, step, source, params, specs, wall_time FROM live_params WHERE run_key = ? "
               "ORDER BY version DESC")
        args: tuple = (run_key,)
        if limit is not None:
            sql, args = sql + " LIMIT ?", (run_key, int(limit))
        rows = conn.execute(sql, args).fetchall()
        return [LiveParamsRecord(run_id=run_id, version=v, step=s, source=src, values=json.loads(p),
                                 specs=json.loads(sp), wall_time=w) for v, s, src, p, sp, w in reversed(rows)]

    # ------------------------------------------------------------------ tickets

    def create_ticket(self, ticket: TicketRecord, audit: AuditEntry) -> TicketRecord:
        cols = [c for c in _TICKET_COLS if c != "ticket_id"]
        now = time.time()
        ticket = dataclasses.replace(ticket, updated_at=ticket.updated_at or now,
                                     requested_at=ticket.requested_at or now)
        with self._tx("create ticket") as conn:
            cur = conn.execute(f"INSERT INTO tickets ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                               [_ticket_value(c, getattr(ticket, c)) for c in cols])
            ticket = dataclasses.replace(ticket, ticket_id=cur.lastrowid)
            self._append(conn, dataclasses.replace(audit, ticket_id=cur.lastrowid))
        self._tickets_changed()
        return ticket

    def get_ticket(self, ticket_id: int) -> TicketRecord:
        row = self._conn().execute(f"SELECT {', '.join(_TICKET_COLS)} FROM tickets WHERE ticket_id = ?",
                                   (int(ticket_id),)).fetchone()
        if row is None:
            raise NotFoundError(f"no ticket {ticket_id}; list a run's tickets with GET /api/runs/<run>/tickets",
                                details={"ticket_id": ticket_id})
        return _ticket(row)

    def list_tickets(self, *, run_id: str | None = None, statuses: Sequence[str] | None = None,
                     limit: int | None = None) -> list[TicketRecord]:
        where, args = [], []
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        if statuses:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            args.extend(statuses)
        sql = f"SELECT {', '.join(_TICKET_COLS)} FROM tickets"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY ticket_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return [_ticket(r) for r in reversed(self._conn().execute(sql, args).fetchall())]

    def transition(self, ticket_id: int, from_statuses: Sequence[str], changes: Mapping[str, object],
                   audit: AuditEntry | None) -> TicketRecord | None:
        unknown = set(changes) - set(_TICKET_COLS) - {"ticket_id"}
        if unknown or "ticket_id" in changes:
            raise StoreError(f"cannot change ticket fields {sorted(unknown) or ['ticket_id']}",
                             details={"fields": sorted(unknown)})
        values = {**changes, "updated_at": time.time()}
        sets = ", ".join(f"{c} = ?" for c in values)
        with self._tx("update ticket") as conn:
            cur = conn.execute(
                f"UPDATE tickets SET {sets} WHERE ticket_id = ? AND status IN ({', '.join('?' * len(from_statuses))})",
                [*(_ticket_value(c, v) for c, v in values.items()), int(ticket_id), *from_statuses])
            if cur.rowcount == 0:
                return None
            if audit is not None:
                self._append(conn, dataclasses.replace(audit, ticket_id=int(ticket_id)))
        self._tickets_changed()
        return self.get_ticket(ticket_id)

    # ------------------------------------------------------------------ audit

    def append_audit(self, entry: AuditEntry) -> AuditEntry:
        with self._tx("append audit entry") as conn:
            return self._append(conn, entry)

    def _append(self, conn: sqlite3.Connection, entry: AuditEntry) -> AuditEntry:
        """Inside an open write transaction: chain ``entry`` to the last row and insert it.

        An entry about a ticket (``ticket_id``) or a user (``user_added`` / ``user_revoked``)
        also carries the digest of that row as it stands now (``details.state``), so the chain
        vouches for the ticket and user tables too: a row changed behind the control plane's
        back no longer matches its last entry (``rlcockpit audit verify``)."""
        last = conn.execute("SELECT hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        seq = self._next_seq(conn)
        prev = last[0] if last else AUDIT_GENESIS
        details = json_safe(dict(entry.details))
        state = _row_state(conn, entry)
        if state is not None:
            details["state"] = state
        entry = dataclasses.replace(entry, seq=seq, at=entry.at or time.time(), prev_hash=prev,
                                    details=details)
        entry = dataclasses.replace(entry, hash=entry.chain_hash(prev))
        conn.execute(f"INSERT INTO audit ({', '.join(_AUDIT_COLS)}) VALUES ({', '.join('?' * len(_AUDIT_COLS))})",
                     (entry.seq, entry.at, entry.actor, entry.action, entry.outcome, entry.run_id,
                      entry.ticket_id, _dumps(entry.details), entry.prev_hash, entry.hash))
        return entry

    @staticmethod
    def _next_seq(conn: sqlite3.Connection) -> int:
        # AUTOINCREMENT's counter: a seq is never reused, even after the last rows were deleted
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'audit'").fetchone()
        return int(row[0]) + 1 if row else 1

    def read_audit(self, *, run_id: str | None = None, after_seq: int | None = None,
                   limit: int | None = None) -> list[AuditEntry]:
        where, args = ["seq > ?"], [int(after_seq or 0)]
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        sql = f"SELECT {', '.join(_AUDIT_COLS)} FROM audit WHERE {' AND '.join(where)} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return [_audit(r) for r in self._conn().execute(sql, args).fetchall()]

    def audit_high_water(self) -> int:
        row = self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'audit'").fetchone()
        return int(row[0]) if row else 0


def _row_state(conn: sqlite3.Connection, entry: AuditEntry) -> str | None:
    if entry.ticket_id is not None:
        row = conn.execute(f"SELECT {', '.join(_TICKET_COLS)} FROM tickets WHERE ticket_id = ?",
                           (int(entry.ticket_id),)).fetchone()
        return state_digest(_ticket(row)) if row else None
    if entry.action in USER_ACTIONS and isinstance(entry.details.get("name"), str):
        row = conn.execute(f"SELECT {', '.join(_USER_COLS)} FROM users WHERE name = ?",
                           (entry.details["name"],)).fetchone()
        return state_digest(_user(row)) if row else None
    return None


def _run_key(conn: sqlite3.Connection, run_id: str) -> int:
    row = conn.execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no run {run_id!r} in this store; `rlcockpit runs` lists them",
                            details={"run_id": run_id})
    return int(row[0])


def _user(row: Sequence[Any]) -> UserRecord:
    return UserRecord(**dict(zip(_USER_COLS, row, strict=True)))


def _ticket_value(column: str, value: Any) -> Any:
    if column in _TICKET_JSON:
        return None if value is None and column != "value" else _dumps(value)
    return value


def _ticket(row: Sequence[Any]) -> TicketRecord:
    data = dict(zip(_TICKET_COLS, row, strict=True))
    for column in _TICKET_JSON:
        if data[column] is not None:
            data[column] = json.loads(data[column])
    return TicketRecord(**data)


def _audit(row: Sequence[Any]) -> AuditEntry:
    data = dict(zip(_AUDIT_COLS, row, strict=True))
    data["details"] = json.loads(data["details"])
    return AuditEntry(**data)
