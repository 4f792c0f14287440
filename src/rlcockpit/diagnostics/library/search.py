"""Bilingual search over the failure library: BM25F over character and word n-grams, pure Python.

Why n-grams: Chinese has no spaces, so a query like "熵掉得很快" is matched through its character
1-3-grams ("熵", "熵掉", ...), which needs no segmenter and no model. English text becomes stemmed
word tokens plus character 3-grams inside each word, so "exploding" still meets "explosion".
Text is normalised first (NFKC folds full-width forms, lower case, punctuation to spaces).

Scoring is BM25F (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
2009, §3.6): each field's term frequency is length-normalised and weighted (title and keywords
highest), summed into one pseudo-frequency, then saturated with k1 and multiplied by the term's IDF.
A query is scored against the index of its own language (auto-detected: any CJK character -> zh).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

LANGS = ("en", "zh")

# field -> weight in the BM25F sum (title and keywords are what a user's words most often hit)
FIELD_WEIGHTS = {"id": 3.0, "title": 3.0, "keywords": 3.0, "symptoms": 2.0, "causes": 1.0,
                 "fixes": 0.7, "diagnosis": 0.5}
# the other language's title and keywords join an index at this factor: mixed queries such as
# "critic loss 很低但 reward 不涨" carry English terms that the Chinese text may not repeat
CROSS_LANG_FACTOR = 0.5
# token kind -> query weight: single CJK characters and in-word 3-grams are weak evidence alone
KIND_WEIGHTS = {"w": 1.0, "c": 0.25, "z1": 0.3, "z2": 1.0, "z3": 0.5}
K1 = 1.2
B = 0.75
UNIT_KINDS = ("w", "z1")  # what the coordination factor counts
COVERAGE = 1.0

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUN = re.compile(f"[{_CJK}]+|[a-z0-9]+")
_HAS_CJK = re.compile(f"[{_CJK}]")
_EN_STOP_WORDS = (
    "a an and are as at be but by do does for from has have how i if in into is it its my of on "
    "or so that the their then there this to was what when where which while why will with "
    "after before again keeps keep getting get got very just still")
_EN_STOP = frozenset(_EN_STOP_WORDS.split())
_ZH_STOP = frozenset("的了是在就都也和吗呢啊吧呀么怎办什我你他它这那个")


# "not rising" is a flat curve: a negated rise ("奖励一直不涨", "reward not rising") adds the word
# for flat, so the entries about a stalled curve meet it; without it the rise itself ("涨", "rising")
# and n-grams straddling two words ("励一" of "奖励一直") pull up the entries about a surge.
_NEGATED_RISE = (
    (re.compile(r"(不|没有?|未|无)(再|怎么|太)?(涨|上涨|升|上升|增长|增加|提高|提升|改善|变好)"), "停滞"),
    (re.compile(r"\b(not|no|never|isn t|doesn t|don t|won t|hardly|barely|stopped)\s+(\w+\s+)?"
                r"(ris\w*|increas\w*|improv\w*|go\w*\s+up|grow\w*|climb\w*|learn\w*)"), "flat"),
)


def expand_query(text: str) -> str:
    """The query, plus "停滞" / "flat" when it negates a rise (see _NEGATED_RISE)."""
    folded = normalize(text)
    extra = [word for pattern, word in _NEGATED_RISE if pattern.search(folded)]
    return " ".join([text, *extra])


def detect_lang(text: str) -> str:
    """'zh' when the text holds any CJK character, else 'en'."""
    return "zh" if _HAS_CJK.search(text) else "en"


def normalize(text: str) -> str:
    """NFKC (full-width -> half-width), lower case, punctuation and symbols -> spaces."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return "".join(" " if unicodedata.category(ch)[0] in "PSZ" else ch for ch in folded)


