"""Parameter update ratio outside its healthy band (001 Q22).

Failure mode: updates too large for the parameters (learning rate too high, a gradient burst:
one step kicks the policy out of the trust region) or too small (learning rate too low,
vanishing gradients, an over-strong KL penalty: training stalls).
Signal: ``update/ratio/actor`` (and ``update/ratio/critic`` when logged) = ‖Δθ‖ / ‖θ‖ per
optimizer step, the median over ``window`` steps.
Default thresholds: above 0.1 → orange (001 Q22: healthy 0.001–0.1); below 1e-4 → yellow. The low
bound is calibrated on the tiny world, whose healthy PPO actor moves ≈ 7e-4 per step (AdamW,
lr 5e-5 to 1e-4): the seed's 1e-3 would flag every healthy tiny run.
False positives: the warm-up of a learning-rate schedule (ratios start near 0): the median window
absorbs a short warm-up; a schedule decaying to ~0 at the end of a run.
Fix: too high — lower the learning rate, enable gradient clipping; too low — raise the learning
rate (carefully), check for vanishing gradients and a KL penalty that is too strong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window

_NETS = ("actor", "critic")


@dataclass(frozen=True)
class UpdateRatioConfig(Config):
    window: int = option(5, help="Steps whose median update ratio is judged.", range=(1, 10000))
    low: float = option(1e-4, help="Yellow below this (0 = no lower bound).", range=(0.0, 1.0))
    high: float = option(0.1, help="Orange above this.", range=(0.0, 1e6))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.low < self.high, "low", self.low, f"must be below high={self.high}")


@register
class UpdateRatio(Detector):
    name = "update_ratio"
    family = "gradients"
    reads = ("update/ratio/actor", "update/ratio/critic")
    patterns = ("update_ratio_out_of_band", "lr_too_high")
    signal = "update ratio"
    Config = UpdateRatioConfig

    def __init__(self, config: UpdateRatioConfig | None = None) -> None:
        super().__init__(config)
        self._windows = {net: Window(self.config.window) for net in _NETS}

    def update(self, view: StepView) -> list[Condition] | object:
        if all(view.get(f"update/ratio/{net}") is None for net in _NETS):
            return SKIPPED
        found = []
        for net in _NETS:
            window = self._windows[net]
            window.push(view.finite(f"update/ratio/{net}"), view.step)
            if window.full:
                found.append(self._judge(net, window))
        return [c for c in found if c is not None]

    def _judge(self, net: str, window: Window) -> Condition | None:
        cfg = self.config
        median = float(np.median(window.values))
        evidence = {"update_ratio_median": median, "window": cfg.window, "low": cfg.low,
                    "high": cfg.high, "signal": "update ratio",
                    "onset_step": int(window.steps[0])}
        if median > cfg.high:
            return Condition("orange", f"{net} update/parameter ratio {median:.2g} above "
                             f"{cfg.high:g}: steps too large (learning rate too high?)", evidence,
                             key=f"high/{net}",
                             message_zh=f"{net} 参数更新比 {median:.2g} 超过 {cfg.high:g}：学习率过高？")
        if median < cfg.low:
            return Condition("yellow", f"{net} update/parameter ratio {median:.2g} below "
                             f"{cfg.low:g}: almost no learning", evidence, key=f"low/{net}",
                             message_zh=f"{net} 参数更新比 {median:.2g} 低于 {cfg.low:g}：几乎没有学习")
        return None
