"""The key a trainer logged for each metric the store holds under another name (issue 29: search
by any name). ``GET /api/runs/{run}`` sends it as ``logged_keys`` (docs/server.md), and the
dashboard's metric search matches it as well as the catalog name.

Where it comes from, best first:

1. ``config["import"]["logged_keys"]``: what ``rlcockpit import`` renamed, recorded at import time
   (stored name -> key as logged; :func:`rlcockpit.integrations.importers._base.add_foreign_steps`);
2. a name kept as ``import/<source>/<key>`` says its key itself;
3. an import made before (1) was recorded: its user ``key_map`` reversed, then the alias rows of
   its sources read backwards (the first row that yields the name, as :func:`aliases.rename_keys`
   prefers it). A pattern row's placeholder stands for itself, so ``reward/helpfulness/mean`` of a
   TRL import is found as ``rewards/helpfulness/mean``.

Runs logged through the SDK keep the names they logged, so they have no entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from rlcockpit.integrations.aliases import ALIASES, foreign_key
from rlcockpit.integrations.aliases_row import _PLACEHOLDER, PLACEHOLDERS, Alias

__all__ = ["logged_keys"]


def logged_keys(names: Iterable[str], config: Mapping[str, Any] | None) -> dict[str, str]:
    """stored name -> key as logged, for each of ``names`` stored under another name."""
    info = (config or {}).get("import")
    info = info if isinstance(info, Mapping) else None
    recorded = info.get("logged_keys") if info else None
    out: dict[str, str] = {}
    for name in names:
        key = _recorded(name, recorded) if isinstance(recorded, Mapping) else None
        if key is None:
            source, key = foreign_key(name)
            key = key if source is not None else None
        if key is None and info is not None and not isinstance(recorded, Mapping):
            key = _reversed(name, info)
        if key is not None and key != name:
            out[name] = key
    return out


def _recorded(name: str, recorded: Mapping[str, Any]) -> str | None:
    key = recorded.get(name)
    return key if isinstance(key, str) else None


def _reversed(name: str, info: Mapping[str, Any]) -> str | None:
    key_map = info.get("key_map") if isinstance(info.get("key_map"), Mapping) else {}
    for key, target in key_map.items():
        if target == name and isinstance(key, str):
            return key
    sources = [s for s in info.get("sources") or () if isinstance(s, str)]
    for row in ALIASES:
        if row.source in sources:
            key = _row_key(row, name)
            if key is not None:
                return key
    return None


def _row_key(row: Alias, name: str) -> str | None:
    if not row.is_pattern:
        return row.key if row.target == name else None
    match = _target_regex(row.target).match(name)
    return None if match is None else _PLACEHOLDER.sub(lambda m: match[m.group(1)], row.key)


@cache
def _target_regex(target: str) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(target)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{PLACEHOLDERS[p]})"
                              for i, p in enumerate(parts)) + r"\Z")
