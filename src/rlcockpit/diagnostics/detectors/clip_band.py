"""PPO clip fraction outside its healthy band (001 Q24).

Failure mode: a clip fraction persistently high means most tokens hit the trust-region boundary —
the updates are too aggressive (learning rate too high, β too weak); near zero means the updates
are so timid that nothing is learned (learning rate too low, β too strong).
Signal: ``policy/clip_frac``, the median over the last ``window`` steps (single-step jumps are the
job of the spike detectors; the band is about a sustained state).
Default thresholds: above 0.3 → yellow, above 0.4 → orange (001 Q24: healthy 10–30%, "20% → 70%
pause"); below 0.0002 → yellow ("close to 0%", 001 Q24), judged after a warm-up of 20 steps
(the first updates barely move the policy). The low bound is calibrated on the tiny world, whose
healthy runs (2 epochs, ε 0.2) clip 0.2% (PPO) to 1.2% (GRPO) of tokens (medians of 3 recorded
runs): the seed's 10% floor is for large models with many epochs and would flag every healthy
tiny run — raise ``low`` to 0.05 for such setups.
False positives: GRPO with one epoch clips exactly nothing (ratio = 1); runs that log a clip
fraction of 0 by construction should disable the low bound (``low: 0``).
Fix: too high — lower the actor learning rate, raise β, run fewer epochs, look for high-advantage
outlier samples; too low — raise the learning rate or lower β.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, trailing_onset


@dataclass(frozen=True)
class ClipBandConfig(Config):
    window: int = option(10, help="Steps whose median clip fraction is judged.", range=(1, 10000))
    low: float = option(0.0002, help="Yellow below this (0 = no lower bound).", range=(0.0, 1.0))
    min_steps: int = option(20, help="Steps before the low bound is judged (warm-up).",
                            range=(0, 100000))
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

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("policy/clip_frac") is None:
            return SKIPPED
        self._seen += self._window.push(view.finite("policy/clip_frac"), view.step)
        if not self._window.full:
            return None
        cfg = self.config
        values = self._window.values
        median = float(np.median(values))
        if median > cfg.high:
            return self._high(median, values)
        if median < cfg.low and self._seen > cfg.min_steps:
            return Condition("yellow", f"clip fraction {median:.2%} (median of {cfg.window} "
                             f"steps) below {cfg.low:.2%}: updates too timid to learn",
                             self._evidence(median, cfg.low, values < cfg.low), key="low",
                             message_zh=f"裁剪比例 {median:.2%} 低于 {cfg.low:.2%}：更新过于保守")
        return None

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
