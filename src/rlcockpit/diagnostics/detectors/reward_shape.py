"""Reward distribution shape: variance collapse, two modes, a long right tail, a left shift (001 Q10).

Failure mode: the reward histogram says more than its mean (001 Q10). All rewards squeezed into a
narrow band (variance collapse: no learning signal left, often mode collapse plus reward hacking);
two separated peaks (the policy serves one kind of prompt well and another badly, or the reward
model favours one answer pattern); a long right tail (a few samples paid far above the rest —
often the first hacks); the whole distribution moving left (policy degradation, forgetting, or a
reward-scale drift).
Signal: the step's sample rewards (``reward/std`` and ``reward/mean`` when no samples are logged).
Key "variance_collapse": the std of the last ``recent`` (3) steps against the larger of the
reference median (``window`` = 20 steps before) and the run's early median.
Key "bimodal": Sarle's bimodality coefficient of the step's rewards (median of the last
``recent`` steps) against its reference median; not judged on a step whose skewness marks a tail
(the coefficient grows with the skewness).
Key "long_tail": skewness and (max − p90) / (p90 − p10) of the step's rewards.
Key "left_shift": ``reward/mean``'s recent mean as a robust z against the reference, confirmed by
a two-sample KS test (rlcockpit.metrics.ks) of the recent rewards against the reference rewards.
Default thresholds (yellow, after ``warmup`` = 10 reference steps): variance collapse when the
recent std ≤ ``collapse_ratio`` (0.25) × reference; bimodal when the coefficient > 5/9 while the
reference median is < 5/9 − ``bc_margin`` (0.15) — binary rewards are bimodal from the start and
never alarm; orange when the last step's rewards split into two groups (the best 1-D
2-means cut) with Ashman's D ≥ ``separation`` (2: a clear gap between the modes) and each group
≥ ``min_mode_share`` (20 %) of the samples — two separated modes that were not there before say
one group of prompts or answers is paid on another scale, at any reward scale (D is a ratio of
the gap to the groups' own spread); long tail when skewness ≥ ``tail_skew`` (2) and the tail ratio ≥ ``tail_ratio`` (1)
for ``tail_steps`` (3) steps in a row; left shift when z ≤ −``z_shift`` (4) and (without samples,
or) KS p < ``ks_p`` (1e-4) with a lower median or mean.
Practical significance: never red. Orange only for two separated modes (Ashman's D ≥ 2, each ≥ 20%
of the samples: the gap over the modes' own spread, at any reward scale); variance collapse, a
blurred bimodality, a long tail and a left shift are yellow (easy prompts also collapse the
variance). The left shift's robust z has its scale floored at 2% of the reference mean's magnitude
and needs a KS test where samples exist; with a reference mean of exactly 0 and no samples that
floor is 1e-9 (no guard). A reference spread of 0 is not judged for collapse.
Scale assumptions: none in reward units — spread ratios, skewness, the bimodality coefficient
and robust z-scores against the run's own reference steps.
False positives: a task switch in the prompt stream (every shape moves with the prompt mix);
saturation on easy prompts (variance collapse is then correct: nothing is left to learn).
Fix: inspect the samples at both modes / in the tail (the evidence lists the extreme ones); for
collapse raise the sampling temperature or use harder prompts; for a left shift roll back and
lower the learning rate; recalibrate the reward model if the tail samples are hacks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import (
    BC_UNIFORM,
    Lagged,
    bimodality_coefficient,
    sample_values,
    skewness,
    two_mode_split,
)
from rlcockpit.diagnostics.windows import Streak, median, quantile
from rlcockpit.metrics.ks import ks_test


@dataclass(frozen=True)
class RewardShapeConfig(Config):
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    recent: int = option(3, help="Steps taken as the current state.", range=(1, 100))
    warmup: int = option(10, help="Reference steps needed before judging.", range=(3, 10_000))
    collapse_ratio: float = option(0.25, help="Variance collapse: recent std at most this × the "
                                   "reference std.", range=(0.0, 1.0))
    bc_margin: float = option(0.15, help="Bimodal: the reference coefficient must be this far "
                              "below 5/9.", range=(0.0, 1.0))
    separation: float = option(2.0, help="Bimodal is orange when the step's rewards split into "
                               "two groups this far apart (Ashman's D) ...", range=(0.0, 1e6))
    min_mode_share: float = option(0.2, help="... each holding at least this share of the "
                                   "samples.", range=(0.0, 0.5))
    tail_skew: float = option(2.0, help="Long tail: smallest skewness.", range=(0.0, 1e6))
    tail_ratio: float = option(1.0, help="Long tail: smallest (max − p90) / (p90 − p10).",
                               range=(0.0, 1e6))
    tail_steps: int = option(3, help="Long tail: steps in a row.", range=(1, 1000))
    z_shift: float = option(4.0, help="Left shift: robust z of the recent mean at most minus "
                            "this.", range=(0.5, 1e6))
    ks_p: float = option(1e-4, help="Left shift: KS p-value that confirms it.", range=(0.0, 1.0))


@register
class RewardShape(Detector):
    name = "reward_shape"
    family = "reward_shape"
    reads = ("reward/mean", "reward/std")
    reads_samples = True
    patterns = ("reward_variance_collapse", "reward_bimodal", "reward_long_tail",
                "reward_left_shift")
    signal = "reward distribution"
    Config = RewardShapeConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/mean" in names or samples

    def __init__(self, config: RewardShapeConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._mean = Lagged(cfg.window, cfg.recent)
        self._std = Lagged(cfg.window, cfg.recent)
        self._bc = Lagged(cfg.window, cfg.recent)
        self._early_std: list[float] = []
        self._pending: deque[np.ndarray] = deque(maxlen=cfg.recent)
        self._pool: deque[np.ndarray] = deque(maxlen=cfg.window)
        self._tail = Streak()

    def update(self, view: StepView) -> list[Condition] | object:
        rewards = sample_values(view.samples, "reward")
        if view.get("reward/mean") is None and rewards.size == 0:
            return SKIPPED
        std = float(rewards.std()) if rewards.size >= 4 else view.finite("reward/std")
        self._mean.push(view.finite("reward/mean"), view.step)
        self._std.push(std, view.step)
        if std is not None and len(self._early_std) < self.config.window:
            self._early_std.append(std)
        if rewards.size >= 4:
            self._bc.push(bimodality_coefficient(rewards), view.step)
            self._pending.append(rewards)
        skew = skewness(rewards) if rewards.size >= 8 else 0.0
        out = [self._collapse(), self._bimodal(skew), self._long_tail(rewards, view.step, skew),
               self._left_shift()]
        self._roll_pool()
        return [c for c in out if c is not None]

    def _roll_pool(self) -> None:
        if len(self._pending) == self._pending.maxlen:
            self._pool.append(self._pending.popleft())

    def _collapse(self) -> Condition | None:
        cfg = self.config
        if not self._std.ready(cfg.warmup):
            return None
        ref = max(self._std.median, median(self._early_std))
        now = float(self._std.recent.mean())
        if ref <= 0 or now > cfg.collapse_ratio * ref:
            return None
        evidence = {"std_now": now, "std_reference": ref, "ratio": now / ref,
                    "threshold": cfg.collapse_ratio, "signal": "reward std",
                    "onset_step": self._std.onset(lambda v: v <= cfg.collapse_ratio * ref)}
        return Condition("yellow", f"reward variance collapsed: std {now:.3g} vs {ref:.3g} "
                         f"before (×{now / ref:.2f}): little learning signal left", evidence,
                         key="variance_collapse",
                         message_zh=f"奖励方差坍塌：std {now:.3g}（此前 {ref:.3g}）")

    def _bimodal(self, skew: float) -> Condition | None:
        cfg = self.config
        if not self._bc.ready(cfg.warmup) or abs(skew) >= cfg.tail_skew:
            return None  # a strongly skewed step is a tail (key "long_tail"), not two modes
        now = median(self._bc.recent)
        ref = self._bc.median
        if not (now > BC_UNIFORM and ref < BC_UNIFORM - cfg.bc_margin):
            return None
        split = two_mode_split(self._pending[-1], cfg.min_mode_share) if self._pending else None
        separated = split is not None and split[0] >= cfg.separation
        evidence = {"bimodality": now, "reference_bimodality": ref, "threshold": BC_UNIFORM,
                    "separation": split[0] if split else None,
                    "minor_mode_share": split[1] if split else None,
                    "separation_threshold": cfg.separation, "signal": "reward distribution",
                    "onset_step": self._bc.onset(lambda v: v > BC_UNIFORM)}
        if separated:
            return Condition(
                "orange", f"reward distribution split into two separated modes (Ashman's D "
                f"{split[0]:.1f} ≥ {cfg.separation:g}, the smaller holds {split[1]:.0%} of the "
                f"samples; Sarle coefficient {now:.2f}, was {ref:.2f}): one group of prompts or "
                "answers is paid on another scale — read the samples of both modes", evidence,
                key="bimodal",
                message_zh=f"奖励分布分裂为两个分离的峰（Ashman D {split[0]:.1f}，小峰占 "
                           f"{split[1]:.0%}；双峰系数 {now:.2f}，此前 {ref:.2f}）：某一类提示或回答"
                           "获得了另一量级的奖励")
        return Condition("yellow", f"reward distribution became bimodal (Sarle coefficient "
                         f"{now:.2f}, was {ref:.2f}; above 5/9 means two modes)", evidence,
                         key="bimodal", message_zh=f"奖励分布出现双峰（双峰系数 {now:.2f}，"
                         f"此前 {ref:.2f}）")

    def _long_tail(self, rewards: np.ndarray, step: int, skew: float) -> Condition | None:
        """``skew``: the rewards' skewness (computed once per step by :meth:`update`)."""
        cfg = self.config
        if rewards.size < 8:
            self._tail.update(False, step)
            return None
        p10, p90 = quantile(rewards, 0.1), quantile(rewards, 0.9)
        ratio = (float(rewards.max()) - p90) / max(float(p90 - p10), 1e-12)
        held = self._tail.update(skew >= cfg.tail_skew and ratio >= cfg.tail_ratio, step)
        if held < cfg.tail_steps:
            return None
        top = np.sort(rewards)[-3:][::-1]
        evidence = {"skewness": skew, "tail_ratio": ratio, "max": float(rewards.max()),
                    "p90": float(p90), "p10": float(p10), "top_rewards": top.tolist(),
                    "skew_threshold": cfg.tail_skew, "ratio_threshold": cfg.tail_ratio,
                    "signal": "reward tail", "onset_step": self._tail.onset, "steps": held}
        return Condition("yellow", f"long right tail of rewards: max {rewards.max():.3g} vs "
                         f"p90 {p90:.3g} (skewness {skew:.1f}) for {held} steps", evidence,
                         key="long_tail", message_zh=f"奖励出现长右尾：最大值 {rewards.max():.3g}，"
                         f"p90 {p90:.3g}")

    def _left_shift(self) -> Condition | None:
        cfg = self.config
        if not self._mean.ready(cfg.warmup):
            return None
        ref = self._mean.median
        scale = self._mean.scale(max(0.02 * abs(ref), 1e-9))
        z = self._mean.z(scale)
        if z > -cfg.z_shift:
            return None
        ks = self._ks()
        if ks is not None and not ks["confirmed"]:
            return None
        now = float(self._mean.recent.mean())
        evidence = {"mean_now": now, "mean_reference": ref, "z": z, "z_threshold": -cfg.z_shift,
                    **(ks or {}), "signal": "reward",
                    "onset_step": self._mean.onset(lambda v: v - ref <= -2.0 * scale)}
        return Condition("yellow", f"reward distribution shifted left: mean {now:.3g} vs "
                         f"{ref:.3g} (z {z:+.1f})", evidence, key="left_shift",
                         message_zh=f"奖励分布整体左移：均值 {now:.3g}（此前 {ref:.3g}）")

    def _ks(self) -> dict | None:
        if len(self._pending) < 1 or len(self._pool) < self.config.warmup:
            return None
        recent = np.concatenate(list(self._pending))
        ref = np.concatenate(list(self._pool))
        d, p = ks_test(recent, ref)
        lower = median(recent) < median(ref) or recent.mean() < ref.mean()
        return {"ks_d": d, "ks_p": p, "confirmed": bool(p < self.config.ks_p and lower),
                "recent_samples": int(recent.size)}
