"""The built-in faults (names are the public contract: ``rlcockpit faults run NAME``).

Each comes ``strong`` (the values below: the failure shows on the tiny world within about 10-20
steps of the onset) and, where ``mild`` is given, with a milder magnitude; most also as a slow
``ramp`` (``Fault.with_variant``). docs/detection.md shows the measured effect of each. Four
change no logged hyper-parameter: only the reward or the reference model is wrong. The last four
break one rank of a data-parallel run (``rlcockpit faults run NAME --nproc 2``, docs/distributed.md)
and are not in the single-process detection benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from rlcockpit.faults.base import Fault, LiveChange, RewardFault

KL_FAMILY = ("kl_tiers", "kl_token_spike", "kl_trend")
# a reward model that pays for hedging ("I am not sure"): a template the SFT model knows (a few percent
# of its knowledge answers) but not the filler template the reward-hacking checks were tuned on
HEDGE_PATTERN = r"\bnot sure\b|不确定|不知道"
SYSTEM_PREFIX = "System: You are a helpful assistant. Answer briefly.\n"
SHORT_PREFIX = "User: "


def times(key: str, factor: float) -> LiveChange:
    return LiveChange(key, "times", factor)


def to(key: str, value: float) -> LiveChange:
    return LiveChange(key, "set", value)


def _sync_reference(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
    from rlcockpit.faults.models import sync_reference

    return sync_reference(trainer, frac)


def _perturb(sigma: float) -> Any:
    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        from rlcockpit.faults.models import perturb_reference

        return perturb_reference(sigma)(trainer, frac)
    return action


def _on_rank(factory: str, *args: Any) -> Any:
    """A rank fault's action: ``faults.ranks.<factory>(*args)``, imported when it runs (torch)."""
    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        from rlcockpit.faults import ranks

        return getattr(ranks, factory)(*args)(trainer, frac)
    return action


