"""A user's own key map for trainers the alias table does not know (``rlcockpit import --map``).

A custom trainer logs ``Reward`` or ``KL_ref``; no alias table can guess what those mean. The user
says it: ``--map Reward=reward/mean --map KL_ref=kl/token_mean`` (repeatable), or a YAML file of
the same pairs (``--map-file map.yaml``)::

    Reward: reward/mean
    KL_ref: kl/token_mean
    Avg Response Len: response/length_mean

Keys are matched exactly as logged. Every target must be a catalog name (docs/metrics.md); a
wrong one is refused before any file is read, with the closest catalog names. A mapped key wins
over the alias table; two foreign keys may not map to one name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path

from rlcockpit.errors import ConfigError
from rlcockpit.integrations.aliases import is_catalog_name

MAP_FLAG = "--map"


def parse_map_items(items: Iterable[str]) -> dict[str, str]:
    """``["FOREIGN_KEY=catalog/name", ...]`` -> {foreign key: catalog name} (not yet checked).

    The key may itself contain ``=`` only if it is quoted in a map file; here the LAST ``=``
    separates key and name, since catalog names never contain one.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, name = item.rpartition("=")
        if not sep or not key.strip() or not name.strip():
            raise ConfigError(f"{MAP_FLAG} {item!r} is not FOREIGN_KEY=catalog/name; write e.g. "
                              f"{MAP_FLAG} 'KL_ref=kl/token_mean'", details={"map": item})
        out[key.strip()] = name.strip()
    return out


def read_map_file(path: str | Path) -> dict[str, str]:
    """A YAML mapping {foreign key: catalog name} (not yet checked)."""
    from rlcockpit.config import read_yaml

    data = read_yaml(path)
    bad = [k for k, v in data.items() if not isinstance(v, str) or not str(k).strip()]
    if bad:
        raise ConfigError(f"map file {path}: the entry {bad[0]!r} is not `FOREIGN_KEY: catalog/name` "
                          "(one catalog name as text per foreign key)", details={"path": str(path)})
    return {str(k).strip(): v.strip() for k, v in data.items()}


def close_names(name: str, n: int = 5) -> list[str]:
    """Catalog names close to ``name`` (templated names shown with their placeholders)."""
    from rlcockpit.metrics.catalog import CATALOG

    return difflib.get_close_matches(name, sorted(CATALOG), n=n, cutoff=0.5)


def check_key_map(key_map: Mapping[str, str]) -> dict[str, str]:
    """``key_map`` itself when every target is a catalog name and no two keys share a target."""
    for key, name in key_map.items():
        if not is_catalog_name(name):
            near = close_names(name)
            hint = f"; close catalog names: {', '.join(near)}" if near else ""
            raise ConfigError(f"{MAP_FLAG} {key}={name}: {name!r} is not a catalog metric name{hint}. "
                              "The names are listed in docs/metrics.md",
                              details={"map": key, "name": name, "close": near})
    seen: dict[str, str] = {}
    for key, name in key_map.items():
        if name in seen:
            raise ConfigError(f"{MAP_FLAG}: both {seen[name]!r} and {key!r} map to {name!r}; map "
                              "one foreign key per catalog name", details={"name": name})
        seen[name] = key
    return dict(key_map)


def build_key_map(items: Iterable[str] = (), map_file: str | Path | None = None) -> dict[str, str]:
    """The checked user map: ``--map-file`` entries, then ``--map`` items (which win)."""
    merged = read_map_file(map_file) if map_file else {}
    merged.update(parse_map_items(items))
    return check_key_map(merged)
