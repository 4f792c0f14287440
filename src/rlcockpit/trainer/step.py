"""What one training step carries from phase to phase.

``StepState`` is filled in order: ROLLOUT (prompts, token ids, responses), SCORE (old / reference
logprobs, values, rewards), ADVANTAGE (shaped rewards, advantages, returns), UPDATE (stats).
Samples whose reward is NaN/inf stay in the state (they are stored) but get ``update_mask`` 0, so
they never reach a loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlcockpit.rewards import ScoredBatch
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
