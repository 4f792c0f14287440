"""Parse store URIs (DESIGN.md §5): ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a bare
path, ``clickhouse://[user[:password]@]host[:port]/database[?secure=true]`` (a ClickHouse server
over HTTP) and ``chdb:///path/to/dir`` (the same engine in-process).

The ``sqlite:`` form follows SQLAlchemy and MLflow: three slashes then the path, so an absolute path
has four slashes (``sqlite:////tmp/x.db``). Options go in the query string
(``sqlite:///runs.db?busy_timeout_s=2``); unknown options are refused with the list of known ones.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from rlcockpit.errors import StoreError

VALID_SCHEMES = ("sqlite", "clickhouse", "chdb")
AVAILABLE_SCHEMES = ("sqlite", "clickhouse", "chdb")

# option name -> (converter, help); all options are optional
SQLITE_OPTIONS = {
    "busy_timeout_s": (float, "seconds a connection waits for a lock before failing (default 5)"),
    "stale_after_s": (float, "a 'running' run whose heartbeat is older is reported 'crashed' (default 120)"),
}


# ClickHouse (clickhouse:// and chdb://) options: name -> (converter, help)
CLICKHOUSE_OPTIONS = {
    "secure": (lambda v: v.lower() in ("1", "true", "yes"), "HTTPS to the server (clickhouse:// only; default false)"),
    "stale_after_s": (float, "a 'running' run whose heartbeat is older is reported 'crashed' (default 120)"),
    "control": (str, "the SQLite file of the control plane (users, tickets, audit); chdb:// "
                     "defaults to DIR/control.db, clickhouse:// needs it (a path all processes share)"),
    "database": (str, "the database inside a chdb:// directory (default rlcockpit)"),
    "token_arrays_ttl_days": (float, "per-token arrays older than this many days are dropped "
                                     "by ClickHouse's TTL (default 0: kept)"),
    "connect_timeout_s": (float, "seconds to wait for the server (clickhouse:// only; default 10)"),
}


@dataclass(frozen=True)
class StoreURI:
    scheme: str
    path: Path
    options: dict[str, float] = field(default_factory=dict)
    text: str = ""
    # clickhouse:// only
    host: str = ""
    port: int | None = None
    user: str = ""
    password: str = ""
    database: str = ""

    def redacted(self) -> str:
        """The URI text with its password replaced by ``***`` (for messages and logs)."""
        if not self.password:
            return self.text
        return self.text.replace(":" + urllib.parse.quote(self.password, safe="") + "@", ":***@"
                                 ).replace(":" + self.password + "@", ":***@")


def parse_store_uri(uri: str | Path) -> StoreURI:
    """Split ``uri`` into scheme, path and options; raise StoreError naming the fix."""
    text = str(uri).strip()
    if not text:
        raise StoreError("the store URI is empty; use e.g. sqlite:///rlcockpit.db",
                         details={"uri": text})
    if "://" not in text:
        if ":" in text.split("/", 1)[0] and not Path(text).exists():
            _unknown_scheme(text, text.split(":", 1)[0])
        return StoreURI("sqlite", _expand(text), {}, text)
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme not in AVAILABLE_SCHEMES:
        _unknown_scheme(text, scheme)
    if scheme == "clickhouse":
        return _parse_clickhouse(text, rest)
    if scheme == "chdb":
        return _parse_chdb(text, rest)
    raw_path, _, query = rest.partition("?")
    if not raw_path.startswith("/") or raw_path in ("/", "/:memory:"):
        raise StoreError(
            f"store URI {text!r} has no file path; write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db (an in-memory database cannot be shared with readers)",
            details={"uri": text})
    return StoreURI("sqlite", _expand(raw_path[1:]), _parse_options(text, query), text)


def _expand(path: str) -> Path:
    return Path(urllib.parse.unquote(path)).expanduser()


def _unknown_scheme(text: str, scheme: str) -> None:
    if scheme in VALID_SCHEMES:
        raise StoreError(
            f"the {scheme!r} store backend is not available in this version of rlcockpit; "
            f"available now: {', '.join(AVAILABLE_SCHEMES)} (e.g. sqlite:///rlcockpit.db)",
            details={"uri": text, "scheme": scheme, "available": list(AVAILABLE_SCHEMES)})
    raise StoreError(
        f"unknown store scheme {scheme!r} in {text!r}; valid schemes: "
        f"{', '.join(VALID_SCHEMES)} (available now: {', '.join(AVAILABLE_SCHEMES)}), "
        "e.g. sqlite:///rlcockpit.db or a bare file path",
        details={"uri": text, "scheme": scheme, "valid": list(VALID_SCHEMES)})


def _parse_options(text: str, query: str) -> dict[str, float]:
    options: dict[str, float] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key not in SQLITE_OPTIONS:
            known = ", ".join(f"{k} ({h})" for k, (_, h) in SQLITE_OPTIONS.items())
            raise StoreError(f"unknown sqlite store option {key!r} in {text!r}; known: {known}",
                             details={"uri": text, "option": key})
        convert = SQLITE_OPTIONS[key][0]
        try:
            options[key] = convert(value)
        except ValueError:
            raise StoreError(f"store option {key}={value!r} in {text!r} must be a number",
                             details={"uri": text, "option": key}) from None
        if not options[key] >= 0:
            raise StoreError(f"store option {key}={value!r} in {text!r} must be >= 0",
                             details={"uri": text, "option": key})
    return options


def _parse_chdb(text: str, rest: str) -> StoreURI:
    raw_path, _, query = rest.partition("?")
    if not raw_path.startswith("/") or raw_path in ("/", "/:memory:"):
        raise StoreError(
            f"store URI {text!r} has no directory; write chdb:///relative/dir or "
            "chdb:////absolute/dir (the directory holds the ClickHouse data)",
            details={"uri": text})
    options = _parse_ch_options(text, query, "chdb")
    return StoreURI("chdb", _expand(raw_path[1:]), options, text,
                    database=str(options.pop("database", "rlcockpit")))


def _parse_clickhouse(text: str, rest: str) -> StoreURI:
    parts = urllib.parse.urlsplit("clickhouse://" + rest)
    database = urllib.parse.unquote(parts.path.strip("/"))
    if not parts.hostname or not database.isidentifier():
        raise StoreError(
            f"store URI {text!r} needs a host and a database: "
            "clickhouse://[user[:password]@]host[:port]/database[?secure=true] (the database a "
            "plain name: letters, digits, _)", details={"uri": text})
    try:
        port = parts.port
    except ValueError:
        raise StoreError(f"the port in {text!r} is not a number", details={"uri": text}) from None
    options = _parse_ch_options(text, parts.query, "clickhouse")
    if "database" in options:
        raise StoreError(f"give the database in the path of {text!r}, not as ?database=",
                         details={"uri": text})
    return StoreURI("clickhouse", Path(), options, text, host=parts.hostname, port=port,
                    user=urllib.parse.unquote(parts.username or "default"),
                    password=urllib.parse.unquote(parts.password or ""), database=database)


def _parse_ch_options(text: str, query: str, scheme: str) -> dict:
    options: dict = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key not in CLICKHOUSE_OPTIONS or (scheme == "chdb" and key in ("secure",
                                                                           "connect_timeout_s")):
            known = ", ".join(f"{k} ({h})" for k, (_, h) in CLICKHOUSE_OPTIONS.items())
            raise StoreError(f"unknown {scheme} store option {key!r} in {text!r}; known: {known}",
                             details={"uri": text, "option": key})
        try:
            options[key] = CLICKHOUSE_OPTIONS[key][0](value)
        except ValueError:
            raise StoreError(f"store option {key}={value!r} in {text!r} must be a number",
                             details={"uri": text, "option": key}) from None
        if isinstance(options[key], float) and not options[key] >= 0:
            raise StoreError(f"store option {key}={value!r} in {text!r} must be >= 0",
                             details={"uri": text, "option": key})
    if scheme == "chdb" and "database" in options and not str(options["database"]).isidentifier():
        raise StoreError(f"database={options['database']!r} in {text!r} must be a plain name "
                         "(letters, digits, _)", details={"uri": text})
    return options
