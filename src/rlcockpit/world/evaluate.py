"""Sampled evaluation of a policy on tiny-world prompts (``rlcockpit world eval``).

Responses are sampled with Hugging Face ``generate`` under a fixed seed, scored with
:func:`rlcockpit.world.rewards.score` and reduced per category by
:func:`rlcockpit.metrics.evaluation.eval_metrics` (the trainer's EVAL phase uses the same function).
The reward of a sample is the unweighted sum of its components; accuracy is the mean of
``info/correct``. The caller's torch RNG state is left untouched, so evaluating inside a training
run does not change the run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlcockpit.metrics.evaluation import eval_metrics
from rlcockpit.world.prompts import CATEGORIES, Prompt
from rlcockpit.world.rewards import FLAGS, score, total_reward

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclasses.dataclass(frozen=True)
class EvalSample:
    prompt: Prompt
    response: str
    reward: float
    scores: dict


@dataclasses.dataclass(frozen=True)
class CategoryStats:
    category: str
    count: int
    reward_mean: float
    accuracy: float
    flag_rates: dict
    """``{flag: share of samples with it}``."""


@dataclasses.dataclass(frozen=True)
class EvalReport:
    samples: list[EvalSample]
    categories: list[CategoryStats]

    @property
    def reward_mean(self) -> float:
        return self.metrics()["eval/reward/mean"] if self.samples else 0.0

    def metrics(self) -> dict[str, float]:
        """Catalog names (DESIGN.md §4): ``eval/reward/mean``, ``eval/reward/category/<c>/mean``,
        ``eval/accuracy/<c>``."""
        return _metrics(self.samples)


def generate_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 24,
    seed: int = 0,
    batch_size: int = 64,
) -> list[str]:
    """Sample one response per prompt (greedy when ``temperature`` is 0), seeded and batched."""
    import torch

    was_training = model.training
    model.eval()
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
    if temperature <= 0:
        sampling = {"do_sample": False}
    out: list[str] = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                chunk = list(prompts[start : start + batch_size])
                enc = tokenizer(chunk, return_tensors="pt", padding=True, padding_side="left",
                                add_special_tokens=False)
                ids = model.generate(
                    **enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, **sampling,
                )
                new = ids[:, enc["input_ids"].shape[1]:]
                out += tokenizer.batch_decode(new, skip_special_tokens=True)
    finally:
        model.train(was_training)
    return out


def evaluate_detailed(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    **generate_kwargs,
) -> EvalReport:
    """Generate, score and reduce; ``generate_kwargs`` go to :func:`generate_responses`."""
    responses = generate_responses(model, tokenizer, [p.prompt for p in prompts], **generate_kwargs)
    scores = score([p.prompt for p in prompts], responses, [p.meta for p in prompts], 0)
    samples = [EvalSample(p, r, total_reward(s), s)
               for p, r, s in zip(prompts, responses, scores, strict=True)]
    return EvalReport(samples, _per_category(samples))


def _metrics(samples: Sequence[EvalSample]) -> dict[str, float]:
    return eval_metrics([s.prompt.category for s in samples], [s.reward for s in samples],
                        [s.scores["info/correct"] for s in samples])


def _per_category(samples: list[EvalSample]) -> list[CategoryStats]:
    metrics, stats = _metrics(samples), []
    for category in CATEGORIES:
        group = [s for s in samples if s.prompt.category == category]
        if not group:
            continue
        flags = {f: statistics.fmean(s.scores[f"flag/{f}"] for s in group) for f in FLAGS}
        stats.append(CategoryStats(
            category, len(group), metrics.get(f"eval/reward/category/{category}/mean", math.nan),
            metrics.get(f"eval/accuracy/{category}", math.nan), flags,
        ))
    return stats


def evaluate_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 24,
    seed: int = 0,
    batch_size: int = 64,
) -> dict[str, float]:
    """Reward mean and accuracy per category, keyed by the catalog's ``eval/...`` names."""
    report = evaluate_detailed(
        model, tokenizer, prompts, temperature=temperature, top_p=top_p,
        max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size,
    )
    return report.metrics()


__all__ = ["CategoryStats", "EvalReport", "EvalSample", "evaluate_detailed", "evaluate_policy",
           "generate_responses"]
