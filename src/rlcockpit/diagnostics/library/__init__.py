"""The failure library (DESIGN.md §6): every failure pattern of the source documents with its
symptoms, causes, quick diagnosis, fixes and related detectors, in English and Chinese, searchable
in natural language in either language.

    from rlcockpit.diagnostics.library import load_library

    lib = load_library()
    for hit in lib.search("KL 突增怎么办", k=3):
        print(hit.pattern.id, hit.score, hit.pattern.title[hit.lang])
    lib.get("kl_explosion").fixes["en"]

The entries live in ``patterns.yaml`` next to this file (package data), loaded lazily on first
use and validated: unique ids, both languages in every text field, no empty list. Detectors name
entries by id in their ``patterns`` attribute; a test checks every such id exists here.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rlcockpit.errors import ConfigError, NotFoundError

LANGS = ("en", "zh")
TEXT_FIELDS = ("title", "symptoms", "causes", "diagnosis", "fixes", "keywords")
LIST_FIELDS = ("symptoms", "causes", "diagnosis", "fixes", "keywords")
REQUIRED = ("id", "seed", "detectors", *TEXT_FIELDS)
DEFAULT_PATH = Path(__file__).with_name("patterns.yaml")


@dataclass(frozen=True)
class Pattern:
    """One failure pattern. Text fields map a language ("en", "zh") to a string (title) or to a
    tuple of strings (symptoms, causes, diagnosis, fixes, keywords)."""

    id: str
    title: Mapping[str, str]
    symptoms: Mapping[str, tuple[str, ...]]
    causes: Mapping[str, tuple[str, ...]]
    diagnosis: Mapping[str, tuple[str, ...]]
    fixes: Mapping[str, tuple[str, ...]]
    keywords: Mapping[str, tuple[str, ...]]
    detectors: tuple[str, ...]
    seed: str

    def to_dict(self, lang: str | None = None) -> dict[str, Any]:
        """JSON-ready dict; with ``lang`` only that language's text."""
        out: dict[str, Any] = {"id": self.id, "seed": self.seed, "detectors": list(self.detectors)}
        for name in TEXT_FIELDS:
            value = getattr(self, name)
            out[name] = _plain(value[lang]) if lang else {k: _plain(v) for k, v in value.items()}
        return out


def _plain(value: str | tuple[str, ...]) -> str | list[str]:
    return value if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class Hit:
    """A search result: the pattern, its score (BM25F, higher is better) and the query language."""

    pattern: Pattern
    score: float
    lang: str


class Library:
    """The failure patterns, by id, with bilingual search."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self._patterns = {p.id: p for p in patterns}
        self._searcher = None  # built on the first search (tokenising ~50 entries takes ~50 ms)

    def __len__(self) -> int:
        return len(self._patterns)

    def __iter__(self) -> Iterator[Pattern]:
        return iter(self._patterns.values())

    def ids(self) -> list[str]:
        """Every pattern id, in library order."""
        return list(self._patterns)

    def get(self, pattern_id: str) -> Pattern:
        """The pattern with this id; NotFoundError (with the closest id) when there is none."""
        found = self._patterns.get(pattern_id)
        if found is None:
            close = _suggest(pattern_id, self.ids())
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise NotFoundError(
                f"no failure pattern {pattern_id!r}{hint} "
                f"(`rlcockpit library list` shows all {len(self)} ids)",
                details={"id": pattern_id, "suggestion": close[0] if close else None})
        return found

    def search(self, query: str, k: int = 5, lang: str | None = None) -> list[Hit]:
        """The ``k`` best patterns for a free-text query, best first. ``lang`` ("en" / "zh")
        defaults to the query's language (any CJK character -> "zh")."""
        from rlcockpit.diagnostics.library.search import Searcher, detect_lang

        if lang is not None and lang not in LANGS:
            raise ConfigError(f"search language {lang!r} is not one of {LANGS}; pass 'en' or 'zh'")
        if k < 1:
            raise ConfigError(f"k={k} must be >= 1 (how many results to return)")
        if self._searcher is None:
            self._searcher = Searcher(list(self))
        lang = lang or detect_lang(query)
        patterns = self._searcher.patterns
        return [Hit(patterns[i], round(s, 4), lang)
                for i, s in self._searcher.rank(query, lang)[:k]]


