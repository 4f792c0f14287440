"""What the server may take from the machine (issue 17, item 9): a trainer often shares it.

- :func:`limit_threads`: at most ``worker_threads`` API requests run at once (FastAPI runs plain
  ``def`` routes on the event loop's thread pool; its default is 40 threads, so 40 busy clients
  meant 40 threads of JSON and SQLite work against the trainer's cores).
- :func:`nice_this_thread`: the threads that do the server's work (the event loop, request
  workers, live-stream pollers) run ``worker_nice`` steps below the process's priority, so a
  trainer on the same machine (or, in ``rlcockpit demo``, in the same process) gets the CPU
  first. Linux-only (per-thread niceness); elsewhere it is skipped.
- :class:`StreamSlots`: at most ``max_streams`` live streams at once (each polls the store).
"""

from __future__ import annotations

import os
import threading

from rlcockpit.server.errors import TooManyStreams

_local = threading.local()


def limit_threads(n: int) -> None:
    """Bound the running event loop's thread pool (call from the app's lifespan)."""
    import anyio.to_thread

    anyio.to_thread.current_default_thread_limiter().total_tokens = n


def nice_this_thread(increment: int) -> None:
    """Make the calling thread ``increment`` steps nicer than the process (at most 19), once."""
    if increment <= 0 or getattr(_local, "niced", False):
        return
    _local.niced = True
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + increment)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), target)
    except OSError:  # not permitted here (a sandbox): run at the normal priority
        return


class StreamSlots:
    """A counter of open live streams with a ceiling."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self.open >= self.limit:
                raise TooManyStreams(f"{self.open} live streams are open, the server's limit "
                                     "(max_streams); close a dashboard tab or raise the limit",
                                     details={"limit": self.limit})
            self.open += 1

    def release(self) -> None:
        with self._lock:
            self.open = max(0, self.open - 1)
