"""UPDATE: the PPO update, read top to bottom in :meth:`Updater.run` (CleanRL ``ppo.py`` structure
and names; seed 003 §4-§5)::

    for epoch in range(ppo_epochs):
        for mb_inds in randperm(N).split(minibatch_size):
            newlogprob = log pi(a | s) of the minibatch's responses under the current actor
            pg_loss    = clipped surrogate, mean of max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))
            loss       = pg_loss - ent_coef * entropy_loss  (+ kl_coef * kl_loss, GRPO)
            actor step (guarded: a non-finite loss or gradient skips it; per-group clipping)
            v_loss     = clipped value loss; critic step on vf_coef * v_loss  (PPO, separate critic)
    then the controllers move: beta from the measured KL, epsilon from the entropy.

The loss terms are pure functions in :mod:`rlcockpit.trainer.losses` (tested against naive loops).
Every minibatch's numbers are buffered under their catalog names and reduced once at the end of the
phase (TRL style, NaN-aware): :class:`MinibatchStats`.

Data parallel (a ``group`` of several ranks, trainer/distributed.py): each rank runs this loop on
its shard with ``ppo.minibatch_size / world_size`` samples per minibatch; every loss is scaled by
the rank's share of the global minibatch's tokens, so the averaged gradient is the gradient of the
token mean over the *global* minibatch (not a mean of rank means); the optimizers average the
gradients; the step's loss statistics are token-weighted over the ranks and the controllers move
from the global KL and entropy, so every rank holds the same beta and epsilon.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from rlcockpit.metrics.rl import entropy_from_logits, logprobs_from_logits
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.controllers import Controllers
from rlcockpit.trainer.devices import Placement, grad_scaler
from rlcockpit.trainer.gradstats import GradStats
from rlcockpit.trainer.live import LiveParams
from rlcockpit.trainer.losses import entropy_bonus, kl_loss, kl_pull_share, policy_loss, value_loss
from rlcockpit.trainer.memory import MicroBatches, update_mode
from rlcockpit.trainer.optim import (
    GuardedOptimizer,
    StepGrads,
    flat_params,
    lr_factor,
    update_ratio,
)
from rlcockpit.trainer.rollout import response_logits, response_values
from rlcockpit.trainer.step import StepState

if TYPE_CHECKING:
    from rlcockpit.trainer.distributed import Group

# statistics each rank measures on its own shard: token-weighted over the ranks (ratio_max: the max)
RANK_STATS = ("policy/loss", "policy/clip_frac", "policy/ratio_mean", "policy/approx_kl", "policy/entropy",
              "value/loss", "value/clip_frac")


class Updater:
    """Owns the optimizers and the minibatch order generator; ``run`` performs one UPDATE phase."""

    def __init__(self, actor: nn.Module, critic: nn.Module | None, controllers: Controllers,
                 cfg: TrainConfig, group: Group | None = None, place: Placement | None = None) -> None:
        self.actor, self.critic, self.controllers, self.cfg = actor, critic, controllers, cfg
        self.group = group if group is not None and group.distributed else None
        self.place = place or Placement.cpu()
        world = self.group.world_size if self.group else 1
        self.minibatch_size = cfg.ppo.minibatch_size // world  # per rank; the global minibatch is the config's
        self.actor_opt = GuardedOptimizer(actor, cfg.optim, cfg.optim.actor_lr, split_embedding=True, group=group,
                                          scaler=grad_scaler(self.place))
        self.critic_opt = (GuardedOptimizer(critic, cfg.optim, cfg.optim.critic_lr, split_embedding=False,
                                            group=group, scaler=grad_scaler(self.place))
                           if critic is not None else None)
        m = cfg.model
        self.micro = MicroBatches(m.micro_batch_size, self.place.device, getattr(actor, "config", None),
                                  m.gradient_checkpointing, self.place.dtype.itemsize)
        # checkpointed blocks and LoRA's dropout act only in train mode (trainer/memory.py)
        self.train_mode = m.gradient_checkpointing or (m.lora.r > 0 and m.lora.dropout > 0)
        self.generator = torch.Generator().manual_seed(group.seed(cfg.seed + 1) if group else cfg.seed + 1)
        self.local_grad_norm = math.nan  # data parallel: mean over the step of this rank's pre-reduce actor norm
        # gradient ring buffer for diagnostic snapshots (one number per layer per minibatch)
        self.gradstats = GradStats.for_models(actor, critic, self.actor_opt.groups.by_layer, cfg.seed) \
            if cfg.diagnostics.enabled else None

    @property
    def skipped_total(self) -> int:
        return self.actor_opt.skipped_total + (self.critic_opt.skipped_total if self.critic_opt else 0)

    def run(self, state: StepState, live: LiveParams,
            on_epoch: Callable[[int, int], None] | None = None) -> dict[str, float]:
        """One UPDATE phase on ``state`` with this step's live parameters; returns the step's policy,
        value, gradient and update-ratio stats."""
        self._set_lrs(state.step, live)
        stats = MinibatchStats()
        actor_before = flat_params(self.actor)
        critic_before = flat_params(self.critic) if self.critic is not None else None
        if self.gradstats is not None:
            self.gradstats.begin_step()
        with update_mode([self.actor, self.critic], self.train_mode):
            local_norms = self._epochs(state, live, stats, on_epoch)
        if self.gradstats is not None:
            self.gradstats.end_step(state.step)
        out = stats.reduce()
        if self.group is not None:
            out.update(self._over_ranks(out, float(state.update_mask.sum())))
            finite = [n for n in local_norms if math.isfinite(n)]
            self.local_grad_norm = float(np.mean(finite)) if finite else math.nan
        out["update/ratio/actor"] = update_ratio(actor_before, self.actor)
        if critic_before is not None:
            out["update/ratio/critic"] = update_ratio(critic_before, self.critic)  # type: ignore[arg-type]
        self._move_controllers(state, out)
        return out

    def _epochs(self, state: StepState, live: LiveParams, stats: MinibatchStats,
                on_epoch: Callable[[int, int], None] | None) -> list[float]:
        local_norms: list[float] = []
        for epoch in range(live.ppo_epochs):
            b_inds = torch.randperm(state.size, generator=self.generator)
            for mb_inds in b_inds.split(self.minibatch_size):
                share = self._token_share(state.update_mask[mb_inds])
                local_norms.append(self._policy_step(state, mb_inds, live, stats, share, first_epoch=epoch == 0))
                if self.critic_opt is not None:
                    self._value_step(state, mb_inds, live, stats, share)
            if on_epoch is not None:
                on_epoch(epoch + 1, live.ppo_epochs)
        return local_norms

    def _micro(self, state: StepState, mb_inds: torch.Tensor, body: Callable[[torch.Tensor, float], Any],
               opt: GuardedOptimizer) -> list[Any]:
        """``body(micro_inds, weight)`` per micro-batch (trainer/memory.py): ``weight`` is the micro-batch's
        share of the minibatch's tokens, so the accumulated gradient is the minibatch token mean's."""
        total = float(state.update_mask[mb_inds].sum())
        n = len(mb_inds)

        def weighted(micro: torch.Tensor) -> Any:
            w = float(state.update_mask[micro].sum()) / total if total > 0 else len(micro) / n
            return body(micro, w)

        opt.zero_grad()
        return self.micro.run(mb_inds, weighted, phase="UPDATE", step=state.step, reset=opt.zero_grad,
                              seq_len=state.batch.prompt_width + state.batch.response_ids.shape[1],
                              response_len=state.batch.response_ids.shape[1])

    def _token_share(self, mb_mask: torch.Tensor) -> float | None:
        """Data parallel: world_size x this rank's share of the global minibatch's tokens (the loss
        scale that makes the averaged gradient the global token mean's); None for one process."""
        if self.group is None:
            return None
        local = float(mb_mask.sum())
        (total,) = self.group.sum([local])
        return self.group.world_size * local / total if total > 0 else 0.0

    def _over_ranks(self, out: dict[str, float], tokens: float) -> dict[str, float]:
        """The rank-measured statistics of the step over the group: token-weighted means (NaN-aware),
        ``policy/ratio_max`` the max. The gradient norms need nothing: the gradients are already global."""
        names = [n for n in RANK_STATS if n in out]
        values = [out[n] for n in names]
        weights = [tokens if math.isfinite(v) else 0.0 for v in values]
        sums = self.group.sum([v * w if w else 0.0 for v, w in zip(values, weights, strict=True)] + weights)
        k = len(names)
        merged = {n: sums[i] / sums[k + i] if sums[k + i] > 0 else math.nan for i, n in enumerate(names)}
        if "policy/ratio_max" in out:
            ratio_max = out["policy/ratio_max"]
            (merged["policy/ratio_max"],) = self.group.max([ratio_max if math.isfinite(ratio_max) else -math.inf])
        return merged

    def _policy_step(self, state: StepState, mb_inds: torch.Tensor, live: LiveParams, stats: MinibatchStats,
                     share: float | None = None, *, first_epoch: bool) -> float:
        """Clipped surrogate + entropy bonus (+ GRPO's KL-to-reference term), accumulated over the
        micro-batches; one guarded actor step. ``share``: the data-parallel loss scale
        (:meth:`_token_share`). Returns this rank's gradient norm before the reduction (NaN for one process)."""
        parts = self._micro(state, mb_inds, lambda micro, w: self._policy_loss(state, micro, live, share, w),
                            self.actor_opt)
        grads = self.actor_opt.finish(live.grad_clip_actor, live.grad_clip_embedding, ok=all(p["ok"] for p in parts))
        if self.gradstats is not None:
            self.gradstats.after_actor(grads)
        merged = _merge(parts)
        for name in ("policy/loss", "policy/clip_frac", "policy/ratio_mean", "policy/approx_kl"):
            stats.add(name, merged[name])
        stats.add("policy/ratio_max", merged["policy/ratio_max"], reduce="max")
        if "kl/pull_share" in merged:
            stats.add("kl/pull_share", merged["kl/pull_share"])
        if first_epoch:  # the entropy of the rollout policy, not of the policy being updated
            stats.add("policy/entropy", merged["policy/entropy"])
        stats.add_grads(grads, "actor", layers=True)
        return grads.local

    def _policy_loss(self, state: StepState, micro: torch.Tensor, live: LiveParams, share: float | None,
                     weight: float) -> dict[str, Any]:
        """One micro-batch's policy loss, backward (weighted by its token share); its statistics."""
        put = self.place.put
        mb = state.batch.select(micro)
        mb_mask = put(state.update_mask[micro])
        logits = response_logits(self.actor, mb, live.temperature, self.place)
        newlogprob = logprobs_from_logits(logits, put(mb.response_ids))
        advantages = put(state.advantages[micro])
        pg_loss, pg_stats = policy_loss(newlogprob, put(state.old_logprobs[micro]), advantages, mb_mask,
                                        state.clip_eps)
        with torch.set_grad_enabled(live.entropy_coef > 0):  # only differentiate the bonus when used
            entropy_loss = entropy_bonus(entropy_from_logits(logits), mb_mask)
        loss = pg_loss
        if live.entropy_coef > 0:
            loss = loss - live.entropy_coef * entropy_loss
        out: dict[str, Any] = {"weight": weight}
        if self.cfg.algo == "grpo" and state.kl_coef > 0:  # GRPO: KL to the reference is a loss term
            ref = put(state.ref_logprobs[micro])
            loss = loss + state.kl_coef * kl_loss(newlogprob, ref, mb_mask, self.cfg.kl.estimator)
            pull = kl_pull_share(newlogprob, ref, advantages, mb_mask, state.kl_coef, self.cfg.kl.estimator)
            if pull is not None:
                out["kl/pull_share"] = pull
        if share is not None:
            loss = loss * share
        out["ok"] = self.actor_opt.backward(loss * weight if weight != 1.0 else loss)
        out.update({"policy/loss": float(pg_loss.detach()), "policy/clip_frac": pg_stats["clip_frac"],
                    "policy/ratio_mean": pg_stats["ratio_mean"], "policy/ratio_max": pg_stats["ratio_max"],
                    "policy/approx_kl": pg_stats["approx_kl"], "policy/entropy": float(entropy_loss.detach())})
        return out

    def _value_step(self, state: StepState, mb_inds: torch.Tensor, live: LiveParams,
                    stats: MinibatchStats, share: float | None = None) -> None:
        """Clipped value loss on the separate critic, accumulated over the micro-batches; one guarded
        critic step on vf_coef * v_loss."""
        parts = self._micro(state, mb_inds, lambda micro, w: self._value_loss(state, micro, live, share, w),
                            self.critic_opt)  # type: ignore[arg-type]
        grads = self.critic_opt.finish(live.grad_clip_critic, 0.0, ok=all(p["ok"] for p in parts))  # type: ignore[union-attr]
        if self.gradstats is not None:
            self.gradstats.after_critic(grads)
        merged = _merge(parts)
        stats.add("value/loss", merged["value/loss"])
        stats.add("value/clip_frac", merged["value/clip_frac"])
        stats.add_grads(grads, "critic", layers=False)

    def _value_loss(self, state: StepState, micro: torch.Tensor, live: LiveParams, share: float | None,
                    weight: float) -> dict[str, Any]:
        put = self.place.put
        mb = state.batch.select(micro)
        newvalue = response_values(self.critic, mb, self.place)  # type: ignore[arg-type]
        clip = live.value_clip if live.value_clip > 0 else None
        v_loss, v_clipfrac = value_loss(newvalue, put(state.values[micro]), put(state.value_targets[micro]),
                                        put(state.update_mask[micro]), clip)
        scaled = self.cfg.ppo.vf_coef * v_loss if share is None else self.cfg.ppo.vf_coef * v_loss * share
        ok = self.critic_opt.backward(scaled * weight if weight != 1.0 else scaled)  # type: ignore[union-attr]
        return {"weight": weight, "ok": ok, "value/loss": float(v_loss.detach()), "value/clip_frac": v_clipfrac}

    def _set_lrs(self, step: int, live: LiveParams) -> None:
        """This step's learning rates: the live peak x warm-up x schedule."""
        o = self.cfg.optim
        f = lr_factor(step, o.warmup_steps, self.cfg.train.steps, o.schedule, o.min_lr_ratio)
        self.actor_opt.set_lr(live.actor_lr * f)
        if self.critic_opt is not None:
            self.critic_opt.set_lr(live.critic_lr * f)

    def _move_controllers(self, state: StepState, stats: dict[str, float]) -> None:
        """For the next step: beta follows the measured KL (per-sequence sum, batch mean), epsilon
        the entropy."""
        kl_mean, n = float(state.token_kl.sum(-1).mean()), state.size
        if self.group is not None:  # the global batch's mean: every rank moves beta alike
            kl_sum, n = self.group.sum([float(state.token_kl.sum()), float(state.size)])
            kl_mean, n = kl_sum / n, int(n)
        self.controllers.kl.update(kl_mean, n)
        if self.controllers.clip is not None:
            self.controllers.clip.update(stats.get("policy/entropy", math.nan))


def _merge(parts: list[dict[str, Any]]) -> dict[str, float]:
    """One minibatch's statistics from its micro-batches': token-weighted means (their ``weight``s sum
    to 1), the max for ``policy/ratio_max``; one micro-batch gives its own numbers unchanged."""
    if len(parts) == 1:
        return {k: v for k, v in parts[0].items() if k not in ("weight", "ok")}
    out: dict[str, float] = {}
    names = {k for p in parts for k in p} - {"weight", "ok"}
    for name in names:
        pairs = [(p["weight"], p[name]) for p in parts if name in p and math.isfinite(p[name])]
        if name == "policy/ratio_max":
            out[name] = max((v for _, v in pairs), default=math.nan)
            continue
        w = sum(w for w, _ in pairs)
        out[name] = sum(w_i * v for w_i, v in pairs) / w if w > 0 else math.nan
    return out


class MinibatchStats:
    """Numbers per minibatch under their catalog names, reduced once per phase: the mean of the finite
    values, or their max, or the sum of all values (``reduce``)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self.how: dict[str, str] = {}

    def add(self, name: str, value: float, reduce: str = "mean") -> None:
        self.values[name].append(value)
        self.how[name] = reduce

    def add_grads(self, grads: StepGrads, who: str, *, layers: bool) -> None:
        self.add(f"update/skipped/{who}", 1.0 if grads.skipped else 0.0, reduce="sum")
        if grads.skipped:
            return
        self.add(f"grad/norm/{who}", grads.total)
        if layers:
            for name, norm in grads.layers.items():
                self.add(f"grad/norm/layer/{name}", norm)

    def reduce(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, values in self.values.items():
            arr = np.asarray(values, dtype=np.float64)
            finite = arr[np.isfinite(arr)]
            if self.how[name] == "sum":
                out[name] = float(arr.sum())
            elif not finite.size:
                out[name] = math.nan
            else:
                out[name] = float(finite.max() if self.how[name] == "max" else finite.mean())
        return out
