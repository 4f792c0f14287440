"""KL trend: the KL rising steadily, step after step — the policy drifting away (001 Q3).

Failure mode: a slow, monotonic rise of the KL is "language ability leaking away slowly but surely"
(001 Q3); each step looks fine against the tier thresholds until the drift is large.
Signal: the KL in its scale's units (``_kl.KLScale``: per sequence against ``kl/target`` or the
config's ``target``; per token against the run's comfort level when no target is known) over the
last ``window`` steps: the Mann–Kendall trend test (rising, p below ``p_max``) together with the
rise of the window's end over its start (medians of ``k`` values each, robust to single spikes),
measured in units of the scale: "the KL climbed by a whole target within 30 steps". The onset is
the step from which the KL stayed above start + 20% of the rise (where it left its band), not the
start of the window.
A run without a reference model (``kl/coef`` = 0 and no KL logged: TRL GRPO's default β = 0, verl
without a KL loss or KL reward) reports status "no reference", not "skipped".
Default thresholds: window 30 steps, p < 0.01; yellow when the KL rose by > 1.0 × the scale,
orange when it rose by > 2.0 × the scale within the window. Measured on healthy tiny-world runs
(3 runs × 120 steps, target 1.0): the largest significant 30-step rise is 0.46–0.74 nats. A rise
measured relative to the start level would flag every healthy start, where the KL grows from ~0
(001 Q1: "rises slowly from 0, then settles").
Practical significance: the rise is measured in units of the KL's target or comfort level (at least
0.05 nats per token), so "a whole target within 30 steps" holds at any scale: yellow above 1 target,
orange above 2; never red — a drift warns before ``kl_tiers`` judges the level. No z-score: a
Mann–Kendall rank test with the rise in target units, so a KL growing from ~0 (a healthy start) is
no relative explosion.
Scale assumptions: none in nats (ratios to the target or comfort level, see kl_tiers).
False positives: the settling phase of an adaptive controller after its target was raised; a KL
target set far below the KL the task needs. Widen ``window`` to catch slower drifts.
Fix: raise β, lower the actor learning rate, run fewer PPO epochs (001 Q3); if the KL is already
far above target, roll back to the checkpoint before the rise; check the reward model for a
strong but wrong gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import KLScale, has_kl, kl_missing
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, band_exit, mann_kendall, median, relative_growth


@dataclass(frozen=True)
class KLTrendConfig(Config):
    window: int = option(30, help="Steps of kl/mean tested for a monotonic rise.", range=(5, 10000))
    k: int = option(5, help="Values whose median is the window's start / end level.",
                    range=(1, 1000))
    p_max: float = option(0.01, help="Mann–Kendall p-value below which the rise is real.",
                          range=(1e-12, 0.5))
    rise_yellow: float = option(1.0, help="Yellow when the KL rose by more than this × target "
                                "within the window.", range=(0.0, 1e6))
    rise_orange: float = option(2.0, help="Orange above this rise (× target).", range=(0.0, 1e6))
    target: float = option(0.0, help="KL target (nats per sequence) when kl/target is not logged; "
                           "0 = none: the KL per token against the run's comfort level.",
                           range=(0.0, 1e6))
    onset_share: float = option(0.2, help="The onset is where the KL stayed above start + this share "
                                "of the rise.", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(2 * self.k <= self.window, "k", self.k,
              f"must be at most window/2={self.window // 2}")
        check(self.rise_orange >= self.rise_yellow, "rise_orange", self.rise_orange,
              f"must be >= rise_yellow={self.rise_yellow}")


@register
class KLTrend(Detector):
    name = "kl_trend"
    family = "kl"
    reads = ("kl/mean", "kl/token_mean", "kl/target", "response/length_mean")
    patterns = ("kl_monotonic_rise", "kl_explosion")
    signal = "KL"
    Config = KLTrendConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"kl/mean", "kl/token_mean"} & names)

    def __init__(self, config: KLTrendConfig | None = None) -> None:
        super().__init__(config)
        self._kl = Window(self.config.window)
        self._scale = KLScale(self.config.target)

    def update(self, view: StepView) -> Condition | object | None:
        if not has_kl(view):
            return kl_missing(view)
        reading = self._scale.read(view)
        if reading is None:
            return None
        self._kl.push(reading.value, view.step)
        cfg = self.config
        if not self._kl.full:
            return None
        values = self._kl.values
        target = reading.unit
        start, end = median(values[:cfg.k]), median(values[-cfg.k:])
        rise = (end - start) / target
        if rise <= cfg.rise_yellow:
            return None
        trend = mann_kendall(values)
        if trend.z <= 0 or trend.p >= cfg.p_max:
            return None
        severity = "orange" if rise > cfg.rise_orange else "yellow"
        evidence = {"rise_targets": rise, "kl_start": start, "kl_end": end, "target": target,
                    "growth": relative_growth(values, cfg.k, eps=1e-3 * target),
                    "p_value": trend.p, "tau": trend.tau, "window": cfg.window, "signal": "KL",
                    "kl_per": reading.per, "target_basis": reading.basis,
                    "onset_step": band_exit(values, self._kl.steps,
                                            start + cfg.onset_share * (end - start))}
        return Condition(severity, f"KL rising steadily: {start:.3g} → {end:.3g} per {reading.per} "
                         f"(+{rise:.2f}× target) over the last {cfg.window} steps "
                         f"(Mann–Kendall p={trend.p:.1e})", evidence,
                         message_zh=f"KL 持续单调上升：最近 {cfg.window} 步由 {start:.3g} 升至 "
                                    f"{end:.3g}（Mann–Kendall p={trend.p:.1e}）")
