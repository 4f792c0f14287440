"""The two ways to reach ClickHouse: a server over HTTP (``clickhouse://``, clickhouse-connect) and
the same engine in-process (``chdb://``). One SQL dialect and one set of queries serve both; a
transport only runs a statement, returns rows, and inserts columns.

Values reach SQL as literals made by :func:`lit` (one quoting rule for both transports), so the
queries are plain text that can be logged and rerun in ``clickhouse-client``. Inserts go as
columns (Arrow for chDB, the native format for clickhouse-connect), never as SQL text.

chDB runs one embedded server per process and it locks its directory: another process cannot
open the same directory while this one has it open, and this process cannot open a second
directory at the same time. :class:`ChdbTransport` shares one connection per process between all
stores that open the same directory and releases the lock when the last one closes.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcockpit.errors import QueryTimeoutError, StoreError

_TIMEOUT_CODE = "Code: 159"  # TIMEOUT_EXCEEDED
# errors a value in an insert causes: CANNOT_PARSE_TEXT, CANNOT_PARSE_QUOTED_STRING,
# CANNOT_PARSE_INPUT_ASSERTION_FAILED, CANNOT_PARSE_NUMBER, BAD_ARGUMENTS, CANNOT_PARSE_DATETIME,
# TYPE_MISMATCH, SYNTAX_ERROR, ARGUMENT_OUT_OF_BOUND, CANNOT_CONVERT_TYPE, CANNOT_PARSE_ESCAPE_SEQUENCE,
# INCORRECT_DATA, VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE, TOO_LARGE_STRING_SIZE
_DATA_ERROR_CODES = {6, 26, 27, 72, 36, 41, 53, 62, 69, 70, 25, 117, 321, 131}


def lit(value: Any) -> str:
    """A ClickHouse literal for ``value`` (None, bool, int, float incl. NaN / inf, str, bytes,
    lists and sets as arrays, tuples as tuples)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, bytes):
        return f"unhex('{value.hex()}')"
    if isinstance(value, str):
        escaped = (value.replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0")
                   .replace("\n", "\\n").replace("\r", "\\r"))
        return f"'{escaped}'"
    if isinstance(value, tuple):  # a ClickHouse tuple (keys compared with IN)
        return "tuple(" + ", ".join(lit(v) for v in value) + ")"
    if isinstance(value, (list, set, frozenset)):  # an array
        return "[" + ", ".join(lit(v) for v in value) + "]"
    if hasattr(value, "item"):  # numpy scalars
        return lit(value.item())
    raise StoreError(f"cannot use {type(value).__name__} value {value!r} in a ClickHouse query",
                     details={"type": type(value).__name__})