def _stem(word: str) -> str:
    """A light English suffix stripper: enough to meet plurals and -ing/-ed forms."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def tokens(text: str) -> list[str]:
    """Typed tokens of a text: w:word, c:3-gram of a word, z1/z2/z3: CJK 1-, 2-, 3-grams."""
    out: list[str] = []
    for run in _RUN.findall(normalize(text)):
        if _HAS_CJK.match(run):
            out.extend(_cjk_grams(run))
        elif run not in _EN_STOP:
            word = _stem(run)
            out.append(f"w:{word}")
            padded = f"#{run}#"
            out.extend(f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2) if len(run) >= 3)
    return out


def _cjk_grams(run: str) -> list[str]:
    grams = [f"z1:{ch}" for ch in run if ch not in _ZH_STOP]
    for n in (2, 3):
        grams.extend(f"z{n}:{run[i:i + n]}" for i in range(len(run) - n + 1))
    return grams


def _kind(token: str) -> str:
    return token.split(":", 1)[0]


@dataclass(frozen=True)
class _Doc:
    fields: Mapping[str, Counter]  # field -> token counts
    lengths: Mapping[str, float]


class BM25FIndex:
    """BM25F over documents made of weighted fields; one index per language."""

    def __init__(self, docs: Sequence[Mapping[str, Iterable[str]]],
                 weights: Mapping[str, float]) -> None:
        self.weights = dict(weights)
        counted = [{f: Counter(toks) for f, toks in d.items()} for d in docs]
        self.docs = [_Doc(c, {f: float(sum(n.values())) for f, n in c.items()}) for c in counted]
        fields = {f for d in self.docs for f in d.fields}
        self.avg_len = {f: max(1.0, sum(d.lengths.get(f, 0.0) for d in self.docs) / len(self.docs))
                        for f in fields}
        df: Counter = Counter()
        for d in self.docs:
            df.update({t for c in d.fields.values() for t in c})
        n = len(self.docs)
        self.idf = {t: math.log(1.0 + (n - m + 0.5) / (m + 0.5)) for t, m in df.items()}

    def _pseudo_tf(self, doc: _Doc, token: str) -> float:
        total = 0.0
        for field, counts in doc.fields.items():
            tf = counts.get(token, 0)
            if tf:
                norm = 1.0 - B + B * doc.lengths[field] / self.avg_len[field]
                total += self.weights.get(field, 1.0) * tf / norm
        return total

    def scores(self, query_tokens: Sequence[str]) -> list[float]:
        """BM25F score of every document for the query's tokens (weighted by token kind),
        times a coordination factor: the share of the query's units (words, CJK characters) the
        document contains, to the power COVERAGE. Without it a document matching one rare
        n-gram that straddles two words ("奖励几" in "奖励几乎一样") beats one matching most of
        the query's words."""
        query = Counter(t for t in query_tokens if t in self.idf)
        units = {t for t in query_tokens if _kind(t) in UNIT_KINDS}
        out = []
        for doc in self.docs:
            score = 0.0
            for token, qtf in query.items():
                tf = self._pseudo_tf(doc, token)
                if tf:
                    weight = KIND_WEIGHTS[_kind(token)] * (1.0 + math.log(qtf))
                    score += weight * self.idf[token] * tf * (K1 + 1.0) / (K1 + tf)
            if units and score:
                present = sum(1 for t in units if any(t in c for c in doc.fields.values()))
                score *= (present / len(units)) ** COVERAGE
            out.append(score)
        return out


def pattern_fields(pattern, lang: str) -> dict[str, list[str]]:
    """The tokens of one pattern's fields in one language (plus id and the other language's
    title/keywords, the latter weighted by CROSS_LANG_FACTOR through a separate field)."""
    other = "zh" if lang == "en" else "en"
    fields = {"id": tokens(pattern.id.replace("_", " ")),
              "title": tokens(pattern.title[lang]),
              "keywords": tokens(" ; ".join(pattern.keywords[lang])),
              "cross": tokens(pattern.title[other] + " ; " + " ; ".join(pattern.keywords[other]))}
    for name in ("symptoms", "causes", "fixes", "diagnosis"):
        fields[name] = tokens(" ; ".join(getattr(pattern, name)[lang]))
    return fields


class Searcher:
    """Ranks patterns for a free-text query in English or Chinese."""

    def __init__(self, patterns: Sequence) -> None:
        self.patterns = list(patterns)
        weights = {**FIELD_WEIGHTS, "cross": CROSS_LANG_FACTOR * FIELD_WEIGHTS["keywords"]}
        self.indexes = {lang: BM25FIndex([pattern_fields(p, lang) for p in self.patterns], weights)
                        for lang in LANGS}

    def rank(self, query: str, lang: str | None = None) -> list[tuple[int, float]]:
        """(pattern index, score) for every pattern with a positive score, best first."""
        lang = lang or detect_lang(query)
        scores = self.indexes[lang].scores(tokens(expand_query(query)))
        ranked = sorted(((i, s) for i, s in enumerate(scores) if s > 0), key=lambda x: -x[1])
        return ranked
