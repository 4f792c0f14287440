"""One SQLite connection per thread (a connection must not cross threads), opened on first use."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable


class ThreadConnections:
    """``get()`` returns the calling thread's connection; ``close()`` closes every one opened."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
