"""Reward model and rules disagreeing: the model pays what a rule forbids (000 §3.1).

Failure mode: the reward model pays well for samples the rule scorer rejects, on a growing share
of samples -- the seed's incident, where the reward model paid high scores for
"这是一个很好的问题，值得深入探讨" that the template rule rejects. With the rules' weight low (or
off) the policy follows the model into the hack.
Signal: ``reward/rm_rule_disagreement`` (share of samples on which a rule fired although the model
scores them above the step's median) over the last ``recent`` (3) steps, against ``level_yellow`` (0.25) and
``level_orange`` (0.5); and a rise of at least ``rise`` (0.15) over the last ``window`` (20)
steps with a significant Mann–Kendall trend (p below ``p_max``).
Default thresholds: yellow when the level holds for 3 steps or the rise is significant; orange at
half the samples.
Scale assumptions: none (fractions of samples).
False positives: a rule that is wrong for the task (e.g. the off-topic similarity on very short
answers); the samples flagged ``rule_*`` with a high model score show which.
Fix: read the disagreeing samples; if the model is being hacked, raise the fusion's rule weight
(``reward.rm.fusion``) or turn on the fallback, and retrain the reward model with the reviewed
labels; if a rule misfires, fix the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, mann_kendall


@dataclass(frozen=True)
class RMRuleDisagreementConfig(Config):
    recent: int = option(3, help="Steps the level must hold.", range=(1, 1000))
    level_yellow: float = option(0.25, help="Yellow when the disagreement share stayed at or above "
                                 "this for `recent` steps.", range=(0.0, 1.0))
    level_orange: float = option(0.5, help="Orange at or above this share.", range=(0.0, 1.0))
    window: int = option(20, help="Steps tested for a rising disagreement.", range=(5, 10_000))
    rise: float = option(0.15, help="Smallest rise (absolute) counted.", range=(0.0, 1.0))
    p_max: float = option(0.01, help="Mann–Kendall p-value below which the rise is real.",
                          range=(1e-12, 0.5))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.level_orange >= self.level_yellow, "level_orange", self.level_orange,
              f"must be >= level_yellow={self.level_yellow}")


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
        self._long = Window(self.config.window)
        self._recent = Window(self.config.recent)

    def update(self, view: StepView) -> Condition | object | None:
        value = view.finite("reward/rm_rule_disagreement")
        if value is None:
            return SKIPPED
        self._long.push(value, view.step)
        self._recent.push(value, view.step)
        cfg = self.config
        level = float(np.min(self._recent.values)) if self._recent.full else 0.0
        if level >= cfg.level_yellow:
            severity = "orange" if level >= cfg.level_orange else "yellow"
            return Condition(severity, f"reward model and rules disagree on {level:.0%} or more of the "
                             f"samples for {cfg.recent} steps", {"disagreement": level,
                             "signal": self.signal, "onset_step": int(self._recent.steps[0])},
                             key="level", message_zh=f"奖励模型与规则判决相反的样本连续 {cfg.recent} 步 ≥ {level:.0%}")
        if not self._long.full:
            return None
        values = self._long.values
        start, end = float(np.median(values[:3])), float(np.median(values[-3:]))
        trend = mann_kendall(values)
        if end - start < cfg.rise or trend.z <= 0 or trend.p >= cfg.p_max:
            return None
        return Condition("yellow", f"reward model and rules disagree more and more: {start:.0%} → "
                         f"{end:.0%} of the samples over the last {cfg.window} steps",
                         {"disagreement_start": start, "disagreement_end": end, "p_value": trend.p,
                          "signal": self.signal, "onset_step": int(self._long.steps[0])}, key="rising",
                         message_zh=f"奖励模型与规则的分歧持续扩大：{start:.0%} → {end:.0%}")
