"""Real architectures with random weights: Llama, Qwen2 and GPT-2 causal LMs built locally.

``save_random_model(dir, "qwen2", ...)`` writes a Hugging Face directory (config, weights,
generation config, the tiny world's ChatML tokenizer with its chat template) that ``model.path``
loads like any downloaded checkpoint, so the trainer's loading code, chat templates, padding, EOS
handling and position ids run on the real model classes without a download (the trainer tests,
``benchmarks/gpu_smoke.py``). The generation config lists two EOS ids, as Qwen's instruct models
do: the end of an assistant turn (``<|im_end|>``) and ``<|endoftext|>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("llama", "qwen2", "gpt2")


@dataclass(frozen=True)
class ArchSize:
    """The shape of a random model; the defaults are tiny (a CPU test step in a fraction of a second)."""

    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 64
    max_positions: int = 512


def build_config(kind: str, size: ArchSize, tokenizer: Any) -> Any:
    """A transformers config of ``kind`` sized ``size`` for ``tokenizer``'s vocabulary."""
    from transformers import AutoConfig

    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: one of {', '.join(KINDS)}")
    ids = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
           "eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.pad_token_id}
    if kind == "gpt2":
        return AutoConfig.for_model("gpt2", n_embd=size.hidden, n_layer=size.layers, n_head=size.heads,
                                    n_inner=size.intermediate, n_positions=size.max_positions, **ids)
    return AutoConfig.for_model(kind, hidden_size=size.hidden, intermediate_size=size.intermediate,
                                num_hidden_layers=size.layers, num_attention_heads=size.heads,
                                num_key_value_heads=size.kv_heads, max_position_embeddings=size.max_positions,
                                tie_word_embeddings=kind == "qwen2", **ids)


def save_random_model(path: Path, kind: str, size: ArchSize | None = None, *, seed: int = 0) -> Path:
    """Build a randomly initialised ``kind`` model with the ChatML tokenizer and save both to ``path``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlcockpit.world.tokenizer import EOS_TOKEN, chat_tokenizer

    tok = chat_tokenizer(max_length=(size or ArchSize()).max_positions)
    config = build_config(kind, size or ArchSize(), tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids(EOS_TOKEN)], pad_token_id=tok.pad_token_id,
        bos_token_id=tok.pad_token_id)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def count_parameters(kind: str, size: ArchSize) -> int:
    """Parameters of a ``kind`` model of ``size`` (built on the meta device: nothing is allocated)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlcockpit.world.tokenizer import chat_tokenizer

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(build_config(kind, size, chat_tokenizer()))
    return int(sum(p.numel() for p in model.parameters()))
