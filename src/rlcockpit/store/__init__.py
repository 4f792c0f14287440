"""Stores chosen by URI: ``sqlite:///path/to.db`` (default), ``clickhouse://host:8123/db`` and
``chdb:///path/to/dir`` (ClickHouse; the client libraries are imported only when such a store is
opened). See :func:`open_store`.

    from rlcockpit.store import open_store
    store = open_store("sqlite:///runs.db")
    writer = store.writer()   # one connection, one thread
    reader = store.reader()   # its own connections; safe while another process writes
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlcockpit.store.base import (
    DiagnosticsReader,
    RunReader,
    RunSummary,
    SampleHistogram,
    SamplePage,
    SampleQuery,
    SampleReader,
    Series,
    StoreReader,
    StoreWriter,
    TailReader,
)
from rlcockpit.store.uri import AVAILABLE_SCHEMES, VALID_SCHEMES, parse_store_uri

if TYPE_CHECKING:
    from rlcockpit.store.clickhouse import ClickHouseStore
    from rlcockpit.store.sqlite import SqliteStore


def open_store(uri: str | Path, *, create: bool = True, read_only: bool = False
               ) -> SqliteStore | ClickHouseStore:
    """Open (and create or upgrade) the store at ``uri``; fail fast with a fix when it cannot.

    Accepted: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, or a bare file
    path. Options in the query string: ``busy_timeout_s``, ``stale_after_s``. With
    ``create=False`` a missing file is an error instead of a new empty store (for read-only
    tools such as ``rlcockpit runs``). Raises :class:`~rlcockpit.errors.StoreError` for an unknown
    scheme (listing the valid ones), a directory, a missing or unwritable directory, a file that
    is not an rlcockpit store, or a store written by a newer rlcockpit. An existing empty file is
    refused unless ``create`` (it is never turned into a store by a tool that only reads).

    ``read_only=True`` (``rlcockpit runs``, ``audit verify``): never writes — no migration, no
    journal-mode change — and works on a file or directory this user cannot write; only
    ``reader()`` and the control store's reads work.

    ``clickhouse://[user[:password]@]host[:port]/database[?secure=true]`` and
    ``chdb:///path/to/dir`` open a :class:`~rlcockpit.store.clickhouse.ClickHouseStore`
    (docs/store.md, "ClickHouse"); ``create=False`` then refuses a database without a store.
    """
    parsed = parse_store_uri(uri)
    if parsed.scheme in ("clickhouse", "chdb"):
        from rlcockpit.store.clickhouse import ClickHouseStore

        return ClickHouseStore(parsed, create=create, read_only=read_only)
    from rlcockpit.store.sqlite import SqliteStore

    return SqliteStore(parsed, create=create and not read_only, read_only=read_only)


__all__ = [
    "AVAILABLE_SCHEMES",
    "VALID_SCHEMES",
    "DiagnosticsReader",
    "RunReader",
    "RunSummary",
    "SampleHistogram",
    "SamplePage",
    "SampleQuery",
    "SampleReader",
    "Series",
    "StoreReader",
    "StoreWriter",
    "TailReader",
    "open_store",
]
