"""EVAL: the policy answers fixed validation prompts with a fixed sampling seed.

Every evaluation uses a fresh ``torch.Generator(eval.seed)``, so two evaluations of the same weights
give the same answers and differences between steps come from learning, not from sampling noise.
It never touches the rollout generator, so evaluating does not change the training trajectory. The
``eval/*`` metrics are reduced by :func:`rlcockpit.metrics.evaluation.eval_metrics`, as in
``rlcockpit world eval``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import nn

from rlcockpit.metrics.evaluation import eval_metrics
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer.config import EvalConfig
from rlcockpit.trainer.data import PromptItem
from rlcockpit.trainer.devices import Placement
from rlcockpit.trainer.rollout import sample_responses


class Evaluator:
    def __init__(self, items: Sequence[PromptItem], cfg: EvalConfig, tokenizer, reward_fn: RewardFunction,
                 place: Placement | None = None, stop: Sequence[int] = ()) -> None:
        self.items = list(items)[: cfg.max_prompts]
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.reward_fn = reward_fn
        self.place = place or Placement.cpu()
        self.stop = tuple(stop)

    def run(self, model: nn.Module, step: int, max_new_tokens: int) -> dict[str, float]:
        totals, correct = self.score(model, step, max_new_tokens)
        return eval_metrics([it.category for it in self.items], totals, correct)

    def score(self, model: nn.Module, step: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Total reward per validation prompt (and ``info["correct"]`` when the reward function gives it);
        the control plane's effect measurement compares these distributions before / after a change."""
        generator = self.place.generator(self.cfg.seed)
        responses: list[str] = []
        for start in range(0, len(self.items), self.cfg.batch_size):
            chunk = self.items[start:start + self.cfg.batch_size]
            _, texts = sample_responses(model, [it.token_ids for it in chunk], self.tokenizer,
                                        max_new_tokens=max_new_tokens, temperature=self.cfg.temperature,
                                        top_p=self.cfg.top_p, generator=generator, place=self.place,
                                        stop=self.stop)
            responses.extend(texts)
        scored = self.reward_fn([it.prompt for it in self.items], responses, [it.meta for it in self.items], step)
        return np.asarray(scored.totals, dtype=np.float64), scored.info.get("correct")

