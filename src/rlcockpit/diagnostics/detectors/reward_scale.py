"""Reward scale spike: the rewards suddenly come in a much larger scale (000 §4.3).

Failure mode: a reward multiplier or a reward-model change makes the rewards many times larger
(seed 000 §4.3: the reward scale raised by hand; a ×20 jump is the fault benchmark's case). The
advantages, the critic targets and the gradients scale with it: the critic diverges, the KL blows
up, the embedding gradients explode a few steps later.
Signal: the spread of the step's rewards (``reward/std``) and their magnitude
(max(|``reward/min``|, |``reward/max``|)) against the median of the last ``window`` steps before
the change; ``reward/raw/mean`` tells whether the reward model's own scores moved (evidence only).
Default thresholds: red when ``reward/std`` is ≥ ``factor`` (3; 5 before the calibration round of
the new benchmark, where a reward scaled ×3 moved the spread 4.5× and was missed)× its reference
median, or when the
reward magnitude is ≥ ``factor``× its reference and ``reward/std`` ≥ ``factor`` / 2× its
reference; after ``warmup`` (8) steps. The reference is the ``window`` steps that end ``lag`` (8)
steps before the current one: a scale growing over several steps (a ramp) is compared with its
level before the ramp began (with the steps just before as reference, a ×20 scale reached over 15
steps never stood 2× above the widest of its own previous steps and was missed). The reference is frozen while the condition holds (the new
scale does not become "normal"), and rebuilt after ``rebase_after`` (30) steps of a lasting change.
The reference spread is floored at ``floor_rel`` (0.1) × the reference reward magnitude, and
the new spread must exceed ``over_max`` (2)× the widest spread of the reference steps: a run
whose step rewards had no spread for a while (every GRPO group solved or failed alike: real run
017 had ``reward_std`` 0 for 20 logged steps, then 0.57 with rewards around 2–3; 004/005/016
alternate between 0 and 0.2–0.5) has not changed its scale when some spread comes back — that is
not a ×530,000 jump. The ×20 fault: 12.8 against a widest reference spread of ~0.8. Zero spread itself is the
``levels`` detector's (no learning signal).
Practical significance: a jump — ``reward/std`` ≥ 3× its reference median (or the reward magnitude
≥ 3× with the spread ≥ 1.5×) and > 2× the widest reference spread — is orange; red when the scale
is ≥ 10× its reference (every advantage and critic target ten times larger: bad in its own units)
or the change has held 3 steps (the reference is frozen while it holds, so a lasting scale change
stays judged against the level before it; the ×20 fault of the benchmark is red at once). Against a history of zero spread the reference
spread is floored at 0.1 × the reference reward magnitude (and 1e-6), and the new spread must exceed
2× the widest reference spread: spread returning after steps of 0 is no jump.
Scale assumptions: ratios to the run's own reference; the floor relative to its reward magnitude.
False positives: an intended change of ``reward/scale`` or of the reward function (the evidence
shows ``reward/scale`` before and now); the first steps of a run whose rewards all start at 0.
Fix: undo the scale change (``reward/scale`` back, ticket audited), or normalise the rewards
(``reward.normalize``) and re-tune the clipping before raising the scale again.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged


@dataclass(frozen=True)
class RewardScaleConfig(Config):
    factor: float = option(3.0, help="Red when reward/std is at least this many times its "
                           "reference median (000 §4.3 saw ×20).", range=(1.5, 1e6))
    window: int = option(20, help="Reference window (steps before the current one).",
                         range=(3, 10_000))
    warmup: int = option(8, help="Steps of reference needed before judging.", range=(3, 10_000))
    lag: int = option(5, help="The reference ends this many steps before the current one, so a "
                      "scale that grows over several steps (a ramp) is compared with its level "
                      "before the ramp, not with the ramp's own first steps.", range=(1, 10_000))
    rebase_after: int = option(30, help="Steps of a lasting change after which its level becomes "
                               "the new reference.", range=(1, 100_000))
    over_max: float = option(2.0, help="... and the spread must exceed this × the widest spread "
                             "of the reference steps (a spread the run already had is no jump).",
                             range=(1.0, 1e9))
    floor_rel: float = option(0.1, help="Smallest reference spread, as a fraction of the "
                              "reference reward magnitude (max |reward|).", range=(0.0, 1e6))
    floor: float = option(1e-6, help="Smallest reference spread used in ratios (reward units).",
                          range=(0.0, None))


@register
class RewardScale(Detector):
    name = "reward_scale"
    family = "reward_scale"
    reads = ("reward/std", "reward/mean", "reward/min", "reward/max", "reward/raw/mean",
             "reward/scale")
    patterns = ("reward_scale_spike",)
    signal = "reward scale"
    Config = RewardScaleConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/std" in names

    def __init__(self, config: RewardScaleConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._std = Lagged(cfg.window, cfg.lag)
        self._mag = Lagged(cfg.window, cfg.lag)
        self._scale = Lagged(cfg.window, cfg.lag)
        self._mean = Lagged(cfg.window, cfg.lag)
        self._firing = 0

    def update(self, view: StepView) -> Condition | object | None:
        std = view.finite("reward/std")
        if std is None:
            return SKIPPED if view.get("reward/std") is None else None
        low, high = view.finite("reward/min"), view.finite("reward/max")
        magnitude = max(abs(low), abs(high)) if low is not None and high is not None else None
        self._std.push(std, view.step)
        self._mag.push(magnitude, view.step)
        self._scale.push(view.finite("reward/scale"), view.step)
        self._mean.push(view.finite("reward/mean"), view.step)
        if not self._std.ready(self.config.warmup):
            return None
        cond = self._judge(view, std, magnitude)
        self._track(cond is not None)
        return cond

    def _ratio(self, lagged: Lagged, value: float | None, floor: float = 0.0) -> float:
        if value is None or len(lagged.reference) == 0:
            return 1.0
        return abs(value) / max(abs(lagged.median), self.config.floor, floor)

    def _judge(self, view: StepView, std: float, magnitude: float | None) -> Condition | None:
        cfg = self.config
        magnitude_before = abs(self._mag.median) if len(self._mag.reference) else 0.0
        if not magnitude_before:  # no min / max logged (TRL): the reward mean's magnitude
            magnitude_before = abs(self._mean.median) if len(self._mean.reference) else 0.0
        std_ratio = self._ratio(self._std, std, cfg.floor_rel * magnitude_before)
        mag_ratio = self._ratio(self._mag, magnitude)
        spiked = std_ratio >= cfg.factor or (mag_ratio >= cfg.factor
                                             and std_ratio >= cfg.factor / 2)
        widest = float(self._std.reference.values.max()) if len(self._std.reference) else 0.0
        if not spiked or std < cfg.over_max * widest:
            return None
        evidence = {
            "reward_std": std, "reference_std": self._std.median, "std_ratio": std_ratio,
            "reward_abs_max": magnitude, "reference_abs_max": self._mag.median,
            "abs_max_ratio": mag_ratio, "factor": cfg.factor, "window": cfg.window,
            "reward_raw_mean": view.finite("reward/raw/mean"),
            "reward_scale": view.finite("reward/scale"),
            "reward_scale_before": self._scale.median if len(self._scale.reference) else None,
            "signal": "reward scale", "onset_step": self._onset(view.step),
        }
        ratio = max(std_ratio, mag_ratio)
        # red for a scale 10x its reference (bad in its own units: every advantage and critic
        # target 10x) or a change that has held 3 steps; a 3-10x step is orange (issue 26)
        severe = ratio >= 10 or self._firing + 1 >= 3
        evidence["steps"] = self._firing + 1
        return Condition(
            "red" if severe else "orange", f"reward scale jumped ×{ratio:.1f} (reward/std {std:.3g} vs "
            f"{self._std.median:.3g} over steps {self._ref_span()})",
            evidence, message_zh=f"奖励尺度突增 {ratio:.1f} 倍（reward/std {std:.3g}，"
            f"此前中位数 {self._std.median:.3g}）")

    def _ref_span(self) -> str:
        steps = self._std.reference.steps
        return f"{int(steps[0])}-{int(steps[-1])}" if len(steps) else "-"

    def _onset(self, step: int) -> int:
        return step - self._firing

    def _track(self, firing: bool) -> None:
        self._firing = self._firing + 1 if firing else 0
        for lagged in (self._std, self._mag, self._scale, self._mean):
            lagged.frozen = firing
            if self._firing > self.config.rebase_after:
                lagged.rebase()
        if self._firing > self.config.rebase_after:
            self._firing = 0
