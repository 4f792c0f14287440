"""UPDATE: minibatches x epochs of the clipped policy loss (+ entropy bonus, + GRPO's KL term) and,
for PPO, the clipped value loss on a separate critic (CleanRL ``ppo.py`` structure, seed 003 §5.3).

Stats are buffered per minibatch and reduced once at the end of the phase (TRL style).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from rlcockpit.metrics.rl import entropy_from_logits, logprobs_from_logits
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.gradstats import GradStats
from rlcockpit.trainer.live import LiveParams
from rlcockpit.trainer.losses import entropy_bonus, kl_loss, policy_loss, value_loss
from rlcockpit.trainer.optim import (
    GuardedOptimizer,
    StepGrads,
    flat_params,
    lr_factor,
    update_ratio,
)
from rlcockpit.trainer.rollout import response_logits, response_values
from rlcockpit.trainer.step import StepState


class Updater:
    """Owns the optimizers and the minibatch order generator; ``run`` performs one UPDATE phase."""

    def __init__(self, actor: nn.Module, critic: nn.Module | None, cfg: TrainConfig) -> None:
        self.actor, self.critic, self.cfg = actor, critic, cfg
        self.actor_opt = GuardedOptimizer(actor, cfg.optim, cfg.optim.actor_lr, split_embedding=True)
        self.critic_opt = (GuardedOptimizer(critic, cfg.optim, cfg.optim.critic_lr, split_embedding=False)
                           if critic is not None else None)
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)
        # gradient ring buffer for diagnostic snapshots (one number per layer per minibatch)
        self.gradstats = GradStats.for_models(actor, critic, self.actor_opt.groups.by_layer, cfg.seed) \
            if cfg.diagnostics.enabled else None

    def set_lrs(self, step: int, live: LiveParams) -> None:
        o = self.cfg.optim
        f = lr_factor(step, o.warmup_steps, self.cfg.train.steps, o.schedule, o.min_lr_ratio)
        self.actor_opt.set_lr(live.actor_lr * f)
        if self.critic_opt is not None:
            self.critic_opt.set_lr(live.critic_lr * f)

    @property
    def skipped_total(self) -> int:
        return self.actor_opt.skipped_total + (self.critic_opt.skipped_total if self.critic_opt else 0)

    def run(self, state: StepState, live: LiveParams, temperature: float,
            on_epoch: Callable[[int, int], None] | None = None) -> dict[str, float]:
        acc: dict[str, list[float]] = defaultdict(list)
        before_actor = flat_params(self.actor)
        before_critic = flat_params(self.critic) if self.critic is not None else None
        if self.gradstats is not None:
            self.gradstats.begin_step()
        for epoch in range(live.ppo_epochs):
            order = torch.randperm(state.size, generator=self.generator)
            for idx in order.split(self.cfg.ppo.minibatch_size):
                self._actor_minibatch(state, idx, live, temperature, acc, first_epoch=epoch == 0)
                if self.critic_opt is not None:
                    self._critic_minibatch(state, idx, live, acc)
            if on_epoch is not None:
                on_epoch(epoch + 1, live.ppo_epochs)
        if self.gradstats is not None:
            self.gradstats.end_step(state.step)
        stats = reduce_stats(acc)
        stats["update/ratio/actor"] = update_ratio(before_actor, self.actor)
        if before_critic is not None:
            stats["update/ratio/critic"] = update_ratio(before_critic, self.critic)  # type: ignore[arg-type]
        return stats

    def _actor_minibatch(self, state: StepState, idx: torch.Tensor, live: LiveParams, temperature: float,
                         acc: dict[str, list[float]], *, first_epoch: bool) -> None:
        sub = state.batch.select(idx)
        mask = state.update_mask[idx]
        logits = response_logits(self.actor, sub, temperature)
        new_logprobs = logprobs_from_logits(logits, sub.response_ids)
        pg_loss, pstats = policy_loss(new_logprobs, state.old_logprobs[idx], state.advantages[idx], mask,
                                      state.clip_eps)
        loss = pg_loss
        with torch.set_grad_enabled(live.entropy_coef > 0):  # only differentiate the bonus when used
            entropy = entropy_bonus(entropy_from_logits(logits), mask)
        if live.entropy_coef > 0:
            loss = loss - live.entropy_coef * entropy
        if self.cfg.algo == "grpo" and state.kl_coef > 0:  # GRPO: KL to the reference is a loss term
            loss = loss + state.kl_coef * kl_loss(new_logprobs, state.ref_logprobs[idx], mask,
                                                  self.cfg.kl.estimator)
        grads = self.actor_opt.step(loss, live.grad_clip_actor, live.grad_clip_embedding)
        if self.gradstats is not None:
            self.gradstats.after_actor(grads)
        acc["policy/loss"].append(float(pg_loss.detach()))
        acc["policy/clip_frac"].append(pstats["clip_frac"])
        acc["policy/ratio_mean"].append(pstats["ratio_mean"])
        acc["max:policy/ratio_max"].append(pstats["ratio_max"])
        acc["policy/approx_kl"].append(pstats["approx_kl"])
        if first_epoch:
            acc["policy/entropy"].append(float(entropy.detach()))
        _record_grads(acc, grads, "actor", layers=True)

    def _critic_minibatch(self, state: StepState, idx: torch.Tensor, live: LiveParams,
                          acc: dict[str, list[float]]) -> None:
        sub = state.batch.select(idx)
        mask = state.update_mask[idx]
        values = response_values(self.critic, sub)  # type: ignore[arg-type]
        clip = live.value_clip if live.value_clip > 0 else None
        v_loss, v_clip_frac = value_loss(values, state.values[idx], state.value_targets[idx], mask, clip)
        grads = self.critic_opt.step(self.cfg.ppo.vf_coef * v_loss, live.grad_clip_critic, 0.0)  # type: ignore[union-attr]
        if self.gradstats is not None:
            self.gradstats.after_critic(grads)
        acc["value/loss"].append(float(v_loss.detach()))
        acc["value/clip_frac"].append(v_clip_frac)
        _record_grads(acc, grads, "critic", layers=False)


def _record_grads(acc: dict[str, list[float]], grads: StepGrads, who: str, *, layers: bool) -> None:
    acc[f"sum:update/skipped/{who}"].append(1.0 if grads.skipped else 0.0)
    if grads.skipped:
        return
    acc[f"grad/norm/{who}"].append(grads.total)
    if layers:
        for name, norm in grads.layers.items():
            acc[f"grad/norm/layer/{name}"].append(norm)


def reduce_stats(acc: dict[str, list[float]]) -> dict[str, float]:
    """Mean per name; ``max:`` and ``sum:`` prefixes pick another reduction. NaN-aware."""
    out: dict[str, float] = {}
    for key, values in acc.items():
        arr = np.asarray(values, dtype=np.float64)
        finite = arr[np.isfinite(arr)]
        if key.startswith("max:"):
            out[key[4:]] = float(finite.max()) if finite.size else math.nan
        elif key.startswith("sum:"):
            out[key[4:]] = float(arr.sum())
        else:
            out[key] = float(finite.mean()) if finite.size else math.nan
    return out
