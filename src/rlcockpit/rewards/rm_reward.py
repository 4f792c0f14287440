"""The two-track reward of seed 000 §3.1 as a reward function (``reward.fn``): the learned reward
model with confidence gating (primary track), the rule fallback (auxiliary track) and their fusion.

What each sample returns (the reward-function contract of :mod:`rlcockpit.rewards.loader`):

* components -- ``helpfulness``, ``correctness``, ``harmlessness``: each head's share of the final
  reward, ``alpha * gate * w_head * head`` (0 where the rules took over); ``rule``: ``beta * rule``,
  or the rule judgment (+1 / -1) where the rules took over. They add up to the final reward.
* flags -- ``needs_review`` (the rules took over: a person should look), ``rm_gated``,
  ``rm_fallback``, and ``rule_fact_error`` / ``rule_template`` / ``rule_off_topic`` for the rules
  that fired.
* info -- ``uncertainty`` (MC-dropout std; stored as the sample's uncertainty), ``gate_weight``,
  ``gated``, ``fallback``, ``rule_fired``, ``disagree`` (a rule fired on a sample the model scores
  above the batch median: the model pays what a rule forbids),
  ``rm_score`` (the model's total before gating), ``rm_<head>`` (raw head scores), ``rule_score``,
  ``fusion_alpha``, ``fusion_beta``. The trainer turns them into ``reward/uncertainty/mean``,
  ``reward/gated_frac``, ``reward/fallback_frac``, ... (docs/metrics.md).

``observe(step, metrics)`` feeds the fusion LSTM one step of history (the trainer calls it in
DIAGNOSE); ``configure(cfg)`` applies ``reward.rm`` and starts a fresh history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlcockpit.rewards.fallback import RuleScorer
from rlcockpit.rewards.fusion import FusionWeights
from rlcockpit.rewards.gating import Decision, combine
from rlcockpit.rewards.rm_config import RMConfig

RULE_FLAGS = {"fact_error": "rule_fact_error", "template": "rule_template", "off_topic": "rule_off_topic"}
# the step metrics the fusion LSTM reads (written by the trainer from this function's info)
HISTORY_METRICS = ("reward/uncertainty/mean", "reward/rule_rate", "policy/entropy")


class RMReward:
    """Callable ``(prompts, responses, meta, step) -> list[dict]`` around a loaded reward model."""

    def __init__(self, cfg: RMConfig, scorer: Any, rules: RuleScorer, lstm: Any | None = None) -> None:
        self.cfg = cfg
        self.scorer = scorer
        self.rules = rules
        self.lstm = lstm
        self.fusion = self._fusion(cfg)
        self.last: Decision | None = None

    def _fusion(self, cfg: RMConfig) -> FusionWeights:
        f = cfg.fusion
        lstm = self.lstm if f.mode == "lstm" else None
        return FusionWeights(lstm, window=f.window, fixed=(f.alpha, f.beta))

    def configure(self, cfg: RMConfig) -> None:
        """New constants, fresh fusion history (a new run starts calm)."""
        self.cfg = cfg
        self.fusion = self._fusion(cfg)

    def state_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.fusion.load_state_dict(dict(state.get("fusion", {})))

    def observe(self, step: int, metrics: Mapping[str, float]) -> None:
        """One training step's signals for the fusion LSTM (missing ones skip the step)."""
        u, r, h = (float(metrics.get(k, float("nan"))) for k in HISTORY_METRICS)
        self.fusion.observe(u, r, h)

    def score_batch(self, prompts: Sequence[str], responses: Sequence[str],
                    meta: Sequence[Mapping], step: int) -> list[dict[str, float]]:
        g, fb = self.cfg.gating, self.cfg.fallback
        rm = self.scorer(prompts, responses, mc_passes=g.mc_passes, seed=g.seed + int(step))
        verdicts = self.rules(prompts, responses, meta)
        alpha, beta = self.fusion.current()
        d = combine(rm.total, rm.uncertainty, verdicts.judgment, verdicts.any_fired, alpha=alpha,
                    beta=beta, threshold=g.threshold, gated_weight=g.gated_weight, gating=g.enabled,
                    fallback=fb.enabled, fallback_threshold=fb.uncertainty_threshold)
        self.last = d
        w = dict(zip(self.scorer.heads, self.scorer.weights, strict=True))
        # the model pays what a rule forbids: a rule fired, yet the score is above the batch median
        # (the model's scores carry a per-head offset, so their sign alone says little)
        disagree = verdicts.any_fired & (rm.total > np.median(rm.total))
        out = []
        for i in range(len(responses)):
            scale = 0.0 if d.fallback[i] else alpha * d.gate[i]
            row = {h: float(scale * w[h] * rm.heads[h][i]) for h in self.scorer.heads}
            row["rule"] = float(d.rule_part[i])
            row.update(self._labels(i, d, verdicts.fired[i]))
            row.update({f"info/rm_{h}": float(rm.heads[h][i]) for h in self.scorer.heads})
            row.update({"info/uncertainty": float(rm.uncertainty[i]), "info/gate_weight": float(d.gate[i]),
                        "info/rm_score": float(rm.total[i]), "info/rule_score": float(verdicts.judgment[i]),
                        "info/fusion_alpha": alpha, "info/fusion_beta": beta,
                        "info/disagree": float(disagree[i])})
            out.append(row)
        return out

    @staticmethod
    def _labels(i: int, d: Decision, fired: tuple[str, ...]) -> dict[str, float]:
        out = {"flag/needs_review": float(d.fallback[i]), "flag/rm_fallback": float(d.fallback[i]),
               "flag/rm_gated": float(d.gate[i] < 1.0), "info/gated": float(d.gate[i] < 1.0),
               "info/fallback": float(d.fallback[i]), "info/rule_fired": float(bool(fired))}
        out.update({f"flag/{flag}": float(name in fired) for name, flag in RULE_FLAGS.items()})
        return out

    __call__ = score_batch


def build_rm_reward(cfg: RMConfig, path: Any, fact_rules: Sequence[Callable] = (),
                    embed: Callable | None = None) -> RMReward:
    """Load the reward model (and its fusion LSTM) from ``path`` and wire the rules."""
    from rlcockpit.rewards.fusion import FUSION_FILE, load_fusion
    from rlcockpit.rewards.reward_model import RewardModelScorer, load_reward_model

    model, tokenizer, _ = load_reward_model(path)
    scorer = RewardModelScorer(model, tokenizer, cfg.head_weights)
    lstm = load_fusion(path) if (path / FUSION_FILE).is_file() else None
    if cfg.fusion.mode == "lstm" and lstm is None:
        from rlcockpit.errors import ConfigError

        raise ConfigError(f"reward.rm.fusion.mode=lstm but {path} has no {FUSION_FILE}; retrain "
                          "with `rlcockpit world rm` or set reward.rm.fusion.mode=fixed",
                          details={"key": "reward.rm.fusion.mode"})
    return RMReward(cfg, scorer, RuleScorer(cfg.fallback, fact_rules, embed), lstm)


__all__ = ["HISTORY_METRICS", "RULE_FLAGS", "RMReward", "build_rm_reward"]
