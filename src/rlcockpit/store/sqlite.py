"""The embedded SQLite store: one file, WAL, one writer connection, readers on their own
connections (in this or other processes). See docs/store.md.

Concurrency model (Datasette's "one writer thread"): a :class:`SqliteWriter` is one connection
used by one thread; it writes each batch in one ``BEGIN IMMEDIATE`` transaction. Readers never
block the writer and the writer never blocks readers (WAL); two writers (two training processes
into one file) take turns, waiting up to ``busy_timeout_s`` for the lock.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from rlcockpit.errors import StoreError
from rlcockpit.store.schema import SCHEMA_VERSION, current_version, migrate, user_tables
from rlcockpit.store.uri import StoreURI

DEFAULT_BUSY_TIMEOUT_S = 5.0
DEFAULT_STALE_AFTER_S = 120.0
PAGE_SIZE = 16384


def connect(path: Path, *, busy_timeout_s: float, read_only: bool = False,
            file_read_only: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, synchronous=NORMAL.

    synchronous=NORMAL in WAL mode keeps every committed transaction across a process crash
    (SIGKILL); only a power loss can drop the last transactions. ``check_same_thread`` is off
    because the telemetry creates its writer on the caller's thread and hands it to its writer
    thread; each connection is still used by one thread at a time.
    """
    target, uri = str(path), False
    if file_read_only:  # opened read-only by SQLite itself; immutable when no -shm can be made
        target, uri = _read_only_uri(path), True
    conn = sqlite3.connect(target, timeout=busy_timeout_s, isolation_level=None,
                           check_same_thread=False, uri=uri)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -32768")  # 32 MiB page cache per connection
    conn.execute("PRAGMA temp_store = MEMORY")
    if read_only:
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA mmap_size = 268435456")
    return conn


class SqliteStore:
    """An opened, validated and migrated SQLite store file. Cheap to hold; connections are made
    by :meth:`writer` and :meth:`reader`."""

    def __init__(self, uri: StoreURI, *, create: bool = True, read_only: bool = False) -> None:
        self.uri = uri.text
        self.path = uri.path
        self.read_only = read_only
        self.busy_timeout_s = float(uri.options.get("busy_timeout_s", DEFAULT_BUSY_TIMEOUT_S))
        self.stale_after_s = float(uri.options.get("stale_after_s", DEFAULT_STALE_AFTER_S))
        _check_path(self.path, create=create, writable=not read_only)
        if not create and _empty(self.path):
            raise StoreError(f"{self.path} is an empty file, not an rlcockpit store; give the path "
                             "of a store (a training run or `rlcockpit demo` makes one)",
                             details={"path": str(self.path)})
        self.schema_version = self._check_version() if read_only else self._open_and_migrate()

    def writer(self):
        from rlcockpit.store.sqlite_writer import SqliteWriter

        self._refuse_if_read_only("write runs")
        return SqliteWriter(self._connect())

    def reader(self):
        from rlcockpit.store.sqlite_reader import SqliteReader

        return SqliteReader(lambda: self._connect(read_only=True), stale_after_s=self.stale_after_s)

    def control(self):
        """The control plane's tables (users, live parameters, tickets, audit): docs/control.md."""
        from rlcockpit.store.sqlite_control import SqliteControlStore

        return SqliteControlStore(self._connect, signal=self.path.with_name(self.path.name + "-tickets"))

    def leases(self):
        """The runs' leases: which process writes each run (store/sqlite_lease.py)."""
        from rlcockpit.store.sqlite_lease import SqliteLeases

        self._refuse_if_read_only("take run leases")
        return SqliteLeases(self._connect)

    def layouts(self):
        """Saved dashboard layouts, one per project (store/layouts.py)."""
        from rlcockpit.store.layouts import SqliteLayouts

        return SqliteLayouts(self._connect, read_only=self.read_only)

    def _refuse_if_read_only(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; cannot {what}",
                             details={"path": str(self.path)})

    def _check_version(self) -> int:
        """Read-only open: the file must already be a store of this schema version."""
        conn = self._connect()
        try:
            version = current_version(conn)
        except sqlite3.DatabaseError as exc:
            raise _not_a_store(self.path, exc) from exc
        finally:
            conn.close()
        if version != SCHEMA_VERSION:
            what = "is not an rlcockpit store" if version == 0 else (
                f"has store schema version {version}; this rlcockpit reads {SCHEMA_VERSION} "
                + ("(upgrade rlcockpit)" if version > SCHEMA_VERSION else
                   "(open it once with write access, e.g. `rlcockpit users list`, to upgrade it)"))
            raise StoreError(f"{self.path} {what}", details={"path": str(self.path), "version": version})
        return version

    def close(self) -> None:
        """Nothing to release: connections belong to the writers and readers."""

    def __repr__(self) -> str:
        return f"SqliteStore({self.uri!r})"

    def _connect(self, read_only: bool = False) -> sqlite3.Connection:
        try:
            return connect(self.path, busy_timeout_s=self.busy_timeout_s,
                           read_only=read_only or self.read_only, file_read_only=self.read_only)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}; check the path and its "
                             "permissions", details={"path": str(self.path)}) from exc
        except sqlite3.DatabaseError as exc:  # "file is not a database": corrupt or foreign
            raise _not_a_store(self.path, exc) from exc

    def _open_and_migrate(self) -> int:
        conn = self._connect()
        try:
            return _validate_and_migrate(conn, self.path)
        except sqlite3.DatabaseError as exc:
            raise _not_a_store(self.path, exc) from exc
        finally:
            conn.close()


