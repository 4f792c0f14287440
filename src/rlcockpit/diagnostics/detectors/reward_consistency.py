"""A reward that pays the same answer differently: noise, or rewards given to the wrong sample.

Failure mode: the reward does not depend (only) on the answer — a reward function fed the wrong
field or the wrong sample (an asynchronous reward server whose results come back out of order), a
judge model sampling at a temperature, dropout left on in a reward model, a seed that changes per
call, a reward of pure noise. The curves look ordinary: the reward's mean and spread stay in range,
the policy moves (its KL grows) and nothing improves; the critic's explained variance stays near 0,
which healthy critics also show for their first steps, so no curve detector can call it early.
The samples can: a deterministic reward pays an identical answer to an identical prompt exactly
the same every time, to the last bit.

Signal: the step's samples (``reward``, ``prompt``, ``response``). Each answer is remembered by
(prompt, whitespace-stripped response) with its last reward and step; when the same pair comes
again within ``window`` steps (a GRPO group's duplicate in the same step, or the prompt's next
epoch) the difference of the two rewards is kept. The share of the reward's variance that is noise
is ``mean(d²) / 2`` (the variance of a reward that differs by d between two draws) over the
variance of every reward of the last ``window`` steps. Rewards are divided by ``reward/scale``
when the trainer logs it (a live reward-scale change is ``reward_scale``'s to judge); when the
reward model's fusion weight ``reward/fusion_alpha`` moves (the LSTM fusion of seed 000 §3.1
re-weighs every answer each step by design), answers paid before are forgotten. Samples
scored by a reward model with
uncertainty gating (their ``uncertainty`` is logged) are left out: their weight follows the
dropout draw of their batch by design (docs/reward_model.md).

Default thresholds: judged once ``min_pairs`` = 20 repeated answers are in the window; yellow when
the noise share is ≥ ``yellow`` = 0.1 (an LLM judge's jitter stays below), orange at ≥ ``orange``
= 0.5 (more than half of what the policy is paid is unrelated to its answer). A deterministic
reward gives exactly 0 (the healthy tiny-world runs: 0 on 471 repeated answers in 40 steps); a
uniform noise reward gives ~1 (0.95–2.0 from its first 20 pairs, benchmarks/unseen_faults.py).

Practical significance: a fraction of the reward's own variance, the same at any reward scale or
model size; orange means the advantage the policy follows is mostly noise. No z-score: the
statistic is exactly 0 for a deterministic reward, so a history is not needed — only repeated
answers, which long free-form answers rarely give (then this detector says nothing).
Scale assumptions: none — a ratio of variances of the same reward.

False positives: a reward that depends on the step by design (a curriculum, an annealed length
penalty: compare within ``window``), on the other samples of the group (rank-based rewards), or
on state outside the answer (a tool's live result): read the pairs in the evidence.
Fix: score a batch twice and compare; check that rewards are matched to their samples by id, not by
arrival order; set the judge's temperature to 0 and fix its seed; put the reward model in eval
mode; check which field the reward function reads.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak

_MAX_ANSWERS = 50_000  # remembered (prompt, response) pairs; the oldest are forgotten first


@dataclass(frozen=True)
class RewardConsistencyConfig(Config):
    window: int = option(50, help="Steps within which a repeated answer is compared, and over "
                         "which the reward's variance is taken.", range=(1, 100000))
    min_pairs: int = option(20, help="Repeated answers in the window before judging.",
                            range=(2, 1000000))
    yellow: float = option(0.1, help="Noise share of the reward's variance for yellow.",
                           range=(0.0, 10.0))
    orange: float = option(0.5, help="Noise share of the reward's variance for orange.",
                           range=(0.0, 10.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.orange >= self.yellow, "orange", self.orange, f"must be >= yellow={self.yellow}")


@register
class RewardConsistency(Detector):
    name = "reward_consistency"
    family = "reward_noise"
    reads = ("reward/scale", "reward/fusion_alpha")
    reads_samples = True
    patterns = ("reward_volatility",)
    signal = "reward"
    Config = RewardConsistencyConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return samples  # reward/scale is context

    def __init__(self, config: RewardConsistencyConfig | None = None) -> None:
        super().__init__(config)
        self._last: OrderedDict[int, tuple[int, float]] = OrderedDict()  # hash of the answer
        self._pairs: deque[tuple[int, float, float]] = deque()  # step, reward, the earlier one
        self._rewards: deque[tuple[int, float]] = deque()
        self._noisy = Streak()
        self._alpha: float | None = None

    def update(self, view: StepView) -> Condition | object | None:
        cfg = self.config
        if not view.samples and not self._rewards:
            return SKIPPED
        scale = view.finite("reward/scale")  # a live reward_scale change pays every answer anew
        scale = scale if scale is not None and scale > 0 else 1.0
        alpha = view.finite("reward/fusion_alpha")
        if alpha is not None and alpha != self._alpha:  # the reward model's fusion weights moved:
            self._last.clear()  # answers paid before are not comparable (same-step repeats are)
        self._alpha = alpha
        for s in view.samples:
            if s.reward is None or not math.isfinite(s.reward) or s.uncertainty is not None:
                continue
            reward = s.reward / scale
            key = hash((s.prompt, s.response.strip()))  # 64 bits: no long texts kept
            seen = self._last.pop(key, None)
            if seen is not None and view.step - seen[0] <= cfg.window:
                self._pairs.append((view.step, reward, seen[1]))
            self._last[key] = (view.step, reward)
            if len(self._last) > _MAX_ANSWERS:
                self._last.popitem(last=False)
            self._rewards.append((view.step, reward))
        first = view.step - cfg.window
        while self._pairs and self._pairs[0][0] <= first:
            self._pairs.popleft()
        while self._rewards and self._rewards[0][0] <= first:
            self._rewards.popleft()
        return self._judge(view.step)

    def _judge(self, step: int) -> Condition | None:
        cfg = self.config
        pairs = len(self._pairs)
        total = float(np.var([r for _, r in self._rewards])) if len(self._rewards) > 1 else 0.0
        share = (sum((r - before) ** 2 for _, r, before in self._pairs) / pairs / 2 / total
                 if pairs >= cfg.min_pairs and total > 0 else 0.0)
        if not self._noisy.update(share >= cfg.yellow, step):
            return None
        severity = "orange" if share >= cfg.orange else "yellow"
        differ = sum(1 for _, r, before in self._pairs if r != before)
        worst_step, worst, earlier = max(self._pairs, key=lambda x: abs(x[1] - x[2]))
        evidence = {"noise_share": share, "pairs": pairs, "pairs_differing": differ,
                    "reward_var": total, "window": cfg.window, "example": {
                        "step": worst_step, "reward": worst, "earlier_reward": earlier},
                    "threshold": cfg.orange if severity == "orange" else cfg.yellow,
                    "signal": "reward", "onset_step": self._noisy.onset, "pattern": "reward_volatility"}
        return Condition(
            severity, f"identical answers to the same prompt were paid differently: {differ} of "
            f"{pairs} repeated answers in the last {cfg.window} steps (e.g. {earlier:.3g} and then "
            f"{worst:.3g}); that noise is {share:.0%} of the reward's variance — the reward "
            "does not depend only on the answer (noise, a reward that changes with time, or "
            "rewards matched to the wrong samples)",
            evidence,
            message_zh=f"同一提示下完全相同的回答得到了不同的奖励：最近 {cfg.window} 步内 {pairs} 个重复回答中有 "
                       f"{differ} 个（如 {earlier:.3g} 后又得 {worst:.3g}）；这部分噪声占奖励方差的 "
                       f"{share:.0%}——奖励并不只取决于回答（噪声、随时间变化的奖励，或奖励被对应到了错误的样本）")
