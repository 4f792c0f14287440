"""Phase timing and the overrun watchdog.

The trainer wraps every phase in :meth:`PhaseClock.phase`. A single daemon thread watches the
running phase: once it exceeds its limit, ``on_overrun`` is called *while the phase is still
running* (the trainer records a ``phase_timeout`` event and warns). When the phase returns, an
overrun under ``on_timeout="abort"`` raises :class:`PhaseTimeoutError` — a torch op cannot be
interrupted safely mid-way, so the abort happens at the phase boundary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rlcockpit.errors import PhaseTimeoutError


@dataclass
class _Running:
    phase: str
    step: int
    started: float
    limit: float
    overran: bool = False


class PhaseClock:
    """Times phases (``durations``) and reports overruns from a watchdog thread."""

    def __init__(self, limit_for: Callable[[str], float], *, abort: bool,
                 on_start: Callable[[str, int], None], on_end: Callable[[str, int, float, bool], None],
                 on_overrun: Callable[[str, int, float, float], None], poll_s: float = 0.05) -> None:
        self._limit_for = limit_for
        self._abort = abort
        self._on_start, self._on_end, self._on_overrun = on_start, on_end, on_overrun
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._running: _Running | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.durations: dict[str, float] = {}
        self.current: str | None = None

    @contextmanager
    def phase(self, name: str, step: int) -> Iterator[None]:
        limit = self._limit_for(name)
        running = _Running(name, step, time.perf_counter(), limit)
        with self._lock:
            self._running = running
        self.current = name
        if limit > 0:
            self._ensure_thread()
        self._on_start(name, step)
        ok = False
        try:
            yield
            ok = True
        finally:
            duration = time.perf_counter() - running.started
            with self._lock:
                self._running = None
            self.current = None
            self.durations[name] = self.durations.get(name, 0.0) + duration
            self._on_end(name, step, duration, ok)
        if self._abort and running.overran:
            raise PhaseTimeoutError(f"phase {name} at step {step} ran {duration:.1f} s, over its limit of "
                                    f"{limit:g} s (timeouts.{name.lower()}_s); timeouts.on_timeout=abort stops "
                                    "the run", details={"phase": name, "step": step, "duration_s": duration,
                                                        "limit_s": limit})

    def take_durations(self) -> dict[str, float]:
        """Durations summed per phase since the last call (one step's worth)."""
        out, self.durations = self.durations, {}
        return out

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._watch, name="rlcockpit-phase-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            with self._lock:
                r = self._running
                due = r is not None and r.limit > 0 and not r.overran
                elapsed = time.perf_counter() - r.started if r is not None else 0.0
                if due and elapsed > r.limit:  # type: ignore[union-attr]
                    r.overran = True  # type: ignore[union-attr]
                else:
                    due = False
            if due:
                self._on_overrun(r.phase, r.step, elapsed, r.limit)  # type: ignore[union-attr]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
