"""SCORE: the step's rewards, old and reference logprobs, per-token KL and critic values (DESIGN.md §3).

Frozen forward passes under no-grad: the reward function on (prompt, response, meta, step); the
reference (and, when sampling did not record them, the actor) over (prompt, response) at the
sampling temperature; the critic's values, mapped back to return units when values are normalised.
"""

from __future__ import annotations

import torch

from rlcockpit.metrics.rl import kl_per_token, logprobs_from_logits
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer.advantage import ValueNormalizer
from rlcockpit.trainer.rollout import response_logits, response_values
from rlcockpit.trainer.setup import Models
from rlcockpit.trainer.step import StepState


@torch.no_grad()
def score_batch(state: StepState, *, models: Models, reward_fn: RewardFunction, temperature: float, kl_estimator: str,
                value_norm: ValueNormalizer | None) -> None:
    """Fill ``state.scored``, ``old_logprobs``, ``ref_logprobs``, ``token_kl`` (0 on padding) and, with
    a critic, ``values`` / ``values_real``."""
    state.scored = reward_fn([it.prompt for it in state.items], state.responses,
                             [it.meta for it in state.items], state.step)
    ids = state.batch.response_ids
    state.old_logprobs = state.batch.logprobs  # recorded while sampling: no second actor pass
    if state.old_logprobs is None:
        state.old_logprobs = logprobs_from_logits(response_logits(models.actor, state.batch, temperature), ids)
    state.ref_logprobs = logprobs_from_logits(response_logits(models.reference, state.batch, temperature), ids)
    kl = kl_per_token(state.old_logprobs, state.ref_logprobs, kl_estimator)
    state.token_kl = torch.where(state.mask != 0, kl, torch.zeros_like(kl))
    if models.critic is not None:
        state.values = response_values(models.critic, state.batch)
        state.values_real = value_norm.denormalize(state.values).float() if value_norm else state.values
