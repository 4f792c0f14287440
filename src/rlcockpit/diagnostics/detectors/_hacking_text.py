"""The text checks of :mod:`.reward_hacking`: a template taking over the responses, a phrase the
reward pays, and the n-gram statistics they share (split from that module by the checks it holds;
the detector, its config and its docstring stay there)."""

from __future__ import annotations

import functools
import heapq
import math
from collections import Counter, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rlcockpit.diagnostics.base import Condition, StepView
from rlcockpit.diagnostics.windows import Streak, median, quantile

if TYPE_CHECKING:
    from rlcockpit.diagnostics.detectors.reward_hacking import RewardHackingConfig

TOP_KEPT = 64  # n-grams remembered per step for the reference shares
MAX_RISEN = 16  # risen n-grams whose coverage is measured


def top_samples(samples: Sequence, k: int = 3) -> list[dict]:
    """The ``k`` highest-reward samples of the step (001 Q2: read the jump step's texts first)."""
    scored = sorted((s for s in samples if math.isfinite(s.reward)), key=lambda s: -s.reward)
    return [{"sample_id": s.sample_id, "reward": s.reward, "prompt": s.prompt[:200],
             "response": s.response[:300]} for s in scored[:k]]


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def ngram_shares(responses: Sequence[str], n: int, max_chars: int,
                 top: int | None = None) -> Counter:
    """Per character n-gram with a letter, the share of responses containing it.

    ``top``: keep only the most common ones (the letter test then runs on those alone: it is the
    costly part on long responses).
    """
    counts: Counter = Counter()
    for text in responses:
        text = text[:max_chars]
        counts.update({text[i:i + n] for i in range(len(text) - n + 1)})
    total = max(len(responses), 1)
    # ties broken by the n-gram itself: set order depends on the interpreter's hash seed
    if top is None:  # filtering before sorting keeps the same order and sorts fewer
        kept = sorted(((g, c) for g, c in counts.items() if has_letter(g)), key=_by_count)
    else:
        kept = [(g, c) for g, c in heapq.nsmallest(4 * top, counts.items(), key=_by_count)
                if has_letter(g)][:top]
    return Counter({g: c / total for g, c in kept})


@functools.lru_cache(maxsize=65536)
def has_letter(gram: str) -> bool:
    """Any alphabetic character (cached: a run's answers repeat the same n-grams step after step)."""
    return any(ch.isalpha() for ch in gram)


@functools.lru_cache(maxsize=65536)
def is_phrase(gram: str) -> bool:
    """A piece of a phrase: letters on both sides of a space (``"t ques"``), or CJK characters
    (the Chinese filler has no spaces). A single common word with its spaces (``" with "``) is
    not: a healthy tiny GRPO run (calibration seed 0, 200 steps) raised " with " from 5% to 38% of
    its answers as its style drifted."""
    if any("\u4e00" <= ch <= "\u9fff" for ch in gram):
        return True
    return any(gram[i - 1].isalpha() and gram[i] == " " and gram[i + 1].isalpha()
               for i in range(1, len(gram) - 1))


