"""Reward scale drifting steadily: the rewards grow in size step after step (000 §4.3, 001 Q10).

Failure mode: the reward's *scale* creeps up — reward normalisation off while a reward model's
outputs inflate, a reward scale or bonus that compounds, a learned reward model drifting as the
policy moves. No single step jumps, so the spike check (``reward_scale``: a factor against a
reference a few steps back) never fires; yet the advantages, the critic's targets and the
gradients all grow with the scale until the KL or the critic blows up. With normalisation on the
normalised rewards hide it; the raw ones do not.
Signal: the step's reward *magnitude* — max(|``reward/min``|, |``reward/max``|), else the 0.95
quantile of |reward| over the step's samples, else |``reward/mean``| + 2 ``reward/std`` — over the
last ``window`` (20) steps: a Mann–Kendall trend test (rlcockpit.diagnostics.windows) and the
growth of the level (median of the last ``k`` = 5 steps over the median of the window's first 5).
Default thresholds: orange when the trend is increasing with p < ``trend_p`` (1e-3) and the level
grew ≥ ``growth`` (2)× within the window, after ``warmup`` (10) steps, key "scale". The reference
is the window itself, so a drift is judged against where it stood ``window`` steps ago, and the
finding holds while the growth goes on.
Practical significance: the magnitude, not the mean, is judged — a run that learns moves its mean
reward up while a bounded reward's magnitude stays bounded (accuracy in [0, 1]: max |r| = 1 at any
model size), so learning is no drift; a magnitude that doubles steadily within 20 steps is a scale
that is not under control. Healthy real runs: the rewards of the corpus are bounded ([0, 1],
[−5, 5]) and their magnitudes never double with a significant trend within 20 logged steps.
A window that starts at a magnitude of exactly 0 (no reward earned yet) is no evidence: the first
rewards of a sparse task are not a drift.
Scale assumptions: none in reward units — a rank test and a ratio of the run's own magnitudes.
False positives: a curriculum that raises the reward range on purpose; an intended change of
``reward/scale`` over several steps (the evidence shows ``reward/scale`` when logged).
Fix: turn reward normalisation on (``reward.normalize``), clip the rewards (``reward.clip``), find
what inflates the reward model's outputs (its head bias, a reward term without bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import sample_values
from rlcockpit.diagnostics.windows import Streak, Window, mann_kendall, median, quantile


@dataclass(frozen=True)
class RewardDriftConfig(Config):
    window: int = option(20, help="Steps of reward magnitude tested for a trend.",
                         range=(5, 10_000))
    warmup: int = option(10, help="Steps of magnitude needed before judging.", range=(5, 10_000))
    k: int = option(5, help="Steps whose median is a level (start and end of the window).",
                    range=(1, 100))
    trend_p: float = option(1e-3, help="Mann–Kendall p-value below which the magnitude rises "
                            "steadily.", range=(0.0, 1.0))
    growth: float = option(2.0, help="... and the level grew at least this × within the window.",
                           range=(1.0, 1e9))


def reward_magnitude(view: StepView) -> float | None:
    """How large the step's rewards are, from what the step carries (see the module docstring)."""
    low, high = view.finite("reward/min"), view.finite("reward/max")
    if low is not None and high is not None:
        return max(abs(low), abs(high))
    rewards = sample_values(view.samples, "reward")
    if rewards.size >= 4:
        return quantile(np.abs(rewards), 0.95)
    mean, std = view.finite("reward/mean"), view.finite("reward/std")
    if mean is not None and std is not None:
        return abs(mean) + 2 * std
    return None


@register
class RewardDrift(Detector):
    name = "reward_drift"
    family = "reward_scale"
    reads = ("reward/min", "reward/max", "reward/mean", "reward/std")
    reads_samples = True
    patterns = ("reward_scale_spike",)
    signal = "reward magnitude"
    Config = RewardDriftConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return {"reward/min", "reward/max"} <= names or {"reward/mean", "reward/std"} <= names \
            or samples

    def __init__(self, config: RewardDriftConfig | None = None) -> None:
        super().__init__(config)
        self._sizes = Window(self.config.window)
        self._streak = Streak()
        self._seen = 0

    def update(self, view: StepView) -> list[Condition] | object:
        size = reward_magnitude(view)
        if size is None:
            return SKIPPED
        self._sizes.push(size, view.step)
        self._seen += 1
        cfg = self.config
        if self._seen < max(cfg.warmup, 2 * cfg.k) or len(self._sizes) < 2 * cfg.k:
            self._streak.update(False, view.step)
            return []
        values = self._sizes.values
        start, end = median(values[:cfg.k]), median(values[-cfg.k:])
        trend = mann_kendall(values)
        # a start of exactly 0 (every reward 0: nothing earned yet) is no scale to grow from
        growth = end / start if start > 0 else 1.0
        drifting = trend.z > 0 and trend.p < cfg.trend_p and growth >= cfg.growth
        held = self._streak.update(drifting, view.step)
        if not drifting:
            return []
        steps = self._sizes.steps
        evidence = {"magnitude_now": end, "magnitude_before": start, "growth": growth,
                    "trend_p": trend.p, "kendall_tau": trend.tau, "window": len(values),
                    "threshold_growth": cfg.growth, "threshold_p": cfg.trend_p, "steps": held,
                    "reward_scale": view.finite("reward/scale"), "signal": "reward magnitude",
                    "onset_step": int(steps[0])}
        return [Condition(
            "orange", f"reward scale drifting up: the rewards' magnitude grew {growth:.1f}× "
            f"({start:.3g} → {end:.3g}) over the last {len(values)} steps, rising steadily "
            f"(Mann–Kendall p={trend.p:.1e}); advantages and critic targets grow with it",
            evidence, key="scale",
            message_zh=f"奖励尺度持续漂移：最近 {len(values)} 步奖励量级增长 {growth:.1f} 倍"
                       f"（{start:.3g} → {end:.3g}），单调上升；优势与 critic 目标随之变大")]
