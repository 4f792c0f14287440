"""ROLLOUT: sample responses with our own KV-cached loop, decode them, and the forward passes over
(prompt, response).

:func:`sample_responses` is the phase (the trainer's rollout and the validation prompts of EVAL
both use it): left-pad the prompts, sample with :func:`generate`, decode with
:func:`decode_responses`.

Layout of a batch (seed 003 §3.2): prompts are *left*-padded to width P, responses *right*-padded
to width R, so every response starts at column P. ``response_mask`` is 1 on generated tokens up to
and including EOS and 0 on padding — every loss and metric uses it, so prompt and padding tokens
never count. Position ids follow the attention mask, so left padding does not shift positions.

A hand-written sampling loop over the KV cache gives exact control (temperature, top-p, a seeded
``torch.Generator`` on the model's device, several EOS ids) and records the old logprobs while it
samples; docs/trainer.md ("Generation") compares it with ``transformers``' ``generate``. Logprobs
are always computed from the *tempered* distribution the tokens were drawn from. Forwards run on
the model's device under the run's autocast (trainer/devices.py); batches come back on the CPU.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlcockpit.metrics.cost import SCHEDULES, schedule_n
from rlcockpit.trainer.devices import Placement


@dataclass
class RolloutBatch:
    """Token ids and masks of one step's samples (B = prompts * n_samples)."""

    prompt_ids: torch.Tensor  # [B, P] long, left-padded
    prompt_mask: torch.Tensor  # [B, P] long
    response_ids: torch.Tensor  # [B, R] long, right-padded with pad_id
    response_mask: torch.Tensor  # [B, R] float, 1 up to and including EOS
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    logprobs: torch.Tensor | None = None  # [B, R] tempered logprobs of the sampled tokens (0 on padding)

    @property
    def size(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def prompt_width(self) -> int:
        return int(self.prompt_ids.shape[1])

    def full(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, position_ids) of prompt + response, [B, P + R]."""
        input_ids = torch.cat([self.prompt_ids, self.response_ids], dim=1)
        attention_mask = torch.cat([self.prompt_mask, self.response_mask.long()], dim=1)
        return input_ids, attention_mask, positions(attention_mask)

    def select(self, idx: torch.Tensor) -> RolloutBatch:
        return RolloutBatch(self.prompt_ids[idx], self.prompt_mask[idx], self.response_ids[idx],
                            self.response_mask[idx], self.truncated[idx],
                            None if self.logprobs is None else self.logprobs[idx])


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        if s:
            ids[i, width - len(s):] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids, mask


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """One token per row from softmax(logits / T), restricted to the top-p nucleus."""
    return _sample(torch.softmax(logits.float() / temperature, dim=-1), top_p, generator)


def _sample(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # the top token always stays
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
             temperature: float, top_p: float, eos_id: int | Sequence[int], pad_id: int, generator: torch.Generator,
             on_token: Callable[[int], None] | None = None, place: Placement | None = None) -> RolloutBatch:
    """Sample up to ``max_new_tokens`` per row; rows stop at EOS (any of ``eos_id``: instruct models
    often have two, e.g. Qwen's <|im_end|> and <|endoftext|>), kept and masked 1, then pad (masked 0).
    Runs on the model's device (``generator`` must live there) under ``place``'s autocast; the batch
    comes back on the CPU."""
    place = place or Placement.cpu()
    prompt_ids, prompt_mask = place.inputs(model, prompt_ids, prompt_mask)
    device = prompt_ids.device
    eos = torch.as_tensor([eos_id] if isinstance(eos_id, int) else list(eos_id), device=device)
    attn = prompt_mask.clone()
    cache_kw = _cache_keyword(model)
    keep = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
    with place.autocast(device):
        out = model(input_ids=prompt_ids, attention_mask=attn, position_ids=positions(attn), use_cache=True, **keep)
    past, logits = _cache_of(out), out.logits[:, -1]
    next_pos = attn.sum(-1)  # position of the first response token in each row
    finished = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=device)
    tokens, valid, logps = [], [], []
    for t in range(max_new_tokens):
        # the old logprobs of PPO's ratio: the full tempered distribution the token was drawn from
        logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
        tok = _sample(logp_all.exp(), top_p, generator)
        alive = ~finished
        tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
        tokens.append(tok)
        valid.append(alive)
        logps.append(torch.where(alive, logp_all.gather(-1, tok.unsqueeze(-1)).squeeze(-1), 0.0))
        finished = finished | (alive & torch.isin(tok, eos))
        if on_token is not None:
            on_token(t + 1)
        if bool(finished.all()) or t + 1 == max_new_tokens:
            break
        attn = torch.cat([attn, alive.long().unsqueeze(1)], dim=1)
        with place.autocast(device):
            out = model(input_ids=tok.unsqueeze(1), attention_mask=attn, position_ids=next_pos.unsqueeze(1),
                        use_cache=True, **{cache_kw: past})
        past, logits = _cache_of(out), out.logits[:, -1]
        next_pos = next_pos + alive.long()
    cpu = torch.device("cpu")
    return RolloutBatch(prompt_ids.to(cpu), prompt_mask.to(cpu), torch.stack(tokens, dim=1).to(cpu),
                        torch.stack(valid, dim=1).float().to(cpu), truncated=(~finished).to(cpu),
                        logprobs=place.keep(torch.stack(logps, dim=1)))


def stop_ids(tokenizer: Any, model: nn.Module | None = None) -> tuple[int, ...]:
    """Every token that ends a response: the tokenizer's EOS and the model's generation_config EOS
    ids (an instruct model's end-of-turn token, e.g. Qwen's <|im_end|>, next to <|endoftext|>)."""
    ids = [tokenizer.eos_token_id]
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None)
    ids += [extra] if isinstance(extra, int) else list(extra or [])
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


def sample_responses(model: nn.Module, prompts: Sequence[Sequence[int]], tokenizer: Any, *, max_new_tokens: int,
                     temperature: float, top_p: float, generator: torch.Generator, place: Placement | None = None,
                     stop: Sequence[int] | None = None) -> tuple[RolloutBatch, list[str]]:
    """Sample one response per prompt (token ids): the batch (ids, masks, logprobs) and its text.
    ``stop``: the ids that end a response (default: the tokenizer's EOS)."""
    pad_id = tokenizer.pad_token_id
    stop = tuple(stop) if stop else (tokenizer.eos_token_id,)
    ids, mask = left_pad(prompts, pad_id)
    batch = generate(model, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                     eos_id=stop, pad_id=pad_id, generator=generator, place=place)
    return batch, decode_responses(tokenizer, batch.response_ids, batch.response_mask, stop)


def decode_responses(tokenizer: Any, response_ids: torch.Tensor, response_mask: torch.Tensor,
                     eos_id: int | Sequence[int]) -> list[str]:
    """Response text without its EOS and padding."""
    eos = {eos_id} if isinstance(eos_id, int) else set(eos_id)
    rows = []
    for ids, n in zip(response_ids.tolist(), response_mask.sum(-1).tolist(), strict=True):
        ids = ids[: int(n)]
        if ids and ids[-1] in eos:
            ids = ids[:-1]
        rows.append(ids)
    return tokenizer.batch_decode(rows, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _accepts(model: nn.Module, name: str) -> bool:
    # a peft wrapper (or the reference view of one) passes keywords through to the HF model inside
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return name in inspect.signature(inner.forward).parameters


def _cache_keyword(model: nn.Module) -> str:
    # transformers 5 renamed ``past_key_values`` to ``cache``; accept both generations of the API
    return "cache" if _accepts(model, "cache") else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def response_logits(model: nn.Module, batch: RolloutBatch, temperature: float,
                    place: Placement | None = None) -> torch.Tensor:
    """Tempered fp32 logits that predicted each response token, on the model's device: [B, R, V]
    (column P-1+t predicts token t)."""
    place = place or Placement.cpu()
    input_ids, attention_mask, position_ids = place.inputs(model, *batch.full())
    r = batch.response_ids.shape[1]
    with place.autocast(input_ids.device):
        if _accepts(model, "logits_to_keep"):  # skip the LM head on prompt positions
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        use_cache=False, logits_to_keep=r + 1)
            return out.logits[:, :-1].float() / temperature
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    p = batch.prompt_width
    return out.logits[:, p - 1:-1].float() / temperature


def response_values(critic: nn.Module, batch: RolloutBatch, place: Placement | None = None) -> torch.Tensor:
    """Critic value (fp32, on the critic's device) of the state before each response token: [B, R]."""
    place = place or Placement.cpu()
    input_ids, attention_mask, position_ids = place.inputs(critic, *batch.full())
    with place.autocast(input_ids.device):
        values = critic(input_ids, attention_mask, position_ids)
    p = batch.prompt_width
    return values[:, p - 1:-1].float()


class SamplingSchedule:
    """``rollout.schedule`` (seed 004 §3.1; the stages in ``metrics.cost``): temperature, top-p and
    samples per prompt by the training phase; without one, ``rollout.n_samples`` throughout."""

    def __init__(self, name: str, total_steps: int, n_samples: int) -> None:
        self.stages = SCHEDULES[name] if name else None
        self.total_steps = total_steps
        self.default_n = n_samples
        self.applied: int | None = None  # the stage whose sampling was last applied

    def stage(self, step: int) -> tuple[int, float, float, int] | None:
        """(stage index, temperature, top_p, n_samples) at ``step``."""
        if self.stages is None:
            return None
        fraction = (max(step, 1) - 1) / self.total_steps
        index = max(i for i, stage in enumerate(self.stages) if fraction >= stage[0])
        return (index, *schedule_n(self.stages, fraction))

    def n_samples(self, step: int) -> int:
        stage = self.stage(step)
        return stage[3] if stage else self.default_n

    def starting(self, next_step: int) -> tuple[int, float, float, int] | None:
        """The stage that starts at ``next_step`` (once), else None."""
        stage = self.stage(next_step)
        if stage is None or stage[0] == self.applied or next_step > self.total_steps:
            return None
        self.applied = stage[0]
        return stage
