"""The ClickHouse store: ``clickhouse://user:pw@host:8123/db`` (a server, many processes and nodes)
and ``chdb:///path/to/dir`` (the same engine in this process). See docs/store.md, "ClickHouse".

The run data (runs, metrics, histograms, samples, events, findings, snapshots, phases,
checkpoints) lives in ClickHouse. The control plane (users, tickets, live parameters, the audit
hash chain) stays in a transactional SQLite file beside it (``?control=PATH``; chDB defaults to
``DIR/control.db``): its guarantees rest on compare-and-set and on appending each audit entry
inside the same write lock as the state change, which ClickHouse does not offer.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from rlcockpit.errors import NotFoundError, StoreError
from rlcockpit.records import LiveParamsRecord, RunInfo
from rlcockpit.store import ch_schema
from rlcockpit.store.ch_transport import ChdbTransport, HttpTransport, Transport
from rlcockpit.store.uri import StoreURI, parse_store_uri

DEFAULT_STALE_AFTER_S = 120.0


class ClickHouseStore:
    """An opened, validated and migrated ClickHouse database. ``writer()``, ``reader()`` and
    ``control()`` share one connection (chDB: the process's one embedded engine)."""

    def __init__(self, uri: StoreURI, *, create: bool = True, read_only: bool = False) -> None:
        self.uri = uri.text
        self.scheme = uri.scheme
        self.read_only = read_only
        self.stale_after_s = float(uri.options.get("stale_after_s", DEFAULT_STALE_AFTER_S))
        self._shown = uri.redacted()
        self._control_path = self._control_location(uri)
        self._control_store = None
        self._transport = self._connect(uri, create=create and not read_only)
        # the store's own handle goes when the store object does (e.g. rlcockpit.init keeps only
        # the writer): chDB then frees the directory when the writer closes
        self._finalizer = weakref.finalize(self, self._transport.close)
        self.multi_process = self._transport.multi_process
        self.database = self._transport.database
        try:
            self.schema_version = self._open(create=create and not read_only,
                                             read_only=read_only)
            ttl = uri.options.get("token_arrays_ttl_days")
            if ttl is not None and not read_only:
                ch_schema.set_token_array_ttl(self._transport, float(ttl))
        except BaseException:
            self._transport.close_engine()
            raise

    # ------------------------------------------------------------------ sides

    def writer(self):
        from rlcockpit.store.ch_writer import ClickHouseWriter

        if self.read_only:
            raise StoreError(f"{self._shown} was opened read-only; cannot write runs",
                             details={"uri": self._shown})
        return ClickHouseWriter(self._transport.share(), close_transport=True)

    def reader(self):
        from rlcockpit.store.ch_reader import ClickHouseReader

        return ClickHouseReader(self._transport.share(), stale_after_s=self.stale_after_s,
                                close_transport=True)

    def leases(self):
        """The runs' leases: which process writes each run (store/ch_lease.py; best effort)."""
        from rlcockpit.store.ch_lease import ClickHouseLeases

        if self.read_only:
            raise StoreError(f"{self._shown} was opened read-only; cannot take run leases",
                             details={"uri": self._shown})
        return ClickHouseLeases(self._transport.share(), close_transport=True)

    def layouts(self):
        """Saved dashboard layouts, one per project (store/layouts.py)."""
        from rlcockpit.store.layouts import ClickHouseLayouts

        return ClickHouseLayouts(self._transport, read_only=self.read_only)

    def control(self):
        """The control plane: a SQLite control store beside the ClickHouse data
        (docs/store.md, "Control plane on ClickHouse")."""
        if self._control_path is None:
            raise StoreError(
                f"{self._shown} keeps the control plane (users, tickets, audit) in a SQLite file "
                "that every process of the team must share; add ?control=/shared/path/control.db "
                "to the store URI", details={"uri": self._shown})
        from rlcockpit.store.sqlite import SqliteStore

        if self._control_store is None:
            self._control_store = SqliteStore(parse_store_uri(str(self._control_path)),
                                              create=not self.read_only,
                                              read_only=self.read_only)
        return BesideControlStore(self._control_store, self.reader())

    def close(self) -> None:
        """Close the connection now, with every writer and reader of this store (chDB: frees the
        directory for another process or store). Without it, the connection closes when the
        store object and all its writers and readers are closed or gone."""
        self._finalizer.detach()
        self._transport.close_engine()

    def __repr__(self) -> str:
        return f"ClickHouseStore({self._shown!r})"

    # ------------------------------------------------------------------ opening

    @staticmethod
    def _control_location(uri: StoreURI) -> Path | None:
        if "control" in uri.options:
            return Path(str(uri.options["control"])).expanduser()
        return uri.path / "control.db" if uri.scheme == "chdb" else None

    def _connect(self, uri: StoreURI, *, create: bool) -> Transport:
        if uri.scheme == "clickhouse":
            return HttpTransport(uri.host, uri.port, uri.user, uri.password, uri.database,
                                 secure=bool(uri.options.get("secure", False)),
                                 connect_timeout_s=float(uri.options.get("connect_timeout_s", 10)),
                                 shown=self._shown)
        _check_dir(uri.path, create=create)
        return ChdbTransport(uri.path, uri.database)

    def _open(self, *, create: bool, read_only: bool) -> int:
        version = ch_schema.current_version(self._transport)
        if version == 0 and not create:
            raise StoreError(f"no rlcockpit store in {self._shown} (database "
                             f"{self._transport.database!r} has no tables); check the URI",
                             details={"uri": self._shown})
        if read_only:
            if version != ch_schema.SCHEMA_VERSION:
                raise StoreError(
                    f"{self._shown} has store schema version {version}; this rlcockpit reads "
                    f"{ch_schema.SCHEMA_VERSION} ("
                    + ("upgrade rlcockpit)" if version > ch_schema.SCHEMA_VERSION else
                       "open it once with write access to upgrade it)"),
                    details={"uri": self._shown, "version": version})
            return version
        return ch_schema.migrate(self._transport)


class BesideControlStore:
    """The SQLite control store, with runs checked against the ClickHouse data: live parameters
    need their run, which the SQLite file learns of (a copy of its identity) on first use."""

    def __init__(self, sqlite_store, reader) -> None:
        self._sqlite = sqlite_store
        self._control = sqlite_store.control()
        self._reader = reader

    def __getattr__(self, name: str):
        return getattr(self._control, name)

    def publish_live_params(self, record: LiveParamsRecord) -> LiveParamsRecord:
        self._mirror_run(record.run_id)
        return self._control.publish_live_params(record)

    def read_live_params(self, run_id: str, *, limit: int | None = None) -> list[LiveParamsRecord]:
        self._reader.get_run(run_id)  # NotFoundError for a run the data store does not have
        try:
            return self._control.read_live_params(run_id, limit=limit)
        except NotFoundError:
            return []  # nothing published yet

    def _mirror_run(self, run_id: str) -> None:
        run = self._reader.get_run(run_id)
        writer = self._sqlite.writer()
        try:
            writer.create_run(RunInfo(run_id=run.run_id, project=run.project, name=run.name,
                                      started_at=run.started_at))
        except StoreError as exc:
            if "already exists" not in exc.message:
                raise
        finally:
            writer.close()

    def close(self) -> None:
        self._control.close()


def _check_dir(path: Path, *, create: bool) -> None:
    if path.exists() and not path.is_dir():
        raise StoreError(f"chdb store path {path} is a file; chdb:// needs a directory (e.g. "
                         f"chdb:///{path.parent / 'rlcockpit-ch'})", details={"path": str(path)})
    if not path.exists():
        if not create:
            raise StoreError(f"no store at {path}; check the path (an absolute path needs four "
                             "slashes: chdb:////abs/dir)", details={"path": str(path)})
        if not path.parent.is_dir():
            raise StoreError(f"directory {path.parent} for store {path} does not exist; create "
                             "it first", details={"path": str(path)})
