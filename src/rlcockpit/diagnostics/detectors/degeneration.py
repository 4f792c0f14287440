"""Degeneration: responses turn repetitive and the policy over-confident (002 §1.2, 001 Q7).

Failure mode: language collapse — the policy loops on a few tokens ("好的好的好的"), repeats a
phrase, or emits the same fixed text; its perplexity on its own samples collapses toward 1 (it
is "confident" about everything) while the answers lose content (002 §1.2: a PPL falling from
~15 to ~1.5 is the collapse pattern).
Signal, key "repetition": ``response/repetition_rate`` (share of repeated token 3-grams within a
response, batch mean) — its mean over the last ``recent`` (3) steps against the median of the
``window`` (20) steps before. Key "ppl": ``response/ppl`` as the mean negative log-likelihood
log(ppl) — the recent mean against the reference median.
Default thresholds (orange, after ``warmup`` = 10 reference steps): "repetition" when the recent
rate ≥ ``rep_min`` (0.2) and ≥ ``rep_rise`` (0.1) above the reference median, with a robust z ≥
``z_rise`` (4; the scale never below ``rep_floor`` = 0.02); "ppl" when log(ppl) ≤ ``ppl_ratio``
(0.3) × its reference median and the z ≤ −``z_rise``. Both reference windows freeze while the
condition holds.
Practical significance: never red; both keys are orange and stated in the text's own terms, at any
vocabulary size: ≥ 20% of a response's 3-grams repeated and ≥ 0.1 more than before, or a mean
log-perplexity ≤ 0.3 × its reference (ppl 15 → 2.3), each over a 3-step mean. The robust z has
floors: the repetition scale is never below 0.02, the log-ppl scale never below 5% of its reference
median, and a reference log-ppl ≤ 0 is not judged.
Scale assumptions: the repetition rate is a share of the response (dimensionless) and its rise
is a robust z against the run's own history; the 0.2 floor was checked on the tiny world only
(no run of the real-run corpus logs a repetition rate); perplexity in log space, relative to the
reference window.
False positives: tasks whose answers legitimately repeat (tables, lists of numbers); a policy
that became confident because it learned the task — the ppl condition alone, with unchanged
rewards and diverse samples, is worth a look but rarely a failure.
Fix: look at the samples (looping tokens, a fixed template?), check the entropy and KL (001 Q7:
entropy first, KL next), raise the sampling temperature or the entropy bonus, raise the KL
coefficient, and resume from the checkpoint before the onset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged


@dataclass(frozen=True)
class DegenerationConfig(Config):
    rep_min: float = option(0.2, help="Smallest recent repetition rate that counts.",
                            range=(0.0, 1.0))
    rep_rise: float = option(0.1, help="Smallest rise of the repetition rate over the reference.",
                             range=(0.0, 1.0))
    rep_floor: float = option(0.02, help="Smallest z scale of the repetition rate.",
                              range=(1e-9, 1.0))
    ppl_ratio: float = option(0.3, help="log(ppl) at most this × its reference median counts as "
                              "a collapse.", range=(0.0, 1.0))
    z_rise: float = option(4.0, help="Robust |z| of the recent mean needed.", range=(0.5, 1e6))
    recent: int = option(3, help="Steps averaged as the current level.", range=(1, 100))
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    warmup: int = option(10, help="Reference steps needed before judging.", range=(3, 10_000))


@register
class Degeneration(Detector):
    name = "degeneration"
    family = "degeneration"
    reads = ("response/repetition_rate", "response/ppl")
    patterns = ("degeneration_repetition",)
    signal = "repetition"
    Config = DegenerationConfig

    def __init__(self, config: DegenerationConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._rep = Lagged(cfg.window, cfg.recent)
        self._nll = Lagged(cfg.window, cfg.recent)

    def update(self, view: StepView) -> list[Condition] | object:
        rep, ppl = view.get("response/repetition_rate"), view.get("response/ppl")
        if rep is None and ppl is None:
            return SKIPPED
        ppl = view.finite("response/ppl")
        self._rep.push(view.finite("response/repetition_rate"), view.step)
        self._nll.push(math.log(ppl) if ppl is not None and ppl > 0 else None, view.step)
        out = [self._repetition(), self._ppl()]
        self._rep.frozen = out[0] is not None
        self._nll.frozen = out[1] is not None
        return [c for c in out if c is not None]

    def _repetition(self) -> Condition | None:
        cfg = self.config
        if not self._rep.ready(cfg.warmup):
            return None
        ref = self._rep.median
        now = float(self._rep.recent.mean())
        z = self._rep.z(cfg.rep_floor)
        if now < cfg.rep_min or now - ref < cfg.rep_rise or z < cfg.z_rise:
            return None
        evidence = {"repetition_rate": now, "reference": ref, "z": z, "threshold": cfg.rep_min,
                    "signal": "repetition",
                    "onset_step": self._rep.onset(lambda v: v - ref >= cfg.rep_rise)}
        return Condition("orange", f"responses turned repetitive: repetition rate {now:.2f} "
                         f"(was {ref:.2f})", evidence, key="repetition",
                         message_zh=f"回答开始大量重复：重复率 {now:.2f}（此前 {ref:.2f}）")

    def _ppl(self) -> Condition | None:
        cfg = self.config
        if not self._nll.ready(cfg.warmup):
            return None
        ref = self._nll.median
        now = float(self._nll.recent.mean())
        z = self._nll.z(max(0.05 * abs(ref), 1e-6))
        if ref <= 0 or now > cfg.ppl_ratio * ref or z > -cfg.z_rise:
            return None
        evidence = {"ppl": math.exp(now), "reference_ppl": math.exp(ref), "log_ppl": now,
                    "reference_log_ppl": ref, "ratio": now / ref, "z": z,
                    "threshold": cfg.ppl_ratio, "signal": "perplexity",
                    "onset_step": self._nll.onset(lambda v: v <= cfg.ppl_ratio * ref)}
        return Condition("orange", f"perplexity collapsed to {math.exp(now):.3g} (was "
                         f"{math.exp(ref):.3g}): the policy is over-confident", evidence,
                         key="ppl", message_zh=f"困惑度坍塌到 {math.exp(now):.3g}（此前 "
                         f"{math.exp(ref):.3g}）：策略过度自信")
