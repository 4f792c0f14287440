"""One SQLite connection per thread (a connection must not cross threads), opened on first use
and closed when its thread has ended.

A server answers on pool threads and on short-lived threads (one per live stream); a connection
kept for a thread that is gone holds its file handles (database, WAL, shared memory) and its page
cache forever — 50 finished threads left 50 connections and +101 file handles. So each connection
is held together with its thread, and connections of finished threads are closed whenever a new
one is opened (and by :meth:`ThreadConnections.prune`). ``check_same_thread`` is off on these
connections, so closing one from another thread is allowed once its own thread has ended.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable


class ThreadConnections:
    """``get()`` returns the calling thread's connection; ``close()`` closes every one opened."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._open: dict[int, tuple[threading.Thread, sqlite3.Connection]] = {}
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self.prune()
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._open[id(conn)] = (threading.current_thread(), conn)
        return conn

    def prune(self) -> int:
        """Close the connections of threads that have ended; how many were closed."""
        with self._lock:
            dead = [k for k, (thread, _) in self._open.items() if not thread.is_alive()]
            conns = [self._open.pop(k)[1] for k in dead]
        for conn in conns:
            conn.close()
        return len(conns)

    def count(self) -> int:
        """Connections open now (for tests and diagnostics)."""
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        with self._lock:
            conns, self._open = [c for _, c in self._open.values()], {}
        for conn in conns:
            conn.close()
        self._local = threading.local()
