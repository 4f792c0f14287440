"""A user's own key map for trainers the alias table does not know (``rlcockpit import --map``).

A custom trainer logs ``Reward`` or ``KL_ref``; no alias table can guess what those mean. The user
says it: ``--map Reward=reward/mean --map KL_ref=kl/token_mean`` (repeatable), or a YAML file of
the same pairs (``--map-file map.yaml``, or ``map.json`` with one JSON object)::

    Reward: reward/mean
    KL_ref: kl/token_mean
    Avg Response Len: response/length_mean

Keys are matched exactly as logged. Every target must be a catalog name (docs/metrics.md); a
wrong one is refused before any file is read, with the closest catalog names. A mapped key wins
over the alias table; two foreign keys may not map to one name.

:func:`suggest_names` is what ``rlcockpit doctor --import`` prints for every key it kept under
``import/``: the names another trainer's alias table gives the key, then fuzzy matches of its
last path segment (with a few synonyms: ``len`` -> ``length``, ``lr`` -> ``learning rate``...).
"""

from __future__ import annotations

import difflib
import re
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
    """A YAML (or, for ``.json``, JSON) mapping {foreign key: catalog name} (not yet checked)."""
    from rlcockpit.config import read_yaml

    data = _read_json_map(Path(path)) if Path(path).suffix == ".json" else read_yaml(path)
    bad = [k for k, v in data.items() if not isinstance(v, str) or not str(k).strip()]
    if bad:
        raise ConfigError(f"map file {path}: the entry {bad[0]!r} is not `FOREIGN_KEY: catalog/name` "
                          "(one catalog name as text per foreign key)", details={"path": str(path)})
    return {str(k).strip(): v.strip() for k, v in data.items()}


def _read_json_map(path: Path) -> dict[str, object]:
    import json

    if not path.is_file():
        raise ConfigError(f"map file not found: {path}; pass the path of a JSON or YAML file of "
                          "FOREIGN_KEY: catalog/name pairs", details={"path": str(path)})
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"map file {path} is not valid JSON ({exc}); write one object, e.g. "
                          '{"KL_ref": "kl/token_mean"}', details={"path": str(path)}) from None
    if not isinstance(data, dict):
        raise ConfigError(f"map file {path} must hold one JSON object of FOREIGN_KEY: catalog/name "
                          "pairs", details={"path": str(path)})
    return data


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


# Words of foreign keys -> the catalog words they usually stand for (a suggestion, never a map).
SYNONYMS = {"len": "length", "length": "length", "lr": "lr", "learning": "lr", "rate": "lr",
            "kl": "kl", "kld": "kl", "entropy": "entropy", "ent": "entropy", "reward": "reward",
            "rew": "reward", "rewards": "reward", "score": "reward", "avg": "mean", "average": "mean", "loss": "loss", "grad": "grad", "gradnorm": "grad",
            "norm": "norm", "clip": "clip", "clipfrac": "clip_frac", "value": "value",
            "critic": "value", "vf": "value", "adv": "advantage", "advantage": "advantage",
            "advantages": "advantage", "return": "returns", "returns": "returns", "time": "time",
            "mem": "mem", "memory": "mem", "ratio": "ratio", "std": "std", "mean": "mean",
            "max": "max", "min": "min", "response": "response", "completion": "response"}
_WORD = re.compile(r"[a-z]+")


def _words(text: str) -> set[str]:
    return {SYNONYMS.get(w, w) for w in _WORD.findall(text.lower().replace("kl_", "kl "))}


def suggest_names(key: str, n: int = 3) -> list[str]:
    """Catalog names an unknown foreign ``key`` (or its ``import/<source>/<key>`` name) may mean:
    first what another trainer's alias table maps it to, then the catalog names that share the
    largest share of words with it (Jaccard, synonyms applied), ties and the rest by difflib on
    the last path segment."""
    from rlcockpit.integrations.aliases import catalog_meanings, foreign_key
    from rlcockpit.metrics.catalog import CATALOG

    _, raw = foreign_key(key)
    out = sorted(catalog_meanings(raw))
    tail = raw.rsplit("/", 1)[-1]
    words = _words(raw) or _words(tail)
    scored = []
    for name in sorted(CATALOG):
        theirs = _words(name)
        share = len(words & theirs) / len(words | theirs) if words | theirs else 0.0
        ratio = difflib.SequenceMatcher(None, tail.lower(), name.rsplit("/", 1)[-1]).ratio()
        if share or ratio >= 0.6:
            scored.append((-share, -ratio, name))
    out += [name for _, _, name in sorted(scored) if name not in out]
    return out[:n]
