"""KL tiers: the batch-mean KL against its target, in the seed's four alert tiers (001 Q12).

Failure mode: the policy drifts far from the reference model (language collapse, reward hacking);
the further the KL runs above its target, the more damage each step does.
Signal: ``kl/mean`` (per-sequence KL to the reference, batch mean) divided by the target:
``kl/target`` when the adaptive controller logs it, else ``target`` from the config.
Default thresholds (001 Q12): yellow when KL > 1.5× target for 3 consecutive steps; red when
KL > 2.5× target for 2 consecutive steps (one noisy batch must not pause a run: a healthy tiny
GRPO run peaks at 2.3× its target); black when KL > 10 nats per sequence (an absolute bound:
the seed's 0.2–0.5 is 10× its 0.02–0.05 target; the tiny world's target is 1.0 nat per sequence
and healthy PPO runs stay below 1.3).
False positives: a target set far below what the task needs (every step is "above target"); the
first steps after an intended jump in the reward scale. Set ``target`` to the comfortable level
of your first healthy steps.
Fix: raise the KL coefficient β (or enable the adaptive controller), lower the actor learning
rate, run fewer PPO epochs; on red/black roll back to the last checkpoint before the rise.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak


@dataclass(frozen=True)
class KLTiersConfig(Config):
    target: float = option(1.0, help="KL target (nats per sequence) when kl/target is not logged.",
                           range=(1e-9, 1e6))
    yellow_ratio: float = option(1.5, help="Yellow when KL > this × target ...", range=(1.0, 1e3))
    yellow_steps: int = option(3, help="... for this many consecutive steps.", range=(1, 1000))
    red_ratio: float = option(2.5, help="Red when KL > this × target ...", range=(1.0, 1e3))
    red_steps: int = option(2, help="... for this many consecutive steps.", range=(1, 1000))
    black_abs: float = option(10.0, help="Black when KL > this absolute bound (nats per sequence).",
                              range=(1e-9, 1e9))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.red_ratio >= self.yellow_ratio, "red_ratio", self.red_ratio,
              f"must be >= yellow_ratio={self.yellow_ratio}")


@register
class KLTiers(Detector):
    name = "kl_tiers"
    family = "kl"
    reads = ("kl/mean", "kl/target")
    patterns = ("kl_explosion",)
    signal = "KL"
    Config = KLTiersConfig

    def __init__(self, config: KLTiersConfig | None = None) -> None:
        super().__init__(config)
        self._above = Streak()
        self._red = Streak()

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("kl/mean") is None:
            return SKIPPED
        kl = view.finite("kl/mean")
        if kl is None:
            return None  # NaN/inf is the nonfinite detector's finding
        cfg = self.config
        target = view.finite("kl/target") or cfg.target
        ratio = kl / target
        held = self._above.update(ratio > cfg.yellow_ratio, view.step)
        red_held = self._red.update(ratio > cfg.red_ratio, view.step)
        evidence = {"kl": kl, "target": target, "ratio": ratio, "steps_above": held,
                    "onset_step": self._above.onset if held else view.step, "signal": "KL"}
        if kl > cfg.black_abs:
            return Condition("black", f"KL {kl:.3g} above the absolute bound {cfg.black_abs:g}",
                             {**evidence, "threshold": cfg.black_abs},
                             message_zh=f"KL {kl:.3g} 超过绝对上界 {cfg.black_abs:g}")
        if red_held >= cfg.red_steps:
            return Condition("red", f"KL {kl:.3g} is {ratio:.2f}× its target {target:g}",
                             {**evidence, "threshold": cfg.red_ratio * target},
                             message_zh=f"KL {kl:.3g} 为目标值 {target:g} 的 {ratio:.2f} 倍")
        if held >= cfg.yellow_steps:
            return Condition("yellow", f"KL {kl:.3g} above {cfg.yellow_ratio}× target {target:g} "
                             f"for {held} steps", {**evidence,
                                                   "threshold": cfg.yellow_ratio * target},
                             message_zh=f"KL 连续 {held} 步超过目标值的 {cfg.yellow_ratio} 倍")
        return None
