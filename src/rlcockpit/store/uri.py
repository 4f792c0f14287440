"""Parse store URIs (DESIGN.md §5): ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a bare
path, and (later) ``clickhouse://host:8123/db``.

The ``sqlite:`` form follows SQLAlchemy and MLflow: three slashes then the path, so an absolute path
has four slashes (``sqlite:////tmp/x.db``). Options go in the query string
(``sqlite:///runs.db?busy_timeout_s=2``); unknown options are refused with the list of known ones.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from rlcockpit.errors import StoreError

VALID_SCHEMES = ("sqlite", "clickhouse")
AVAILABLE_SCHEMES = ("sqlite",)

# option name -> (converter, help); all options are optional
SQLITE_OPTIONS = {
    "busy_timeout_s": (float, "seconds a connection waits for a lock before failing (default 5)"),
    "stale_after_s": (float, "a 'running' run whose heartbeat is older is reported 'crashed' (default 120)"),
}


@dataclass(frozen=True)
class StoreURI:
    scheme: str
    path: Path
    options: dict[str, float] = field(default_factory=dict)
    text: str = ""


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
