"""The tiny GPT-2-style causal LM of the tiny world, built by our own code (no download).

About 1.1 M parameters: small enough that the float32 checkpoint stays under 5 MiB and that
CPU rollouts of a few dozen tokens take milliseconds per sample, yet deep enough (5 layers) to
learn two-digit addition with carries.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rlcockpit.config import Config, check, option
from rlcockpit.world.tokenizer import MAX_LENGTH, VOCAB_SIZE

if TYPE_CHECKING:
    from transformers import GPT2Config, GPT2LMHeadModel


@dataclasses.dataclass(frozen=True)
class TinyModelConfig(Config):
    """Shape of the tiny GPT-2. The defaults are the shipped model's."""

    vocab_size: int = option(VOCAB_SIZE, help="Vocabulary size; must match the tokenizer.",
                             range=(8, None))
    n_positions: int = option(MAX_LENGTH, help="Longest sequence (prompt + response) in tokens.",
                              range=(16, 4096))
    n_embd: int = option(128, help="Hidden size; must be a multiple of n_head.", range=(8, 4096))
    n_layer: int = option(5, help="Number of transformer blocks.", range=(1, 64))
    n_head: int = option(4, help="Attention heads per block.", range=(1, 64))
    dropout: float = option(0.0, help="Dropout everywhere. Keep 0.0 for RL: the logprobs of a "
                            "rollout must match the logprobs recomputed in the update.",
                            range=(0.0, 0.9))
    pad_token_id: int = option(0, help="Id of <|pad|> in the tokenizer.", range=(0, None))
    eos_token_id: int = option(1, help="Id of <|endoftext|> (eos and bos).", range=(0, None))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.n_embd % self.n_head == 0, "n_embd", self.n_embd,
              f"must be a multiple of n_head={self.n_head}; e.g. n_embd={self.n_head * 32}")

    def to_hf(self) -> GPT2Config:
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=self.vocab_size, n_positions=self.n_positions, n_embd=self.n_embd,
            n_layer=self.n_layer, n_head=self.n_head, resid_pdrop=self.dropout,
            embd_pdrop=self.dropout, attn_pdrop=self.dropout, pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id, bos_token_id=self.eos_token_id,
            tie_word_embeddings=True,
        )


def build_model(config: TinyModelConfig | None = None, *, seed: int | None = None) -> GPT2LMHeadModel:
    """A randomly initialised tiny GPT-2 (float32). ``seed`` makes the init reproducible without
    touching the caller's global RNG state."""
    import torch
    from transformers import GPT2LMHeadModel

    hf_config = (config or TinyModelConfig()).to_hf()
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        model = GPT2LMHeadModel(hf_config).float()
    # GPT2LMHeadModel's class name maps to no loss type, which makes transformers warn once and
    # fall back to the causal-LM loss; name that loss explicitly.
    model.loss_type = "ForCausalLM"
    return model


def count_parameters(model) -> int:
    """Unique trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


__all__ = ["TinyModelConfig", "build_model", "count_parameters"]