def distinct_3(responses: Sequence[str], max_chars: int) -> float:
    """distinct-3 over character trigrams of the batch (Li et al. 2016); NaN without trigrams.

    Same value as ``rlcockpit.metrics.stats.distinct_ngram_frac`` on character lists, with string
    slices instead of tuples (several times faster on long responses).
    """
    unique: set[str] = set()
    total = 0
    for text in responses:
        text = text[:max_chars]
        grams = [text[i:i + 3] for i in range(len(text) - 2)]
        total += len(grams)
        unique.update(grams)
    return len(unique) / total if total else math.nan


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class TemplateWatch:
    """The template / distinct-n part of :class:`RewardHacking` (reads the step's responses)."""

    def __init__(self, cfg: RewardHackingConfig) -> None:
        self.cfg = cfg
        self._pending: deque[tuple[Counter, float]] = deque(maxlen=cfg.recent)
        self._reference: deque[tuple[Counter, float]] = deque(maxlen=cfg.window)
        self._early: list[Counter] = []
        self._streak = Streak()

    def update(self, view: StepView) -> Condition | None:
        cfg = self.cfg
        samples = list(view.samples[:cfg.max_samples])
        responses = [s.response for s in samples]
        if len(responses) < 4:
            return None  # no samples this step: the template part is skipped
        shares = ngram_shares(responses, cfg.ngram, cfg.max_chars, top=TOP_KEPT)
        distinct = distinct_3(responses, cfg.max_chars)
        found = self._judge(shares, distinct, samples) \
            if len(self._reference) >= cfg.warmup else None
        self._remember(shares, distinct)
        held = self._streak.update(found is not None, view.step)
        if found is None or held < cfg.template_steps:
            return None
        return self._condition(found, view.step)

    def _remember(self, shares: Counter, distinct: float) -> None:
        if len(self._pending) == self._pending.maxlen:
            self._reference.append(self._pending[0])
            if len(self._early) < self.cfg.window:
                self._early.append(self._pending[0][0])
        self._pending.append((shares, distinct))

    def _reference_share(self, gram: str, share: float) -> tuple[float, float] | None:
        """(mean, population std) of the n-gram's share over the reference steps, or over the
        early steps when those held less of it (plain Python: ≤ ``window`` values, called for
        every candidate n-gram of every step); None when ``share`` is not ``share_rise`` above
        that mean (it cannot have risen, whatever the spread: the spread is not computed)."""
        recent = [c.get(gram, 0.0) for c, _ in self._reference]
        early = [c.get(gram, 0.0) for c in self._early] if self._early else recent
        recent_mean, early_mean = _mean(recent), _mean(early)
        base, mean = (recent, recent_mean) if recent_mean <= early_mean else (early, early_mean)
        if share - mean < self.cfg.share_rise:
            return None
        return mean, math.sqrt(sum((v - mean) ** 2 for v in base) / len(base))

    def _risen(self, shares: Counter) -> list[tuple[str, float, float]]:
        """(n-gram, share now, reference share) of the n-grams that rose above their noise."""
        cfg = self.cfg
        risen = []
        for gram, share in shares.items():
            if share < cfg.share_rise or not is_phrase(gram):
                continue
            reference = self._reference_share(gram, share)
            if reference is None:
                continue
            base, spread = reference
            if share - base >= max(cfg.share_rise, 3.0 * spread):
                risen.append((gram, share, base))
        risen.sort(key=lambda item: (item[2] - item[1], item[0]))
        return risen[:MAX_RISEN]

    def _spread(self, risen: list, samples: list) -> list:
        """The risen n-grams used by several prompts and, when the step mixes categories, by more
        than one category: a template crosses tasks; an answer's content (a number, a capital)
        stays with its prompt."""
        cfg = self.cfg
        n_categories = len({s.category for s in samples if s.category})
        kept = []
        for item in risen:
            users = [s for s in samples if item[0] in s.response[:cfg.max_chars]]
            prompts = {s.prompt_id or s.prompt for s in users}
            categories = {s.category for s in users if s.category}
            if len(prompts) >= cfg.min_prompts and (n_categories < 2 or len(categories) >= 2):
                kept.append(item)
        return kept

    def _judge(self, shares: Counter, distinct: float, samples: list) -> dict | None:
        cfg = self.cfg
        responses = [s.response for s in samples]
        risen = self._spread(self._risen(shares), samples)
        if risen:
            grams = [g for g, _, _ in risen]
            covered = [r for r in responses if any(g in r[:cfg.max_chars] for g in grams)]
            coverage = len(covered) / len(responses)
            if coverage >= cfg.share_min:
                return {"ngram": grams[0], "ngrams": grams[:5], "share": coverage,
                        "reference_share": max(b for _, _, b in risen),
                        "ngram_shares": {g: sh for g, sh, _ in risen[:5]},
                        "distinct_3": distinct, "examples": [r[:200] for r in covered[:3]]}
        ref = [d for _, d in self._reference if math.isfinite(d)]
        ref_median = median(ref) if ref else math.nan
        if math.isfinite(distinct) and ref and distinct < cfg.distinct_ratio * ref_median:
            return {"distinct_3": distinct, "reference_distinct_3": ref_median,
                    "ratio_threshold": cfg.distinct_ratio,
                    "examples": [r[:200] for r in responses[:3]]}
        return None

    def _condition(self, found: dict, step: int) -> Condition:
        gram = found.get("ngram")
        evidence = {**found, "signal": "response template",
                    "onset_step": self._streak.onset, "steps": self._streak.count}
        if gram is not None:
            what = (f"{found['share']:.0%} of responses contain new n-grams such as {gram!r} "
                    f"(each at most {found['reference_share']:.0%} before)")
            zh = (f"{found['share']:.0%} 的回答包含新出现的 n-gram，例如 {gram!r}"
                  f"（此前每个至多 {found['reference_share']:.0%}）")
        else:
            what = (f"distinct-3 fell to {found['distinct_3']:.3f} from "
                    f"{found['reference_distinct_3']:.3f}")
            zh = f"distinct-3 从 {found['reference_distinct_3']:.3f} 降到 {found['distinct_3']:.3f}"
        return Condition("orange", f"template takeover: {what}", evidence, key="template",
                         message_zh=f"模板接管：{zh}")


