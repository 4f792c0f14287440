"""The alias table: other trainers' metric keys -> rlcockpit catalog names (DESIGN.md §4).

The rows live in one module per family of trainers (:mod:`.aliases_hf`: TRL, ms-swift;
:mod:`.aliases_verl`: verl, NeMo-RL; :mod:`.aliases_more`: OpenRLHF, DeepSpeed-Chat, MiniMind);
this module joins them and holds the lookup.

Each row says where the foreign key is logged (file / function of the source project) and, when the
foreign quantity is not exactly the catalog quantity, a short note that says how it differs. A key
that has no alias is never dropped: it is kept as ``import/<source>/<original key>`` so it stays
visible and is clearly marked as foreign.

Only aliases whose meaning matches are listed. Look-alikes that measure something else are kept
under ``import/`` on purpose and listed in :data:`KEPT` with the reason, e.g. TRL PPO's
``objective/entropy`` (a per-sequence sum of ``-logprob``, not the mean token entropy) or verl's
``critic/rewards/mean`` (score minus the in-reward KL penalty).

Keys are matched as logged and, for loggers that add a prefix, also without it: the Hugging Face
``Trainer`` TensorBoard/W&B callbacks rewrite ``x`` to ``train/x`` and ``eval_x`` to ``eval/x``
(transformers ``integrations.integration_utils.rewrite_logs``); OpenRLHF and NeMo-RL write
``train/<k>`` and OpenRLHF ``eval/<k>``.

A trainer no table knows is mapped by its user (``rlcockpit import --map KEY=catalog/name``,
:mod:`rlcockpit.integrations.keymap`); that map wins over this table in :func:`rename_keys`.

``python -m rlcockpit.integrations.aliases`` prints the Markdown table of docs/import_export.md;
``--update docs/import_export.md`` rewrites the generated part of that file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache

from rlcockpit.integrations import aliases_hf, aliases_more, aliases_verl
from rlcockpit.integrations.aliases_row import Alias, Kept

SOURCES = ("trl-grpo", "trl-ppo", "verl", "openrlhf", "ms-swift", "nemo-rl", "deepspeed-chat",
           "minimind-grpo", "minimind-ppo")
NATIVE_SOURCE = "rlcockpit"  # files rlcockpit exported itself: names are kept verbatim
UNKNOWN_SOURCE = "unknown"  # no alias table matched any key
IMPORT_PREFIX = "import/"

# Where each source's keys are logged (module paths of the source projects; versions read).
SOURCE_ORIGINS = {**aliases_hf.ORIGINS, **aliases_verl.ORIGINS, **aliases_more.ORIGINS}
ALIASES: tuple[Alias, ...] = (*aliases_hf.ROWS, *aliases_verl.ROWS, *aliases_more.ROWS)
KEPT: tuple[Kept, ...] = (*aliases_hf.KEPT, *aliases_verl.KEPT, *aliases_more.KEPT)
MARKERS: dict[str, tuple[str, ...]] = dict(aliases_hf.MARKERS)  # non-metric keys that name a source

__all__ = ["ALIASES", "KEPT", "SOURCES", "Alias", "Kept", "catalog_meanings", "detect_source",
           "import_name", "kept_note", "map_keys", "rename_keys", "to_catalog"]


def _check_sources() -> None:
    named = {a.source for a in ALIASES} | {k.source for k in KEPT} | set(MARKERS)
    unknown = (named | set(SOURCE_ORIGINS)) ^ set(SOURCES)
    if unknown:
        raise ValueError(f"alias rows name unknown sources {sorted(unknown)}; known: {SOURCES}")


_check_sources()


@cache
def _exact(source: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for row in ALIASES:
        if row.source == source and not row.is_pattern:
            table.setdefault(row.key, row.target)
    return table


@cache
def _patterns(source: str) -> tuple[tuple[re.Pattern[str], Alias], ...]:
    return tuple((row.regex(), row) for row in ALIASES if row.source == source and row.is_pattern)


def _candidates(key: str) -> list[str]:
    """``key`` as logged, then without a logger's ``train/`` prefix, then ``eval/x`` as ``eval_x``."""
    out = [key]
    if key.startswith("train/"):
        out.append(key[len("train/"):])
    if key.startswith("eval/"):
        out.append("eval_" + key[len("eval/"):])
    return out


