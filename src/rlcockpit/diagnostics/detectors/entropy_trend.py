"""Entropy rising steadily: a cause that builds up before its consequence (001 Q7, 000 §3.1).

Failure mode: a config fault present from step 1 whose damage grows — an entropy bonus too large
(``ppo.entropy_coef``), a sampling temperature above 1, a learning rate that lets the policy flatten
— pushes the policy's entropy up a little every step. Nothing jumps: the KL to the reference
grows only as the distribution spreads, and by the time the KL tiers fire it is already many
times its target (a bonus too large: KL red at step 28, black at 32). The entropy rise that leads
there is visible many steps earlier; this detector names the cause before its consequence.
Signal: ``policy/entropy`` (mean per-token entropy) — a Mann–Kendall trend test over the last
``window`` (15) steps, and the level (median of the last ``k`` = 5 steps) against the run's early
baseline (median of its first ``baseline_steps`` = 10 steps).
Default thresholds: yellow when the trend is increasing with p < ``trend_p`` (1e-3) and the level
is ≥ ``rise`` (1.5)× the baseline, key "rising"; orange when the KL over the same window
(``kl/mean`` or ``kl/token_mean``) has started to follow — rising with p < ``kl_p`` (0.01) and
grown ≥ ``kl_growth`` (2)× — the cause named with its consequence starting, long before the KL
tiers fire. An entropy that rises alone is yellow: the healthy-labelled real run 002 (GRPO,
β = 0, no KL) climbs 0.14 → 0.48 nats per token over 80 steps as its policy recovers exploration.
Practical significance: a monotone rise (a rank test, p < 1e-3 on 15 steps: 15 values rising in
all but a few pairs) that has already moved the entropy half again above where the run started —
in the quantity's own terms, a policy spreading its probability mass steadily, at any scale. A
healthy run's entropy wanders and falls as the policy sharpens; the explosion (≥ 3× the
baseline) is ``entropy``'s, a level near uniform from the start ``levels``'.
Scale assumptions: none in nats — a rank test and a ratio to the run's own early entropy.
False positives: a deliberate temperature or entropy-bonus schedule that rises; a run that starts
from an over-sharpened SFT checkpoint and recovers some entropy on purpose.
Fix: lower ``ppo.entropy_coef`` (often 0 for LLM RL) or the sampling temperature, lower the actor
learning rate; if the KL has started to follow, roll back to the step before the rise.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, mann_kendall, median

_KL_NAMES = ("kl/mean", "kl/token_mean")


@dataclass(frozen=True)
class EntropyTrendConfig(Config):
    window: int = option(15, help="Steps of entropy tested for a trend.", range=(5, 10_000))
    k: int = option(5, help="Steps whose median is the current level.", range=(1, 100))
    baseline_steps: int = option(10, help="First steps whose median is the baseline.",
                                 range=(1, 10_000))
    trend_p: float = option(1e-3, help="Mann–Kendall p-value below which the entropy rises "
                            "steadily.", range=(0.0, 1.0))
    rise: float = option(1.5, help="... and the level is at least this × the baseline.",
                         range=(1.0, 1e6))
    kl_p: float = option(0.01, help="Orange when the KL over the same window also rises with a "
                         "Mann–Kendall p below this ...", range=(0.0, 1.0))
    kl_growth: float = option(2.0, help="... and grew at least this × (median of its last k "
                              "steps over its first k).", range=(1.0, 1e6))


@register
class EntropyTrend(Detector):
    name = "entropy_trend"
    family = "entropy"
    reads = ("policy/entropy", *_KL_NAMES)
    patterns = ("entropy_blowup",)
    signal = "entropy"
    Config = EntropyTrendConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "policy/entropy" in names

    def __init__(self, config: EntropyTrendConfig | None = None) -> None:
        super().__init__(config)
        self._entropy = Window(self.config.window)
        self._kl = Window(self.config.window)
        self._early: list[float] = []

    def update(self, view: StepView) -> list[Condition] | object:
        entropy = view.finite("policy/entropy")
        if entropy is None:
            return SKIPPED
        cfg = self.config
        if len(self._early) < cfg.baseline_steps:
            self._early.append(entropy)
        self._entropy.push(entropy, view.step)
        kl = next((view.finite(n) for n in _KL_NAMES if view.finite(n) is not None), None)
        self._kl.push(kl, view.step)
        if len(self._early) < cfg.baseline_steps or len(self._entropy) < cfg.window:
            return []
        baseline = median(self._early)
        level = median(self._entropy.values[-cfg.k:])
        trend = mann_kendall(self._entropy.values)
        if baseline <= 0 or not (trend.z > 0 and trend.p < cfg.trend_p
                                 and level >= cfg.rise * baseline):
            return []
        kl = self._kl.values
        kl_trend = mann_kendall(kl) if len(kl) >= 2 * cfg.k else None
        kl_start = median(kl[:cfg.k]) if kl_trend else 0.0
        kl_growth = median(kl[-cfg.k:]) / kl_start if kl_trend and kl_start > 0 else 0.0
        kl_follows = kl_trend is not None and kl_trend.z > 0 and kl_trend.p < cfg.kl_p \
            and kl_growth >= cfg.kl_growth
        evidence = {"entropy_now": level, "entropy_baseline": baseline, "ratio": level / baseline,
                    "trend_p": trend.p, "kendall_tau": trend.tau, "window": cfg.window,
                    "threshold_ratio": cfg.rise, "threshold_p": cfg.trend_p,
                    "kl_trend_p": kl_trend.p if kl_trend else None, "kl_growth": kl_growth,
                    "kl_rising": kl_follows,
                    "signal": "entropy", "onset_step": int(self._entropy.steps[0])}
        then = ("the KL is already rising with it" if kl_follows
                else "the KL to the reference will follow")
        then_zh = "KL 已随之上升" if kl_follows else "KL 将随之上升"
        return [Condition(
            "orange" if kl_follows else "yellow", f"policy entropy rising steadily: {baseline:.3g} → {level:.3g} nats per "
            f"token ({level / baseline:.1f}× its start) over the last {cfg.window} steps "
            f"(Mann–Kendall p={trend.p:.1e}); {then} — an entropy bonus or temperature too high?",
            evidence, key="rising",
            message_zh=f"策略熵持续上升：{baseline:.3g} → {level:.3g} nats/token"
                       f"（为初始的 {level / baseline:.1f} 倍）；{then_zh}——熵奖励或温度过高？")]
