"""What one training step carries from phase to phase, and the pure ADVANTAGE computations.

``StepState`` is filled in order: ROLLOUT (prompts, token ids, responses), SCORE (old / reference
logprobs, values, rewards), ADVANTAGE (shaped rewards, advantages, returns), UPDATE (stats).
Samples whose reward is NaN/inf stay in the state (they are stored) but get ``update_mask`` 0, so
they never reach a loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlcockpit.metrics.rl import gae, group_normalize, masked_whiten
from rlcockpit.rewards import ScoredBatch
from rlcockpit.trainer.advantages import RunningMeanStd, ValueNormalizer, token_rewards
from rlcockpit.trainer.data import PromptItem
from rlcockpit.trainer.rollout import RolloutBatch


@dataclass
class StepState:
    step: int
    items: list[PromptItem]  # one per sample (prompts repeated n_samples times, groups contiguous)
    group_ids: list[int]
    batch: RolloutBatch
    responses: list[str]
    old_logprobs: torch.Tensor | None = None  # [N, R]
    ref_logprobs: torch.Tensor | None = None  # [N, R]
    token_kl: torch.Tensor | None = None  # [N, R], zero on padding
    values: torch.Tensor | None = None  # [N, R] critic output (normalised units if enabled)
    values_real: torch.Tensor | None = None  # [N, R] in return units
    scored: ScoredBatch | None = None
    rewards: np.ndarray | None = None  # [N] total * reward_scale (NaN kept) -> reward/mean
    shaped: torch.Tensor | None = None  # [N] after running normalisation and clip (0 where dropped)
    update_mask: torch.Tensor | None = None  # [N, R] response mask of the samples kept for the update
    advantages: torch.Tensor | None = None  # [N, R] what the policy loss uses
    raw_advantages: torch.Tensor | None = None  # [N, R] before whitening
    returns: torch.Tensor | None = None  # [N, R] in return units
    value_targets: torch.Tensor | None = None  # [N, R] in critic units
    zero_std_groups: int = 0
    kl_coef: float = 0.0
    clip_eps: float = 0.0
    update_stats: dict[str, float] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.items)

    @property
    def mask(self) -> torch.Tensor:
        return self.batch.response_mask


def shape_rewards(rewards: np.ndarray, rms: RunningMeanStd | None, clip: float) -> torch.Tensor:
    """Running normalisation (seed 000 §4.2) then clipping; non-finite rewards become 0 (dropped)."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    finite = torch.isfinite(r)
    r = torch.where(finite, r, torch.zeros_like(r))
    if rms is not None:
        rms.update(r, finite)
        r = rms.normalize(r).float()
    if clip > 0:
        r = r.clamp(-clip, clip)
    return torch.where(finite, r, torch.zeros_like(r))


def ppo_advantages(state: StepState, *, gamma: float, lam: float, whiten: bool,
                   value_norm: ValueNormalizer | None) -> None:
    """Token rewards (-beta * KL per token + sequence reward on the last token), GAE, whitening."""
    mask = state.update_mask
    rewards = token_rewards(state.shaped, state.token_kl, mask, state.kl_coef)
    adv, returns = gae(rewards, state.values_real, mask, gamma, lam)
    state.raw_advantages, state.returns = adv, returns
    targets = returns
    if value_norm is not None:
        value_norm.update(returns, mask)
        targets = torch.where(mask != 0, value_norm.normalize(returns).float(), torch.zeros_like(returns))
    state.value_targets = targets
    state.advantages = masked_whiten(adv, mask) if whiten else adv


def grpo_advantages(state: StepState, group_size: int) -> None:
    """Group-normalised sequence advantages broadcast over the response tokens (no critic)."""
    finite = torch.isfinite(torch.as_tensor(state.rewards))
    seq = torch.where(finite, state.shaped, torch.full_like(state.shaped, float("nan")))
    seq_adv, zero_std = group_normalize(seq, group_size)
    state.zero_std_groups = zero_std
    adv = seq_adv.float().unsqueeze(1) * state.update_mask
    state.raw_advantages = adv
    state.advantages = adv  # no critic, so no returns and no value targets