def _suggest(wrong: str, ids: list[str]) -> list[str]:
    """The closest id: one containing the typed text (``kl_zero`` -> ``kl_zero_ref_synced``),
    else difflib's nearest spelling."""
    key = wrong.strip().lower().replace("-", "_").replace(" ", "_")
    contained = [i for i in ids if key and key in i]
    return contained[:1] or difflib.get_close_matches(key, ids, n=1)


def _fail(source: str, where: str, what: str) -> ConfigError:
    return ConfigError(f"{source}: {where}: {what}", details={"file": source, "where": where})


def _text(entry: Mapping, name: str, source: str, where: str) -> dict[str, Any]:
    value = entry.get(name)
    if not isinstance(value, Mapping):
        raise _fail(source, f"{where} field {name!r}", "must map each language (en, zh) to text, "
                    f"got {type(value).__name__}")
    out: dict[str, Any] = {}
    for lang in LANGS:
        item = value.get(lang)
        here = f"{where} field {name!r} language {lang!r}"
        if name == "title":
            if not isinstance(item, str) or not item.strip():
                raise _fail(source, here, "missing or empty; write the title in both en and zh")
            out[lang] = item.strip()
            continue
        if not isinstance(item, list) or not item:
            raise _fail(source, here, "missing or empty list; give at least one item per language")
        bad = [x for x in item if not isinstance(x, str) or not x.strip()]
        if bad:
            raise _fail(source, here, f"items must be non-empty strings, got {bad[0]!r} (quote "
                        "items containing ': ' in YAML)")
        out[lang] = tuple(x.strip() for x in item)
    return out


def _pattern(entry: Any, index: int, source: str) -> Pattern:
    if not isinstance(entry, Mapping):
        raise _fail(source, f"entry #{index}", f"must be a mapping, got {type(entry).__name__}")
    pid = entry.get("id")
    where = f"pattern {pid!r}" if pid else f"entry #{index}"
    if not isinstance(pid, str) or not pid.isidentifier() or pid != pid.lower():
        raise _fail(source, where, "needs an `id` in snake_case (e.g. kl_explosion)")
    missing = [f for f in REQUIRED if f not in entry]
    if missing:
        raise _fail(source, where, f"missing field(s) {', '.join(missing)}")
    detectors = entry["detectors"]
    if not isinstance(detectors, list) or not all(isinstance(d, str) for d in detectors):
        raise _fail(source, f"{where} field 'detectors'", "must be a list of detector names "
                    "(may be empty: [])")
    seed = entry["seed"]
    if not isinstance(seed, str) or not seed.strip():
        raise _fail(source, f"{where} field 'seed'", "must name the source section, e.g. '001 Q12'")
    # read-only views: a Pattern is shared by every caller of the cached library
    texts = {name: MappingProxyType(_text(entry, name, source, where)) for name in TEXT_FIELDS}
    return Pattern(id=pid, detectors=tuple(detectors), seed=seed.strip(), **texts)


def parse_library(raw: Any, source: str = "patterns.yaml") -> Library:
    """Validate the loaded YAML (a list of entries) and build the library."""
    if not isinstance(raw, list) or not raw:
        raise _fail(source, "top level", "must be a non-empty list of pattern entries")
    patterns = [_pattern(entry, i, source) for i, entry in enumerate(raw)]
    seen: set[str] = set()
    for p in patterns:
        if p.id in seen:
            raise _fail(source, f"pattern {p.id!r}", "duplicate id; every id must be unique")
        seen.add(p.id)
    return Library(patterns)


def read_library(path: str | Path) -> Library:
    """Load and validate a library YAML file (uncached; see :func:`load_library`)."""
    import yaml

    path = Path(path)
    try:
        # libyaml's C loader when present: 6x faster than the pure-Python one on this file
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except FileNotFoundError as exc:
        raise ConfigError(f"failure library file {path} does not exist") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_library(raw, str(path))


@functools.lru_cache(maxsize=4)
def load_library(path: str | None = None) -> Library:
    """The failure library (the shipped ``patterns.yaml`` unless ``path`` is given), cached."""
    return read_library(path or DEFAULT_PATH)


__all__ = ["LANGS", "Hit", "Library", "Pattern", "load_library", "parse_library", "read_library"]
