"""EVAL: the policy answers fixed validation prompts with a fixed sampling seed.

Every evaluation uses a fresh ``torch.Generator(eval.seed)``, so two evaluations of the same weights
give the same answers and differences between steps come from learning, not from sampling noise.
It never touches the rollout generator, so evaluating does not change the training trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer.config import EvalConfig
from rlcockpit.trainer.data import PromptItem
from rlcockpit.trainer.rollout import generate, left_pad


class Evaluator:
    def __init__(self, items: Sequence[PromptItem], cfg: EvalConfig, tokenizer, reward_fn: RewardFunction,
                 pad_id: int, eos_id: int) -> None:
        self.items = list(items)[: cfg.max_prompts]
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.reward_fn = reward_fn
        self.pad_id, self.eos_id = pad_id, eos_id

    def run(self, model: nn.Module, step: int, max_new_tokens: int) -> dict[str, float]:
        totals, correct = self.score(model, step, max_new_tokens)
        return eval_metrics(self.items, totals, correct)

    def score(self, model: nn.Module, step: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Total reward per validation prompt (and ``info["correct"]`` when the reward function gives it);
        the control plane's effect measurement compares these distributions before / after a change."""
        generator = torch.Generator().manual_seed(self.cfg.seed)
        responses: list[str] = []
        for start in range(0, len(self.items), self.cfg.batch_size):
            chunk = self.items[start:start + self.cfg.batch_size]
            ids, mask = left_pad([it.token_ids for it in chunk], self.pad_id)
            batch = generate(model, ids, mask, max_new_tokens=max_new_tokens, temperature=self.cfg.temperature,
                             top_p=self.cfg.top_p, eos_id=self.eos_id, pad_id=self.pad_id, generator=generator)
            responses.extend(decode_responses(self.tokenizer, batch.response_ids, batch.response_mask,
                                              self.eos_id))
        scored = self.reward_fn([it.prompt for it in self.items], responses, [it.meta for it in self.items], step)
        return np.asarray(scored.totals, dtype=np.float64), scored.info.get("correct")


def eval_metrics(items: Sequence[PromptItem], totals: np.ndarray, correct: np.ndarray | None) -> dict[str, float]:
    """eval/reward/mean, eval/reward/category/<c>/mean and eval/accuracy/<c> (mean of info/correct)."""
    categories = np.asarray([it.category for it in items])
    finite = np.isfinite(totals)
    out = {"eval/reward/mean": float(totals[finite].mean()) if finite.any() else float("nan")}
    for cat in sorted(set(categories.tolist())):
        sel = (categories == cat) & finite
        if sel.any():
            out[f"eval/reward/category/{cat}/mean"] = float(totals[sel].mean())
        if correct is not None:
            verdicts = correct[(categories == cat) & np.isfinite(correct)]
            if verdicts.size:
                out[f"eval/accuracy/{cat}"] = float(verdicts.mean())
    return out


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor,
                     eos_id: int) -> list[str]:
    """Response text without EOS and padding."""
    rows = []
    for ids, n in zip(response_ids.tolist(), response_mask.sum(-1).tolist(), strict=True):
        ids = ids[: int(n)]
        if ids and ids[-1] == eos_id:
            ids = ids[:-1]
        rows.append(ids)
    return tokenizer.batch_decode(rows, skip_special_tokens=True, clean_up_tokenization_spaces=False)
