"""Counting what telemetry could not write, and saying so (never silently, never by raising)."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("rlcockpit.telemetry")

DROP_REASONS = ("queue_full", "write_error", "invalid", "closed", "lease_lost", "unwritable",
                "spool_full")
MAX_WARNING = 1000  # characters of one warning line (values in it are cut shorter: records.echo)


class DropCounter:
    """Thread-safe counts of dropped records by (kind, reason), with rate-limited warnings.

    ``kind`` is the record kind (metrics, histogram, samples, event, finding, phase, checkpoint);
    each dropped metric value or sample counts as one record.
    """

    def __init__(self, warn_interval_s: float) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._total = 0
        self._warn_interval_s = warn_interval_s
        self._last_warn: dict[str, float] = {}

    @property
    def total(self) -> int:
        return self._total

    def add(self, kind: str, n: int, reason: str, detail: str = "", *, quiet: bool = False) -> None:
        """Count ``n`` dropped records; ``quiet``: the caller said why once already (lease_lost)."""
        with self._lock:
            key = (kind, reason)
            self._counts[key] = self._counts.get(key, 0) + n
            self._total += n
            total = self._total
        if quiet:
            return
        self.warn(reason, f"rlcockpit telemetry dropped {n} {kind} record(s) ({reason}"
                          f"{': ' + detail if detail else ''}); {total} dropped so far in this run")

    def by_kind(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for (kind, _), n in self._counts.items():
                out[kind] = out.get(kind, 0) + n
            return out

    def by_reason(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for (_, reason), n in self._counts.items():
                out[reason] = out.get(reason, 0) + n
            return out

    def warn(self, topic: str, message: str, *, exc_info: bool = False) -> None:
        """Log ``message`` unless a warning on ``topic`` was logged within the interval."""
        now = time.monotonic()
        last = self._last_warn.get(topic)
        if last is not None and now - last < self._warn_interval_s:
            return
        self._last_warn[topic] = now
        if len(message) > MAX_WARNING:
            message = f"{message[:MAX_WARNING]}… ({len(message)} chars)"
        logger.warning(message, exc_info=exc_info)
