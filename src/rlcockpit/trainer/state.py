"""The trainer's checkpoint state besides the weights (exact resume, in-process rollback)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from rlcockpit.config import to_dict
from rlcockpit.trainer.live import LiveParams


def trainer_state(t: Any) -> dict[str, Any]:
    """The trainer's state for a checkpoint: step, optimizers, controllers, live parameters, data
    cursor, control link, RNG streams and counters."""
    u, ctl, norm = t.updater, t.controllers, t.normalizers
    return {
        "run_id": t.telemetry.run_id, "step": t.step, "config": to_dict(t.cfg),
        "actor_optim": u.actor_opt.optimizer.state_dict(),
        "critic_optim": u.critic_opt.optimizer.state_dict() if u.critic_opt else None,
        "kl_controller": ctl.kl.state_dict(),
        "clip_controller": ctl.clip.state_dict() if ctl.clip else None,
        "reward_rms": norm.reward.state_dict() if norm.reward else None,
        "value_norm": norm.value.state_dict() if norm.value else None,
        "reward_fn": t.reward_fn.state_dict(),  # e.g. the reward model's fusion history
        "live": t.live.params.as_dict(), "data": t.prompts.source.state_dict(),
        "control": t.control.state_dict() if t.control is not None else None,
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                "rollout": t.rollout_gen.get_state(), "update": u.generator.get_state()},
        "counters": {"nonfinite_total": t.nonfinite_total, "prev_kl_mean": t.prev_kl_mean,
                     "skipped_actor": u.actor_opt.skipped_total,
                     "skipped_critic": u.critic_opt.skipped_total if u.critic_opt else 0},
    }


def restore_trainer_state(t: Any, state: dict[str, Any]) -> None:
    """Load :func:`trainer_state`'s output (exact resume, and the in-process rollback)."""
    u, ctl, norm = t.updater, t.controllers, t.normalizers
    t.step = int(state["step"])
    u.actor_opt.optimizer.load_state_dict(state["actor_optim"])
    if u.critic_opt is not None:
        u.critic_opt.optimizer.load_state_dict(state["critic_optim"])
        t.models.critic.load_state_dict(torch.load(t.resume_from / "critic.pt", map_location="cpu"))
    ctl.kl.load_state_dict(state["kl_controller"])
    for obj, key in ((ctl.clip, "clip_controller"), (norm.reward, "reward_rms"), (norm.value, "value_norm")):
        if obj is not None and state.get(key) is not None:
            obj.load_state_dict(state[key])
    t.reward_fn.load_state_dict(state.get("reward_fn"))
    t.live.set_params(LiveParams(**state["live"]))
    if t.control is not None:
        t.control.restored(state.get("control"))
    t.prompts.source.load_state_dict(state["data"])
    rng = state["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    t.rollout_gen.set_state(rng["rollout"])
    u.generator.set_state(rng["update"])
    counters = state["counters"]
    t.nonfinite_total = int(counters["nonfinite_total"])
    t.prev_kl_mean = float(counters["prev_kl_mean"])
    u.actor_opt.skipped_total = int(counters["skipped_actor"])
    if u.critic_opt is not None:
        u.critic_opt.skipped_total = int(counters["skipped_critic"])
