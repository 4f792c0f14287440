"""The learned multi-head reward model (seed 000 §3.1 primary track; DESIGN.md §1: helpfulness,
truthfulness / correctness, harmlessness sub-scores) and its MC-dropout uncertainty.

A small GPT-2-style transformer encoder (no LM head) reads ``prompt + response``; the hidden state
of the last real token feeds one linear head per component, squashed by tanh to [-1, 1] so scores
live on the same scale as the rule judgments (+1 / -1) and the gate's 0.15 means the same thing
for every head. The model's total score is the weighted mean of the heads.

Uncertainty (seed 000 §3.1): ``mc_passes`` forward passes with dropout *on*; the std of the total
score over the passes. The dropout masks come from a seeded generator, so a batch scored twice
gets the same uncertainty.

A checkpoint directory holds ``config.json`` (shape + heads), ``model.safetensors`` and the
tokenizer (``tokenizer.json`` + config) -- written by :func:`save_reward_model`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.errors import NotFoundError

if TYPE_CHECKING:
    import torch

HEADS = ("helpfulness", "correctness", "harmlessness")
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class RewardModelConfig(Config):
    """Shape of the reward model. The defaults are the shipped tiny-world model's."""

    vocab_size: int = option(1024, help="Vocabulary size; must match the tokenizer.", range=(8, None))
    n_positions: int = option(128, help="Longest prompt + response in tokens.", range=(16, 4096))
    n_embd: int = option(64, help="Hidden size; a multiple of n_head.", range=(8, 4096))
    n_layer: int = option(2, help="Transformer blocks.", range=(1, 64))
    n_head: int = option(4, help="Attention heads per block.", range=(1, 64))
    dropout: float = option(0.1, help="Dropout everywhere; MC dropout needs it above 0.",
                            range=(0.0, 0.9))
    heads: tuple[str, ...] = option(default_factory=lambda: HEADS, help="One score head per name.")
    pad_token_id: int = option(0, help="Id of the padding token.", range=(0, None))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.n_embd % self.n_head == 0, "n_embd", self.n_embd,
              f"must be a multiple of n_head={self.n_head}; e.g. n_embd={self.n_head * 16}")
        check(len(self.heads) >= 1 and len(set(self.heads)) == len(self.heads), "heads",
              list(self.heads), "needs at least one head and no duplicate names")


def build_reward_model(cfg: RewardModelConfig, *, seed: int | None = None) -> Any:
    """A randomly initialised :class:`MultiHeadRewardModel` (float32)."""
    import torch

    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        return _model_class()(cfg)


def _model_class() -> type:
    import torch
    from transformers import GPT2Config, GPT2Model

    class MultiHeadRewardModel(torch.nn.Module):
        """GPT-2 blocks -> last real token's hidden state -> one tanh head per component."""

        def __init__(self, cfg: RewardModelConfig) -> None:
            super().__init__()
            self.cfg = cfg
            self.body = GPT2Model(GPT2Config(
                vocab_size=cfg.vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd,
                n_layer=cfg.n_layer, n_head=cfg.n_head, resid_pdrop=cfg.dropout,
                embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, pad_token_id=cfg.pad_token_id,
                bos_token_id=None, eos_token_id=None))
            self.drop = torch.nn.Dropout(cfg.dropout)
            self.heads = torch.nn.Linear(cfg.n_embd, len(cfg.heads))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            """[B, T] right-padded ids -> [B, H] head scores in [-1, 1]."""
            hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            last = attention_mask.sum(-1).clamp(min=1) - 1
            pooled = hidden[torch.arange(hidden.shape[0]), last]
            return torch.tanh(self.heads(self.drop(pooled)))

    return MultiHeadRewardModel


