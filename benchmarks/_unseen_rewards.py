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


# --- the second batch (classes the first five did not cover) ------------------------------------

LENGTH_PAY = 0.15  # per word: a reward that pays for length, the classic verbosity exploit


def _words(text: str) -> int:
    return len(text.split())


def length_paid(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
                step: int) -> list[dict[str, float]]:
    """The world's rewards plus LENGTH_PAY per word of the response (a reward that pays for
    length; run with kl.coef=0 so nothing holds the policy back)."""
    out = world_score(prompts, responses, meta, step)
    return [{**scores, "length_bonus": LENGTH_PAY * _words(resp)}
            for scores, resp in zip(out, responses, strict=True)]


def constant(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
             step: int) -> list[float]:
    """Every answer paid the same (a reward function that ignores its input: a broken parser,
    a reward model returning its bias): no learning signal from step 1."""
    return [1.0] * len(responses)


def noise(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
          step: int) -> list[float]:
    """A reward that is pure noise, uncorrelated with the answer (a reward model fed the wrong
    field): uniform in [-1, 1], reproducible from the step and the text."""
    return [((zlib.crc32(f"{step}|{p}|{r}".encode()) % 20001) - 10000) / 10000.0
            for p, r in zip(prompts, responses, strict=True)]
