"""No learning: the reward never moved since the run began, or it froze at one value (001 Q25).

Failure mode: the run burns compute and nothing is learned — a learning rate far too small, a
reward model that scores every answer alike, a pipeline that feeds the same batch, a policy that
collapsed to one answer the reward model scores the same. ``stall`` names a flat reward *with* a
flat KL; this detector needs the reward alone, for the many logs that carry no KL (MiniMind,
DeepSpeed-Chat step 3, custom trainers) and for the case the KL cannot show.
Signal, key "never_improved": every ``reward/mean`` since the first step, judged once at least
``min_steps`` (200) were logged and every ``every`` (10) steps after: the medians of up to 50
equal blocks of the history get a Mann–Kendall test, and the level moved (median of the last
fifth of the history minus the median of the first fifth) is compared with the per-step spread
(the standard deviation of all values). Key "constant": the last ``constant_steps`` (5) values of
``reward/mean`` lie within ``constant_rel`` (1%) of their median (or within 1e-9 of 0) —
checked only when ``reward/std`` is not logged (with it, ``levels`` reads the spread itself).
Default thresholds: "never_improved" yellow when the block medians show no trend (Mann–Kendall
p ≥ ``trend_p`` = 0.05, either direction) and the level moved less than ``moved_sigmas`` (0.5)
standard deviations; once raised it holds until the reward moves clearly (p < 0.005 or 2× the
move: hysteresis). "constant" yellow from the fifth such step.
Calibration (real runs, calibration half): the reported no-learning MiniMind run 006 (9,751 steps,
reward −1.78 → −1.78) is flat by both tests; the DeepSpeed-Chat report 018 ("the reward collapsed
to a stable point": 0.2056–0.2065 over 6 steps) is constant within 0.5%; the healthy-labelled runs
(002, 004, 009) rise with Mann–Kendall p < 1e-6 over their block medians.
Practical significance: never above yellow — a flat reward is a watch, not a verdict: a run may
start at the reward's ceiling, and a batch-mean reward can be constant while its samples still
differ. Both tests are in the reward's own units: its per-step spread, and a share of its level.
Scale assumptions: none beyond the run's own values (a rank test and a spread ratio; 1% of the
level for "constant", 1e-9 absolute at a level of 0).
False positives: a run that starts at its ceiling (an easy task: every answer right from step 1);
a log whose ``reward/mean`` is the normalised reward (mean 0 by construction) — map the raw reward
instead.
Fix: the "perturbation test" of 001 Q25: raise the learning rate for a while and watch whether
the reward reacts; check the reward's variance within a batch (every answer scored alike?), the
data pipeline (the same prompts each step?) and the samples (one answer repeated?).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, mann_kendall, median


@dataclass(frozen=True)
class RewardProgressConfig(Config):
    min_steps: int = option(200, help="Steps of reward needed before 'never improved' is judged.",
                            range=(20, 10_000_000))
    every: int = option(10, help="Judge 'never improved' every this many steps.",
                        range=(1, 100_000))
    blocks: int = option(50, help="Block medians the whole history is tested on.", range=(5, 1000))
    trend_p: float = option(0.05, help="No trend when the block medians' Mann–Kendall p is at "
                            "least this.", range=(0.0, 1.0))
    moved_sigmas: float = option(0.5, help="... and the level moved less than this × the per-step "
                                 "standard deviation.", range=(0.0, 1e6))
    constant_steps: int = option(5, help="Steps in a row for 'constant'.", range=(2, 100_000))
    constant_rel: float = option(0.01, help="'constant': the last values within this share of "
                                 "their median.", range=(0.0, 1.0))


@register
class RewardProgress(Detector):
    name = "reward_progress"
    family = "stall"
    reads = ("reward/mean", "reward/std")
    patterns = ("training_stall",)
    signal = "reward"
    Config = RewardProgressConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/mean" in names

    def __init__(self, config: RewardProgressConfig | None = None) -> None:
        super().__init__(config)
        self._values: list[float] = []
        self._steps: list[int] = []
        self._flat: Condition | None = None
        self._constant = Streak()

    def update(self, view: StepView) -> list[Condition] | object:
        reward = view.finite("reward/mean")
        if reward is None:
            return SKIPPED
        self._values.append(reward)
        self._steps.append(view.step)
        cfg = self.config
        n = len(self._values)
        if n >= cfg.min_steps and (n - cfg.min_steps) % cfg.every == 0:
            self._flat = self._never_improved()
        found = [self._flat, self._constant_now(view)]
        return [c for c in found if c is not None]

    def _never_improved(self) -> Condition | None:
        cfg = self.config
        x = np.asarray(self._values, dtype=float)
        n = len(x)
        medians = [float(np.median(b)) for b in np.array_split(x, min(cfg.blocks, n // 4))]
        trend = mann_kendall(medians)
        fifth = max(n // 5, 1)
        start, end = median(x[:fifth]), median(x[-fifth:])
        sigma = float(x.std())
        moved = end - start
        # hysteresis: once flat, the reward must move clearly to clear it (p/10, 2× the move), so
        # the finding does not flicker with each evaluation
        widen, p_min = (2.0, cfg.trend_p / 10) if self._flat else (1.0, cfg.trend_p)
        if trend.p < p_min or abs(moved) >= widen * cfg.moved_sigmas * max(sigma, 1e-12):
            return None
        evidence = {"steps": n, "reward_start": start, "reward_end": end, "moved": moved,
                    "reward_std": sigma, "moved_sigmas": abs(moved) / max(sigma, 1e-12),
                    "trend_p": trend.p, "blocks": len(medians), "signal": "reward",
                    "onset_step": self._steps[0]}
        return Condition("yellow", f"no learning: the reward has not moved in {n} steps since the "
                         f"run began ({start:.3g} → {end:.3g}, {abs(moved) / max(sigma, 1e-12):.2f}σ "
                         f"of its per-step spread, no trend p={trend.p:.2f})", evidence,
                         key="never_improved",
                         message_zh=f"没有学习：自训练开始 {n} 步以来奖励没有变化（{start:.3g} → "
                                    f"{end:.3g}，无趋势）")

    def _constant_now(self, view: StepView) -> Condition | None:
        cfg = self.config
        if view.get("reward/std") is not None or len(self._values) < cfg.constant_steps:
            self._constant.update(False, view.step)
            return None
        last = self._values[-cfg.constant_steps:]
        level = median(last)
        spread = max(last) - min(last)
        constant = spread <= cfg.constant_rel * abs(level) if level else spread <= 1e-9
        held = self._constant.update(constant, view.step)
        if not constant:
            return None
        evidence = {"reward_level": level, "reward_range": spread, "window": cfg.constant_steps,
                    "relative_range": spread / abs(level) if level else None,
                    "threshold": cfg.constant_rel, "steps": held, "signal": "reward",
                    "onset_step": self._steps[-cfg.constant_steps]}
        return Condition("yellow", f"reward constant at {level:.4g} for the last "
                         f"{cfg.constant_steps} steps (range {spread:.2g}): every answer may be "
                         "scored alike — no learning signal", evidence, key="constant",
                         message_zh=f"奖励在最近 {cfg.constant_steps} 步恒定于 {level:.4g}"
                                    f"（极差 {spread:.2g}）：可能所有回答得分相同，没有学习信号")
