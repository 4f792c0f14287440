"""Critic health: value-loss divergence, over-fit, value distribution shift (001 Q5, Q16, 000 §4.2).

Failure mode: *divergence* — the value loss jumps by orders of magnitude or turns NaN (extreme
returns, a critic learning rate too high, value clipping off, 001 Q5); *over-fit* — the value loss
is tiny while the advantages have collapsed: no learning signal reaches the actor (001 Q16, Q25);
*distribution shift* — the predicted values drift away from the returns, so every advantage is
biased (001 Q16, 000 §4.2).
Signal: ``value/loss`` (robust z-score of its log against the last ``window`` steps);
``advantage/abs_median`` (or ``advantage/std``) against its early baseline; the gap
``value/mean − returns/mean`` in units of ``advantage/std``.
Default thresholds: divergence when the log value loss has robust z > 6 and the loss is > 5× the
window median, or the loss is NaN/inf → red (key "divergence"); over-fit when the loss is < 5% and
the advantage scale < 20% of their early baselines for 5 steps → yellow (key "overfit"); shift when
the median gap over 10 steps exceeds 1.5 advantage standard deviations → yellow (key "shift").
Clip: ``value/clip_frac`` — the share of value predictions an update moved farther than the
value clip range — averaged over the last ``clip_steps`` (5) steps ≥ ``clip_frac`` (0.03) →
yellow (key "value_clip"): the critic's steps are too large for its clip range, most often a
critic learning rate too high. Calibration: healthy tiny-world PPO runs (40 × 200 steps) stay
≤ 0.004 on every step, the real verl PPO run (7 B, 335 steps) ≤ 0.007 with a median of 0, a
TRL PPO run's fragments 0–0.045; a critic learning rate × 10 puts 0.02–0.2 on most steps while
its value loss looks better than a healthy run's (the critic fits faster): the clip fraction is
its only trace.
GRPO and other critic-free runs log no value metrics: the detector reports "skipped".
Practical significance: red on a non-finite value loss (wrong in any units) and on a divergence
spike: robust z of log(loss) > 6 (its scale floored at 0.05 in log units) and the loss > 5× its
window median (losses ≤ 0 are left out of the history, so exact zeros make no median). The spike
is orange on a single step and red only when it holds 3 steps in a row (an effect that persists) or
the loss is ≥ 100× its window median, as ``gradients`` asks. Over-fit, shift and value clip are
yellow: a poorly fitting critic slows learning.
Scale assumptions: none in loss units — the value loss is judged in log space against its own
window (robust z and a ratio to the median), over-fitting against the run's early baseline, the
value shift in units of the advantage spread; the clip fraction is a fraction of the value
predictions (it does depend on the configured value clip range: a wider range clips less).
False positives: the first updates of a fresh critic (warm-up of ``window`` steps); a deliberate
change of the reward scale (the loss jumps once, then settles — the finding resolves).
Fix: divergence — print the batch's rewards and returns (data or optimiser?), lower the critic
learning rate, enable value clipping and gradient clipping; over-fit — more exploration, check
the reward's variance; shift — roll the critic back, normalise the returns (001 Q16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, median, robust_z


@dataclass(frozen=True)
class CriticConfig(Config):
    window: int = option(30, help="Steps of log value loss forming the reference.",
                         range=(5, 10000))
    min_steps: int = option(10, help="Steps before judging a spike.", range=(3, 10000))
    spike_z: float = option(6.0, help="Robust z-score of log value loss for divergence.",
                            range=(0.5, 1e6))
    spike_ratio: float = option(5.0, help="... and the loss must exceed this × window median.",
                                range=(1.0, 1e9))
    baseline_steps: int = option(10, help="Early steps forming the loss / advantage baselines.",
                                 range=(1, 10000))
    overfit_loss: float = option(0.05, help="Over-fit: loss below this × its early baseline ...",
                                 range=(0.0, 1.0))
    overfit_adv: float = option(0.2, help="... and advantage scale below this × its baseline ...",
                                range=(0.0, 1.0))
    overfit_steps: int = option(5, help="... for this many consecutive steps.", range=(1, 10000))
    shift_window: int = option(10, help="Steps of value-vs-returns gap whose median is judged.",
                               range=(1, 10000))
    shift_sigmas: float = option(1.5, help="Shift when |median gap| exceeds this × advantage std.",
                                 range=(0.0, 1e6))
    clip_frac: float = option(0.03, help="Value clip: mean value/clip_frac over `clip_steps` "
                              "steps at or above this → yellow.", range=(0.0, 1.0))
    clip_steps: int = option(5, help="Value clip: steps averaged.", range=(1, 10000))


@register
class Critic(Detector):
    name = "critic"
    family = "critic"
    reads = ("value/loss", "value/mean", "returns/mean", "advantage/abs_median", "advantage/std",
             "value/clip_frac")
    patterns = ("critic_divergence", "critic_overfit", "value_distribution_shift")
    signal = "value loss"
    Config = CriticConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "value/loss" in names

    def __init__(self, config: CriticConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._log_loss = Window(cfg.window)
        self._spikes = Streak()
        self._gap = Window(cfg.shift_window)
        self._base_loss: list[float] = []
        self._base_adv: list[float] = []
        self._overfit = Streak()
        self._clip = Window(cfg.clip_steps)

    def update(self, view: StepView) -> list[Condition] | object:
        loss = view.get("value/loss")
        if loss is None:
            return SKIPPED  # no critic (GRPO, RLOO, ...)
        found = [self._divergence(view, loss), self._overfitting(view, loss), self._shift(view),
                 self._value_clip(view)]
        if math.isfinite(loss) and loss > 0:
            self._log_loss.push(math.log(loss), view.step)
        return [c for c in found if c is not None]

    def _divergence(self, view: StepView, loss: float) -> Condition | None:
        cfg = self.config
        evidence = {"value_loss": loss, "signal": "value loss", "onset_step": view.step,
                    "returns_mean": view.finite("returns/mean")}
        if not math.isfinite(loss):
            return Condition("red", f"value loss is {loss} at step {view.step}", evidence,
                             key="divergence", message_zh=f"第 {view.step} 步价值损失为 {loss}")
        if len(self._log_loss) < cfg.min_steps or loss <= 0:
            return None
        ref = self._log_loss.values
        z = robust_z(math.log(loss), ref, floor=0.05)
        med = math.exp(median(ref))
        spiked = z > cfg.spike_z and loss > cfg.spike_ratio * med
        held = self._spikes.update(spiked, view.step)
        if not spiked:
            return None
        # red for an effect that persists (3 steps in a row) or a loss 100x its median; one
        # step of 5-100x that the critic recovers from is orange (issue 26)
        severe = held >= 3 or loss >= 100 * med
        evidence.update(z=z, window_median=med, ratio=loss / med, threshold_z=cfg.spike_z,
                        steps=held, onset_step=self._spikes.onset, magnitude=loss)
        return Condition("red" if severe else "orange",
                         f"value loss spiked to {loss:.3g} ({loss / med:.1f}× its "
                         f"median {med:.3g}, robust z={z:.1f}): critic diverging", evidence,
                         key="divergence",
                         message_zh=f"价值损失飙升至 {loss:.3g}（为中位数的 {loss / med:.1f} "
                                    "倍），Critic 发散")

    def _overfitting(self, view: StepView, loss: float) -> Condition | None:
        cfg = self.config
        adv = view.finite("advantage/abs_median")
        if adv is None:
            adv = view.finite("advantage/std")
        if adv is None or not math.isfinite(loss):
            return None
        if len(self._base_loss) < cfg.baseline_steps:
            self._base_loss.append(loss)
            self._base_adv.append(abs(adv))
            return None
        base_loss, base_adv = median(self._base_loss), median(self._base_adv)
        tiny = loss < cfg.overfit_loss * base_loss and abs(adv) < cfg.overfit_adv * base_adv
        held = self._overfit.update(tiny, view.step)
        if held < cfg.overfit_steps:
            return None
        evidence = {"value_loss": loss, "loss_baseline": base_loss, "advantage": adv,
                    "advantage_baseline": base_adv, "steps": held, "signal": "value loss",
                    "onset_step": self._overfit.onset}
        return Condition("yellow", f"value loss {loss:.2g} tiny while advantages collapsed "
                         f"({adv:.2g} vs {base_adv:.2g} early): no learning signal", evidence,
                         key="overfit",
                         message_zh="价值损失极小而优势几乎为零：Critic 过拟合，Actor 缺乏学习信号")

    def _shift(self, view: StepView) -> Condition | None:
        cfg = self.config
        value, ret = view.finite("value/mean"), view.finite("returns/mean")
        scale = view.finite("advantage/std")
        if value is None or ret is None or not scale:
            return None
        self._gap.push((value - ret) / abs(scale), view.step)
        if not self._gap.full:
            return None
        gap = median(self._gap.values)
        if abs(gap) <= cfg.shift_sigmas:
            return None
        evidence = {"gap_sigmas": gap, "value_mean": value, "returns_mean": ret,
                    "advantage_std": scale, "window": cfg.shift_window,
                    "threshold": cfg.shift_sigmas, "signal": "value mean",
                    "onset_step": int(self._gap.steps[int(np.argmax(
                        np.abs(self._gap.values) > cfg.shift_sigmas))])}
        return Condition("yellow", f"value predictions drifted {gap:+.1f} advantage-std away "
                         f"from the returns ({value:.3g} vs {ret:.3g})", evidence, key="shift",
                         message_zh=f"价值预测偏离回报 {gap:+.1f} 个标准差"
                                    f"（{value:.3g} 对 {ret:.3g}）")

    def _value_clip(self, view: StepView) -> Condition | None:
        cfg = self.config
        frac = view.finite("value/clip_frac")
        if frac is None:
            return None
        self._clip.push(frac, view.step)
        if not self._clip.full:
            return None
        mean = float(np.mean(self._clip.values))
        if mean < cfg.clip_frac:
            return None
        steps = self._clip.steps
        evidence = {"clip_frac_mean": mean, "clip_frac_now": frac, "steps": cfg.clip_steps,
                    "threshold": cfg.clip_frac, "signal": "value clip fraction",
                    "onset_step": int(steps[int(np.argmax(self._clip.values >= cfg.clip_frac))])}
        return Condition("yellow", f"{mean:.1%} of the value predictions per step moved beyond "
                         f"the value clip range (mean of {cfg.clip_steps} steps; healthy runs "
                         "stay below 1%): the critic's steps are too large — is its learning "
                         "rate too high?", evidence, key="value_clip",
                         message_zh=f"每步 {mean:.1%} 的价值预测超出价值裁剪范围（{cfg.clip_steps} "
                                    "步均值；健康运行低于 1%）：Critic 步长过大，学习率是否过高？")
