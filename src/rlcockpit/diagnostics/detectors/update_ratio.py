"""Parameter update ratio outside its healthy band (001 Q22).

Failure mode: updates too large for the parameters (learning rate too high, a gradient burst:
one step kicks the policy out of the trust region) or too small (learning rate too low,
vanishing gradients, an over-strong KL penalty: training stalls).
Signal: ``update/ratio/actor`` (and ``update/ratio/critic`` when logged) = ‖Δθ‖ / ‖θ‖ per
optimizer step, the median over ``window`` steps.
Default thresholds: above 0.1 → orange (001 Q22: healthy 0.001–0.1; a relative change of the
weights, so it holds at any size); a jump to > 10× the median of the previous (up to) 20 steps,
once 5 are known → orange (key "jump/<net>": the weights moved 10× more than they just did — the
tiny actor goes from 8e-4 to 7e-2 per step when its learning rate is raised 100×, still inside
the seed's band, and the KL explodes the same step); below 1% of its own median over the first
10 steps → yellow (key "low/<net>": the weights almost stopped moving). The low bound is
relative because the healthy ratio depends on the model, optimizer and learning rate (the tiny
PPO actor moves ≈ 7e-4 per step; a LoRA adapter or a 7 B model at lr 1e-6 moves far less):
no absolute floor holds at every scale (``low`` sets one, 0 = none).
Practical significance: orange at most, never red: ‖Δθ‖/‖θ‖ > 0.1 (a tenth of the weights' norm per
step, any model size) and a jump to > 10× the median of the previous 20 steps are orange; a median
below 1% of the early level is yellow. No z-score: the jump's median must be > 0 (a history of exact
zeros is not judged) but has no floor above it, so a learning-rate warm-up from ~0 makes a 10× jump
cheap.
Scale assumptions: the ratio is dimensionless; the jump and the low bound are relative to the
run's own history.
False positives: the warm-up of a learning-rate schedule (ratios start near 0): the median window
absorbs a short warm-up; a schedule decaying to ~0 at the end of a run.
Fix: too high — lower the learning rate, enable gradient clipping; too low — raise the learning
rate (carefully), check for vanishing gradients and a KL penalty that is too strong.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, median, trailing_onset

_NETS = ("actor", "critic")


@dataclass(frozen=True)
class UpdateRatioConfig(Config):
    window: int = option(5, help="Steps whose median update ratio is judged.", range=(1, 10000))
    low: float = option(0.0, help="Yellow below this absolute ratio (0 = no absolute bound).",
                        range=(0.0, 1.0))
    low_ratio: float = option(0.01, help="Yellow below this × the median of the first "
                              "`baseline_steps` steps (0 = off).", range=(0.0, 1.0))
    baseline_steps: int = option(10, help="Early steps whose median is the run's own level.",
                                 range=(1, 100000))
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
        check(self.low_ratio < 1.0, "low_ratio", self.low_ratio, "must be below 1")


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
        self._baseline: dict[str, list[float]] = {net: [] for net in _NETS}

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
            base = self._baseline[net]
            if value is not None and len(base) < self.config.baseline_steps:
                base.append(value)
            if window.push(value, view.step) and window.full:
                found.append(self._judge(net, window))
        return [c for c in found if c is not None]

    def _jump(self, net: str, value: float, history: Window, step: int) -> Condition | None:
        cfg = self.config
        med = median(history.values)
        if med <= 0 or value <= cfg.jump_ratio * med:
            return None
        evidence = {"update_ratio": value, "previous_median": med, "ratio": value / med,
                    "threshold": cfg.jump_ratio, "history": cfg.history,
                    "signal": "update ratio", "onset_step": step}
        return Condition("orange", f"{net} weights moved {value / med:.0f}× more than in the "
                         f"previous steps (update/parameter ratio {value:.2g}, median {med:.2g}): "
                         "the policy is pushed far per step", evidence, key=f"jump/{net}",
                         message_zh=f"{net} 参数单步更新幅度为此前的 {value / med:.0f} 倍"
                                    f"（更新比 {value:.2g}，此前中位数 {med:.2g}）")

    def _judge(self, net: str, window: Window) -> Condition | None:
        cfg = self.config
        values, steps = window.values, window.steps
        med = median(values)
        base = self._baseline[net]
        low = max(cfg.low, cfg.low_ratio * median(base) if
                  len(base) >= cfg.baseline_steps else 0.0)
        outside = values > cfg.high if med > cfg.high else values < low
        evidence = {"update_ratio_median": med, "window": cfg.window, "low": low,
                    "high": cfg.high, "signal": "update ratio",
                    "onset_step": trailing_onset(steps, outside) or int(steps[-1])}
        if med > cfg.high:
            return Condition("orange", f"{net} update/parameter ratio {med:.2g} above "
                             f"{cfg.high:g}: steps too large (learning rate too high?)", evidence,
                             key=f"high/{net}",
                             message_zh=f"{net} 参数更新比 {med:.2g} 超过 {cfg.high:g}：学习率过高？")
        if med < low:
            return Condition("yellow", f"{net} update/parameter ratio {med:.2g} below "
                             f"{low:.2g} (1% of its early level): almost no learning", evidence,
                             key=f"low/{net}",
                             message_zh=f"{net} 参数更新比 {med:.2g} 低于 {low:.2g}"
                                        "（早期水平的 1%）：几乎没有学习")
        return None