def _lookup(key: str, source: str) -> str | None:
    for candidate in _candidates(key):
        target = _exact(source).get(candidate)
        if target is not None:
            return target
        for regex, row in _patterns(source):
            match = regex.match(candidate)
            if match:
                name = row.render(match)
                if is_catalog_name(name):
                    return name
    return None


def is_catalog_name(name: str) -> bool:
    """True when ``name`` is a metric of the catalog (templated names included)."""
    from rlcockpit.metrics.catalog import is_catalog_name as _is_catalog_name

    return bool(_is_catalog_name(name))


def to_catalog(key: str, source: str | None = None) -> str | None:
    """The catalog name a foreign ``key`` means, or None when there is no alias.

    ``source`` is one of :data:`SOURCES`; ``None`` searches every source table in that order and
    returns the first match. A key that already is a catalog name is returned unchanged.
    """
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown alias source {source!r}; choose one of {', '.join(SOURCES)}")
    for name in (source,) if source else SOURCES:
        target = _lookup(key, name)
        if target is not None:
            return target
    return key if is_catalog_name(key) else None


def import_name(key: str, source: str) -> str:
    """The name a foreign key is stored under: its alias, itself when it is a catalog name or an
    earlier import's ``import/...`` name, else ``import/<source>/<key>``."""
    if key.startswith(IMPORT_PREFIX) or source == NATIVE_SOURCE:
        return key
    target = to_catalog(key, source) if source in SOURCES else (key if is_catalog_name(key) else None)
    return target if target is not None else f"{IMPORT_PREFIX}{source}/{key}"


def _priority(key: str, source: str) -> int:
    """Row index of the alias a key uses; earlier rows win when two keys land on one name
    (exact rows before pattern rows)."""
    candidates = _candidates(key)
    for index, row in enumerate(ALIASES):
        if row.source == source and row.key in candidates:
            return index
    for index, row in enumerate(ALIASES):
        if row.source == source and row.is_pattern and any(row.regex().match(c) for c in candidates):
            return len(ALIASES) + index
    return 2 * len(ALIASES)


def rename_keys(keys: Iterable[str], source: str,
                user_map: Mapping[str, str] | None = None) -> dict[str, str]:
    """foreign key -> stored name for one step's keys.

    ``user_map`` (foreign key as logged -> catalog name, from ``--map``) is the user's word and
    wins over the alias table. When two keys map to the same catalog name (e.g. verl's
    ``actor/kl_loss`` and ``actor/reward_kl_penalty``), the user's key, then the earlier alias row
    wins and the other key is kept under ``import/<source>/<key>``: no value is lost or silently
    replaced."""
    return dict(_rename(frozenset(keys), source, tuple(sorted((user_map or {}).items()))))


@lru_cache(maxsize=1024)  # consecutive steps of a log almost always carry the same keys
def _rename(keys: frozenset[str], source: str, user_map: tuple[tuple[str, str], ...]
            ) -> tuple[tuple[str, str], ...]:
    mapped = dict(user_map)
    out = [(key, mapped[key]) for key in sorted(keys) if key in mapped]
    used = {name for _, name in out}
    rest = (k for k in keys if k not in mapped)
    for key in sorted(rest, key=lambda k: (_priority(k, source), k)):
        name = import_name(key, source)
        if name in used:
            name = f"{IMPORT_PREFIX}{source}/{key}"
        used.add(name)
        out.append((key, name))
    return tuple(out)


