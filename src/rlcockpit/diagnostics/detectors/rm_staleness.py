"""Reward-model staleness: the reward model no longer fits the policy's outputs (001 Q17).

Failure mode: as PPO moves the policy away from the reward model's training distribution, the
reward model saturates — it scores everything close to one high value ("an applause machine",
001 Q17) — and leans on shallow features such as length or punctuation instead of content.
Signal, key "saturation": over the last ``long_window`` (60) steps, ``reward/std`` falls (its
median over the last 10 steps against the first 10 steps, with a Mann–Kendall trend) while
``reward/mean`` rises (Mann–Kendall trend).
Key "length_correlation" (samples): Spearman's rank correlation between the reward and the
response length — in tokens and in characters, the stronger counts — over the samples of the
last ``corr_steps`` (5) steps, against the same correlation over the run's first ``corr_steps``
judged steps.
Default thresholds: "saturation" when the std fell by ≥ ``std_drop`` (0.6, i.e. to 40%) with a
trend Z ≤ −``z_trend`` (3) and the mean's trend Z ≥ ``z_trend``; "length_correlation" when the
correlation ≥ ``corr_min`` (0.5) and ≥ ``corr_rise`` (0.3) above the early correlation, with at
least ``min_samples`` (50) samples. Yellow for one of the two, orange for both at once. On the
healthy tiny-world runs the 5-step correlation stayed ≤ 0.37 (tokens and characters); with the
``length_reward`` fault (+0.05 per character) it reaches 0.55–0.77 within 3 steps.
Practical significance: never red. Yellow for one sign — the reward spread down ≥ 60% over 60 steps
while the mean rises (Mann–Kendall |Z| ≥ 3 both), or the reward tracking length (Spearman ≥ 0.5 and
+0.3 over the run's start) — orange for both at once. No z-score: rank tests and rank correlations;
a reward spread that starts at 0 cannot fall (saturation never fires).
Scale assumptions: none — a relative fall of the reward spread, Mann–Kendall Z and Spearman
correlations.
False positives: a task whose good answers really are longer (the early correlation is then
already high and the rise test stays quiet); a run converging on easy prompts (variance falls
because the policy is right, not because the reward model is blind). The tiny world's healthy
runs lose about 40% of their reward std over 120 steps: the default needs 60%.
Fix: evaluate recent samples with people or a strong judge and compare with the reward model's
ranking; refresh the reward model on the current policy's outputs (iterated RLHF); add a length
penalty while it is retrained.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import spearman
from rlcockpit.diagnostics.windows import (
    Window,
    band_exit,
    mann_kendall,
    median,
    ranks,
    relative_drop,
)

ENDS = 10  # steps whose median is the start / end level of the long window
# Length in tokens (SampleRecord.length) and in characters: with mixed scripts (Chinese and
# English answers) the two rank responses differently, and a reward model may follow either.
LENGTHS = {"tokens": 1, "characters": 2}


@dataclass(frozen=True)
class RMStalenessConfig(Config):
    long_window: int = option(60, help="Steps of the saturation test.", range=(2 * ENDS, 100_000))
    std_drop: float = option(0.6, help="Saturation: relative fall of reward/std over the window.",
                             range=(0.0, 1.0))
    z_trend: float = option(3.0, help="Saturation: Mann–Kendall |Z| of the std's fall and the "
                            "mean's rise.", range=(0.5, 1e6))
    corr_steps: int = option(5, help="Steps of samples pooled for the correlation.",
                             range=(1, 1000))
    corr_min: float = option(0.5, help="Length correlation: smallest Spearman correlation.",
                             range=(-1.0, 1.0))
    corr_rise: float = option(0.3, help="Length correlation: smallest rise over the early "
                              "correlation.", range=(0.0, 2.0))
    min_samples: int = option(50, help="Length correlation: samples needed.",
                              range=(3, 10_000_000))


@register
class RMStaleness(Detector):
    name = "rm_staleness"
    family = "rm_staleness"
    reads = ("reward/mean", "reward/std")
    reads_samples = True
    patterns = ("rm_staleness", "reward_variance_collapse")
    signal = "reward model fit"
    Config = RMStalenessConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/std" in names or samples

    def __init__(self, config: RMStalenessConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._mean = Window(cfg.long_window)
        self._std = Window(cfg.long_window)
        self._pairs: deque[np.ndarray] = deque(maxlen=cfg.corr_steps)
        self._early: dict[str, float] | None = None

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("reward/std") is None and not view.samples:
            return SKIPPED
        self._mean.push(view.finite("reward/mean"), view.step)
        self._std.push(view.finite("reward/std"), view.step)
        saturation = self._saturation() if self._std.full and self._mean.full else None
        correlation = self._correlation(view)
        if saturation is not None and correlation is not None:
            saturation, correlation = (_orange(c) for c in (saturation, correlation))
        return [c for c in (saturation, correlation) if c is not None]

    def _saturation(self) -> Condition | None:
        cfg = self.config
        std, mean = self._std.values, self._mean.values
        drop = relative_drop(std, k=ENDS)
        std_trend, mean_trend = mann_kendall(std), mann_kendall(mean)
        if drop < cfg.std_drop or std_trend.z > -cfg.z_trend or mean_trend.z < cfg.z_trend:
            return None
        evidence = {"std_start": median(std[:ENDS]), "std_end": median(std[-ENDS:]),
                    "std_drop": drop, "std_trend_z": std_trend.z, "mean_trend_z": mean_trend.z,
                    "mean_start": median(mean[:ENDS]),
                    "mean_end": median(mean[-ENDS:]), "window": cfg.long_window,
                    "threshold": cfg.std_drop, "signal": "reward std",
                    "onset_step": _band_exit_down(std, self._std.steps)}
        return Condition("yellow", f"reward model saturating: reward/std fell {drop:.0%} over "
                         f"{cfg.long_window} steps while reward/mean rose", evidence,
                         key="saturation", message_zh=f"奖励模型趋于饱和：{cfg.long_window} 步内 "
                         f"reward/std 下降 {drop:.0%}，reward/mean 上升")

    def _correlation(self, view: StepView) -> Condition | None:
        cfg = self.config
        rows = [(s.reward, s.length, len(s.response)) for s in view.samples
                if np.isfinite(s.reward)]
        if len(rows) < 4:
            return None  # no samples this step: the correlation part is skipped
        self._pairs.append(np.asarray(rows, dtype=float))
        pooled = np.concatenate(list(self._pairs))
        if len(self._pairs) < cfg.corr_steps or pooled.shape[0] < cfg.min_samples:
            return None
        reward_ranks = ranks(pooled[:, 0])
        rhos = {name: spearman(pooled[:, 0], pooled[:, col], x_ranks=reward_ranks)
                for name, col in LENGTHS.items() if np.any(pooled[:, col] > 0)}
        if self._early is None:
            self._early = rhos
            return None
        hits = {n: r for n, r in rhos.items()
                if r >= cfg.corr_min and r - self._early.get(n, 0.0) >= cfg.corr_rise}
        if not hits:
            return None
        name = max(hits, key=hits.get)
        rho, early = hits[name], self._early.get(name, 0.0)
        evidence = {"spearman": rho, "early_spearman": early, "length_unit": name,
                    "all_spearman": rhos, "samples": int(pooled.shape[0]),
                    "steps": cfg.corr_steps, "threshold": cfg.corr_min,
                    "rise_threshold": cfg.corr_rise, "signal": "reward vs length",
                    "onset_step": view.step - cfg.corr_steps + 1}
        return Condition("yellow", f"reward now tracks response length in {name} (Spearman "
                         f"{rho:.2f}, was {early:.2f}): the reward model may lean on length",
                         evidence, key="length_correlation",
                         message_zh=f"奖励与回答长度（{name}）高度相关（Spearman {rho:.2f}，"
                         f"此前 {early:.2f}）：奖励模型可能依赖长度")


def _orange(cond: Condition) -> Condition:
    return Condition("orange", cond.message, cond.evidence, key=cond.key,
                     message_zh=cond.message_zh)


def _band_exit_down(values: np.ndarray, steps: np.ndarray) -> int:
    """Where a falling series left its band: it stayed below start - 20% of its fall."""
    start, end = median(values[:ENDS]), median(values[-ENDS:])
    return band_exit(values, steps, start - 0.2 * (start - end), rising=False) or int(steps[-1])
