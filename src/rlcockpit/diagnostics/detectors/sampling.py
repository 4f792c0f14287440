"""Sampling collapsed: rollouts drawn far colder or narrower than the policy (001 Q4).

Failure mode: the rollout temperature is set (or changed live) far below 1, or the nucleus
(top-p) far below 1 — a value copied from an evaluation config, a "deterministic" setting for
debugging, a typo. Tokens are then sampled from p^(1/T), a distribution much sharper than the
policy, or only from the few tokens that make up the top-p of its mass: the answers it would give at T = 1 are never
drawn, the group's samples agree, the entropy of what is sampled falls towards 0 and the update
learns from a narrow slice of its own behaviour (exploration collapse, 001 Q4's first cause). The
run can look better for a while — greedy-ish answers score higher — which is why no reward or
entropy detector can call it a failure: the entropy is low *from the first step* and has nothing
to fall from, and nothing compares the run with a warmer one unless a baseline run is given.

Signal: ``rollout/temperature`` and ``rollout/top_p`` as the trainer logs them each step (our
trainer, and any run that logs its sampling settings); ``policy/entropy`` is quoted as the
consequence. Runs that log neither (most imports) skip this detector. One key per setting.

Default thresholds: yellow when the temperature is below ``low`` = 0.6, orange at or below
``cold`` = 0.4, from the first step it holds (a configured value is exact, not noisy: no
confirmation window). Healthy RL rollouts sample at 0.6–1.0: 1.0 in the default configs of TRL,
verl and OpenRLHF, 0.7 in seed 003 §5.3, down to 0.6 in the last phase of seed 004's sampling
schedule (``rollout.schedule=seed004``), which stays quiet here. The detection benchmark's
``entropy_collapse`` fault sets 0.3 (strong) and 0.6 (mild). Top-p: yellow below ``top_p_low`` =
0.8, orange at or below ``top_p_narrow`` = 0.5 (healthy rollouts use 0.9–1.0; seed 004's schedule
goes down to 0.85; at 0.5 every position whose top token holds half the mass is sampled greedily).

Practical significance: a level in its own units, the scale factor of the logits — at T ≤ 0.4 the
sampled distribution is the policy's raised to the power 2.5 or more, whatever the model size, so
a token the policy gives 10 % is sampled ~100× less often than its top token at p = 0.6; at
top-p ≤ 0.5 half the policy's mass is never sampled. Orange
(the run learns from samples it would not produce), never red: the run still trains and the
setting may be deliberate.
Scale assumptions: none — a temperature and a probability mass are dimensionless and mean the same
for every model.

False positives: a deliberately cold recipe (some distillation-like or "self-consistency" setups
sample at 0.2–0.5 on purpose); an evaluation-only run logged as training.
Fix: set ``rollout.temperature`` back to 0.7–1.0 and ``rollout.top_p`` to 0.9–1.0 (a ticket can
change both live); check that an evaluation config did not leak into training.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak


@dataclass(frozen=True)
class SamplingConfig(Config):
    low: float = option(0.6, help="Yellow below this sampling temperature.", range=(0.0, 10.0))
    cold: float = option(0.4, help="Orange at or below this sampling temperature.",
                         range=(0.0, 10.0))
    top_p_low: float = option(0.8, help="Yellow below this nucleus threshold.", range=(0.0, 1.0))
    top_p_narrow: float = option(0.5, help="Orange at or below this nucleus threshold.",
                                 range=(0.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.cold <= self.low, "cold", self.cold, f"must be <= low={self.low}")
        check(self.top_p_narrow <= self.top_p_low, "top_p_narrow", self.top_p_narrow,
              f"must be <= top_p_low={self.top_p_low}")


@register
class Sampling(Detector):
    name = "sampling"
    family = "entropy"
    reads = ("rollout/temperature", "rollout/top_p", "policy/entropy")
    patterns = ("entropy_collapse",)
    signal = "sampling temperature"
    Config = SamplingConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"rollout/temperature", "rollout/top_p"} & names)  # the entropy is context

    def __init__(self, config: SamplingConfig | None = None) -> None:
        super().__init__(config)
        self._cold, self._narrow = Streak(), Streak()

    def update(self, view: StepView) -> list[Condition] | object:
        cfg = self.config
        temperature = view.finite("rollout/temperature")
        top_p = view.finite("rollout/top_p")
        if temperature is None and top_p is None:
            return SKIPPED
        entropy = view.finite("policy/entropy")
        found = [self._temperature(view.step, temperature, entropy, cfg),
                 self._top_p(view.step, top_p, entropy, cfg)]
        return [c for c in found if c is not None]

    def _temperature(self, step: int, temperature: float | None, entropy: float | None,
                     cfg: SamplingConfig) -> Condition | None:
        cold = temperature is not None and 0 < temperature < cfg.low
        if not self._cold.update(cold, step) or temperature is None:
            return None
        onset = self._cold.onset
        severity = "orange" if temperature <= cfg.cold else "yellow"
        sharper = 1.0 / temperature
        evidence = {"temperature": temperature, "entropy": entropy, "sharpening": sharper,
                    "threshold": cfg.cold if severity == "orange" else cfg.low,
                    "signal": "sampling temperature", "onset_step": onset,
                    "pattern": "entropy_collapse"}
        return Condition(
            severity, f"rollouts are sampled at temperature {temperature:.3g} since step {onset} "
            f"(logits × {sharper:.2g}){_entropy(entropy)}: the policy explores little and learns "
            "from answers it would rarely give at T = 1", evidence, key="temperature",
            message_zh=f"自第 {onset} 步起以温度 {temperature:.3g} 采样（logits × {sharper:.2g}）"
                       f"{_entropy_zh(entropy)}：策略几乎不探索，学习的样本并非其在 T = 1 时的行为")

    def _top_p(self, step: int, top_p: float | None, entropy: float | None,
               cfg: SamplingConfig) -> Condition | None:
        narrow = top_p is not None and 0 < top_p < cfg.top_p_low
        if not self._narrow.update(narrow, step) or top_p is None:
            return None
        onset = self._narrow.onset
        severity = "orange" if top_p <= cfg.top_p_narrow else "yellow"
        evidence = {"top_p": top_p, "entropy": entropy,
                    "threshold": cfg.top_p_narrow if severity == "orange" else cfg.top_p_low,
                    "signal": "sampling top-p", "onset_step": onset, "pattern": "entropy_collapse"}
        return Condition(
            severity, f"rollouts are sampled with top-p {top_p:.3g} since step {onset}: "
            f"{1 - top_p:.0%} of the policy's probability mass is never sampled{_entropy(entropy)} "
            "— the policy explores little", evidence, key="top_p",
            message_zh=f"自第 {onset} 步起以 top-p {top_p:.3g} 采样：策略 {1 - top_p:.0%} 的概率质量从不被采样"
                       f"{_entropy_zh(entropy)}——策略几乎不探索")


def _entropy(entropy: float | None) -> str:
    return f"; sampled entropy {entropy:.2g} nats per token" if entropy is not None else ""


def _entropy_zh(entropy: float | None) -> str:
    return f"；采样熵 {entropy:.2g} nats/token" if entropy is not None else ""