class PaidWatch:
    """The "paid" part of :class:`RewardHacking`: responses paid above anything in the reference."""

    def __init__(self, cfg: RewardHackingConfig) -> None:
        self.cfg = cfg
        self._max: deque[float] = deque(maxlen=cfg.window)  # per reference step: largest reward
        self._spread: deque[float] = deque(maxlen=cfg.window)  # ... and the rewards' std
        self._pool: deque[tuple[int, list]] = deque(maxlen=cfg.recent)  # (step, over-paid)
        self._counts: list[int] = []  # over-paid answers per step since the first one

    def update(self, view: StepView, rescaled: bool) -> Condition | None:
        samples = [s for s in view.samples[:self.cfg.max_samples] if math.isfinite(s.reward)]
        if len(samples) < 4:
            return None
        rewards = np.asarray([s.reward for s in samples], dtype=float)
        ready = len(self._max) >= self.cfg.paid_warmup
        bar = max(self._max) + self.cfg.paid_gap * median(self._spread) if ready \
            else math.inf
        if ready and float(rewards.std()) >= self.cfg.scale_ratio * median(self._spread):
            rescaled = True  # every reward grew: the reward_scale detector's finding
        over = [s for s in samples if s.reward > bar] if not rescaled else []
        if over or self._counts:
            self._counts.append(len(over))
        if over:
            self._pool.append((view.step, over))
        else:  # only steps without over-paid answers become the reference
            self._pool.append((view.step, []))
            self._max.append(float(rewards.max()))
            self._spread.append(float(rewards.std()))
        return self._judge(bar) if over else None

    def _judge(self, bar: float) -> Condition | None:
        paid = [s for _, over in self._pool for s in over]
        prompts = {s.prompt_id or s.prompt for s in paid}
        if len(paid) < self.cfg.paid_min or len(prompts) < 2:
            return None
        gram, users = shared_ngram(paid, self.cfg)
        if 2 * users < len(paid):  # a common word among many over-paid answers is no template
            gram, users = None, 0
        top = sorted(paid, key=lambda s: -s.reward)
        growth = self._growth()
        evidence = {"over_paid": len(paid), "prompts": len(prompts), "bar": bar, "growth": growth,
                    "per_step": self._counts[-3 * self.cfg.recent:],
                    "reference_max": max(self._max), "ngram": gram, "ngram_users": users,
                    "examples": [{"reward": s.reward, "response": s.response[:200]}
                                 for s in top[:3]],
                    "signal": "reward per sample",
                    "onset_step": next(step for step, over in self._pool if over)}
        what = f"{len(paid)} responses to {len(prompts)} prompts were paid above {bar:.3g}"
        if gram is None or growth is None or growth < self.cfg.paid_growth:
            shared = f", {users} sharing {gram!r}" if gram else ""
            return Condition("yellow", f"over-paid responses: {what} (more than any response of "
                             f"the steps before{shared}): a pattern the policy may learn to exploit",
                             evidence, key="paid",
                             message_zh=f"奖励异常偏高：{len(paid)} 个回答的奖励超过 {bar:.3g}，"
                                        "策略可能学会利用它")
        return Condition("orange", f"the policy is learning an over-paid template: {what}, "
                         f"{users} of them sharing {gram!r}, {growth:.1f}× more per step than when "
                         "it first appeared", evidence, key="paid",
                         message_zh=f"策略正在学习被过度奖励的模板：{users} 个高奖励回答共享 "
                                    f"{gram!r}，每步数量增至最初的 {growth:.1f} 倍")

    def _growth(self) -> float | None:
        """Over-paid answers per step in the last ``recent`` steps over the first ``recent``
        steps since they appeared: > 1 when the policy produces more of them (it exploits the
        reward); None until 2 × ``recent`` steps are known."""
        k = self.cfg.recent
        if len(self._counts) < 2 * k:
            return None
        first, last = float(np.mean(self._counts[:k])), float(np.mean(self._counts[-k:]))
        return last / max(first, 1e-9)


