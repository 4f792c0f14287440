"""SCORE: the step's rewards, old and reference logprobs, per-token KL and critic values (DESIGN.md §3).

Frozen forward passes under no-grad: the reward function on (prompt, response, meta, step); the
reference (and, when sampling did not record them, the actor) over (prompt, response) at the
sampling temperature; the critic's values, mapped back to return units when values are normalised.
The forwards run on each model's device in micro-batches (``model.micro_batch_size``; an
out-of-memory error halves them, trainer/memory.py); what the step keeps comes back to the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from rlcockpit.metrics.rl import kl_per_token, logprobs_from_logits
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer.advantage import ValueNormalizer
from rlcockpit.trainer.memory import MicroBatches
from rlcockpit.trainer.rollout import RolloutBatch, response_logits, response_values
from rlcockpit.trainer.setup import Models
from rlcockpit.trainer.step import StepState


@torch.no_grad()
def score_batch(state: StepState, *, models: Models, reward_fn: RewardFunction, temperature: float, kl_estimator: str,
                value_norm: ValueNormalizer | None, micro: MicroBatches | None = None) -> None:
    """Fill ``state.scored``, ``old_logprobs``, ``ref_logprobs``, ``token_kl`` (0 on padding) and, with
    a critic, ``values`` / ``values_real``."""
    state.scored = reward_fn([it.prompt for it in state.items], state.responses,
                             [it.meta for it in state.items], state.step)
    place = models.placement

    def logprobs(model: nn.Module) -> Callable[[RolloutBatch], torch.Tensor]:
        return lambda b: logprobs_from_logits(response_logits(model, b, temperature, place),
                                              place.inputs(model, b.response_ids)[0])

    state.old_logprobs = state.batch.logprobs  # recorded while sampling: no second actor pass
    if state.old_logprobs is None:
        state.old_logprobs = _chunked(state, logprobs(models.actor), micro)
    state.ref_logprobs = _chunked(state, logprobs(models.reference), micro)
    kl = kl_per_token(state.old_logprobs, state.ref_logprobs, kl_estimator)
    state.token_kl = torch.where(state.mask != 0, kl, torch.zeros_like(kl))
    if models.critic is not None:
        critic = models.critic
        state.values = _chunked(state, lambda b: response_values(critic, b, place), micro)
        state.values_real = value_norm.denormalize(state.values).float() if value_norm else state.values


def _chunked(state: StepState, forward: Callable[[RolloutBatch], torch.Tensor],
             micro: MicroBatches | None) -> torch.Tensor:
    """``forward`` over the batch in micro-batches, concatenated on the CPU in fp32."""
    batch = state.batch
    if micro is None:
        return forward(batch).float().cpu()
    parts = micro.run(torch.arange(batch.size), lambda idx: forward(batch.select(idx)).float().cpu(),
                      phase="SCORE", step=state.step, seq_len=batch.prompt_width + batch.response_ids.shape[1],
                      response_len=batch.response_ids.shape[1])
    return torch.cat(parts, dim=0)