def map_keys(values: Mapping[str, float], source: str,
             user_map: Mapping[str, str] | None = None) -> dict[str, float]:
    """One step's foreign metrics under their stored names (see :func:`rename_keys`)."""
    return {name: values[key] for key, name in rename_keys(values, source, user_map).items()}


def detect_source(keys: Iterable[str]) -> str | None:
    """The source whose alias table knows most of ``keys``, its marker keys (ms-swift's
    ``remaining_time``...) counting too (ties: order of :data:`SOURCES`)."""
    keys = list(keys)
    scores = {s: sum(1 for k in keys if _lookup(k, s) is not None or k in MARKERS.get(s, ()))
              for s in SOURCES}
    best = max(SOURCES, key=lambda s: scores[s])
    return best if scores[best] > 0 else None


def foreign_key(name: str) -> tuple[str | None, str]:
    """(source, key as logged) of a stored ``import/<source>/<key>`` name; (None, name) else."""
    if name.startswith(IMPORT_PREFIX):
        source, _, key = name[len(IMPORT_PREFIX):].partition("/")
        if key:
            return source, key
    return None, name


@lru_cache(maxsize=4096)
def catalog_meanings(name: str) -> frozenset[str]:
    """Every catalog name ``name`` means under any trainer's table: itself when it is a catalog
    name, else the targets of the aliases of every source that know the key (an
    ``import/<source>/<key>`` name is looked up by its key). Empty when no table knows it, and when
    the key's own source keeps it as a look-alike (:data:`KEPT`: MiniMind GRPO's ``KL_ref`` is no
    KL although MiniMind PPO's is)."""
    source, key = foreign_key(name)
    if is_catalog_name(key):
        return frozenset({key})
    if source is not None and kept_note(name) is not None:
        return frozenset()
    return frozenset(t for s in SOURCES if (t := _lookup(key, s)) is not None)


def kept_note(name: str) -> str | None:
    """Why a stored ``import/<source>/<key>`` name (or a foreign key) stays foreign on purpose,
    or None when no table lists it as a look-alike."""
    source, key = foreign_key(name)
    return next((k.note for k in KEPT if k.key == key and source in (None, k.source)), None)


def _shown(text: str) -> str:
    return re.sub(r"\{(\w+)\}", r"<\1>", text).replace("|", "\\|")


def aliases_markdown() -> str:
    """The alias table as Markdown, one section per source (the generated part of the docs),
    each followed by the keys it keeps under ``import/`` on purpose."""
    lines: list[str] = []
    for source in SOURCES:
        lines += [f"### {source}", "", f"Logged by {SOURCE_ORIGINS[source]}.", "",
                  "| foreign key | catalog name | logged in | note |", "| --- | --- | --- | --- |"]
        lines += [f"| `{_shown(r.key)}` | `{_shown(r.target)}` | {r.origin} | {r.note} |"
                  for r in ALIASES if r.source == source]
        kept = [k for k in KEPT if k.source == source]
        if kept:
            lines += ["", "Kept under `import/` on purpose:", ""]
            lines += [f"- `{_shown(k.key)}`: {k.note}" for k in kept]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


DOC_BEGIN = "<!-- BEGIN GENERATED ALIASES (python -m rlcockpit.integrations.aliases) -->"
DOC_END = "<!-- END GENERATED ALIASES -->"


def render_doc(text: str) -> str:
    """``text`` with the part between the generated-aliases markers replaced by the current table."""
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {DOC_BEGIN!r} and {DOC_END!r} are missing from the document")
    return text[: start + len(DOC_BEGIN)] + "\n" + aliases_markdown() + text[end:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--update"] and len(argv) == 2:
        with open(argv[1], encoding="utf-8") as fh:
            text = fh.read()
        with open(argv[1], "w", encoding="utf-8") as fh:
            fh.write(render_doc(text))
        return 0
    sys.stdout.write(aliases_markdown())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
