"""Confidence gating and the per-sample decision of the two-track reward (seed 000 §3.1).

Pure numpy, no model: the reward model hands in its scores and their MC-dropout std, the rule
scorer its judgments; :func:`combine` returns the final reward and every per-sample decision so
they can be stored and counted.

Per sample ``i``::

    gate_i     = gated_weight  if uncertainty_i > threshold  else 1.0     (seed: 0.15 -> 30%)
    fallback_i = fallback on and (uncertainty_i > fallback_threshold or a rule fired)
    final_i    = rule_i                                   if fallback_i   (the rules' +1 / -1)
               = alpha * gate_i * rm_i + beta * rule_i    otherwise       (the fusion)

A NaN uncertainty counts as uncertain (a broken score must not pass at full weight).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def gate_weights(uncertainty: np.ndarray, threshold: float, gated_weight: float,
                 enabled: bool = True) -> np.ndarray:
    """1.0 where the uncertainty is at most ``threshold``, ``gated_weight`` above it (and for NaN)."""
    u = np.asarray(uncertainty, dtype=np.float64)
    if not enabled:
        return np.ones_like(u)
    uncertain = ~(u <= threshold)  # NaN is uncertain
    return np.where(uncertain, float(gated_weight), 1.0)


@dataclass(frozen=True)
class Decision:
    """The final reward of N samples and how each was reached."""

    final: np.ndarray        # [N] the reward the trainer gets
    gate: np.ndarray         # [N] 1.0 or the gated weight
    fallback: np.ndarray     # [N] bool: scored by the rules
    rm_part: np.ndarray      # [N] alpha * gate * rm (0 where fallback)
    rule_part: np.ndarray    # [N] beta * rule, or the rule judgment where fallback

    @property
    def gated(self) -> np.ndarray:
        return self.gate < 1.0

    @property
    def effective_frac(self) -> float:
        """Share of samples whose reward-model score counts at full weight (the seed's "有效样本率")."""
        full = (~self.fallback) & (self.gate >= 1.0)
        return float(full.mean()) if full.size else float("nan")


def combine(rm: np.ndarray, uncertainty: np.ndarray, rule: np.ndarray, rule_fired: np.ndarray, *,
            alpha: float, beta: float, threshold: float, gated_weight: float, gating: bool = True,
            fallback: bool = True, fallback_threshold: float = float("inf")) -> Decision:
    """Final rewards from the model's scores, their uncertainty and the rules' judgments."""
    rm = np.asarray(rm, dtype=np.float64)
    u = np.asarray(uncertainty, dtype=np.float64)
    rule = np.asarray(rule, dtype=np.float64)
    fired = np.asarray(rule_fired, dtype=bool)
    gate = gate_weights(u, threshold, gated_weight, gating)
    use_rules = (fired | ~(u <= fallback_threshold)) if fallback else np.zeros(rm.shape, dtype=bool)
    rm_part = np.where(use_rules, 0.0, alpha * gate * rm)
    rule_part = np.where(use_rules, rule, beta * rule)
    return Decision(final=rm_part + rule_part, gate=gate, fallback=use_rules, rm_part=rm_part,
                    rule_part=rule_part)


__all__ = ["Decision", "combine", "gate_weights"]
