"""Token-level KL spike: one token the reference model would almost never pick (001 Q11, Q12).

Failure mode: the actor emits a token in a context where the reference gives it almost no
probability — often the first cry of a local language collapse, visible before the mean KL moves.
Signal: ``kl/token_max``, the largest per-token KL in the batch (``kl/token_p99`` in the evidence).
Default thresholds (001 Q12: "a high absolute value such as 10 or 20"): any token KL > 20 →
orange (the policy saves the batch so the token and its context can be read); spikes within
``hold`` (10) steps of each other are one finding, not one per spike. Measured on healthy
tiny-world runs (3 runs × 120 steps): token-KL peaks reach 6.5 and 13 (PPO) and 48 (GRPO, whose
q90 is 9.7) — the seed's lower choice, 10, would page on every few GRPO steps.
False positives: rare single spikes during healthy exploration (001 Q11); a healthy tiny GRPO run
still gets about three such findings in 120 steps — read one saved batch, then raise
``threshold`` if the tokens look harmless.
Fix: read the saved batch; if the spikes sit on the same few tokens, the reward model likes them
(reward hacking) — fix the reward; otherwise raise β or lower the actor learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register


@dataclass(frozen=True)
class KLTokenSpikeConfig(Config):
    threshold: float = option(20.0, help="Orange when the largest per-token KL exceeds this.",
                              range=(1e-6, 1e9))
    hold: int = option(10, help="Steps a spike stays reported, so that nearby spikes make one "
                       "finding (the engine resolves it resolve_after steps later).",
                       range=(1, 100000))


@register
class KLTokenSpike(Detector):
    name = "kl_token_spike"
    family = "kl"
    reads = ("kl/token_max", "kl/token_p99", "kl/mean")
    patterns = ("kl_token_spike",)
    signal = "token KL"
    Config = KLTokenSpikeConfig

    def __init__(self, config: KLTokenSpikeConfig | None = None) -> None:
        super().__init__(config)
        self._last: Condition | None = None
        self._last_step = -1

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("kl/token_max") is None:
            return SKIPPED
        peak = view.finite("kl/token_max")
        threshold = self.config.threshold
        if peak is None or peak <= threshold:
            return self._held(view.step)
        evidence = {"value": peak, "threshold": threshold, "step": view.step,
                    "token_p99": view.finite("kl/token_p99"), "kl_mean": view.finite("kl/mean"),
                    "signal": "token KL", "onset_step": view.step}
        self._last, self._last_step = Condition(
            "orange", f"a token's KL reached {peak:.3g} (> {threshold:g}) at step {view.step}; "
            "the batch is worth reading", evidence,
            message_zh=f"第 {view.step} 步单个 token 的 KL 达到 {peak:.3g}（阈值 {threshold:g}），"
                       "请查看该批次"), view.step
        return self._last

    def _held(self, step: int) -> Condition | None:
        """The last spike while it is younger than ``hold`` steps (one finding per burst)."""
        if self._last is not None and step - self._last_step < self.config.hold:
            return self._last
        return None
