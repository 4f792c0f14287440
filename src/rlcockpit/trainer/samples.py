"""Per-sample records of a step (``SampleRecord``) and the per-step histograms.

Tensors are converted to Python lists once per step and sliced per sample; token strings come from
a per-tokenizer cache (each id decoded once), so no per-token tensor work happens here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rlcockpit.metrics.rl import masked_mean, sequence_sum
from rlcockpit.records import SampleRecord
from rlcockpit.trainer.step import StepState

NONFINITE_FLAG = "nonfinite_reward"


class TokenText:
    """id -> the text of that single token (cached; partial UTF-8 bytes show as U+FFFD)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> tuple[str, ...]:
        missing = [i for i in set(ids) if i not in self._cache]
        if missing:
            texts = self.tokenizer.batch_decode([[i] for i in missing], skip_special_tokens=False,
                                                clean_up_tokenization_spaces=False)
            self._cache.update(zip(missing, texts, strict=True))
        return tuple(self._cache[i] for i in ids)


def _rows(x: torch.Tensor | None) -> list[list[float]] | None:
    return None if x is None else x.detach().float().tolist()


def build_samples(state: StepState, token_text: TokenText) -> list[SampleRecord]:
    mask = state.mask
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    ids = state.batch.response_ids.tolist()
    logprobs, ref_logprobs, token_kl = _rows(state.old_logprobs), _rows(state.ref_logprobs), _rows(state.token_kl)
    kl_sum = sequence_sum(state.token_kl, mask).tolist()
    kl_max = torch.where(mask != 0, state.token_kl, torch.full_like(state.token_kl, -math.inf)).amax(-1).tolist()
    adv = masked_mean(state.advantages, state.update_mask, dim=-1).tolist()
    first_value = state.values_real[:, 0].tolist() if state.values_real is not None else None
    truncated = state.batch.truncated.tolist()
    kept = state.update_mask.sum(-1).gt(0).tolist()
    scored = state.scored
    uncertainty = scored.info.get("uncertainty")  # a reward model's score std (rewards.rm_reward)
    out = []
    for i, item in enumerate(state.items):
        n = lengths[i]
        reward = float(state.rewards[i])
        flags = tuple(scored.flags[i]) if scored.flags else ()
        if not math.isfinite(reward):
            flags = (*flags, NONFINITE_FLAG)
        out.append(SampleRecord(
            step=state.step, sample_id=i, prompt=item.prompt, response=state.responses[i], reward=reward,
            prompt_id=item.prompt_id, group_id=state.group_ids[i], category=item.category,
            components={k: float(v[i]) for k, v in scored.components.items()},
            uncertainty=float(uncertainty[i]) if uncertainty is not None and math.isfinite(uncertainty[i]) else None,
            flags=flags, length=n, truncated=bool(truncated[i]),
            advantage=float(adv[i]) if kept[i] else None,
            value=float(first_value[i]) if first_value is not None else None,
            kl_sum=float(kl_sum[i]), kl_max=float(kl_max[i]) if n else None,
            tokens=token_text(ids[i][:n]), logprobs=tuple(logprobs[i][:n]),
            ref_logprobs=tuple(ref_logprobs[i][:n]), token_kl=tuple(token_kl[i][:n]),
        ))
    return out


def histogram_values(state: StepState) -> dict[str, np.ndarray]:
    """Values of the per-step histograms: reward, response length, advantage and value per sample."""
    out = {
        "reward/hist": np.asarray(state.rewards, dtype=np.float64),
        "response/length/hist": state.mask.sum(-1).numpy().astype(np.float64),
    }
    kept = state.update_mask.sum(-1) > 0
    if bool(kept.any()):
        out["advantage/hist"] = masked_mean(state.advantages, state.update_mask, dim=-1)[kept].numpy()
    if state.values_real is not None:
        out["value/hist"] = state.values_real[:, 0].numpy()
    return out
