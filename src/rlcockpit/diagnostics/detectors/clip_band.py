"""PPO clip fraction outside its healthy band (001 Q24).

Failure mode: a clip fraction persistently high means most tokens hit the trust-region boundary —
the updates are too aggressive (learning rate too high, β too weak); near zero means the updates
are so timid that nothing is learned (learning rate too low, β too strong).
Signal: ``policy/clip_frac``, the median over the last ``window`` steps (single-step jumps are the
job of the spike detectors; the band is about a sustained state).
Default thresholds: above 0.3 → yellow, above 0.4 → orange (001 Q24: healthy 10–30%, "20% → 70%
pause"; a fraction of tokens, so it holds at any scale); "close to 0%" (001 Q24) is judged
against the run's own level: the median falls below 5% (``low_ratio``) of its median over the 20
steps after the warm-up (``min_steps``, 20: the first updates barely move the policy) → yellow.
The healthy level depends on the setup — 0.2% (tiny PPO) to 1.2% (tiny GRPO) in the tiny world,
0.2% on a verl 7 B PPO run, exactly 0 in single-epoch GRPO, where the ratio is 1 by construction
— so no absolute floor holds at every scale (``low`` sets one; 0 = none, the default).
Practical significance: the clip fraction is a share of tokens, so 0.3 and 0.4 mean the same at any
model size: above 0.4 (10-step median) 40% of the tokens hit the trust-region boundary → orange;
0.3–0.4, and a fall below 5% of the run's own level, are yellow (a timid run wastes compute, it
breaks nothing). Never red. No z-score: the low bound is a ratio to the median of 20 steps after the
warm-up, and a level of exactly 0 (single-epoch GRPO) gives a bound of 0.
Scale assumptions: a fraction (dimensionless); the low bound relative to the run's own level.
False positives: a run whose clip fraction falls because it converged with a lowered learning
rate (the schedule's end).
Fix: too high — lower the actor learning rate, raise β, run fewer epochs, look for high-advantage
outlier samples; too low — raise the learning rate or lower β.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, median, trailing_onset


@dataclass(frozen=True)
class ClipBandConfig(Config):
    window: int = option(10, help="Steps whose median clip fraction is judged.", range=(1, 10000))
    low: float = option(0.0, help="Yellow below this absolute fraction (0 = no absolute bound).",
                        range=(0.0, 1.0))
    low_ratio: float = option(0.05, help="Yellow below this × the run's own level (0 = off).",
                              range=(0.0, 1.0))
    min_steps: int = option(20, help="Warm-up steps; the run's own level is the median of the "
                            "`level_steps` after them.", range=(0, 100000))
    level_steps: int = option(20, help="Steps whose median is the run's own level.",
                              range=(1, 100000))
    high: float = option(0.3, help="Yellow above this.", range=(0.0, 1.0))
    orange: float = option(0.4, help="Orange above this.", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.low < self.high <= self.orange, "high", self.high,
              f"need low ({self.low}) < high <= orange ({self.orange})")


@register
class ClipBand(Detector):
    name = "clip_band"
    family = "ppo"
    reads = ("policy/clip_frac",)
    patterns = ("clip_frac_out_of_band",)
    signal = "clip fraction"
    Config = ClipBandConfig

    def __init__(self, config: ClipBandConfig | None = None) -> None:
        super().__init__(config)
        self._window = Window(self.config.window)
        self._seen = 0
        self._level: list[float] = []

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("policy/clip_frac") is None:
            return SKIPPED
        value, cfg = view.finite("policy/clip_frac"), self.config
        self._seen += self._window.push(value, view.step)
        if value is not None and self._seen > cfg.min_steps and len(self._level) < cfg.level_steps:
            self._level.append(value)
        if not self._window.full:
            return None
        values = self._window.values
        med = median(values)
        if med > cfg.high:
            return self._high(med, values)
        low = self._low()
        if med < low:
            return Condition("yellow", f"clip fraction {med:.2%} (median of {cfg.window} "
                             f"steps) below {low:.2%}: updates too timid to learn",
                             self._evidence(med, low, values < low), key="low",
                             message_zh=f"裁剪比例 {med:.2%} 低于 {low:.2%}：更新过于保守")
        return None

    def _low(self) -> float:
        """The low bound: the absolute ``low`` or ``low_ratio`` × the run's own level."""
        cfg = self.config
        own = cfg.low_ratio * median(self._level) \
            if len(self._level) >= cfg.level_steps else 0.0
        return max(cfg.low if self._seen > cfg.min_steps else 0.0, own)

    def _high(self, median: float, values: np.ndarray) -> Condition:
        cfg = self.config
        severity = "orange" if median > cfg.orange else "yellow"
        bound = cfg.orange if severity == "orange" else cfg.high
        return Condition(severity, f"clip fraction {median:.0%} (median of {cfg.window} steps) "
                         f"above {bound:.0%}: updates too aggressive",
                         self._evidence(median, bound, values > cfg.high), key="high",
                         message_zh=f"裁剪比例 {median:.0%} 超过 {bound:.0%}：更新过于激进")

    def _evidence(self, median: float, bound: float, outside: np.ndarray) -> dict:
        # onset: the first step of the trailing run of out-of-band values
        steps = self._window.steps
        onset = trailing_onset(steps, outside) or int(steps[-1])
        return {"clip_frac_median": median, "threshold": bound, "window": self.config.window,
                "signal": "clip fraction", "onset_step": onset}
