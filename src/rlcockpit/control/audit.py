"""The audit chain: verify that no entry was changed or removed, and export the log.

Every entry stores ``hash = sha256(prev_hash + "\\n" + canonical JSON of the entry)``
(:meth:`rlcockpit.records.AuditEntry.chain_hash`), so changing any field of an entry breaks its
own hash, removing an entry breaks the next entry's ``prev_hash`` (and leaves a gap in ``seq``),
and removing the newest entries leaves ``seq`` below the store's high-water mark. Entries about a
ticket or a user carry the digest of its row after the change (``details.state``), so a ticket
or user changed directly in its table is caught as well.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from rlcockpit.records import AUDIT_GENESIS, AuditEntry, state_digest, to_dict
from rlcockpit.store.base import ControlStore

USER_ACTIONS = ("user_added", "user_revoked", "user_token_rotated")  # entries whose details.state is a user row's digest

PAGE = 5000


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    entries: int
    broken_seq: int | None = None
    problem: str = ""

    def message(self) -> str:
        if self.ok:
            return f"OK: {self.entries} audit entries, chain intact"
        return f"BROKEN at entry {self.broken_seq}: {self.problem}"


def entries(store: ControlStore) -> Iterator[AuditEntry]:
    after = 0
    while True:
        page = store.read_audit(after_seq=after, limit=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].seq  # type: ignore[assignment]


@dataclass
class _Walk:
    """How far the chain has been verified, and the state each ticket's and user's last entry
    vouches for (``details.state``, see SqliteControlStore._append)."""

    prev_hash: str = AUDIT_GENESIS
    prev_seq: int = 0
    count: int = 0
    tickets: dict[int, tuple[int, str]] = field(default_factory=dict)  # ticket id -> (seq, digest)
    users: dict[str, tuple[int, str]] = field(default_factory=dict)  # user name -> (seq, digest)

    def copy(self) -> _Walk:
        return _Walk(self.prev_hash, self.prev_seq, self.count, dict(self.tickets), dict(self.users))


def verify(store: ControlStore) -> VerifyResult:
    """Walk the chain from the first entry; the first broken link names its entry. Then every
    ticket and user row must match the state its last audit entry recorded."""
    result, _ = _verify_from(store, _Walk())
    return result


def _verify_from(store: ControlStore, walk: _Walk) -> tuple[VerifyResult, _Walk]:
    after = walk.prev_seq
    while True:
        page = store.read_audit(after_seq=after, limit=PAGE)
        for entry in page:
            problem = _check(entry, walk.prev_hash, walk.prev_seq)
            if problem:
                return VerifyResult(False, walk.count, entry.seq, problem), walk
            _note_state(walk, entry)
            walk.prev_hash, walk.prev_seq, walk.count = entry.hash, entry.seq or 0, walk.count + 1
        if len(page) < PAGE:
            break
        after = page[-1].seq  # type: ignore[assignment]
    high = store.audit_high_water()
    if high > walk.prev_seq:
        return VerifyResult(False, walk.count, walk.prev_seq + 1, f"entries {walk.prev_seq + 1}..{high} were "
                            f"removed (the log ends at {walk.prev_seq})"), walk
    return _state_result(store, walk), walk


def _note_state(walk: _Walk, entry: AuditEntry) -> None:
    state = entry.details.get("state")
    if not isinstance(state, str):
        return
    if entry.ticket_id is not None:
        walk.tickets[entry.ticket_id] = (entry.seq or 0, state)
    elif entry.action in USER_ACTIONS:
        walk.users[str(entry.details.get("name"))] = (entry.seq or 0, state)


def _state_result(store: ControlStore, walk: _Walk) -> VerifyResult:
    """Rows without any entry that records a state (written before the chain covered them) are
    not judged."""
    for ticket in store.list_tickets():
        seen = walk.tickets.get(ticket.ticket_id)  # type: ignore[arg-type]
        if seen and seen[1] != state_digest(ticket):
            return VerifyResult(False, walk.count, seen[0], f"ticket {ticket.ticket_id} in the tickets table "
                                "does not match the state its last audit entry recorded (changed outside "
                                "the control plane)")
    for user in store.list_users():
        seen = walk.users.get(user.name)
        if seen and seen[1] != state_digest(user):
            return VerifyResult(False, walk.count, seen[0], f"user {user.name!r} in the users table does not "
                                "match the state its last audit entry recorded (changed outside the control "
                                "plane)")
    return VerifyResult(True, walk.count)


class ChainCheck:
    """``GET /api/audit?check=true`` without walking the whole chain on every call.

    The chain is walked once; later calls verify only the entries appended since (plus the last
    verified entry, which must be unchanged, and the ticket and user states), and the whole chain
    again once ``full_every_s`` has passed. ``rlcockpit audit verify`` always walks it all.
    """

    def __init__(self, store: ControlStore, *, full_every_s: float = 300.0) -> None:
        self.store = store
        self.full_every_s = full_every_s
        self._walk: _Walk | None = None
        self._full_at = -1e18
        self._lock = threading.Lock()

    def check(self) -> VerifyResult:
        with self._lock:
            now = time.monotonic()
            walk = self._walk
            if walk is None or now - self._full_at >= self.full_every_s or not self._tail_intact(walk):
                walk, self._full_at = _Walk(), now
            result, walk = _verify_from(self.store, walk.copy())
            self._walk = walk if result.ok else None
            return result

    def _tail_intact(self, walk: _Walk) -> bool:
        if walk.prev_seq == 0:
            return True
        last = self.store.read_audit(after_seq=walk.prev_seq - 1, limit=1)
        return (bool(last) and last[0].seq == walk.prev_seq and last[0].hash == walk.prev_hash
                and last[0].chain_hash(last[0].prev_hash) == walk.prev_hash)


def _check(entry: AuditEntry, prev_hash: str, prev_seq: int) -> str:
    if entry.seq != prev_seq + 1:
        return f"entries {prev_seq + 1}..{(entry.seq or 0) - 1} were removed (seq jumps from {prev_seq} to {entry.seq})"
    if entry.prev_hash != prev_hash:
        return "its prev_hash does not match the previous entry's hash (the previous entry was changed or removed)"
    if entry.chain_hash(entry.prev_hash) != entry.hash:
        return "its content does not match its hash (the entry was changed)"
    return ""


def export_jsonl(store: ControlStore) -> Iterator[str]:
    for entry in entries(store):
        yield json.dumps(to_dict(entry), ensure_ascii=False, sort_keys=True)
