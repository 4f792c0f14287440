"""KL tiers: the batch-mean KL against its target, in the seed's four alert tiers (001 Q12).

Failure mode: the policy drifts far from the reference model (language collapse, reward hacking);
the further the KL runs above its target, the more damage each step does.
Signal: the KL as a multiple of its scale (``_kl.KLScale``): ``kl/mean`` per sequence against
``kl/target`` (logged by rlcockpit's trainer every step) or the config's ``target``; with no target
(most imported runs) the KL per token (``kl/token_mean``, or ``kl/mean`` / ``response/length_mean``)
against the run's comfort level — the median of its last 20 values before the 5 most recent, at
least 0.05 nats per token (the upper end of the seeds' 0.01–0.05 comfort zone): a jump is judged
against the level before it, a slow healthy rise moves the level with it (``kl_trend`` judges
slow drifts).
Default thresholds (001 Q12, all relative): yellow when KL > 1.5× the scale for 3 consecutive
steps; red when KL > 2.5× for 3 consecutive steps (noisy batches must not pause a run: healthy
tiny GRPO runs, fixed or adaptive KL, spike to 3–9× their target for one step and to 3.9× and 4.3×
for two steps in a row — seed 102, adaptive KL, 200 steps); black when KL > 10× for 2 consecutive steps (the seed's
absolute bound 0.2–0.5 is 10× its 0.02–0.05 target; two steps, so one spike of a sampled
estimator never stops a run).
Scale assumptions: none in nats — only ratios. Real-run corpus (docs/detection.md): TRL per-token
KL medians 0.0003–0.054 on runs that look healthy (009 max 0.15 = 1.0× the floor); 008 climbs to
2.5 per token (red/black: a real runaway, reward flat); the 011 collapse reaches 17 per token.
False positives: a target set far below what the task needs (every step is "above target"); a
fast but intended change of the KL level with no target logged. Set ``target`` (or log
``kl/target``) to the comfortable level.
Fix: raise the KL coefficient β (or enable the adaptive controller), lower the actor learning
rate, run fewer PPO epochs; on red/black roll back to the last checkpoint before the rise.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import COMFORT_STEPS, TOKEN_FLOOR, KLScale, has_kl
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak


@dataclass(frozen=True)
class KLTiersConfig(Config):
    target: float = option(0.0, help="KL target (nats per sequence) when kl/target is not logged; "
                           "0 = none: judge the KL per token against the run's comfort level.",
                           range=(0.0, 1e6))
    yellow_ratio: float = option(1.5, help="Yellow when KL > this × target ...", range=(1.0, 1e3))
    yellow_steps: int = option(3, help="... for this many consecutive steps.", range=(1, 1000))
    red_ratio: float = option(2.5, help="Red when KL > this × target ...", range=(1.0, 1e3))
    red_steps: int = option(3, help="... for this many consecutive steps.", range=(1, 1000))
    black_ratio: float = option(10.0, help="Black when KL > this × target ...", range=(1.0, 1e6))
    black_steps: int = option(2, help="... for this many consecutive steps.", range=(1, 1000))
    comfort_steps: int = option(COMFORT_STEPS, help="No target: the median of this many recent "
                                "KL values (before the 5 newest) is the run's comfort level.",
                                range=(1, 100000))
    token_floor: float = option(TOKEN_FLOOR, help="No target: the comfort level is at least this "
                                "(nats per token).", range=(1e-9, 1e6))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.red_ratio >= self.yellow_ratio, "red_ratio", self.red_ratio,
              f"must be >= yellow_ratio={self.yellow_ratio}")
        check(self.black_ratio >= self.red_ratio, "black_ratio", self.black_ratio,
              f"must be >= red_ratio={self.red_ratio}")


@register
class KLTiers(Detector):
    name = "kl_tiers"
    family = "kl"
    reads = ("kl/mean", "kl/token_mean", "kl/target", "response/length_mean")
    patterns = ("kl_explosion",)
    signal = "KL"
    Config = KLTiersConfig

    def __init__(self, config: KLTiersConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._scale = KLScale(cfg.target, cfg.comfort_steps, cfg.token_floor)
        self._above = Streak()
        self._red = Streak()
        self._black = Streak()

    def update(self, view: StepView) -> Condition | object | None:
        if not has_kl(view):
            return SKIPPED
        reading = self._scale.read(view)
        if reading is None:
            return None  # NaN/inf is the nonfinite detector's finding
        cfg = self.config
        kl, target, ratio = reading.value, reading.unit, reading.ratio
        held = self._above.update(ratio > cfg.yellow_ratio, view.step)
        red_held = self._red.update(ratio > cfg.red_ratio, view.step)
        black_held = self._black.update(ratio > cfg.black_ratio, view.step)
        unit = "per token" if reading.per == "token" else "per sequence"
        evidence = {**reading.evidence(), "ratio": ratio, "steps_above": held,
                    "onset_step": self._above.onset if held else view.step, "signal": "KL"}
        if black_held >= cfg.black_steps:
            return Condition("black", f"KL {kl:.3g} {unit} is {ratio:.1f}× its {reading.basis} "
                             f"{target:.3g} (black above {cfg.black_ratio:g}×)",
                             {**evidence, "threshold": cfg.black_ratio * target},
                             message_zh=f"KL {kl:.3g} 为目标值 {target:.3g} 的 {ratio:.1f} 倍"
                                        f"（超过 {cfg.black_ratio:g} 倍为黑色）")
        if red_held >= cfg.red_steps:
            return Condition("red", f"KL {kl:.3g} {unit} is {ratio:.2f}× its {reading.basis} "
                             f"{target:.3g}", {**evidence, "threshold": cfg.red_ratio * target},
                             message_zh=f"KL {kl:.3g} 为目标值 {target:.3g} 的 {ratio:.2f} 倍")
        if held >= cfg.yellow_steps:
            return Condition("yellow", f"KL {kl:.3g} {unit} above {cfg.yellow_ratio}× its "
                             f"{reading.basis} {target:.3g} for {held} steps",
                             {**evidence, "threshold": cfg.yellow_ratio * target},
                             message_zh=f"KL 连续 {held} 步超过目标值的 {cfg.yellow_ratio} 倍")
        return None