def _freeze(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
    from rlcockpit.faults.ranks import freeze_rank

    return freeze_rank(trainer, frac)


def _template(prefix: str) -> Any:
    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        from rlcockpit.faults.models import mismatch_reference_template

        return mismatch_reference_template(prefix)(trainer, frac)
    return action


FAULTS: tuple[Fault, ...] = (
    Fault("lr_spike", "actor learning rate x100 from the onset (001 Q22: lr too high)",
          expected=(*KL_FAMILY, "gradients", "update_ratio", "ppo_epoch_kl", "clip_band", "entropy"),
          how="live request actor_lr = 100 x current", live=(times("actor_lr", 100.0),),
          mild={"live": (times("actor_lr", 3.0),), "how": "live request actor_lr = 3 x current"},
          drives="policy/approx_kl"),
    Fault("kl_coef_zero_with_hackable_reward",
          "KL coefficient 0 and a reward model that pays for the filler template "
          "('a great question worth exploring', 000 §3.1)",
          expected=("reward_hacking",),
          how="live request kl_coef = 0 and actor_lr x10 (so the hack spreads within ~20 steps instead of "
              "hundreds); reward wrapper filler_bonus (+3.0 helpfulness for filler)",
          live=(to("kl_coef", 0.0), times("actor_lr", 10.0)), reward=RewardFault("filler_bonus", {"bonus": 3.0}),
          mild={"live": (to("kl_coef", 0.0), times("actor_lr", 3.0)),
                "reward": RewardFault("filler_bonus", {"bonus": 1.5}),
                "how": "live request kl_coef = 0 and actor_lr x3; reward wrapper filler_bonus (+1.5)"},
          drives="reward/helpfulness/mean"),
    Fault("reward_scale_spike", "reward multiplied by 20 (000 §4.3: reward scaling set too high)",
          expected=("reward_scale",), how="live request reward_scale = 20 x current",
          live=(times("reward_scale", 20.0),),
          mild={"live": (times("reward_scale", 3.0),), "how": "live request reward_scale = 3 x current"},
          drives="reward/std"),
    Fault("ref_synced_to_actor", "reference weights copied from the actor from the onset on, before every "
          "step (a 'reference refresh' that follows the actor: KL to the reference becomes ~0)",
          expected=("kl_zero", "levels"),
          how="step hook before every step from the onset: reference.load_state_dict(actor.state_dict())",
          action=_sync_reference, repeat=True, shapes=("step",),
          mild={"repeat": False, "how": "step hook before the onset step only: one reference refresh"},
          drives="kl/mean"),
    Fault("length_reward", "a reward that grows with response length (001 Q6)",
          expected=("length_hacking", "rm_staleness"),
          how="reward wrapper length_bonus (+0.05 helpfulness per response character); live request actor_lr "
              "x10 so the policy follows it within ~20 steps",
          reward=RewardFault("length_bonus", {"per_char": 0.05}), live=(times("actor_lr", 10.0),),
          mild={"reward": RewardFault("length_bonus", {"per_char": 0.02}), "live": (times("actor_lr", 3.0),),
                "how": "reward wrapper length_bonus (+0.02 per character); live request actor_lr x3"},
          drives="response/length_mean"),
    Fault("entropy_collapse", "sampling temperature collapsed to 0.3 (entropy falls, 001 Q4)",
          expected=("entropy", "sampling"), how="live request temperature = 0.3", live=(to("temperature", 0.3),),
          mild={"live": (to("temperature", 0.6),), "how": "live request temperature = 0.6"},
          drives="policy/entropy"),
    Fault("critic_lr_spike", "critic learning rate x1000 (001 Q5: critic divergence)",
          expected=("critic",), how="live request critic_lr = 1000 x current", live=(times("critic_lr", 1000.0),),
          mild={"live": (times("critic_lr", 10.0),), "how": "live request critic_lr = 10 x current"},
          algos=("ppo",), drives="value/loss"),
    Fault("rm_component_bias", "one reward-model component's bias reset: helpfulness shifted by -0.5 on "
          "every sample (000 §4.1)", expected=("rm_component_bias",),
          how="reward wrapper component_shift (helpfulness -0.5)",
          reward=RewardFault("component_shift", {"component": "helpfulness", "shift": -0.5}),
          mild={"reward": RewardFault("component_shift", {"component": "helpfulness", "shift": -0.2}),
                "how": "reward wrapper component_shift (helpfulness -0.2)"},
          drives="reward/helpfulness/mean"),
    Fault("too_many_ppo_epochs", "16 PPO epochs per batch (001 Q23: KL grows within one cycle)",
          expected=("ppo_epoch_kl",), how="live request ppo_epochs = 16", live=(to("ppo_epochs", 16),),
          mild={"live": (to("ppo_epochs", 6),), "how": "live request ppo_epochs = 6"},
          drives="policy/approx_kl"),
    Fault("kl_coef_huge", "KL coefficient 10: the policy is pinned to the reference, learning stalls "
          "(001 Q25)", expected=("stall", "kl_zero"), how="live request kl_coef = 10",
          live=(to("kl_coef", 10.0),),
          mild={"live": (to("kl_coef", 1.0),), "how": "live request kl_coef = 1"}, drives="kl/mean"),
    Fault("nan_reward", "about 10% of the rewards are NaN (001 Q9: a reward function dividing by zero)",
          expected=("nonfinite",), how="reward wrapper nan (seeded 10% of samples)",
          reward=RewardFault("nan", {"rate": 0.1}),
          mild={"reward": RewardFault("nan", {"rate": 0.03}), "how": "reward wrapper nan (seeded 3% of samples)"},
          drives="reward/nonfinite_total"),
    Fault("category_reward_drop", "the math category's reward falls by 0.25 per step from the onset, to -1.5 "
          "(001 Q15)", expected=("category_imbalance",),
          how="reward wrapper category_drop (math correctness -1.5, ramped over 6 steps: -0.25 per step)",
          reward=RewardFault("category_drop", {"category": "math", "drop": -1.5}), ramp=6,
          mild={"reward": RewardFault("category_drop", {"category": "math", "drop": -0.5}),
                "how": "reward wrapper category_drop (math correctness -0.5)"},
          drives="reward/category/math/mean"),
    # ---- faults that change no logged hyper-parameter: the reward or the reference is wrong
    Fault("rm_bias_drift", "the reward model's helpfulness head drifts: its bias grows by 0.05 per step "
          "from the onset (a slowly decaying or mis-updated head, 000 §4.1)",
          expected=("rm_component_bias", "reward_shape"),
          how="reward wrapper bias_drift (helpfulness +0.05 x steps since the onset)",
          reward=RewardFault("bias_drift", {"component": "helpfulness", "per_step": 0.05}),
          ramp=15, shapes=("ramp",),
          mild={"reward": RewardFault("bias_drift", {"component": "helpfulness", "per_step": 0.015}),
                "how": "reward wrapper bias_drift (helpfulness +0.015 x steps since the onset)"},
          drives="reward/helpfulness/mean"),
    Fault("hedge_reward", "a reward model that pays for hedging: responses saying 'not sure' get +3.0 "
          "helpfulness (another template than the filler the checks were tuned on, 000 §3.1)",
          expected=("reward_hacking",),
          how=f"reward wrapper template_bonus (pattern {HEDGE_PATTERN!r}, +3.0 helpfulness); no live change",
          reward=RewardFault("template_bonus", {"pattern": HEDGE_PATTERN, "bonus": 3.0}),
          mild={"reward": RewardFault("template_bonus", {"pattern": HEDGE_PATTERN, "bonus": 1.5}),
                "how": "reward wrapper template_bonus (+1.5 helpfulness for hedging)"},
          drives="reward/helpfulness/mean"),
    Fault("ref_perturbed", "the reference model swapped for a slightly different checkpoint: the SFT "
          "weights plus Gaussian noise of 0.3 x each tensor's std",
          expected=KL_FAMILY,
          how="step hook at the onset: reference weights += 0.3 x std x N(0, 1) per tensor (seeded)",
          action=_perturb(0.3),
          mild={"action": _perturb(0.1), "how": "step hook at the onset: reference weights += 0.1 x std x N(0, 1)"},
          drives="kl/mean"),
    Fault("ref_prompt_template", "prompt-template mismatch: the reference scores each response given a "
          "system line + the prompt, the actor rolled out on the prompt alone",
          expected=KL_FAMILY,
          how=f"step hook at the onset: the reference wrapped to see {SYSTEM_PREFIX!r} before the prompt",
          action=_template(SYSTEM_PREFIX), shapes=("step",),
          mild={"action": _template(SHORT_PREFIX),
                "how": f"step hook at the onset: the reference wrapped to see {SHORT_PREFIX!r} before the prompt"},
          drives="kl/mean"),
    # ---- data-parallel faults: they act on rank 1 of a run of 2+ ranks (`faults run NAME --nproc 2`)
    Fault("rank_straggler", "one data-parallel rank slow: every forward call of rank 1's actor sleeps "
          "20 ms (a throttled GPU, a noisy neighbour; 000 §3.3), the others wait for it at each collective",
          expected=("straggler",), how="step hook at the onset, rank 1: a forward pre-hook on the actor "
          "sleeping 20 ms a call", action=_on_rank("slow_actor", 0.02), rank=1, onset=3,
          mild={"action": _on_rank("slow_actor", 0.008), "how": "step hook at the onset, rank 1: the actor's forward pre-hook "
                "sleeps 8 ms a call"}, drives="dist/time/rollout_s/rank/1"),
    Fault("rank_params_diverged", "the replicas diverge: one weight of rank 1's actor moved by 1e-3 (an update "
          "applied differently on one rank: a non-deterministic kernel, a corrupted all-reduce)",
          expected=("rank_divergence",), how="step hook at the onset, rank 1: the actor's first parameter "
          "element += 1e-3 (seen at the next parameter-hash check, distributed.hash_every)",
          action=_on_rank("nudge_actor", 1e-3), rank=1, onset=3, shapes=("step",), drives="dist/param_hash_mismatch"),
    Fault("rank_grad_outlier", "one rank's gradients far from the others': rank 1's actor gradients x 30 "
          "before the all-reduce (a bad data shard or faulty hardware on one rank; 001 Q14)",
          expected=("rank_grad_outlier",), how="step hook at the onset, rank 1: a gradient hook on every actor "
          "parameter multiplying it by 30 (the averaged update keeps the replicas equal)",
          action=_on_rank("scale_gradients", 30.0), rank=1, onset=3,
          mild={"action": _on_rank("scale_gradients", 8.0), "how": "step hook at the onset, rank 1: actor gradients x 8"},
          drives="dist/grad_norm/rank/1"),
    Fault("rank_frozen", "a rank lost: rank 1's process stops (SIGSTOP: a hung or vanished node as the other "
          "ranks see it); no more heartbeats, the group blocks at its next collective",
          expected=("rank_heartbeat",), how="step hook at the onset, rank 1: the process sends itself "
          "SIGSTOP; the run fails after distributed.timeout_s (90 s here) and the launcher kills the frozen rank",
          action=_freeze, rank=1, onset=3, shapes=("step",), drives="dist/heartbeat_age_s/rank/1",
          overrides={"distributed.timeout_s": 90.0}),
)

KL_KEYS = ("kl/token_mean", "kl/mean")
# What each fault moves, in the `baseline` detector's keys (a finding on another metric does not count):
# the behaviour the fault's description names, not whatever else happens to differ.
BASELINE_KEYS: dict[str, tuple[str, ...]] = {
    "lr_spike": ("policy/approx_kl", "policy/clip_frac", *KL_KEYS, "policy/entropy", "grad/norm/actor"),
    "kl_coef_zero_with_hackable_reward": ("reward/mean", *KL_KEYS),
    "reward_scale_spike": ("reward/std", "reward/mean", "value/loss"),
    "ref_synced_to_actor": KL_KEYS,
    "length_reward": ("response/length_mean", "reward/mean"),
    "entropy_collapse": ("policy/entropy",),
    "critic_lr_spike": ("value/loss", "grad/norm/critic"),
    "rm_component_bias": ("reward/mean",),
    "too_many_ppo_epochs": ("policy/approx_kl", "policy/clip_frac", *KL_KEYS),
    "kl_coef_huge": (*KL_KEYS, "value/loss"),
    "nan_reward": (),
    "category_reward_drop": ("reward/mean",),
    "rm_bias_drift": ("reward/mean",),
    "hedge_reward": ("reward/mean",),
    "ref_perturbed": KL_KEYS,
    "ref_prompt_template": KL_KEYS,
    "rank_straggler": (), "rank_params_diverged": (), "rank_grad_outlier": (), "rank_frozen": (),
}
FAULTS = tuple(replace(f, baseline_keys=BASELINE_KEYS[f.name]) for f in FAULTS)

