"""The completions of one TRL generation as rlcockpit samples (prompt, completion, each reward
function's score, the advantage, per-token logprobs where the trainer computed them).

TRL's GRPO / RLOO trainers append every generation to ``trainer._logs`` (prompts, completions, the
score of each reward function, the advantages; gathered over processes) and return the token ids,
masks and per-token log-probabilities from ``_generate_and_score_completions``. The callback wraps
that method on the trainer instance and calls :func:`samples_of` with its inputs and output, so
each completion is logged exactly once, at the step it is trained on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlcockpit.integrations.importers._base import message_text, prompt_id
from rlcockpit.records import SampleRecord


def _last(values: Any, n: int) -> list[Any]:
    values = list(values)
    return values[-n:] if n else []


def _rows(tensor: Any, mask: Any) -> list[list[float]] | None:
    """Per-row lists of a (batch, length) tensor, cut at the mask's length."""
    if tensor is None or mask is None:
        return None
    lengths = mask.sum(dim=1).tolist()
    values = tensor.detach().float().cpu().tolist()
    return [row[:int(n)] for row, n in zip(values, lengths, strict=True)]


def samples_of(trainer: Any, inputs: Sequence[Mapping[str, Any]], output: Mapping[str, Any], step: int,
               first_id: int = 0) -> list[SampleRecord]:
    """The samples of the generation that just ran (the last entries of ``trainer._logs``)."""
    logs = trainer._logs
    n = len(output["completion_ids"]) * int(getattr(trainer.accelerator, "num_processes", 1))
    prompts, completions = _last(logs["prompt"], n), _last(logs["completion"], n)
    advantages = _last(logs["advantages"], n)
    rewards = {name: _last(values, n) for name, values in logs["rewards"].items()}
    weights = [float(w) for w in trainer.reward_weights.tolist()] if hasattr(trainer, "reward_weights") else []
    names = list(getattr(trainer, "reward_func_names", rewards))
    local = len(output["completion_ids"]) == n  # one process: the token arrays belong to these rows
    mask = output.get("completion_mask")
    ids = output["completion_ids"].tolist() if local else None
    logps = _rows(output.get("old_per_token_logps"), mask) if local else None
    refs = _rows(output.get("ref_per_token_logps"), mask) if local else None
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    groups: dict[str, int] = {}
    out = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        prompt_text = message_text(prompt) or str(prompt)
        components = {k: float(v[i]) for k, v in rewards.items() if v[i] is not None and math.isfinite(v[i])}
        total = sum(weights[names.index(k)] * v if k in names and names.index(k) < len(weights) else v
                    for k, v in components.items())
        length = int(mask[i].sum()) if local and mask is not None else 0
        tokens = _tokens(tokenizer, ids[i][:length]) if local and ids is not None else None
        lp, rl = (logps[i] if logps else None), (refs[i] if refs else None)
        token_kl = [a - b for a, b in zip(lp, rl, strict=True)] if lp and rl else None
        row = inputs[i] if i < len(inputs) and local else {}
        out.append(SampleRecord(
            step=step, sample_id=first_id + i, prompt=prompt_text, response=message_text(completion) or str(completion),
            reward=float(total), prompt_id=prompt_id(prompt_text), group_id=groups.setdefault(prompt_text, len(groups)),
            category=str(row.get("category", "") or ""), components=components, length=length,
            truncated=bool(local and ids is not None and length >= int(trainer.max_completion_length)),
            advantage=float(advantages[i]) if i < len(advantages) else None,
            kl_sum=sum(token_kl) if token_kl else None, kl_max=max(token_kl) if token_kl else None,
            tokens=tuple(tokens) if tokens is not None and (lp or rl) else None,
            logprobs=tuple(lp) if lp else None, ref_logprobs=tuple(rl) if rl else None,
            token_kl=tuple(token_kl) if token_kl else None))
    return out


def _tokens(tokenizer: Any, ids: list[int]) -> list[str] | None:
    if tokenizer is None or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    return [str(t) for t in tokenizer.convert_ids_to_tokens(ids)]
