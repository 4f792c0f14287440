"""Supervised warm start of the tiny world (``rlcockpit world sft``).

Trains the tiny GPT-2 from a seeded random init on the shipped demonstrations
(``data/sft_train.jsonl``): the loss is the next-token cross-entropy on the response tokens and
the closing eos only, the prompt is context. The demonstrations contain a controlled share of bad
habits (see :mod:`rlcockpit.world.build`) and the budget is short, so the resulting policy is
sensible but imperfect -- the headroom RL is meant to close.

Same seed, same thread count, same data -> identical weights (a test checks it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcockpit.config import Config, option
from rlcockpit.world import DATA_DIR
from rlcockpit.world.prompts import read_jsonl

if TYPE_CHECKING:
    import torch
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

IGNORE_INDEX = -100  # label value the loss skips (prompt and padding positions)


@dataclasses.dataclass(frozen=True)
class SFTConfig(Config):
    """Budget and optimiser of the warm start. The defaults produce the shipped checkpoint."""

    seed: int = option(0, help="Seed of the model init and of the data order.", range=(0, None))
    steps: int = option(2000, help="Optimiser steps.", range=(1, 1_000_000))
    batch_size: int = option(64, help="Demonstrations per step.", range=(1, 4096))
    lr: float = option(3e-3, help="Peak AdamW learning rate (linear warm-up, cosine decay).",
                       range=(1e-6, 1.0))
    warmup_steps: int = option(30, help="Linear warm-up steps.", range=(0, None))
    weight_decay: float = option(0.01, help="AdamW weight decay.", range=(0.0, 1.0))
    grad_clip: float = option(1.0, help="Clip the global gradient norm to this value.",
                              range=(0.0, None))
    threads: int = option(1, help="torch CPU threads during training. The result is reproducible "
                          "bit for bit only with the same thread count.", range=(1, 256))


@dataclasses.dataclass
class SFTResult:
    """What a warm start produced."""

    model: GPT2LMHeadModel
    tokenizer: PreTrainedTokenizerFast
    losses: list[float]
    wall_time_s: float


def load_demonstrations(path: Path | None = None) -> list[dict]:
    """Rows ``{"category", "prompt", "response", "habit"}`` of the shipped demonstrations."""
    return read_jsonl(path or DATA_DIR / "sft_train.jsonl")


def encode(tokenizer: PreTrainedTokenizerFast, demos: list[dict]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + response + eos, number of prompt tokens) per demonstration."""
    prompts = tokenizer([d["prompt"] for d in demos], add_special_tokens=False)["input_ids"]
    responses = tokenizer([d["response"] for d in demos], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [(p + r + [eos], len(p)) for p, r in zip(prompts, responses, strict=True)]


def collate(examples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; labels are IGNORE_INDEX on prompt and padding positions.

    Right padding keeps every prompt at position 0, exactly as generation sees it (generate
    derives position ids from the attention mask, so left-padded prompts also start at 0).
    """
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def batches(n_examples: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Index lists for ``steps`` batches: a fresh seeded permutation per epoch."""
    rng = random.Random(f"sft-{seed}")
    out: list[list[int]] = []
    order: list[int] = []
    while len(out) < steps:
        if len(order) < batch_size:
            perm = list(range(n_examples))
            rng.shuffle(perm)
            order += perm
        out.append(order[:batch_size])
        order = order[batch_size:]
    return out


def lr_factor(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train_sft(
    cfg: SFTConfig | None = None,
    *,
    demos: list[dict] | None = None,
    on_step: Callable[[int, float], Any] | None = None,
) -> SFTResult:
    """Train the tiny model from scratch; ``on_step(step, loss)`` is called after every step."""
    import torch

    from rlcockpit.world.model import TinyModelConfig, build_model
    from rlcockpit.world.tokenizer import load_tokenizer

    cfg = cfg or SFTConfig()
    tokenizer = load_tokenizer()
    examples = encode(tokenizer, demos if demos is not None else load_demonstrations())
    model = build_model(TinyModelConfig(vocab_size=len(tokenizer)), seed=cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    losses: list[float] = []
    start = time.perf_counter()
    try:
        model.train()
        for step, idx in enumerate(batches(len(examples), cfg.batch_size, cfg.steps, cfg.seed)):
            batch = collate([examples[i] for i in idx], tokenizer.pad_token_id)
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step, losses[-1])
    finally:
        torch.set_num_threads(previous_threads)
    model.eval()
    return SFTResult(model, tokenizer, losses, time.perf_counter() - start)


def save_checkpoint(model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, out: Path) -> Path:
    """Write a plain Hugging Face directory: config, safetensors weights, tokenizer, generation
    config. ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(out)`` load it offline."""
    from transformers import GenerationConfig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # top_k=0: plain sampling at temperature 1.0 unless the caller asks for more.
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=24,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_class(out / "tokenizer_config.json")
    return out


def _portable_tokenizer_class(path: Path) -> None:
    # transformers 5 writes its internal class name; PreTrainedTokenizerFast loads in 4.x and 5.x.
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


__all__ = ["SFTConfig", "SFTResult", "collate", "encode", "load_demonstrations", "save_checkpoint",
           "train_sft"]
