"""NaN / inf anywhere in the metrics or losses (001 Q9).

Failure mode: a NaN or inf in a loss, a gradient norm, the reward or the KL poisons every later
update; by the time the curves go blank the weights are ruined.
Signal: any logged metric that is NaN or ±inf this step (and the trainer's counters of non-finite
rewards and skipped optimizer steps going up).
Default thresholds: any non-finite loss / gradient / KL → red; a non-finite reward counted and
dropped by the trainer (``reward/nonfinite_total`` rising) → orange; anything else → orange.
Practical significance: red on any NaN or inf in a loss, gradient norm, KL, entropy or ratio — a
non-finite value is wrong in its own units at any scale and poisons every later update; any other
non-finite metric, or a trainer counter of dropped rewards or skipped optimizer steps going up, is
orange. No history and no z-score: each step is judged alone.
Scale assumptions: none — NaN and inf are wrong at any scale.
False positives: metrics that are legitimately undefined (explained variance of a constant batch;
TRL's PPO ``val/ratio_var``, the variance over its minibatches, with one minibatch) are logged as
NaN by some tools; they are listed in ``ignore``.
Fix: find the first non-finite metric (the evidence names it), lower the learning rate, check the
reward function for division by zero, enable gradient clipping, and resume from the last checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register

_CRITICAL = ("policy/loss", "value/loss", "grad/norm/", "kl/", "policy/entropy", "policy/ratio")


@dataclass(frozen=True)
class NonFiniteConfig(Config):
    ignore: tuple[str, ...] = option(("value/explained_var", "import/trl-ppo/val/ratio_var"),
                                     help="Metric names allowed to be NaN (undefined, not broken).")


@register
class NonFinite(Detector):
    name = "nonfinite"
    family = "nonfinite"
    reads = ("policy/loss", "value/loss", "grad/norm/", "kl/", "reward/",
             "reward/nonfinite_total", "update/skipped_total")
    patterns = ("nonfinite_values",)
    signal = "NaN/inf"
    Config = NonFiniteConfig

    def __init__(self, config: NonFiniteConfig | None = None) -> None:
        super().__init__(config)
        self._counters: dict[str, float] = {}

    def update(self, view: StepView) -> Condition | None:
        bad = sorted(k for k, v in view.metrics.items()
                     if not math.isfinite(v) and k not in self.config.ignore)
        grown = self._grown_counters(view)
        if not bad and not grown:
            return None
        critical = [k for k in bad if k.startswith(_CRITICAL)]
        severity = "red" if critical else "orange"
        names = critical or bad or grown
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        return Condition(
            severity, f"non-finite values at step {view.step}: {shown}",
            evidence={"metrics": bad[:20], "counters_grown": grown, "signal": "NaN/inf"},
            message_zh=f"第 {view.step} 步出现 NaN/inf：{shown}")

    def _grown_counters(self, view: StepView) -> list[str]:
        grown = []
        for name in ("reward/nonfinite_total", "update/skipped_total"):
            value = view.finite(name)
            if value is None:
                continue
            if value > self._counters.get(name, 0.0):
                grown.append(name)
            self._counters[name] = value
        return grown
