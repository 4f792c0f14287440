"""Token-level KL spike: one token the reference model would almost never pick (001 Q11, Q12).

Failure mode: the actor emits a token in a context where the reference gives it almost no
probability — often the first cry of a local language collapse, visible before the mean KL moves.
Signal: ``kl/token_max``, the largest per-token KL in the batch, and ``kl/token_p99``, each
judged against the run's own history: the log of the value is compared with the median and the
spread (1.4826 × MAD) of the logs over the last ``window`` steps (robust z). A spike is large in
itself (> ``threshold`` nats: a token the reference gives e^-10 of the actor's probability) and
far out of the run's own range: either the maximum alone (robust z of its log ≥ ``z_single``), or
the maximum together with the 99th percentile (both ≥ ``z_min``: the drift is spreading beyond
one token).
A run without a reference model (``kl/coef`` = 0 and no KL logged: TRL GRPO's default β = 0, verl
without a KL loss or KL reward) reports status "no reference", not "skipped".
Default thresholds (001 Q12: "a high absolute value such as 10 or 20"; "thresholds should adapt
to the recent N steps"): token KL > 10 and (z ≥ 10, or z ≥ 4 for both the maximum and the p99)
against the last 50 steps (at least 10 of them) → orange (the policy saves the batch so the
token and its context can be read); spikes within ``hold`` (10) steps of each other are one
finding. Calibration (tests/fixtures/streams: 4 healthy runs × 120 steps, 10 fault runs): healthy
GRPO runs routinely show single tokens at 20–48 nats (q90 9.7–10.3), at z ≤ 7.5 for the maximum
and ≤ 2.0 for both together; the lr_spike fault's first spikes are at z 12 (maximum) and 8 (both);
the other faults ≤ 3.4 (both).
Practical significance: orange at most: a token the reference gives e^-10 of the actor's probability
(> 10 nats, per token at any model size) far outside the run's own range is a batch worth reading,
not a ruined run (healthy GRPO runs show single tokens at 20–48 nats). The robust z of the log has
its scale floored at 0.1 in log units (10%) and needs 10 steps of history; values ≤ 0 are left out
of it, so exact zeros make no history.
Scale assumptions: per token (independent of length and model size); relative to the run's own
token-KL range. Real runs: verl ``actor/token_kl/max`` 6.9–11.6 on run 023 (quiet).
False positives: a new kind of prompt entering the data (its first tokens are far from the
history); read one saved batch, then raise ``z_single`` / ``z_min`` if the tokens look harmless.
Fix: read the saved batch; if the spikes sit on the same few tokens, the reward model likes them
(reward hacking) — fix the reward; otherwise raise β or lower the actor learning rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import kl_missing
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, median, robust_z


@dataclass(frozen=True)
class KLTokenSpikeConfig(Config):
    threshold: float = option(10.0, help="Orange when the largest per-token KL exceeds this ...",
                              range=(1e-6, 1e9))
    z_single: float = option(10.0, help="... and the robust z of its log against the run's history "
                             "is at least this ...", range=(0.0, 1e6))
    z_min: float = option(4.0, help="... or both the maximum's and the p99's z are at least this.",
                          range=(0.0, 1e6))
    window: int = option(50, help="Steps of token-KL history.", range=(3, 100000))
    min_history: int = option(10, help="Steps of history needed before judging.",
                              range=(3, 100000))
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

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "kl/token_max" in names

    def __init__(self, config: KLTokenSpikeConfig | None = None) -> None:
        super().__init__(config)
        self._last: Condition | None = None
        self._last_step = -1
        self._history = Window(self.config.window)
        self._p99 = Window(self.config.window)

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("kl/token_max") is None:
            return kl_missing(view)
        peak = view.finite("kl/token_max")
        cfg, threshold = self.config, self.config.threshold
        p99 = view.finite("kl/token_p99")
        z, z99 = _z(peak, self._history, cfg.min_history), _z(p99, self._p99, cfg.min_history)
        for value, window in ((peak, self._history), (p99, self._p99)):
            if value is not None and value > 0:
                window.push(math.log(value), view.step)
        spread = z is not None and z99 is not None and min(z, z99) >= cfg.z_min
        if peak is None or peak <= threshold or z is None or not (z >= cfg.z_single or spread):
            return self._held(view.step)
        evidence = {"value": peak, "threshold": threshold, "z_log": z, "z_log_p99": z99,
                    "z_single": cfg.z_single, "z_min": cfg.z_min,
                    "history_median": math.exp(median(self._history.values[:-1])),
                    "step": view.step,
                    "token_p99": view.finite("kl/token_p99"), "kl_mean": view.finite("kl/mean"),
                    "signal": "token KL", "onset_step": view.step}
        self._last, self._last_step = Condition(
            "orange", f"a token's KL reached {peak:.3g} at step {view.step}, far above this run's "
            f"usual peaks (z {z:.1f} of its log; > {threshold:g}); the batch is worth reading", evidence,
            message_zh=f"第 {view.step} 步单个 token 的 KL 达到 {peak:.3g}（阈值 {threshold:g}），"
                       "请查看该批次"), view.step
        return self._last

    def _held(self, step: int) -> Condition | None:
        """The last spike while it is younger than ``hold`` steps (one finding per burst)."""
        if self._last is not None and step - self._last_step < self.config.hold:
            return self._last
        return None


def _z(value: float | None, history: Window, min_history: int) -> float | None:
    """Robust z of log(value) against the history of logs; None before ``min_history`` steps."""
    if value is None or value <= 0 or len(history) < min_history:
        return None
    return robust_z(math.log(value), history.values, floor=0.1)  # flat history: 0.1 in log = 10%
