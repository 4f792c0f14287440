"""Reward-model uncertainty rising: the reward model grows unsure of what it scores (000 §3.1).

Failure mode: the policy moves into outputs the reward model never saw (seed 000 §3.1's cold
start: "30% of the rollout samples above the uncertainty threshold"); its scores turn into noise
that still drives the gradient, or gating and fallback quietly take over most of the reward.
Signal: ``reward/uncertainty/mean`` (the MC-dropout std, averaged over the step's samples) and
``reward/gated_frac`` over the last ``window`` (20) steps: a significant rise (Mann–Kendall p below
``p_max``) of the uncertainty by at least ``rise`` (50%) from the window's start (median of 3) to
its end, or the gated share at or above ``gated_yellow`` (0.3, the seed's figure) for the last 3
steps.
Default thresholds: yellow on either condition; orange when the gated share reaches
``gated_orange`` (0.6) -- most of the reward model's signal is then discounted.
Practical significance: never red. Orange when ≥ 60% of the samples are gated for 3 steps — most of
the reward model's signal is then discounted (a share, any scale); ≥ 30% gated, or the uncertainty
up ≥ 50% over 20 steps with a significant Mann–Kendall trend, is yellow. No z-score; the relative
rise divides by the window's start (median of 3) floored only at 1e-9, so an uncertainty that starts
at 0 makes any significant rise count (yellow).
Scale assumptions: the uncertainty is compared with its own window start (a ratio); the gated
share is a fraction.
False positives: a deliberate change of the prompt mix (new categories the model was not trained
on) raises the uncertainty for a good reason: retrain or extend the reward model.
Fix: look at the gated samples (flag ``rm_gated``) in the sample explorer; retrain the reward model
on the policy's current outputs (the review queue's labels export as training pairs); meanwhile
lower the actor learning rate or raise the KL coefficient so the policy stays where the model
knows its way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, mann_kendall, median


@dataclass(frozen=True)
class RMUncertaintyConfig(Config):
    window: int = option(20, help="Steps of reward/uncertainty/mean tested for a rise.",
                         range=(5, 10_000))
    p_max: float = option(0.01, help="Mann–Kendall p-value below which the rise is real.",
                          range=(1e-12, 0.5))
    rise: float = option(0.5, help="Smallest relative rise of the uncertainty (end / start - 1).",
                         range=(0.0, 1e6))
    gated_yellow: float = option(0.3, help="Yellow when reward/gated_frac stayed at or above this "
                                 "for the last 3 steps (seed 000 §3.1: 30%).", range=(0.0, 1.0))
    gated_orange: float = option(0.6, help="Orange at or above this gated share.", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.gated_orange >= self.gated_yellow, "gated_orange", self.gated_orange,
              f"must be >= gated_yellow={self.gated_yellow}")


@register
class RMUncertainty(Detector):
    name = "rm_uncertainty"
    family = "rm_uncertainty"
    reads = ("reward/uncertainty/mean", "reward/gated_frac")
    patterns = ("rm_uncertainty_high",)
    signal = "RM uncertainty"
    Config = RMUncertaintyConfig

    def __init__(self, config: RMUncertaintyConfig | None = None) -> None:
        super().__init__(config)
        self._u = Window(self.config.window)
        self._gated = Window(3)

    def update(self, view: StepView) -> Condition | object | None:
        u, gated = view.finite("reward/uncertainty/mean"), view.finite("reward/gated_frac")
        if u is None and gated is None:
            return SKIPPED
        self._u.push(u, view.step)
        self._gated.push(gated, view.step)
        cfg = self.config
        recent = float(np.min(self._gated.values)) if self._gated.full else 0.0
        if recent >= cfg.gated_yellow:
            severity = "orange" if recent >= cfg.gated_orange else "yellow"
            return Condition(severity, f"{recent:.0%} or more of the samples gated for high reward-model "
                             f"uncertainty over the last 3 steps (threshold {cfg.gated_yellow:.0%})",
                             {"gated_frac": recent, "signal": self.signal,
                              "onset_step": int(self._gated.steps[0])}, key="gated",
                             message_zh=f"最近 3 步至少 {recent:.0%} 的样本因奖励模型不确定度过高被降权")
        if not self._u.full:
            return None
        values = self._u.values
        start, end = median(values[:3]), median(values[-3:])
        growth = end / max(start, 1e-9) - 1.0
        trend = mann_kendall(values)
        if growth < cfg.rise or trend.z <= 0 or trend.p >= cfg.p_max:
            return None
        return Condition("yellow", f"reward-model uncertainty rising: {start:.3f} → {end:.3f} "
                         f"(+{growth:.0%}) over the last {cfg.window} steps (Mann–Kendall p={trend.p:.1e})",
                         {"uncertainty_start": start, "uncertainty_end": end, "growth": growth,
                          "p_value": trend.p, "signal": self.signal,
                          "onset_step": int(self._u.steps[0])}, key="rising",
                         message_zh=f"奖励模型不确定度持续上升：{start:.3f} → {end:.3f}")
