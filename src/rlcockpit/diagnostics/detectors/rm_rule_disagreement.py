"""Reward model and rules disagreeing: the model pays what a rule forbids (000 §3.1).

Failure mode: the reward model pays well for samples the rule scorer rejects, on a growing share
of samples -- the seed's incident, where the reward model paid high scores for
"这是一个很好的问题，值得深入探讨" that the template rule rejects. With the rules' weight low (or
off) the policy follows the model into the hack.
Signal: ``reward/rm_rule_disagreement``, the share of a step's samples on which a rule fired
although the model scores them above the step's median. Key "drift": the mean of the last
``recent`` (10) steps against the mean of the run's first ``ref_steps`` (10) steps (the policy the
reward model was built for), a one-sided Welch test (normal approximation) with p below ``p_max``
(0.01) and a rise of at least ``min_rise`` (0.05). Key "level": the share at or above
``level_yellow`` (0.25) for ``hold`` (3) steps in a row.
Default thresholds: yellow on either; orange when the level reaches ``level_orange`` (0.5).
Calibration (benchmarks/rm_gating.py, 40 steps of 32 prompts, docs/reward_model.md): with the
filler-paying reward model alone the share went from 0.09–0.11 over the first 10 steps to
0.17–0.19 over the last 10 (seeds 0–2; drift caught at steps 37, 36, 24); with the honest reward
model, alone or with gating and fallback, it stayed at 0.04–0.07 (6 runs, no finding). Held-out
seeds 3–4, run after these thresholds were set: both hacked runs caught (steps 33, 30; share
0.12 → 0.22 and 0.12 → 0.18), no finding on the 4 honest runs. A share of 32 samples per step is
noisy (0.03–0.31 in one hacked run), hence means over 10 steps.
Practical significance: never red. A share of samples, at any scale: yellow when ≥ 25% disagree for
3 steps or the 10-step mean rose ≥ 0.05 above the run's first 10 steps (one-sided Welch p < 0.01);
orange when ≥ 50% disagree for 3 steps — half the samples then earn what the rules reject. The
absolute rise of 0.05 is needed as well, so a reference and recent share with a spread of 0 (p = 0
by the formula) is no evidence alone.
Scale assumptions: none (fractions of samples); the reference is the run's own start.
False positives: a rule that is wrong for the task (e.g. the off-topic similarity on very short
answers); the samples flagged ``rule_*`` with a high model score show which.
Fix: read the disagreeing samples; if the model is being hacked, raise the fusion's rule weight
(``reward.rm.fusion``) or turn on the fallback, and retrain the reward model with the reviewed
labels; if a rule misfires, fix the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window


@dataclass(frozen=True)
class RMRuleDisagreementConfig(Config):
    ref_steps: int = option(10, help="The run's first steps whose mean is the reference.",
                            range=(3, 10_000))
    recent: int = option(10, help="Last steps whose mean is compared with the reference.",
                         range=(3, 10_000))
    min_rise: float = option(0.05, help="Smallest rise of the mean share (absolute) counted.",
                             range=(0.0, 1.0))
    p_max: float = option(0.01, help="One-sided Welch p-value below which the rise is real.",
                          range=(1e-12, 0.5))
    hold: int = option(3, help="Steps the level must hold.", range=(1, 1000))
    level_yellow: float = option(0.25, help="Yellow when the share stayed at or above this for "
                                 "`hold` steps.", range=(0.0, 1.0))
    level_orange: float = option(0.5, help="Orange at or above this share.", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.level_orange >= self.level_yellow, "level_orange", self.level_orange,
              f"must be >= level_yellow={self.level_yellow}")


def welch_rise(reference: np.ndarray, recent: np.ndarray) -> tuple[float, float]:
    """(mean of recent - mean of reference, one-sided p of that rise); normal approximation."""
    rise = float(recent.mean() - reference.mean())
    se = math.sqrt(reference.var(ddof=1) / len(reference) + recent.var(ddof=1) / len(recent))
    if se == 0.0:
        return rise, 0.0 if rise > 0 else 1.0
    return rise, 0.5 * math.erfc(rise / se / math.sqrt(2.0))


@register
class RMRuleDisagreement(Detector):
    name = "rm_rule_disagreement"
    family = "reward_hacking"
    reads = ("reward/rm_rule_disagreement",)
    patterns = ("reward_hacking",)
    signal = "RM vs rules"
    Config = RMRuleDisagreementConfig

    def __init__(self, config: RMRuleDisagreementConfig | None = None) -> None:
        super().__init__(config)
        self._ref: list[float] = []
        self._ref_steps: list[int] = []
        self._recent = Window(self.config.recent)
        self._hold = Window(self.config.hold)

    def update(self, view: StepView) -> Condition | object | None:
        value = view.finite("reward/rm_rule_disagreement")
        if value is None:
            return SKIPPED
        cfg = self.config
        self._hold.push(value, view.step)
        if len(self._ref) < cfg.ref_steps:
            self._ref.append(value)
            self._ref_steps.append(view.step)
        else:
            self._recent.push(value, view.step)
        level = float(np.min(self._hold.values)) if self._hold.full else 0.0
        if level >= cfg.level_yellow:
            severity = "orange" if level >= cfg.level_orange else "yellow"
            return Condition(severity, f"reward model and rules disagree on {level:.0%} or more of the "
                             f"samples for {cfg.hold} steps", {"disagreement": level,
                             "signal": self.signal, "onset_step": int(self._hold.steps[0])},
                             key="level", message_zh=f"奖励模型与规则判决相反的样本连续 {cfg.hold} 步 ≥ {level:.0%}")
        if not self._recent.full:
            return None
        reference, recent = np.asarray(self._ref), self._recent.values
        rise, p = welch_rise(reference, recent)
        if rise < cfg.min_rise or p >= cfg.p_max:
            return None
        return Condition("yellow", f"reward model and rules disagree more and more: {reference.mean():.0%} of "
                         f"the samples over the run's first {cfg.ref_steps} steps, {recent.mean():.0%} over "
                         f"the last {cfg.recent} (p={p:.1e}): the model pays what the rules reject",
                         {"disagreement_start": float(reference.mean()), "disagreement_now": float(recent.mean()),
                          "rise": rise, "p_value": p, "signal": self.signal,
                          "onset_step": int(self._recent.steps[0])}, key="drift",
                         message_zh=f"奖励模型与规则的分歧持续扩大：{reference.mean():.0%} → {recent.mean():.0%}")
