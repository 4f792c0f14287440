"""ADVANTAGE: from the step's rewards to what the losses use (DESIGN.md §3).

:func:`compute_advantages` is the phase, top to bottom:

1. total reward x ``reward_scale``; non-finite rewards are kept in the state (they are stored) but
   get ``update_mask`` 0, so they never reach a loss;
2. :func:`shape_rewards` — running normalisation (:class:`RunningMeanStd`, seed 000 §4.2, seed 002
   §3.1) and clipping;
3. PPO (:func:`ppo_advantages`): :func:`token_rewards` (-beta * KL on every response token plus the
   sequence reward on the last one, seed 003 §3.3), GAE(gamma, lambda), whitening, critic targets
   (normalised by :class:`ValueNormalizer` when enabled, seed 000 §3.2 / §4.2);
   GRPO (:func:`grpo_advantages`): group-normalised sequence advantages, no critic.

The element-wise maths (GAE, group normalisation, whitening) is pure and lives in
:mod:`rlcockpit.metrics.rl`, tested against naive loops there. Data parallel (``group``, a
:class:`rlcockpit.trainer.distributed.Group` of several ranks): each rank holds its shard of the
step, GRPO groups stay within a shard (prompts are sharded, their samples stay together), and the
statistics that span the batch — the running reward and value normalisers' moments and the
whitening — are reduced over the global batch, so every rank normalises alike. The normalisers keep plain-float
state (``state_dict`` / ``load_state_dict``) so a checkpoint resumes them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlcockpit.metrics.rl import gae, group_normalize, masked_whiten
from rlcockpit.trainer.config import PPOConfig
from rlcockpit.trainer.step import StepState

if TYPE_CHECKING:
    from rlcockpit.trainer.distributed import Group


def compute_advantages(state: StepState, *, reward_scale: float, reward_clip: float,
                       normalizers: Normalizers, algo: str, ppo: PPOConfig, group_size: int,
                       group: Group | None = None) -> int:
    """The ADVANTAGE phase on ``state`` (its ``kl_coef`` already set); returns how many rewards were
    non-finite (dropped from the update). ``group``: the data-parallel group (None = one process)."""
    group = group if group is not None and group.distributed else None
    state.rewards = state.scored.totals * reward_scale
    finite = np.isfinite(state.rewards)
    state.shaped = shape_rewards(state.rewards, normalizers.reward, reward_clip, group)
    state.update_mask = state.mask * torch.as_tensor(finite, dtype=state.mask.dtype).unsqueeze(1)
    if algo == "ppo":
        ppo_advantages(state, gamma=ppo.gamma, lam=ppo.lam, whiten=ppo.whiten_advantages,
                       value_norm=normalizers.value, group=group)
    else:
        grpo_advantages(state, group_size)
    return int((~finite).sum())


def shape_rewards(rewards: np.ndarray, rms: RunningMeanStd | None, clip: float,
                  group: Group | None = None) -> torch.Tensor:
    """Running normalisation (seed 000 §4.2) then clipping; non-finite rewards become 0 (dropped).
    With a data-parallel ``group`` the normaliser takes the moments of the global batch."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    finite = torch.isfinite(r)
    r = torch.where(finite, r, torch.zeros_like(r))
    if rms is not None:
        _update(rms, r, finite, group)
        r = rms.normalize(r).float()
    if clip > 0:
        r = r.clamp(-clip, clip)
    return torch.where(finite, r, torch.zeros_like(r))


def _update(rms: RunningMeanStd, x: torch.Tensor, mask: torch.Tensor, group: Group | None) -> None:
    """One batch into a running normaliser: this process's values, or the global batch's moments."""
    if group is None:
        rms.update(x, mask)
        return
    mean, var, count = group.masked_moments(x, mask)
    if count > 0:
        rms.update_from_moments(mean, var, count)


def ppo_advantages(state: StepState, *, gamma: float, lam: float, whiten: bool,
                   value_norm: ValueNormalizer | None, group: Group | None = None) -> None:
    """Token rewards (-beta * KL per token + sequence reward on the last token), GAE, whitening
    (over the global batch with a data-parallel ``group``)."""
    mask = state.update_mask
    rewards = token_rewards(state.shaped, state.token_kl, mask, state.kl_coef)
    adv, returns = gae(rewards, state.values_real, mask, gamma, lam)
    state.raw_advantages, state.returns = adv, returns
    targets = returns
    if value_norm is not None:
        _update(value_norm.stats, returns, mask, group)
        targets = torch.where(mask != 0, value_norm.normalize(returns).float(), torch.zeros_like(returns))
    state.value_targets = targets
    if not whiten:
        state.advantages = adv
    else:
        state.advantages = group.masked_whiten(adv, mask) if group is not None else masked_whiten(adv, mask)


