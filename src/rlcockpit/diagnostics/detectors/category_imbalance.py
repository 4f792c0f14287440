"""Category imbalance: one prompt category's reward falls while the others rise (001 Q15).

Failure mode: alignment imbalance (001 Q15) — the policy over-optimises one dimension and pays for
it in another: safety over-optimised (refusals everywhere) while knowledge or creative rewards
stall or fall, or a style the reward model likes spreading into answers that needed facts. The
total reward still rises, so the mean curve hides it.
Signal: each ``reward/category/<category>/mean`` — the mean of its last ``recent`` (4) steps as a
robust z against its previous ``window`` (20) steps, and a Mann–Kendall trend over the last
``trend_window`` (30) steps — compared with the other categories' z-scores. When the step's
samples carry categories and every category has ≥ ``min_pool`` (8) prompts in the last
``sample_recent`` (2) steps, the level test uses the samples instead: each prompt's mean reward
(a GRPO group counts once), the recent prompts pooled against the reference prompts, Welch's z
(standard deviations never below 2 × the z floor below) — the noise then comes from the data,
not from a fixed floor, and a fall shows two steps earlier.
Default thresholds: a category is falling when z ≤ −``z_drop`` (4.5; −``z_samples`` = −4 for the
samples' Welch z), or when its trend Z ≤
−``z_trend`` (3.5) and it lost at least 3 z-scales between the medians of the first and last 5
trend values; it fires when the other categories hold or rise (median z of the others ≥
``others_min`` = 0): yellow, orange when the others clearly rise (median z ≥ ``others_rise`` = 2)
or the fall is deep (z ≤ −2 × ``z_drop``). One condition per category (key = category). The z
scale is never below ``floor_frac`` (0.25) × the median ``reward/std``: with few prompts per
category per step the category means are noisy. Judged after ``warmup`` (10) reference steps;
the reference freezes while the condition holds (``rebase_after`` = 30 steps). Calibration: on
the healthy tiny-world runs the lowest z was −4.0 (GRPO: about 2 prompts per category per step),
the lowest Welch z −2.7 (PPO, 8 prompts per category per step) and the lowest trend Z −3.3; the
``category_reward_drop`` fault (math −0.25 per step) is seen 3 steps after its onset.
Practical significance: never red — one category falling while the others hold is a trade-off to
read, not a ruined run: yellow, orange when the others clearly rise (median z ≥ 2) or the fall is
deep (z ≤ −2 × ``z_drop``). The robust z's scale is floored at ``floor_frac`` (0.25) × the median
``reward/std`` and the Welch z's standard deviations at twice that, so a category whose reward sat
at exactly 0 does not make its first move extreme; without any ``reward/std`` logged the floor is
only 1e-6 reward units (no guard).
Scale assumptions: none in reward units — robust z-scores of each category against its own
history (the scale floored at a fraction of the reward spread) and Welch z of the pooled samples.
False positives: a category with very few prompts per step (its mean jumps with the draw); a
deliberate re-weighting of the reward components.
Fix: look at the falling category's samples (refusals? style over facts?), re-balance the reward
components' weights or the prompt mix, or use a per-category KL coefficient (001 Q15).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged, PooledLevel
from rlcockpit.diagnostics.windows import Window, mann_kendall, median
from rlcockpit.records import SampleRecord

PREFIX = "reward/category/"


@dataclass(frozen=True)
class CategoryImbalanceConfig(Config):
    z_drop: float = option(4.5, help="Robust z of a category's recent mean that counts as a fall.",
                           range=(0.5, 1e6))
    z_samples: float = option(4.0, help="Welch z (samples) at most minus this counts as a fall.",
                              range=(0.5, 1e6))
    z_trend: float = option(3.5, help="Mann–Kendall Z (negative) that counts as a falling trend.",
                            range=(0.5, 1e6))
    others_min: float = option(0.0, help="The other categories' median z must be at least this "
                               "(they hold or rise).", range=(-1e6, 1e6))
    others_rise: float = option(2.0, help="Orange when the others' median z reaches this.",
                                range=(0.0, 1e6))
    recent: int = option(4, help="Steps averaged as the current level (metrics).",
                         range=(1, 100))
    sample_recent: int = option(2, help="Steps of samples pooled as the current level.",
                                range=(1, 100))
    min_pool: int = option(8, help="Prompts per category needed in the recent steps to judge "
                           "from the samples (else the metric means are used).",
                           range=(2, 1_000_000))
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    trend_window: int = option(30, help="Steps of the trend test.", range=(5, 10_000))
    warmup: int = option(10, help="Reference steps needed before judging.", range=(3, 10_000))
    floor_frac: float = option(0.25, help="Smallest z scale as a fraction of the median "
                               "reward/std.", range=(0.0, 10.0))
    rebase_after: int = option(30, help="Steps of a lasting fall after which it becomes the new "
                               "reference.", range=(1, 100_000))


class _Category:
    def __init__(self, cfg: CategoryImbalanceConfig) -> None:
        self.level = Lagged(cfg.window, cfg.recent)
        self.pool = PooledLevel(cfg.window, cfg.sample_recent)
        self.trend = Window(cfg.trend_window)
        self.firing = 0


def categories(view: StepView) -> list[str]:
    """Category names from ``reward/category/<category>/mean`` metrics."""
    names = []
    for name in view.matching(PREFIX):
        rest = name[len(PREFIX):]
        if rest.endswith("/mean") and "/" not in rest[: -len("/mean")]:
            names.append(rest[: -len("/mean")])
    return sorted(names)


def prompt_means(samples: Sequence[SampleRecord]) -> dict[str, np.ndarray]:
    """Per category, the mean reward of each prompt in the step (GRPO groups count once)."""
    by_prompt: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in samples:
        if s.category and math.isfinite(s.reward):
            by_prompt[(s.category, s.prompt_id or s.prompt)].append(s.reward)
    out: dict[str, list[float]] = defaultdict(list)
    for (category, _), rewards in by_prompt.items():
        out[category].append(float(np.mean(rewards)))
    return {c: np.asarray(v) for c, v in out.items()}


@register
class CategoryImbalance(Detector):
    name = "category_imbalance"
    family = "category_imbalance"
    reads = (PREFIX, "reward/std")
    reads_samples = True
    patterns = ("category_imbalance",)
    signal = "category reward"
    Config = CategoryImbalanceConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        cats = {n[len(PREFIX):-len("/mean")] for n in names
                if n.startswith(PREFIX) and n.endswith("/mean")}
        return len({c for c in cats if "/" not in c}) >= 2 or samples

    def __init__(self, config: CategoryImbalanceConfig | None = None) -> None:
        super().__init__(config)
        self._cats: dict[str, _Category] = {}
        self._std = Window(self.config.window)
        self._z_drop = self.config.z_drop

    def update(self, view: StepView) -> list[Condition] | object:
        cfg = self.config
        per_category = prompt_means(view.samples)
        names = sorted(set(categories(view)) | set(per_category))
        if len(names) < 2:
            return SKIPPED
        floor = cfg.floor_frac * median(self._std.values) if len(self._std) else 1e-6
        floor = max(floor, 1e-9)
        self._std.push(view.finite("reward/std"), view.step)
        for name in names:
            cat = self._cats.setdefault(name, _Category(cfg))
            value = view.finite(f"{PREFIX}{name}/mean")
            cat.level.push(value, view.step)
            cat.trend.push(value, view.step)
            if name in per_category:
                cat.pool.push(per_category[name], view.step)
        zs, by_samples = self._scores(names, per_category, floor)
        self._z_drop = cfg.z_samples if by_samples else cfg.z_drop
        out = []
        for name in names:
            cond = self._judge(name, zs, floor, by_samples) if name in zs else None
            self._track(name, cond is not None)
            if cond is not None:
                out.append(cond)
        return out

    def _scores(self, names: list[str], per_category: dict, floor: float
                ) -> tuple[dict[str, float], bool]:
        """Welch z of the pooled prompt rewards when every category has enough samples this
        step, else the robust z of the metric means."""
        cfg = self.config
        pools = {n: self._cats[n].pool for n in names}
        if per_category and all(n in per_category and p.ready(cfg.warmup)
                                and p.recent.size >= cfg.min_pool for n, p in pools.items()):
            zs = {n: p.z(floor * 2.0) for n, p in pools.items()}
            return {n: z for n, z in zs.items() if math.isfinite(z)}, True
        return {n: self._cats[n].level.z(floor) for n in names
                if self._cats[n].level.ready(cfg.warmup)}, False

    def _falling(self, name: str, z: float, floor: float) -> tuple[bool, float | None]:
        cfg = self.config
        cat = self._cats[name]
        if z <= -self._z_drop:
            return True, None
        if not cat.trend.full:
            return False, None
        values = cat.trend.values
        trend = mann_kendall(values)
        lost = median(values[:5]) - median(values[-5:])
        scale = cat.level.scale(floor)
        return trend.z <= -cfg.z_trend and lost >= 3.0 * scale, trend.z

    def _judge(self, name: str, zs: dict[str, float], floor: float,
               by_samples: bool) -> Condition | None:
        cfg = self.config
        z = zs[name]
        falling, trend_z = self._falling(name, z, floor)
        others = {n: v for n, v in zs.items() if n != name}
        if not falling or not others:
            return None
        others_z = median(others.values())
        if others_z < cfg.others_min:
            return None  # everything falls: a general decline, not an imbalance (reward_shape)
        deep = z <= -2.0 * self._z_drop
        severity = "orange" if others_z >= cfg.others_rise or deep else "yellow"
        now, ref, onset = self._level(name, floor, by_samples)
        if now >= ref:
            return None  # a falling trend whose level is back at (or above) the reference
        evidence = {"category": name, "mean_now": now, "mean_reference": ref, "z": z,
                    "z_kind": "welch (samples)" if by_samples else "robust (metrics)",
                    "trend_z": trend_z, "z_threshold": -self._z_drop, "others_z": others,
                    "others_median_z": others_z, "window": cfg.window,
                    "signal": f"reward/category/{name}/mean", "onset_step": onset}
        return Condition(severity, f"category {name!r} reward fell to {now:.3g} from {ref:.3g} "
                         f"(z {z:+.1f}) while the other categories held or rose (median z "
                         f"{others_z:+.1f})", evidence, key=name,
                         message_zh=f"类别 {name} 的奖励从 {ref:.3g} 降到 {now:.3g}，"
                         f"其他类别持平或上升")

    def _level(self, name: str, floor: float, by_samples: bool) -> tuple[float, float, int]:
        """(recent mean, reference mean, onset step) from the samples or the metric."""
        cat = self._cats[name]
        if by_samples:
            now, ref = float(cat.pool.recent.mean()), float(cat.pool.reference.mean())
            half = (ref + now) / 2.0
            return now, ref, cat.pool.onset(lambda m: m <= half)
        level = cat.level
        ref, scale = level.median, level.scale(floor)
        return float(level.recent.mean()), ref, level.onset(lambda v: v - ref <= -scale)

    def _track(self, name: str, firing: bool) -> None:
        cat = self._cats[name]
        cat.firing = cat.firing + 1 if firing else 0
        cat.level.frozen = cat.pool.frozen = firing
        if cat.firing > self.config.rebase_after:
            cat.level.rebase()
            cat.pool.rebase()
            cat.firing = 0
