"""Refused attempts in the audit log, rate-limited and size-bounded (issue 17, item 1).

Every refusal is worth recording, but one client must not be able to grow the hash-chained log
without limit (each row is a write transaction on the store a trainer is writing too). So:

- **Size**: every refusal row's details are bounded (:func:`rlcockpit.records.bounded`: texts cut
  at ``MAX_TEXT`` characters, at most ``MAX_ITEMS`` list items or keys), like accepted entries.
- **Rate**: refusals are grouped by a key (caller, action, code, reason, method, route template).
  Within ``window_s`` of a key's first refusal, the first ``burst`` refusals get a row each (an
  anonymous caller: the first one only); the rest are counted. When the window is over, one
  ``refusals_suppressed`` row says how many were left out (first and last time, the key) —
  written at the next refusal, the next audit read (``GET /api/audit``), or when the server stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.records import INT64, AuditEntry, bounded
from rlcockpit.store.base import ControlStore

ANONYMOUS_BURST = 1
MAX_KEYS = 10_000  # distinct keys held at once; beyond it every refusal falls into one key
KEY_FIELDS = ("method", "route", "reason", "needed")


@dataclass
class _Window:
    started: float
    written: int = 0
    suppressed: int = 0
    first: float = 0.0
    last: float = 0.0
    sample: dict[str, Any] = field(default_factory=dict)


class RefusalLog:
    """Writes refusal entries through ``store.append_audit`` under the rate limit above."""

    def __init__(self, store: ControlStore, *, window_s: float = 60.0, burst: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.window_s = window_s
        self.burst = burst
        self.clock = clock
        self._windows: dict[tuple, _Window] = {}
        self._lock = threading.Lock()

    def record(self, entry: AuditEntry) -> bool:
        """Append ``entry`` (a refusal) unless its key is over the limit; True when written."""
        entry = AuditEntry(actor=entry.actor[:200], action=entry.action[:200], outcome=entry.outcome,
                           run_id=_cut(entry.run_id), ticket_id=_int64(entry.ticket_id),
                           details=bounded(dict(entry.details)))
        now = self.clock()
        key = _key(entry)
        with self._lock:
            due = self._expired(now)
            window = self._windows.get(key)
            if window is None:
                if len(self._windows) >= MAX_KEYS:
                    key = ("overflow",)
                window = self._windows.setdefault(key, _Window(started=now))
            limit = ANONYMOUS_BURST if entry.actor == "anonymous" else self.burst
            write = window.written < limit
            if write:
                window.written += 1
            else:
                window.suppressed += 1
                window.first = window.first or time.time()
                window.last = time.time()
                window.sample = {"actor": entry.actor, "action": entry.action, **{
                    k: entry.details.get(k) for k in ("code", "status", *KEY_FIELDS) if k in entry.details}}
        for summary in due:
            self.store.append_audit(summary)
        if write:
            self.store.append_audit(entry)
        return write

    def flush(self, *, force: bool = False) -> int:
        """Write the summaries of finished windows (every window when ``force``); their count."""
        with self._lock:
            due = self._expired(self.clock(), force=force)
        for summary in due:
            self.store.append_audit(summary)
        return len(due)

    def _expired(self, now: float, *, force: bool = False) -> list[AuditEntry]:
        """Remove finished windows (under the lock); the summary entries to write."""
        done = [k for k, w in self._windows.items() if force or now - w.started >= self.window_s]
        out = []
        for key in done:
            window = self._windows.pop(key)
            if window.suppressed:
                out.append(_summary(window, self.window_s))
        return out


def _key(entry: AuditEntry) -> tuple:
    details: Mapping[str, Any] = entry.details
    return (entry.actor, entry.action, details.get("code"),
            *(str(details.get(k))[:200] for k in KEY_FIELDS))


def _summary(window: _Window, window_s: float) -> AuditEntry:
    sample = window.sample
    return AuditEntry(actor=str(sample.get("actor", "anonymous")), action="refusals_suppressed",
                      outcome="refused", details={
                          "count": window.suppressed, "first_at": window.first, "last_at": window.last,
                          "window_s": window_s, "refused": sample,
                          "why": "repeated refusals of one key within the window are counted, not "
                                 "written one by one (docs/control.md)"})


def _int64(value: int | None) -> int | None:
    return value if value is not None and INT64[0] <= value <= INT64[1] else None


def _cut(text: str | None, limit: int = 200) -> str | None:
    return None if text is None else str(text)[:limit]


class AuthThrottle:
    """Failed token checks per client address, as a token bucket (docs/control.md "Guessing").

    Each address may fail ``burst`` checks at once; one more failure is allowed every
    ``refill_s`` seconds. Only checks that tested a secret and found it wrong count (an unknown
    or wrong token, a wrong sign-in code): a missing, malformed, revoked or expired credential
    gives a guesser nothing. While an address has no failures left (:meth:`retry_after` > 0),
    the server answers its token checks 429 without testing them, so guessing gets no answer
    at all; a token this server verified before still works (``Users.known``), so the valid
    clients behind a guesser's address are not held back. At most ``MAX_KEYS`` addresses are
    tracked (beyond them the fullest buckets are forgotten first).
    """

    def __init__(self, *, burst: int = 20, refill_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (failures left, at)
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may fail again (0: it may now)."""
        with self._lock:
            left = self._left(client, self.clock())
        return 0.0 if left >= 1.0 else (1.0 - left) * self.refill_s

    def failed(self, client: str) -> float:
        """Count one failed check of ``client``; the seconds it must now wait (0: none)."""
        now = self.clock()
        with self._lock:
            left = max(0.0, self._left(client, now) - 1.0)
            if client not in self._buckets and len(self._buckets) >= MAX_KEYS:
                self._forget_fullest(now)
            self._buckets[client] = (left, now)
        return 0.0 if left >= 1.0 else (1.0 - left) * self.refill_s

    def _left(self, client: str, now: float) -> float:
        left, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), left + (now - at) / self.refill_s)

    def _forget_fullest(self, now: float) -> None:
        ranked = sorted(self._buckets, key=lambda c: self._left(c, now), reverse=True)
        for client in ranked[: max(1, len(ranked) // 10)]:
            self._buckets.pop(client, None)