def grpo_advantages(state: StepState, group_size: int) -> None:
    """Group-normalised sequence advantages broadcast over the response tokens (no critic)."""
    finite = torch.isfinite(torch.as_tensor(state.rewards))
    seq = torch.where(finite, state.shaped, torch.full_like(state.shaped, float("nan")))
    seq_adv, zero_std = group_normalize(seq, group_size)
    state.zero_std_groups = zero_std
    adv = seq_adv.float().unsqueeze(1) * state.update_mask
    state.raw_advantages = adv
    state.advantages = adv  # no critic, so no returns and no value targets


def token_rewards(
    seq_rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> torch.Tensor:
    """Per-token reward ``[B, T]``: -kl_coef * kl on valid tokens, plus ``seq_rewards[b]`` on the
    last valid token of row b (seed 003 §3.3: the reward model scores the whole response, the KL
    penalty is paid per token). Padding is 0; a row without valid tokens gets nothing."""
    valid = mask != 0
    out = torch.where(valid, -kl_coef * kl, torch.zeros_like(kl))
    seq = torch.as_tensor(seq_rewards, dtype=out.dtype, device=out.device).reshape(-1)
    if seq.numel() != out.shape[0]:
        raise ValueError(f"token_rewards: {seq.numel()} sequence rewards for {out.shape[0]} rows")
    positions = torch.arange(out.shape[1], device=out.device).expand_as(out)
    last = torch.where(valid, positions, torch.full_like(positions, -1)).amax(dim=1)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    out[rows, last[rows]] += seq[rows]
    return out


def _finite_values(x: Any, mask: Any = None) -> torch.Tensor:
    t = torch.as_tensor(x).detach().to(torch.float64).reshape(-1)
    keep = torch.isfinite(t)
    if mask is not None:
        keep &= torch.as_tensor(mask).reshape(-1).to(t.device) != 0
    return t[keep]


class RunningMeanStd:
    """Mean and (population) variance of every value seen so far, merged batch by batch.

    Chan et al. (1979) parallel update, so the result equals the statistics of all batches
    concatenated. Non-finite values are ignored (fail soft: one NaN reward must not poison the
    normaliser). ``normalize`` maps r -> (r - mu) / (sigma + 1e-8) (seed 000 §4.2).
    """

    EPS = 1e-8

    def __init__(self) -> None:
        self.mean = 0.0
        self.var = 1.0
        self.count = 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.var)

    def update(self, x: Any, mask: Any = None) -> None:
        values = _finite_values(x, mask)
        if values.numel() == 0:
            return
        self.update_from_moments(
            float(values.mean()), float(values.var(unbiased=False)), float(values.numel())
        )

    def update_from_moments(self, batch_mean: float, batch_var: float, batch_count: float) -> None:
        if self.count == 0:
            self.mean, self.var, self.count = batch_mean, batch_var, batch_count
            return
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count
        m2 += delta * delta * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: torch.Tensor, clip: float | None = None) -> torch.Tensor:
        out = (x - self.mean) / (self.std + self.EPS)
        return out if clip is None else out.clamp(-clip, clip)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Exact inverse of :meth:`normalize` (without clipping)."""
        return x * (self.std + self.EPS) + self.mean

    def state_dict(self) -> dict[str, float]:
        return {"mean": float(self.mean), "var": float(self.var), "count": float(self.count)}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.mean = float(state["mean"])
        self.var = float(state["var"])
        self.count = float(state["count"])


class ValueNormalizer:
    """Critic output normalisation (seed 000 §3.2 / §4.2).

    The critic learns returns in normalised units: ``update(returns, mask)`` then
    ``normalize(returns)`` gives its targets; ``denormalize(v_pred)`` maps its predictions back
    (v = v_pred * sigma + mu) before GAE. This cuts the critic's dependence on the absolute reward
    scale, which drifts as the policy improves.
    """

    def __init__(self) -> None:
        self.stats = RunningMeanStd()

    def update(self, returns: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        self.stats.update(returns, mask)

    def normalize(self, returns: torch.Tensor) -> torch.Tensor:
        return self.stats.normalize(returns)

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return self.stats.denormalize(values)

    def state_dict(self) -> dict[str, float]:
        return self.stats.state_dict()

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.stats.load_state_dict(state)


@dataclass
class Normalizers:
    """The run's running normalisers: rewards (``reward.normalize``) and critic targets
    (``model.normalize_values``, PPO); None when switched off."""

    reward: RunningMeanStd | None
    value: ValueNormalizer | None


__all__ = [
    "Normalizers", "RunningMeanStd", "ValueNormalizer", "compute_advantages", "grpo_advantages",
    "ppo_advantages", "shape_rewards", "token_rewards",
]
