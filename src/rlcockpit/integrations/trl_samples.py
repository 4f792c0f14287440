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
from itertools import islice
from typing import Any

import torch

from rlcockpit.integrations.importers._base import message_text, prompt_id
from rlcockpit.records import SampleRecord


def _last(values: Any, n: int) -> list[Any]:
    values = list(values)
    return values[-n:] if n else []


def _rows(tensor: Any, lengths: list[int]) -> list[tuple[float, ...]] | None:
    """Per-row tuples of a (batch, length) tensor as float32 values, each cut at its row's length —
    one ``tolist`` (float32 and narrower floats convert exactly; a float64 tensor is rounded first)."""
    if tensor is None:
        return None
    if getattr(tensor, "dtype", None) is torch.float64:
        tensor = tensor.float()
    return [tuple(islice(row, n)) for row, n in zip(tensor.tolist(), lengths, strict=True)]


class TokenNames(dict):
    """Token id -> token string through a tokenizer, each id converted once, when first looked up
    (ids map to the same token for the whole run; the tokenizer's own conversion is a Python call
    per id)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__()
        self.tokenizer = tokenizer

    def __missing__(self, token_id: int) -> str:
        name = self[token_id] = str(self.tokenizer.convert_ids_to_tokens([token_id])[0])
        return name


def token_names(trainer: Any) -> TokenNames | None:
    """The trainer's tokenizer as a :class:`TokenNames` (None when it cannot name tokens)."""
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if tokenizer is None or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    return TokenNames(tokenizer)


def samples_of(trainer: Any, inputs: Sequence[Mapping[str, Any]], output: Mapping[str, Any], step: int,
               first_id: int = 0, names: TokenNames | None = None) -> list[SampleRecord]:
    """The samples of the generation that just ran (the last entries of ``trainer._logs``).

    ``names``: the tokenizer as :class:`TokenNames`, kept by the caller across generations (made
    from the trainer's tokenizer when not given). The tensors are read once each, for the batch."""
    logs = trainer._logs
    n = len(output["completion_ids"]) * int(getattr(trainer.accelerator, "num_processes", 1))
    prompts, completions = _last(logs["prompt"], n), _last(logs["completion"], n)
    advantages = _last(logs["advantages"], n)
    weights = [float(w) for w in trainer.reward_weights.tolist()] if hasattr(trainer, "reward_weights") else []
    weight_of: dict[str, float] = {}
    for j, name in enumerate(list(getattr(trainer, "reward_func_names", logs["rewards"]))[:len(weights)]):
        weight_of.setdefault(name, weights[j])  # the first function of that name, as names.index finds it
    # per reward function: its weight (None: unweighted) and each row's finite score (None: dropped)
    scores = [(name, weight_of.get(name), [float(v) if v is not None and math.isfinite(v) else None
                                           for v in _last(values, n)])
              for name, values in logs["rewards"].items()]
    local = len(output["completion_ids"]) == n  # one process: the token arrays belong to these rows
    mask = output.get("completion_mask") if local else None
    ids = output["completion_ids"].tolist() if local else None
    lengths = [int(sum(row)) for row in mask.tolist()] if mask is not None else [0] * len(prompts)
    logps = _rows(output.get("old_per_token_logps"), lengths) if mask is not None else None
    refs = _rows(output.get("ref_per_token_logps"), lengths) if mask is not None else None
    if ids is not None and (logps or refs) and names is None:
        names = token_names(trainer)
    lookup = names.__getitem__ if names is not None and ids is not None else None
    max_length = int(trainer.max_completion_length) if ids is not None else 0
    groups: dict[str, tuple[int, str]] = {}  # prompt text -> (group id, prompt id)
    out = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        prompt_text = prompt if type(prompt) is str and prompt else message_text(prompt) or str(prompt)
        group = groups.get(prompt_text)
        if group is None:
            group = groups[prompt_text] = (len(groups), prompt_id(prompt_text))
        components = {name: col[i] for name, _, col in scores if col[i] is not None}
        total = sum(col[i] * w if w is not None else col[i] for _, w, col in scores if col[i] is not None)
        length = lengths[i]
        lp, rl = (logps[i] if logps else None), (refs[i] if refs else None)
        token_kl = tuple([a - b for a, b in zip(lp, rl, strict=True)]) if lp and rl else None
        tokens = tuple(map(lookup, islice(ids[i], length))) if lookup is not None and (lp or rl) else None
        row = inputs[i] if i < len(inputs) and local else {}
        out.append(SampleRecord(
            step=step, sample_id=first_id + i, prompt=prompt_text,
            response=completion if type(completion) is str and completion else message_text(completion) or str(completion),
            reward=float(total), prompt_id=group[1], group_id=group[0],
            category=str(row.get("category", "") or ""), components=components, length=length,
            truncated=bool(ids is not None and length >= max_length),
            advantage=float(advantages[i]) if i < len(advantages) else None,
            kl_sum=sum(token_kl) if token_kl else None, kl_max=max(token_kl) if token_kl else None,
            tokens=tokens, logprobs=lp or None, ref_logprobs=rl or None, token_kl=token_kl or None))
    return out
