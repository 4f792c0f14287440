"""Reward functions for benchmarks/unseen_faults.py, passed as ``reward.fn=_unseen_rewards:NAME``
(the public hook any user has; ``benchmarks/`` is put on PYTHONPATH by the benchmark). Each wraps
the tiny world's own rule rewards and changes them the way a real reward pipeline goes wrong."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from rlcockpit.world.rewards import score as world_score

GROWTH = 1.08  # per step: the scale of a reward model whose outputs inflate, ~x2.2 in 10 steps
MODE_ONSET, MODE_SHIFT = 10, 4.0


def growing(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
            step: int) -> list[dict[str, float]]:
    """Every component scaled by GROWTH ** step (run with reward.normalize=false)."""
    factor = GROWTH ** step
    return [{k: v * factor if "/" not in k else v for k, v in out.items()}
            for out in world_score(prompts, responses, meta, step)]


def two_modes(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
              step: int) -> list[dict[str, float]]:
    """From step MODE_ONSET on, half of the prompts (by a stable hash) are paid MODE_SHIFT more:
    the step's rewards split into two separated modes."""
    out = world_score(prompts, responses, meta, step)
    if step < MODE_ONSET:
        return out
    shifted = []
    for prompt, scores in zip(prompts, out, strict=True):
        scores = dict(scores)
        if zlib.crc32(prompt.encode("utf-8")) % 2 == 0:
            key = next(k for k in scores if "/" not in k)
            scores[key] += MODE_SHIFT
        shifted.append(scores)
    return shifted
