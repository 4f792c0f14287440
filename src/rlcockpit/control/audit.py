"""The audit chain: verify that no entry was changed or removed, and export the log.

Every entry stores ``hash = sha256(prev_hash + "\\n" + canonical JSON of the entry)``
(:meth:`rlcockpit.records.AuditEntry.chain_hash`), so changing any field of an entry breaks its
own hash, removing an entry breaks the next entry's ``prev_hash`` (and leaves a gap in ``seq``),
and removing the newest entries leaves ``seq`` below the store's high-water mark.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from rlcockpit.records import AUDIT_GENESIS, AuditEntry, to_dict
from rlcockpit.store.base import ControlStore

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


def verify(store: ControlStore) -> VerifyResult:
    """Walk the chain from the first entry; the first broken link names its entry."""
    prev_hash, prev_seq, count = AUDIT_GENESIS, 0, 0
    for entry in entries(store):
        problem = _check(entry, prev_hash, prev_seq)
        if problem:
            return VerifyResult(False, count, entry.seq, problem)
        prev_hash, prev_seq, count = entry.hash, entry.seq or 0, count + 1
    high = store.audit_high_water()
    if high > prev_seq:
        return VerifyResult(False, count, prev_seq + 1,
                            f"entries {prev_seq + 1}..{high} were removed (the log ends at {prev_seq})")
    return VerifyResult(True, count)


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