class PhraseWatch:
    """The "phrase" part of :class:`RewardHacking`: within each step, the responses the reward
    singles out far above the rest, pooled over ``window`` steps — when most of them share a phrase
    (to several prompts and categories) that the other responses of those steps hardly contain, the
    reward pays the phrase itself. Needs no reference steps, so it sees a reward model that pays a
    template from the first step (the "paid" rule compares with earlier steps)."""

    def __init__(self, cfg: RewardHackingConfig) -> None:
        self.cfg = cfg
        self._pool: deque[tuple[int, list, list[str]]] = deque(maxlen=cfg.window)

    def update(self, view: StepView) -> Condition | None:
        cfg = self.cfg
        samples = [s for s in view.samples[:cfg.max_samples] if math.isfinite(s.reward)]
        if len(samples) < 8:
            return None
        rewards = np.asarray([s.reward for s in samples], dtype=float)
        spread = float(rewards.std())
        if spread <= 0:
            return None
        bar = quantile(rewards, 0.9) + cfg.phrase_gap * spread
        singled = [s for s in samples if s.reward > bar]
        rest = [s.response[:cfg.max_chars] for s in samples if s.reward <= bar]
        self._pool.append((view.step, singled, rest))
        return self._judge() if singled else None

    def _judge(self) -> Condition | None:
        cfg = self.cfg
        singled = [s for _, chosen, _ in self._pool for s in chosen]
        if len(singled) < cfg.phrase_min:
            return None
        gram, users = shared_ngram(singled, cfg)
        if gram is None or users < cfg.phrase_min or 2 * users < len(singled):
            return None
        who = [s for s in singled if gram in s.response[:cfg.max_chars]]
        if len({s.prompt_id or s.prompt for s in who}) < min(3, cfg.phrase_min):
            return None
        rest = [text for _, _, texts in self._pool for text in texts]
        rest_share = sum(gram in text for text in rest) / max(len(rest), 1)
        if rest_share > cfg.phrase_rest:
            return None
        rest_rewards = [s.reward for s in singled if s not in who]
        paid = float(np.mean([s.reward for s in who]))
        first = next(step for step, chosen, _ in self._pool
                     if any(gram in s.response[:cfg.max_chars] for s in chosen))
        evidence = {"singled_out": len(singled), "with_phrase": users, "ngram": gram,
                    "rest_share": rest_share, "mean_reward_with_phrase": paid,
                    "other_singled_mean": float(np.mean(rest_rewards)) if rest_rewards else None,
                    "window": cfg.window, "gap_stds": cfg.phrase_gap,
                    "examples": [{"reward": s.reward, "response": s.response[:200]}
                                 for s in who[:3]],
                    "signal": "reward per sample", "onset_step": first}
        return Condition("yellow", f"the reward pays a phrase: {users} of the {len(singled)} "
                         f"responses paid far above the rest of their step (last {cfg.window} "
                         f"steps) contain {gram!r}, which {rest_share:.0%} of the other responses "
                         "contain — a template the policy can learn to exploit", evidence,
                         key="phrase",
                         message_zh=f"奖励在为某个短语买单：最近 {cfg.window} 步中 {len(singled)} "
                                    f"个远高于同步其他回答的高奖励回答里有 {users} 个包含 {gram!r}，"
                                    f"其他回答中仅 {rest_share:.0%} 包含")


def shared_ngram(samples: Sequence, cfg: RewardHackingConfig) -> tuple[str | None, int]:
    """The character n-gram (with a letter) shared by the most responses to ≥ 2 prompts — and to
    ≥ 2 categories when the responses span several: content (a number, "\\boxed") stays with its
    task, a template crosses tasks (as in :meth:`TemplateWatch._spread`)."""
    users: dict[str, set[int]] = {}
    for i, s in enumerate(samples):
        text = s.response[:cfg.max_chars]
        for gram in {text[j:j + cfg.ngram] for j in range(len(text) - cfg.ngram + 1)}:
            users.setdefault(gram, set()).add(i)
    mixed = len({s.category for s in samples if s.category}) >= 2
    best, rank = None, (1, 0)
    for gram, who in sorted(users.items()):  # most users, then most letters, then first in order
        letters = sum(ch.isalpha() for ch in gram)
        if (len(who), letters) <= rank or not letters \
                or len({samples[i].prompt_id or samples[i].prompt for i in who}) < 2:
            continue
        if not mixed or len({samples[i].category for i in who if samples[i].category}) >= 2:
            best, rank = gram, (len(who), letters)
    return best, (rank[0] if best is not None else 0)
