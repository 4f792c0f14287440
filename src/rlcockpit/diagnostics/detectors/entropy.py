"""Policy entropy collapse or blow-up (001 Q4, Q7).

Failure mode: *collapse* — the policy piles its probability on a few tokens or templates (mode
collapse, "drops by more than 50% within a few hundred steps", 001 Q4), the repetitive output
follows; *blow-up* — the entropy explodes and the text turns into gibberish.
Signal: ``policy/entropy`` (mean per-token entropy). Collapse: the drop of the recent level
(median of the last ``k`` steps) below the higher of the window's first half (median: one upward
excursion of a few steps is not a level to fall from — a healthy GRPO run of seed 102 went
0.19 → 0.46 → 0.16 within 20 steps, a "62% drop" from the median of the 5 highest) and the run's
early baseline (median of the first ``baseline_steps`` steps). Blow-up: the recent level above
``blowup_ratio`` × the early baseline, or above ``blowup_uniform`` × the entropy of a uniform
distribution over the vocabulary (``policy/entropy_uniform`` = log V, when logged).
Default thresholds: window 30 steps, k 5, baseline 10 steps; collapse > 60% drop → orange,
> 80% → red (key "collapse") — the seed's "> 50%" (001 Q4) is met by the healthy-labelled real run
004 (Qwen2.5-7B GRPO: 0.095 → 0.047 nats per token, a 50.3% drop at a level where the batch
entropy swings 2× from step to step), while the real collapses fall by 99% (011: 0.21 → 2e-4)
and 95% (017: 0.96 → 0.05), the entropy_collapse fault by 85%; blow-up > 3× baseline or > 0.5 × log V → orange (key "blowup").
Practical significance: collapse is red beyond an 80% drop of the 5-step median from its starting
level (the real collapses fall 95–99%, healthy runs at most ~50%): a drop relative to the run's own
entropy, not an entropy ~0 in nats (that is ``levels``' ``entropy_zero``) and not held beyond the
5-step median; 60–80% is orange. Blow-up (≥ 3× the early level or ≥ 0.5 × log V) is orange. No
z-score; a start level ≤ 0 is not judged for collapse, but an early baseline of exactly 0 makes the
blow-up ratio infinite (orange) — no guard.
Scale assumptions: relative to the run's own early entropy, or normalised by log V — never in
absolute nats (healthy per-token entropy: 0.2 on the tiny model, 0.03–0.5 on 3–9 B models; the
real run 001's blow-up reached 6.4 nats = 0.53 × log 151,936, 21× its early level). An entropy
near zero or near uniform from the first step is the ``levels`` detector's.
False positives: the early, intended drop of a freshly fine-tuned model ("3.0 → 2.6", 001 Q4) stays
well under 50%; a deliberately lowered sampling temperature lowers the entropy too.
Fix: collapse — raise the entropy bonus or β, lower the actor learning rate, look for a reward
shortcut (001 Q7: read the samples); blow-up — lower the learning rate, check the reward for a
"gibberish scores high" hole, roll back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, median, trailing_onset


@dataclass(frozen=True)
class EntropyConfig(Config):
    window: int = option(30, help="Steps of policy/entropy kept.", range=(4, 10000))
    k: int = option(5, help="Values whose median is a level (start, recent).", range=(1, 1000))
    baseline_steps: int = option(10, help="Early steps whose median is the run's baseline.",
                                 range=(1, 10000))
    drop_orange: float = option(0.6, help="Orange when the entropy fell by more than this "
                                "fraction (001 Q4: > 50%; 0.6, see the docstring).", range=(0.0, 1.0))
    drop_red: float = option(0.8, help="Red above this drop.", range=(0.0, 1.0))
    blowup_ratio: float = option(3.0, help="Orange when the entropy exceeds this × baseline.",
                                 range=(1.0, 1e6))
    blowup_uniform: float = option(0.5, help="Orange when the entropy exceeds this × log(vocabulary "
                                   "size) (policy/entropy_uniform; 0 = off).", range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(2 * self.k <= self.window, "k", self.k,
              f"must be at most window/2={self.window // 2}")
        check(self.drop_red >= self.drop_orange, "drop_red", self.drop_red,
              f"must be >= drop_orange={self.drop_orange}")


@register
class Entropy(Detector):
    name = "entropy"
    family = "entropy"
    reads = ("policy/entropy", "policy/entropy_uniform")
    patterns = ("entropy_collapse", "entropy_blowup")
    signal = "entropy"
    Config = EntropyConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "policy/entropy" in names

    def __init__(self, config: EntropyConfig | None = None) -> None:
        super().__init__(config)
        self._window = Window(self.config.window)
        self._early: list[float] = []

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("policy/entropy") is None:
            return SKIPPED
        value = view.finite("policy/entropy")
        cfg = self.config
        if not self._window.push(value, view.step):
            return []
        if len(self._early) < cfg.baseline_steps:
            self._early.append(float(value))
        if len(self._window) < 2 * cfg.k or len(self._early) < cfg.baseline_steps:
            return []
        values = self._window.values
        baseline = median(self._early)
        recent = median(values[-cfg.k:])
        uniform = view.finite("policy/entropy_uniform")
        found = [self._collapse(values, baseline, recent), self._blowup(baseline, recent, uniform)]
        return [c for c in found if c is not None]

    def _collapse(self, values: np.ndarray, baseline: float, recent: float) -> Condition | None:
        cfg = self.config
        start = max(median(values[:max(cfg.k, len(values) // 2)]), baseline)
        if start <= 0:
            return None
        drop = (start - recent) / start
        if drop <= cfg.drop_orange:
            return None
        severity = "red" if drop > cfg.drop_red else "orange"
        # onset: where the entropy last fell below the orange line (healthy noise stays above it)
        falling = values < start * (1 - cfg.drop_orange)
        onset = trailing_onset(self._window.steps, falling) or int(self._window.steps[-1])
        evidence = {"drop": drop, "from": start, "to": recent, "baseline": baseline,
                    "window": cfg.window, "threshold": cfg.drop_orange, "signal": "entropy",
                    "onset_step": onset}
        return Condition(severity, f"policy entropy collapsed by {drop:.0%} ({start:.3g} → "
                         f"{recent:.3g})", evidence, key="collapse",
                         message_zh=f"策略熵骤降 {drop:.0%}（{start:.3g} → {recent:.3g}），"
                                    "疑似模式坍塌")

    def _blowup(self, baseline: float, recent: float, uniform: float | None) -> Condition | None:
        cfg = self.config
        ratio = recent / baseline if baseline > 0 else math.inf
        near_uniform = bool(uniform and cfg.blowup_uniform and recent > cfg.blowup_uniform * uniform)
        if ratio <= cfg.blowup_ratio and not near_uniform:
            return None
        evidence = {"entropy": recent, "baseline": baseline, "ratio": ratio,
                    "threshold_ratio": cfg.blowup_ratio, "entropy_uniform": uniform,
                    "threshold_uniform": cfg.blowup_uniform,
                    "signal": "entropy", "onset_step": self._rise_onset(baseline)}
        return Condition("orange", f"policy entropy blew up to {recent:.3g} ({ratio:.1f}× its "
                         f"early level {baseline:.3g})", evidence, key="blowup",
                         message_zh=f"策略熵暴涨至 {recent:.3g}（为早期水平的 {ratio:.1f} 倍），"
                                    "输出可能变成乱码")

    def _rise_onset(self, baseline: float) -> int:
        """Where the entropy last rose above 1.5× its baseline (the start of the blow-up)."""
        rising = self._window.values > 1.5 * baseline
        return trailing_onset(self._window.steps, rising) or int(self._window.steps[-1])
