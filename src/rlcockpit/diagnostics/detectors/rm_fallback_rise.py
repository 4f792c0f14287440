"""Rule fallback rising: the rules take over more and more of the reward (000 §3.1).

Failure mode: the share of samples the rule fallback scores (a rule fired -- fact error, template
answer, off topic -- or the reward model was too unsure) climbs step after step. Either the
policy is learning exactly what the rules forbid (the seed's "这是一个很好的问题，值得深入探讨"
template spreading) or the reward model is losing its grip on the policy's outputs.
Signal: ``reward/fallback_frac`` over the last ``window`` (20) steps: a significant rise
(Mann–Kendall p below ``p_max``) of the window's end over its start (medians of 3) by at least
``rise_yellow`` (0.15 of all samples); ``reward/rule_rate`` tells which of the two causes it is
(evidence).
Default thresholds: yellow above a 0.15 rise, orange above ``rise_orange`` (0.3).
Practical significance: never red. The rise is in the share of samples the rules score (a fraction,
any scale): yellow above +0.15 within 20 steps with a significant Mann–Kendall trend, orange above
+0.3 — a third more of the reward then comes from rules, not from the model. No z-score: medians of
3 values and a rank test; a share flat at 0 has no trend and never fires.
Scale assumptions: none (fractions of samples).
False positives: rules tuned too tight for a new prompt set (a rule that fires on good answers);
check the samples flagged ``rule_*``.
Fix: open the samples flagged ``needs_review`` (the review queue); if a template spreads, raise
the fusion's rule weight or fix the reward model (it pays the template); if the rules misfire,
loosen them (``reward.rm.fallback.*``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, mann_kendall, median


@dataclass(frozen=True)
class RMFallbackRiseConfig(Config):
    window: int = option(20, help="Steps of reward/fallback_frac tested for a rise.",
                         range=(5, 10_000))
    p_max: float = option(0.01, help="Mann–Kendall p-value below which the rise is real.",
                          range=(1e-12, 0.5))
    rise_yellow: float = option(0.15, help="Yellow when the fallback share rose by more than this "
                                "(absolute) within the window.", range=(0.0, 1.0))
    rise_orange: float = option(0.3, help="Orange above this rise.", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.rise_orange >= self.rise_yellow, "rise_orange", self.rise_orange,
              f"must be >= rise_yellow={self.rise_yellow}")


@register
class RMFallbackRise(Detector):
    name = "rm_fallback_rise"
    family = "rm_fallback"
    reads = ("reward/fallback_frac", "reward/rule_rate")
    patterns = ("template_takeover", "rm_uncertainty_high")
    signal = "rule fallback"
    Config = RMFallbackRiseConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/fallback_frac" in names

    def __init__(self, config: RMFallbackRiseConfig | None = None) -> None:
        super().__init__(config)
        self._frac = Window(self.config.window)

    def update(self, view: StepView) -> Condition | object | None:
        frac = view.finite("reward/fallback_frac")
        if frac is None:
            return SKIPPED
        self._frac.push(frac, view.step)
        cfg = self.config
        if not self._frac.full:
            return None
        values = self._frac.values
        start, end = median(values[:3]), median(values[-3:])
        trend = mann_kendall(values)
        if end - start <= cfg.rise_yellow or trend.z <= 0 or trend.p >= cfg.p_max:
            return None
        severity = "orange" if end - start > cfg.rise_orange else "yellow"
        rule_rate = view.finite("reward/rule_rate")
        cause = "rules firing" if rule_rate is not None and rule_rate >= 0.5 * end else "model unsure"
        return Condition(severity, f"rule fallback rising: {start:.0%} → {end:.0%} of the samples over "
                         f"the last {cfg.window} steps ({cause}; Mann–Kendall p={trend.p:.1e})",
                         {"fallback_start": start, "fallback_end": end, "rule_rate": rule_rate,
                          "cause": cause, "p_value": trend.p, "signal": self.signal,
                          "onset_step": int(self._frac.steps[0])},
                         message_zh=f"规则兜底比例持续上升：{start:.0%} → {end:.0%}")
