"""The three networks of a PPO step — actor, frozen reference, critic — and their parameter groups.

Any Hugging Face causal LM in a local directory works (``model.path``); ``"tiny"`` is the tiny
world's shipped SFT checkpoint. The critic is a backbone loaded from the same checkpoint (its
hidden states) plus a linear value head initialised with a small std (seed 000 §3.2: 0.01).
Every dropout is set to 0 and all three stay in ``eval()`` mode outside UPDATE — dropout would
make the old and new logprobs of PPO's ratio disagree on identical weights (trainer/memory.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcockpit.errors import ConfigError
from rlcockpit.trainer.memory import disable_dropout

_BLOCK_RE = re.compile(r"(?:^|\.)(?:h|layers|layer|blocks|block)\.(\d+)\.")


def resolve_model_path(path: str, key: str = "model.path") -> Path:
    """``"tiny"`` -> the shipped SFT checkpoint; otherwise a local HF directory with config.json."""
    if path == "tiny":
        from rlcockpit.world import SFT_CHECKPOINT

        if not (Path(SFT_CHECKPOINT) / "config.json").is_file():
            raise ConfigError(f"{key}='tiny' but the tiny-world SFT checkpoint is missing at {SFT_CHECKPOINT}; "
                              "rebuild it with `rlcockpit world sft`", details={"key": key, "value": path})
        return Path(SFT_CHECKPOINT)
    p = Path(path).expanduser()
    if not (p / "config.json").is_file():
        raise ConfigError(f"{key}={path!r} is not a Hugging Face model directory (no config.json there); use "
                          "'tiny' or a local directory saved with save_pretrained()",
                          details={"key": key, "value": path})
    return p


def quiet_transformers() -> None:
    """No per-file progress bars or advisory warnings from transformers inside a training run."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_tokenizer(path: Path) -> Any:
    """The tokenizer saved next to the model; pad falls back to EOS (responses are right-padded)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model.path={str(path)!r}: cannot load its tokenizer ({exc}); save one with "
                          "tokenizer.save_pretrained(<dir>)", details={"key": "model.path"}) from None
    if tok.eos_token_id is None:
        raise ConfigError(f"model.path={str(path)!r}: the tokenizer has no EOS token, so responses could not "
                          "end; set tokenizer.eos_token before saving", details={"key": "model.path"})
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(path: Path, key: str = "model.path") -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet_transformers()
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
        if getattr(config, "activation_function", None) == "gelu_new":
            # the same tanh-approximated GELU, fused in torch: ~15 % faster forward + backward on CPU
            config.activation_function = "gelu_pytorch_tanh"
        model = AutoModelForCausalLM.from_pretrained(str(path), config=config, local_files_only=True,
                                                     dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{key}={str(path)!r}: cannot load a causal LM ({exc})", details={"key": key}) from None
    model.eval()
    return model


def max_positions(model: nn.Module) -> int | None:
    """Longest sequence the model's position embeddings allow (None when unbounded, e.g. RoPE)."""
    cfg = model.config
    if getattr(cfg, "model_type", "") in ("gpt2", "gpt_neo", "gptj", "opt", "bloom", "gpt_bigcode"):
        return getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
    return None


class Critic(nn.Module):
    """V(s_t) for every position: a causal-LM backbone's last hidden state -> linear value head."""

    def __init__(self, backbone: nn.Module, hidden_size: int, init_std: float) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.value_head.weight, std=init_std)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        return self.value_head(out.last_hidden_state).squeeze(-1)


def build_critic(path: Path, init_std: float, seed: int, lora: Any = None) -> Critic:
    """The critic from causal LM ``path``'s backbone; ``lora`` (a LoRAConfig) adapts the backbone
    (trainer/adapters.py) while the value head trains in full."""
    lm = disable_dropout(load_causal_lm(path, key="model.critic_path"))
    backbone = lm.base_model  # the transformer without its LM head (GPT2Model, LlamaModel, ...)
    hidden = int(lm.config.hidden_size)
    if lora is not None:
        from rlcockpit.trainer.adapters import add_adapters

        backbone = add_adapters(backbone, lora, seed=seed + 2, causal=False)
    with torch.random.fork_rng():  # the value-head init must not shift the global RNG stream
        torch.manual_seed(seed)
        critic = Critic(backbone, hidden, init_std)
    critic.eval()
    return critic


def freeze(model: nn.Module) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def embedding_param_ids(model: nn.Module) -> set[int]:
    """Ids of the token / position embedding weights (a tied LM head shares the token embedding)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def layer_group(name: str, param: nn.Parameter, embedding_ids: set[int]) -> str:
    """'embedding', 'block_<i>' or 'head' — the granularity of ``grad/norm/layer/<name>``."""
    if id(param) in embedding_ids:
        return "embedding"
    m = _BLOCK_RE.search(name)
    if m:
        return f"block_{int(m.group(1))}"
    return "head"


@dataclass(frozen=True)
class ParamGroups:
    """Parameters split three ways: by layer (norm logging), clip group and weight-decay group."""

    by_layer: dict[str, list[nn.Parameter]]
    embedding: list[nn.Parameter]
    rest: list[nn.Parameter]
    decay: list[nn.Parameter]
    no_decay: list[nn.Parameter]

    @property
    def all(self) -> list[nn.Parameter]:
        return self.embedding + self.rest


def param_groups(model: nn.Module) -> ParamGroups:
    """Weight decay only on matrices that are not embeddings (seed 000 §4.3: decay on embeddings
    made the KL blow up); biases and norm scales are 1-D and never decayed."""
    emb_ids = embedding_param_ids(model)
    by_layer: dict[str, list[nn.Parameter]] = {}
    embedding, rest, decay, no_decay = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        by_layer.setdefault(layer_group(name, p, emb_ids), []).append(p)
        (embedding if id(p) in emb_ids else rest).append(p)
        (decay if p.ndim >= 2 and id(p) not in emb_ids else no_decay).append(p)
    return ParamGroups(by_layer, embedding, rest, decay, no_decay)
