"""Search quality on a query set: precision@k (the expected id among the top k), per language.

The query set (tests/fixtures/library_queries.yaml) maps a language to a list of
``{q: query text, id: expected pattern id}``. ``tests/test_library.py`` holds the bar (>= 0.9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Evaluation:
    """precision@k overall and per language, and the queries that missed (query, expected, got)."""

    k: int
    overall: float
    per_lang: Mapping[str, float]
    counts: Mapping[str, int]
    misses: Sequence[tuple[str, str, tuple[str, ...]]] = field(default_factory=tuple)


def precision_at_k(library, queries: Mapping[str, Sequence[Mapping[str, str]]],
                   k: int = 3) -> Evaluation:
    """Share of queries whose expected id is among the top ``k`` results (language auto-detected)."""
    per_lang: dict[str, float] = {}
    counts: dict[str, int] = {}
    misses: list[tuple[str, str, tuple[str, ...]]] = []
    hits_total = 0
    for lang, items in queries.items():
        hits = 0
        for item in items:
            got = tuple(h.pattern.id for h in library.search(item["q"], k=k))
            if item["id"] in got:
                hits += 1
            else:
                misses.append((item["q"], item["id"], got))
        per_lang[lang] = hits / len(items) if items else 0.0
        counts[lang] = len(items)
        hits_total += hits
    total = sum(counts.values())
    return Evaluation(k, hits_total / total if total else 0.0, per_lang, counts, tuple(misses))