def encode_pairs(tokenizer: Any, prompts: Sequence[str], responses: Sequence[str],
                 max_length: int) -> dict[str, torch.Tensor]:
    """Right-padded ``prompt + response + eos`` ids (cut from the left to ``max_length``)."""
    import torch

    eos = tokenizer.eos_token_id
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    r_ids = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
    rows = [(p + r + [eos])[-max_length:] for p, r in zip(p_ids, r_ids, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


@dataclass(frozen=True)
class RMScores:
    """Scores of N samples: per head (dropout off), the weighted total, and its MC-dropout std."""

    heads: dict[str, np.ndarray]   # name -> [N] in [-1, 1]
    total: np.ndarray              # [N] weighted mean of the heads
    uncertainty: np.ndarray        # [N] std of the total over the MC-dropout passes
    passes: np.ndarray             # [P, N] the total of each MC-dropout pass


class RewardModelScorer:
    """A loaded reward model + tokenizer: ``scorer(prompts, responses, mc_passes, seed)``."""

    def __init__(self, model: Any, tokenizer: Any, head_weights: Mapping[str, float] | None = None,
                 batch_size: int = 64) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.heads = tuple(model.cfg.heads)
        unknown = sorted(set(head_weights or {}) - set(self.heads))
        if unknown:
            from rlcockpit.errors import ConfigError

            raise ConfigError(f"reward.rm.head_weights.{unknown[0]}: the reward model has no such "
                              f"head (its heads: {', '.join(self.heads)})",
                              details={"key": f"reward.rm.head_weights.{unknown[0]}"})
        w = np.asarray([float((head_weights or {}).get(h, 1.0)) for h in self.heads])
        self.weights = w / max(np.abs(w).sum(), 1e-12)
        self.batch_size = batch_size

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], *, mc_passes: int = 5,
                 seed: int = 0) -> RMScores:
        import torch

        n = len(responses)
        heads = np.zeros((n, len(self.heads)))
        passes = np.zeros((mc_passes, n))
        gen_state = torch.random.fork_rng(devices=[])
        with gen_state, torch.no_grad():
            torch.manual_seed(seed)  # the dropout masks: same batch, same uncertainty
            for start in range(0, n, self.batch_size):
                sl = slice(start, start + self.batch_size)
                batch = encode_pairs(self.tokenizer, prompts[sl], responses[sl],
                                     self.model.cfg.n_positions)
                self.model.eval()
                heads[sl] = self.model(**batch).numpy()
                self.model.train()  # dropout on: MC dropout (seed 000 §3.1)
                for p in range(mc_passes):
                    passes[p, sl] = self.model(**batch).numpy() @ self.weights
                self.model.eval()
        return RMScores(heads={h: heads[:, i] for i, h in enumerate(self.heads)},
                        total=heads @ self.weights, uncertainty=passes.std(axis=0, ddof=1),
                        passes=passes)


def save_reward_model(model: Any, tokenizer: Any, out: Path, extra: Mapping[str, Any] | None = None
                      ) -> Path:
    """Write config.json (shape + ``extra``), model.safetensors and the tokenizer into ``out``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {"model": dataclasses.asdict(model.cfg), **(extra or {})}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    tokenizer.save_pretrained(out)
    return out


def load_reward_model(path: Path) -> tuple[Any, Any, dict]:
    """(model, tokenizer, the whole config.json) from a directory written by save_reward_model."""
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise NotFoundError(f"reward model {path} has no {CONFIG_FILE} / {WEIGHTS_FILE}; train one "
                            "with `rlcockpit world rm --out DIR`", details={"path": str(path)})
    config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    shape = dict(config["model"])
    shape["heads"] = tuple(shape["heads"])
    model = build_reward_model(RewardModelConfig(**shape))
    # GPT-2's causal-mask buffers are not saved by every transformers version: load non-strictly
    # and refuse only a missing *parameter*
    missing, unexpected = model.load_state_dict(load_file(str(path / WEIGHTS_FILE)), strict=False)
    params = {name for name, _ in model.named_parameters()}
    if [m for m in missing if m in params] or unexpected:
        raise NotFoundError(f"reward model {path}: weights do not match its config.json "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})",
                            details={"path": str(path)})
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    return model.eval(), tokenizer, config


__all__ = ["HEADS", "RMScores", "RewardModelConfig", "RewardModelScorer", "build_reward_model",
           "encode_pairs", "load_reward_model", "save_reward_model"]
