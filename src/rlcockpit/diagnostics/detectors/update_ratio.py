"""Parameter update ratio outside its healthy band (001 Q22).

Failure mode: updates too large for the parameters (learning rate too high, a gradient burst:
one step kicks the policy out of the trust region) or too small (learning rate too low,
vanishing gradients, an over-strong KL penalty: training stalls).
Signal: ``update/ratio/actor`` (and ``update/ratio/critic`` when logged) = ‖Δθ‖ / ‖θ‖ per
optimizer step, the median over ``window`` steps.
Default thresholds: above 0.1 → orange (001 Q22: healthy 0.001–0.1); below 1e-4 → yellow; a jump
to > 10× the median of the previous (up to) 20 steps, once 5 are known → orange (key "jump/<net>": a learning rate raised
100× moves the tiny actor from 8e-4 to 7e-2 per step — still inside the seed's band, but the
KL explodes the same step). The low
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
from rlcockpit.diagnostics.windows import Window, trailing_onset

_NETS = ("actor", "critic")


@dataclass(frozen=True)
class UpdateRatioConfig(Config):
    window: int = option(5, help="Steps whose median update ratio is judged.", range=(1, 10000))
    low: float = option(1e-4, help="Yellow below this (0 = no lower bound).", range=(0.0, 1.0))
    high: float = option(0.1, help="Orange above this.", range=(0.0, 1e6))
    jump_ratio: float = option(10.0, help="Orange when the ratio exceeds this × the median of the "
                               "previous `history` steps.", range=(1.0, 1e9))
    history: int = option(20, help="Steps before the current one forming the jump reference ...",
                          range=(2, 100000))
    min_history: int = option(5, help="... judged once it holds at least this many steps.",
                              range=(1, 100000))

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
        self._history = {net: Window(self.config.history) for net in _NETS}

    def update(self, view: StepView) -> list[Condition] | object:
        if all(view.get(f"update/ratio/{net}") is None for net in _NETS):
            return SKIPPED
        found = []
        for net in _NETS:
            value = view.finite(f"update/ratio/{net}")
            window, history = self._windows[net], self._history[net]
            if value is not None and len(history) >= self.config.min_history:
                found.append(self._jump(net, value, history, view.step))
            history.push(value, view.step)
            if window.push(value, view.step) and window.full:
                found.append(self._judge(net, window))
        return [c for c in found if c is not None]

    def _jump(self, net: str, value: float, history: Window, step: int) -> Condition | None:
        cfg = self.config
        median = float(np.median(history.values))
        if median <= 0 or value <= cfg.jump_ratio * median:
            return None
        evidence = {"update_ratio": value, "previous_median": median, "ratio": value / median,
                    "threshold": cfg.jump_ratio, "history": cfg.history,
                    "signal": "update ratio", "onset_step": step}
        return Condition("orange", f"{net} update/parameter ratio jumped to {value:.2g}, "
                         f"{value / median:.0f}× its previous median {median:.2g} (learning rate "
                         "raised?)", evidence, key=f"jump/{net}",
                         message_zh=f"{net} 参数更新比跃升至 {value:.2g}，为此前中位数的 "
                                    f"{value / median:.0f} 倍（学习率被调高？）")

    def _judge(self, net: str, window: Window) -> Condition | None:
        cfg = self.config
        values, steps = window.values, window.steps
        median = float(np.median(values))
        outside = values > cfg.high if median > cfg.high else values < cfg.low
        evidence = {"update_ratio_median": median, "window": cfg.window, "low": cfg.low,
                    "high": cfg.high, "signal": "update ratio",
                    "onset_step": trailing_onset(steps, outside) or int(steps[-1])}
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
