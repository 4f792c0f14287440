"""The built-in faults (names are the public contract: ``rlcockpit faults run NAME``).

Magnitudes are tuned so each fault really produces its failure on the tiny world within about
10-20 steps of the onset (docs/detection.md shows the measured effect of each).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlcockpit.faults.base import Fault, RewardFault

if TYPE_CHECKING:
    from rlcockpit.trainer.live import LiveParams
    from rlcockpit.trainer.trainer import Trainer


def _times(key: str, factor: float) -> Any:
    def change(live: LiveParams) -> Mapping[str, Any]:
        return {key: getattr(live, key) * factor}
    return change


def _set(**values: Any) -> Any:
    def change(live: LiveParams) -> Mapping[str, Any]:
        return dict(values)
    return change


def _both(*changes: Any) -> Any:
    def change(live: LiveParams) -> Mapping[str, Any]:
        out: dict[str, Any] = {}
        for c in changes:
            out.update(c(live))
        return out
    return change


def _sync_reference(trainer: Trainer) -> Mapping[str, Any]:
    """Copy the actor's weights into the frozen reference (a botched 'reference refresh')."""
    import torch

    with torch.no_grad():
        trainer.c.reference.load_state_dict(trainer.c.actor.state_dict())
    return {"reference": "weights copied from the actor"}


FAULTS: tuple[Fault, ...] = (
    Fault("lr_spike", "actor learning rate x100 from the onset (001 Q22: lr too high)",
          expected=("kl_tiers", "kl_token_spike", "kl_trend", "gradients", "update_ratio", "ppo_epoch_kl",
                    "clip_band", "entropy"),
          how="live request actor_lr = 100 x current", live=_times("actor_lr", 100.0)),
    Fault("kl_coef_zero_with_hackable_reward",
          "KL coefficient 0 and a reward model that pays for the filler template "
          "('a great question worth exploring', 000 §3.1)",
          expected=("reward_hacking",),
          how="live request kl_coef = 0 and actor_lr x10 (so the hack spreads within ~20 steps instead of "
              "hundreds); reward wrapper filler_bonus (+3.0 helpfulness for filler)",
          live=_both(_set(kl_coef=0.0), _times("actor_lr", 10.0)), reward=RewardFault("filler_bonus", {"bonus": 3.0})),
    Fault("reward_scale_spike", "reward multiplied by 20 (000 §4.3: reward scaling set too high)",
          expected=("reward_scale",), how="live request reward_scale = 20 x current",
          live=_times("reward_scale", 20.0)),
    Fault("ref_synced_to_actor", "reference weights copied from the actor from the onset on, before every "
          "step (a 'reference refresh' that follows the actor: KL to the reference becomes ~0)",
          expected=("kl_zero",),
          how="step hook before every step from the onset: reference.load_state_dict(actor.state_dict())",
          action=_sync_reference, repeat=True),
    Fault("length_reward", "a reward that grows with response length (001 Q6)",
          expected=("length_hacking", "rm_staleness"),
          how="reward wrapper length_bonus (+0.05 helpfulness per response character); live request actor_lr "
              "x10 so the policy follows it within ~20 steps",
          reward=RewardFault("length_bonus", {"per_char": 0.05}), live=_times("actor_lr", 10.0)),
    Fault("entropy_collapse", "sampling temperature collapsed to 0.3 (entropy falls, 001 Q4)",
          expected=("entropy",), how="live request temperature = 0.3", live=_set(temperature=0.3)),
    Fault("critic_lr_spike", "critic learning rate x1000 (001 Q5: critic divergence)",
          expected=("critic",), how="live request critic_lr = 1000 x current", live=_times("critic_lr", 1000.0)),
    Fault("rm_component_bias", "one reward-model component's bias reset: helpfulness shifted by -0.5 on "
          "every sample (000 §4.1)", expected=("rm_component_bias",),
          how="reward wrapper component_shift (helpfulness -0.5)",
          reward=RewardFault("component_shift", {"component": "helpfulness", "shift": -0.5})),
    Fault("too_many_ppo_epochs", "16 PPO epochs per batch (001 Q23: KL grows within one cycle)",
          expected=("ppo_epoch_kl",), how="live request ppo_epochs = 16", live=_set(ppo_epochs=16)),
    Fault("kl_coef_huge", "KL coefficient 10: the policy is pinned to the reference, learning stalls "
          "(001 Q25)", expected=("stall", "kl_zero"), how="live request kl_coef = 10",
          live=_set(kl_coef=10.0)),
    Fault("nan_reward", "about 10% of the rewards are NaN (001 Q9: a reward function dividing by zero)",
          expected=("nonfinite",), how="reward wrapper nan (seeded 10% of samples)",
          reward=RewardFault("nan", {"rate": 0.1})),
    Fault("category_reward_drop", "the math category's reward falls by 0.25 per step from the onset "
          "(001 Q15)", expected=("category_imbalance",),
          how="reward wrapper category_drop (math correctness -0.25 per step, floor -1.5)",
          reward=RewardFault("category_drop", {"category": "math", "per_step": 0.25, "floor": -1.5})),
)
