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
A run without a reference model (``kl/coef`` = 0 and no KL logged: TRL GRPO's default β = 0, verl
without a KL loss or KL reward) reports status "no reference", not "skipped".
Default thresholds (001 Q12, all relative): yellow when KL > 1.5× the scale for 3 consecutive
steps; red when KL > 2.5× for 3 consecutive steps (noisy batches must not pause a run: healthy
tiny GRPO runs, fixed or adaptive KL, spike to 3–9× their target for one step and to 3.9× and 4.3×
for two steps in a row — seed 102, adaptive KL, 200 steps); black when KL > 10× for 2 consecutive steps (the seed's
absolute bound 0.2–0.5 is 10× its 0.02–0.05 target; two steps, so one spike of a sampled
estimator never stops a run).
Start (key "start"): at step 1 the policy has not been updated, so in the usual setup (the
reference is the policy's starting checkpoint) its KL to the reference is 0 up to rounding. A
largest token KL ``kl/token_max`` ≥ ``start_token_max`` = 0.1 nats at step 1 (or, where no token
maximum is logged, |``kl/token_mean``| ≥ ``start_token_mean`` = 0.01 nats) → yellow: the reference
is not the checkpoint the policy starts from — right for on-policy distillation from a teacher,
otherwise the wrong reference (a different or corrupted checkpoint, another tokenizer). Judged only
when the first step seen is step 1 (a log that starts later, or averages its first steps, has no
clean start; one numbered from 0 is not judged). Calibration: the tiny world's step 1 has a token maximum of ≤ 5e-11 (PPO and GRPO);
the reference perturbed by 0.1 σ per tensor gives 0.48–1.23, by 0.3 σ 3.6–9.8 (seeds 100, 101, 400);
the real runs' step-1 token means are |KL| ≤ 0.001 (006, 007, 013–016, 021) except the
distillation-style runs 011, 012 and 023, whose reference differs by design.
Practical significance: every tier is a ratio to the KL's target, or to the run's comfort level of
at least 0.05 nats per token, so it means the same at any model size. Black is a KL far beyond its
target (> 10× for 2 steps); red is > 2.5× held 3 steps in a row (persistence: the healthy runs'
single spikes of 3–9× and two-step runs of ~4× stay below it); yellow > 1.5× for 3 steps, and the
step-1 "start" check. No z-score: the comfort level is a median floored at 0.05 nats per token (or
its MAD noise when larger), so a KL that starts near 0 is no "10× its target".
Scale assumptions: none in nats — only ratios (the start check: nats per token of one token,
a unit that does not grow with the response). Real-run corpus (docs/detection.md): TRL per-token
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
from rlcockpit.diagnostics.base import Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import (
    COMFORT_STEPS,
    TOKEN_FLOOR,
    KLScale,
    has_kl,
    kl_missing,
)
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
    start_token_max: float = option(0.1, help="Step 1: yellow when the largest token KL is at "
                                    "least this (the reference is not the starting checkpoint); "
                                    "0 = off.", range=(0.0, 1e6))
    start_token_mean: float = option(0.01, help="... or, with no token maximum logged, when the "
                                     "token-mean KL is at least this in absolute value.",
                                     range=(0.0, 1e6))

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
    reads = ("kl/mean", "kl/token_mean", "kl/target", "response/length_mean", "kl/token_max")
    patterns = ("kl_explosion",)
    signal = "KL"
    Config = KLTiersConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"kl/mean", "kl/token_mean"} & names)

    def __init__(self, config: KLTiersConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._scale = KLScale(cfg.target, cfg.comfort_steps, cfg.token_floor)
        self._above = Streak()
        self._red = Streak()
        self._black = Streak()

        self._seen = False

    def update(self, view: StepView) -> list[Condition] | object:
        if not has_kl(view):
            return kl_missing(view)
        start = None if self._seen else self._start(view)
        self._seen = True
        tier = self._tier(view)
        return [c for c in (start, tier) if c is not None]

    def _start(self, view: StepView) -> Condition | None:
        """Step 1, before any update: a KL to the reference well above 0 (key "start")."""
        cfg = self.config
        if view.step != 1 or not cfg.start_token_max:
            return None
        top, mean = view.finite("kl/token_max"), view.finite("kl/token_mean")
        if top is not None:
            off, what, value, limit = top >= cfg.start_token_max, "largest token KL", top, cfg.start_token_max
        elif mean is not None:
            off, what, value, limit = abs(mean) >= cfg.start_token_mean, "token-mean KL", mean, cfg.start_token_mean
        else:
            return None
        if not off:
            return None
        return Condition("yellow", f"the {what} is {value:.3g} nats at step {view.step}, before any update "
                         f"(≥ {limit:g}): the reference model is not the checkpoint the policy starts from "
                         "(right for distillation from a teacher; otherwise a wrong or corrupted reference)",
                         {"kl_token_max": top, "kl_token_mean": mean, "threshold": limit, "signal": "KL",
                          "onset_step": view.step}, key="start",
                         message_zh=f"第 {view.step} 步（尚未更新）{'最大 token' if top is not None else 'token 平均'} "
                                    f"KL 为 {value:.3g} nats：参考模型不是策略的初始检查点"
                                    "（教师蒸馏时属正常，否则参考模型有误或已损坏）")

    def _tier(self, view: StepView) -> Condition | None:
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
