"""Sampling temperature collapsed: rollouts drawn far colder than the policy (001 Q4).

Failure mode: the rollout temperature is set (or changed live) far below 1 — a value copied from an
evaluation config, a "deterministic" setting for debugging, a typo. Tokens are then sampled from
p^(1/T), a distribution much sharper than the policy: the answers it would give at T = 1 are never
drawn, the group's samples agree, the entropy of what is sampled falls towards 0 and the update
learns from a narrow slice of its own behaviour (exploration collapse, 001 Q4's first cause). The
run can look better for a while — greedy-ish answers score higher — which is why no reward or
entropy detector can call it a failure: the entropy is low *from the first step* and has nothing
to fall from, and nothing compares the run with a warmer one unless a baseline run is given.

Signal: ``rollout/temperature`` as the trainer logs it each step (our trainer, and any run that
logs its sampling temperature); ``policy/entropy`` is quoted as the consequence. Runs that do not
log a temperature (most imports) skip this detector.

Default thresholds: yellow when the temperature is below ``low`` = 0.6, orange at or below
``cold`` = 0.4, from the first step it holds (a configured value is exact, not noisy: no
confirmation window). Healthy RL rollouts sample at 0.6–1.0: 1.0 in the default configs of TRL,
verl and OpenRLHF, 0.7 in seed 003 §5.3, down to 0.6 in the last phase of seed 004's sampling
schedule (``rollout.schedule=seed004``), which stays quiet here. The detection benchmark's
``entropy_collapse`` fault sets 0.3 (strong) and 0.6 (mild).

Practical significance: a level in its own units, the scale factor of the logits — at T ≤ 0.4 the
sampled distribution is the policy's raised to the power 2.5 or more, whatever the model size, so
a token the policy gives 10 % is sampled ~100× less often than its top token at p = 0.6. Orange
(the run learns from samples it would not produce), never red: the run still trains and the
setting may be deliberate.
Scale assumptions: none — a temperature is dimensionless and means the same for every model.

False positives: a deliberately cold recipe (some distillation-like or "self-consistency" setups
sample at 0.2–0.5 on purpose); an evaluation-only run logged as training.
Fix: set ``rollout.temperature`` back to 0.7–1.0 (a ticket can change it live); to reduce
randomness, lower ``top_p`` a little instead of the temperature; check that an evaluation config
did not leak into training.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register


@dataclass(frozen=True)
class SamplingConfig(Config):
    low: float = option(0.6, help="Yellow below this sampling temperature.", range=(0.0, 10.0))
    cold: float = option(0.4, help="Orange at or below this sampling temperature.",
                         range=(0.0, 10.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.cold <= self.low, "cold", self.cold, f"must be <= low={self.low}")


@register
class Sampling(Detector):
    name = "sampling"
    family = "entropy"
    reads = ("rollout/temperature", "policy/entropy")
    patterns = ("entropy_collapse",)
    signal = "sampling temperature"
    Config = SamplingConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "rollout/temperature" in names  # the entropy is context

    def __init__(self, config: SamplingConfig | None = None) -> None:
        super().__init__(config)
        self._onset: int | None = None

    def update(self, view: StepView) -> Condition | object | None:
        cfg = self.config
        temperature = view.finite("rollout/temperature")
        if temperature is None:
            return SKIPPED
        if temperature >= cfg.low or temperature <= 0:
            self._onset = None
            return None
        self._onset = view.step if self._onset is None else self._onset
        entropy = view.finite("policy/entropy")
        severity = "orange" if temperature <= cfg.cold else "yellow"
        sharper = 1.0 / temperature
        ent = f"; sampled entropy {entropy:.2g} nats per token" if entropy is not None else ""
        ent_zh = f"；采样熵 {entropy:.2g} nats/token" if entropy is not None else ""
        evidence = {"temperature": temperature, "entropy": entropy, "sharpening": sharper,
                    "threshold": cfg.cold if severity == "orange" else cfg.low,
                    "signal": "sampling temperature", "onset_step": self._onset,
                    "pattern": "entropy_collapse"}
        return Condition(
            severity, f"rollouts are sampled at temperature {temperature:.3g} since step "
            f"{self._onset} (logits × {sharper:.2g}){ent}: the policy explores little and learns "
            "from answers it would rarely give at T = 1", evidence,
            message_zh=f"自第 {self._onset} 步起以温度 {temperature:.3g} 采样（logits × {sharper:.2g}）"
                       f"{ent_zh}：策略几乎不探索，学习的样本并非其在 T = 1 时的行为")