class Transport:
    """What the ClickHouse store needs from a connection."""

    database: str
    multi_process: bool

    def query(self, sql: str, settings: Mapping[str, Any] | None = None) -> list[tuple]: ...

    def command(self, sql: str, settings: Mapping[str, Any] | None = None) -> None: ...

    def insert(self, table: str, columns: Sequence[str], data: Sequence[Sequence[Any]],
               types: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> None:
        """Insert column-oriented ``data`` (one sequence per column) into ``table``."""

    def share(self) -> Transport:
        """Another handle on the same connection, released by its own ``close()``."""

    def close(self) -> None: ...

    def close_engine(self) -> None:
        """Close the connection whatever other handles hold it."""


def _settings_clause(settings: Mapping[str, Any] | None) -> str:
    if not settings:
        return ""
    return " SETTINGS " + ", ".join(f"{k} = {lit(v)}" for k, v in settings.items())


def _error(action: str, exc: Exception, where: str) -> StoreError:
    text = str(exc)
    if _TIMEOUT_CODE in text or "TIMEOUT_EXCEEDED" in text:
        return QueryTimeoutError(
            "the query ran past its time limit and was stopped; ask for a narrower step range, "
            "fewer points or a more selective filter (or raise the server's query_timeout_s)",
            details={"store": where, "unavailable": True})
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    # a value Python could not put into the statement (not UTF-8, out of range) is the batch's
    # fault, whatever the engine would have said
    local = isinstance(exc, (TypeError, ValueError, OverflowError))
    return StoreError(f"clickhouse store {where}: {action} failed: {first[:500]}",
                      details={"store": where, "error": type(exc).__name__,
                               "unavailable": not local and unavailable(text)})


def unavailable(text: str) -> bool:
    """Whether a ClickHouse error means the store cannot take writes now (no answer, a network
    error, no disk space, too many parts, memory...: the telemetry spools and retries later), as
    opposed to refusing a value of the batch (the telemetry splits the batch and drops the value)."""
    found = re.search(r"Code: (\d+)", text)
    return found is None or int(found.group(1)) not in _DATA_ERROR_CODES


# --------------------------------------------------------------------------- chDB


class _ChdbEngine:
    """This process's one chDB connection: its directory, how many handles hold it, and a
    generation number (a handle of an engine closed since cannot touch a newer one)."""

    lock = threading.Lock()
    path: Path | None = None
    conn: Any = None
    holders = 0
    generation = 0


SMALL_INSERT = 400  # cells; below this chDB inserts from SQL text instead of Arrow


class ChdbTransport(Transport):
    """chDB in this process. Queries are serialized (one embedded session per process)."""

    multi_process = False

    def __init__(self, path: Path, database: str) -> None:
        self.path = path.expanduser().resolve()
        self.database = database
        self._closed = False
        with _ChdbEngine.lock:
            if _ChdbEngine.path is not None and _ChdbEngine.path != self.path:
                raise StoreError(
                    f"this process already has the chDB store {_ChdbEngine.path} open; chDB runs "
                    f"one directory per process, so {self.path} cannot be opened too. Close the "
                    "other store first, use one directory with several ?database= names, or use "
                    "a ClickHouse server (clickhouse://)",
                    details={"open": str(_ChdbEngine.path), "wanted": str(self.path)})
            if _ChdbEngine.conn is None:
                _ChdbEngine.conn = _chdb_connect(self.path)
                _ChdbEngine.path = self.path
                _ChdbEngine.generation += 1
            _ChdbEngine.holders += 1
            self._generation = _ChdbEngine.generation
        # a handle dropped without close() (a reader nobody closed) still releases the engine
        self._release = weakref.finalize(self, _drop_handle, self._generation)

    def share(self) -> ChdbTransport:
        """Another handle on the same engine (a writer or reader of the same store)."""
        return ChdbTransport(self.path, self.database)

    def query(self, sql: str, settings: Mapping[str, Any] | None = None) -> list[tuple]:
        table = self._arrow(sql + _settings_clause(settings))
        if table is None:
            return []
        columns = [c.to_pylist() for c in table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    def query_columns(self, sql: str) -> list[list[Any]]:
        table = self._arrow(sql)
        return [] if table is None else [c.to_pylist() for c in table.columns]

    def _arrow(self, sql: str):
        import pyarrow as pa

        result = self._run(sql, "ArrowStream")
        data = result.bytes() if result is not None else b""
        if not data:
            return None
        return pa.ipc.open_stream(pa.BufferReader(data)).read_all()

    def command(self, sql: str, settings: Mapping[str, Any] | None = None) -> None:
        self._run(sql + _settings_clause(settings), "CSV")

    def insert(self, table: str, columns: Sequence[str], data: Sequence[Sequence[Any]],
               types: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> None:
        cols = ", ".join(columns)
        if len(data[0]) * len(columns) <= SMALL_INSERT:  # a few rows: SQL text is faster
            values = ", ".join("(" + ", ".join(lit(v) for v in row) + ")"
                               for row in zip(*data, strict=True))
            self._run(f"INSERT INTO {self.database}.{table} ({cols})"
                      + _settings_clause(settings) + f" VALUES {values}", "CSV")
            return
        arrow = _arrow_table(columns, data, types)
        sql = (f"INSERT INTO {self.database}.{table} ({cols}) SELECT {cols} FROM Python(arrow)"
               + _settings_clause(settings))
        self._run(sql, "CSV", arrow=arrow)

    def _run(self, sql: str, fmt: str, arrow: Any = None):
        with _ChdbEngine.lock:
            if self._closed or self._generation != _ChdbEngine.generation:
                raise StoreError(f"the chDB store {self.path} was closed; open it again",
                                 details={"path": str(self.path)})
            try:
                if arrow is not None:
                    # chDB's Python() table function finds the table by its name in the caller's
                    # frame; give it a frame that holds it
                    return _query_with_arrow(_ChdbEngine.conn, sql, fmt, arrow)
                return _ChdbEngine.conn.query(sql, fmt)
            except Exception as exc:  # chdb raises RuntimeError / ChdbError with the server text
                raise _error(sql.split(" ", 2)[0].lower(), exc, f"chdb://{self.path}") from exc

    def close(self) -> None:
        """Release this handle; the engine (and the directory lock) goes with the last one."""
        self._closed = True
        self._release()

    def close_engine(self) -> None:
        """Close the engine now, whatever other handles hold it (``ClickHouseStore.close``):
        the directory is free for another process or another store at once."""
        self._closed = True
        self._release.detach()
        with _ChdbEngine.lock:
            if self._generation == _ChdbEngine.generation and _ChdbEngine.conn is not None:
                _release_engine()


def _drop_handle(generation: int) -> None:
    with _ChdbEngine.lock:
        if generation != _ChdbEngine.generation or _ChdbEngine.conn is None:
            return
        _ChdbEngine.holders -= 1
        if _ChdbEngine.holders <= 0:
            _release_engine()


def _release_engine() -> None:
    _ChdbEngine.conn.close()
    _ChdbEngine.conn, _ChdbEngine.path, _ChdbEngine.holders = None, None, 0


def _query_with_arrow(conn: Any, sql: str, fmt: str, arrow: Any):
    return conn.query(sql, fmt)


def _chdb_connect(path: Path):
    try:
        import chdb
    except ImportError:
        raise StoreError("chdb:// stores need the chdb package: pip install 'rlcockpit[clickhouse]'",
                         details={"missing": "chdb"}) from None
    try:
        return chdb.connect(str(path))
    except Exception as exc:
        raise StoreError(
            f"cannot open the chDB store {path}: {str(exc).strip()[:300]}. chDB locks its "
            "directory: is another process (a trainer, `rlcockpit serve`) using it? Stop it, or "
            "use a ClickHouse server (clickhouse://) so several processes can share one store",
            details={"path": str(path)}) from exc


_ARROW_TYPES = {
    "String": "binary", "LowCardinality(String)": "string", "Int64": "int64", "UInt64": "uint64",
    "UInt8": "uint8", "UInt32": "uint32", "Float64": "float64", "Nullable(Float64)": "float64",
    "Nullable(Int64)": "int64", "Nullable(String)": "binary", "Array(LowCardinality(String))":
    "list<string>", "Array(Float64)": "list<float64>", "Array(Int64)": "list<int64>",
}


def _arrow_table(columns: Sequence[str], data: Sequence[Sequence[Any]], types: Mapping[str, str]):
    import pyarrow as pa

    arrays = []
    for name, values in zip(columns, data, strict=True):
        kind = _ARROW_TYPES[types[name]]
        if kind == "binary":
            values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
            arrays.append(pa.array(values, pa.binary()))
        elif kind.startswith("list<"):
            inner = {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64()}[kind[5:-1]]
            arrays.append(pa.array(values, pa.list_(inner)))
        else:
            arrays.append(pa.array(values, getattr(pa, kind)(), from_pandas=False))
    return pa.Table.from_arrays(arrays, names=list(columns))


# --------------------------------------------------------------------------- server


class HttpTransport(Transport):
    """A ClickHouse server through clickhouse-connect (HTTP). One client, shared by threads (no
    session, so concurrent queries are allowed)."""

    multi_process = True

    def __init__(self, host: str, port: int | None, user: str, password: str, database: str,
                 *, secure: bool, connect_timeout_s: float, shown: str) -> None:
        try:
            import clickhouse_connect
        except ImportError:
            raise StoreError("clickhouse:// stores need clickhouse-connect: pip install "
                             "'rlcockpit[clickhouse]'", details={"missing": "clickhouse-connect"}
                             ) from None
        self.database = database
        self.shown = shown
        self._refs = 1
        self._lock = threading.Lock()
        try:
            self._client = clickhouse_connect.get_client(
                host=host, port=port or (8443 if secure else 8123), username=user,
                password=password, secure=secure, connect_timeout=connect_timeout_s,
                autogenerate_session_id=False)
        except Exception as exc:
            raise StoreError(
                f"cannot reach the ClickHouse server of {shown}: {str(exc).strip()[:300]}; check "
                "host, port (8123 HTTP, 8443 HTTPS with ?secure=true), user and password",
                details={"uri": shown}) from exc

    def query(self, sql: str, settings: Mapping[str, Any] | None = None) -> list[tuple]:
        try:
            return [tuple(r) for r in self._client.query(sql, settings=dict(settings or {})
                                                         ).result_rows]
        except Exception as exc:
            raise _error("query", exc, self.shown) from exc

    def command(self, sql: str, settings: Mapping[str, Any] | None = None) -> None:
        try:
            self._client.command(sql, settings=dict(settings or {}))
        except Exception as exc:
            raise _error("command", exc, self.shown) from exc

    def insert(self, table: str, columns: Sequence[str], data: Sequence[Sequence[Any]],
               types: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> None:
        data = [list(col) for col in data]  # str and bytes both go into String columns
        try:
            self._client.insert(table, data, column_names=list(columns), database=self.database,
                                column_oriented=True, settings=dict(settings or {}))
        except Exception as exc:
            raise _error("insert", exc, self.shown) from exc

    def share(self) -> HttpTransport:
        """The same client for another writer or reader (it is closed with the last one)."""
        with self._lock:
            self._refs += 1
        return self

    def close(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._client.close()

    def close_engine(self) -> None:
        self._client.close()