def _not_a_store(path: Path, exc: Exception) -> StoreError:
    return StoreError(f"{path} is not a readable rlcockpit SQLite store ({exc}); move the file "
                      "away or choose another path", details={"path": str(path)})


def _validate_and_migrate(conn: sqlite3.Connection, path: Path) -> int:
    version = current_version(conn)  # raises DatabaseError for a corrupt / non-SQLite file
    if version == 0 and user_tables(conn):
        raise StoreError(
            f"{path} is a SQLite database but not an rlcockpit store (it has tables "
            f"{', '.join(sorted(user_tables(conn))[:5])} and no schema_version); choose another "
            "file", details={"path": str(path)})
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has store schema version {version}, newer than this rlcockpit understands "
            f"({SCHEMA_VERSION}); upgrade rlcockpit to read it (files are never downgraded)",
            details={"path": str(path), "version": version, "supported": SCHEMA_VERSION})
    if version == 0:
        # 16 KiB pages: a sample payload (~1 KB) per page slot costs less b-tree overhead;
        # measured ~10% less writer CPU than 4 KiB. Only possible before the first table exists.
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(f"cannot switch {path} to WAL mode (got {mode!r}); is it on a network "
                         "file system? Put the store on a local disk", details={"path": str(path)})
    return migrate(conn)


def _empty(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    return path.stat().st_size == 0 and not (wal.exists() and wal.stat().st_size > 0)


def _read_only_uri(path: Path) -> str:
    """``file:...?mode=ro``; SQLite opens a WAL file read-only only when its -shm exists or can be
    created, so in a directory this user cannot write the file is read as immutable."""
    quoted = urllib.parse.quote(str(path.resolve()))
    shm = Path(f"{path}-shm")
    if shm.exists() or os.access(path.parent if str(path.parent) else ".", os.W_OK):
        return f"file:{quoted}?mode=ro"
    return f"file:{quoted}?mode=ro&immutable=1"


def _check_path(path: Path, *, create: bool, writable: bool = True) -> None:
    """Fail fast with a fix for the common mistakes: a directory, a missing parent, no access."""
    shown = str(path)
    if path.is_dir():
        raise StoreError(f"store path {shown} is a directory; give a file inside it, e.g. "
                         f"sqlite:///{path / 'rlcockpit.db'}", details={"path": shown})
    if path.exists():
        if not writable:
            if not os.access(path, os.R_OK):
                raise StoreError(f"store file {shown} is not readable by this user; fix its "
                                 "permissions", details={"path": shown})
            return
        if not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(f"store file {shown} is not readable and writable by this user; fix "
                             "its permissions or choose another path", details={"path": shown})
        return
    if not create:
        raise StoreError(f"no store at {shown}; check the path (an absolute path needs four "
                         "slashes: sqlite:////abs/path.db)", details={"path": shown})
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        hint = ""
        if not path.is_absolute() and Path("/" + str(path)).parent.is_dir():
            hint = f"; did you mean the absolute path sqlite:////{path}? (four slashes)"
        raise StoreError(f"directory {parent.resolve()} for store {shown} does not exist; create "
                         f"it first{hint}", details={"path": shown})
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create store {shown}: directory {parent.resolve()} is not "
                         "writable; choose a writable path", details={"path": shown})
