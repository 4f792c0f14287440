"""INIT: build everything a run needs from its config, failing fast with clear messages.

Nothing here touches the store: a bad model path, reward function or prompt file is reported
before a run is created.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcockpit.errors import ConfigError
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer.advantage import Normalizers, RunningMeanStd, ValueNormalizer
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.controllers import (
    AdaptiveClipEps,
    AdaptiveKLController,
    Controllers,
    FixedKLController,
)
from rlcockpit.trainer.data import PromptItem, PromptSource, load_prompt_items, tokenize_items
from rlcockpit.trainer.models import (
    Critic,
    build_critic,
    freeze,
    load_causal_lm,
    load_tokenizer,
    max_positions,
    resolve_model_path,
)


@dataclass
class Models:
    """The networks of a run and their tokenizer."""

    tokenizer: Any
    actor: nn.Module
    reference: nn.Module  # frozen: the KL anchor
    critic: Critic | None  # PPO only


@dataclass
class Prompts:
    """The run's prompts: the training source (seeded order, resumable cursor) and the validation set."""

    source: PromptSource
    eval_items: list[PromptItem]
    skipped: int  # training prompts longer than data.max_prompt_tokens, left out


@dataclass
class Components:
    """What INIT builds; the trainer keeps each part under its own name."""

    models: Models
    prompts: Prompts
    reward_fn: RewardFunction
    controllers: Controllers
    normalizers: Normalizers
    max_new_tokens_limit: int  # longest response the model's context allows after the longest prompt


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_components(cfg: TrainConfig, actor_dir: Path | None = None) -> Components:
    """Load models, prompts and the reward function. ``actor_dir`` (a checkpoint's actor) replaces the
    actor's initial weights; the reference always comes from ``model.path``."""
    if cfg.model.threads > 0:
        torch.set_num_threads(cfg.model.threads)
    seed_everything(cfg.seed)
    model_path = resolve_model_path(cfg.model.path)
    tokenizer = load_tokenizer(actor_dir or model_path)
    reference = freeze(load_causal_lm(model_path))
    actor = load_causal_lm(actor_dir) if actor_dir is not None else copy.deepcopy(reference)
    for p in actor.parameters():
        p.requires_grad_(True)
    critic = None
    if cfg.algo == "ppo":
        critic_path = resolve_model_path(cfg.model.critic_path, "model.critic_path") if cfg.model.critic_path \
            else model_path
        critic = build_critic(critic_path, cfg.model.value_head_init_std, cfg.seed)
    source, eval_items, skipped = _prompts(cfg, tokenizer)
    reward_fn = RewardFunction.from_spec(cfg.reward.fn, cfg.reward.weights)
    reward_fn.configure(cfg.reward.rm)
    first = source.items[0]
    reward_fn.probe(first.prompt, first.meta)  # a broken function fails here, before any training
    limit = _max_new_tokens_limit(cfg, actor, source.items + eval_items)
    return Components(
        models=Models(tokenizer=tokenizer, actor=actor, reference=reference, critic=critic),
        prompts=Prompts(source=source, eval_items=eval_items, skipped=skipped),
        reward_fn=reward_fn,
        controllers=Controllers(kl=_kl_controller(cfg), clip=_clip_controller(cfg)),
        normalizers=Normalizers(
            reward=RunningMeanStd() if cfg.reward.normalize else None,
            value=ValueNormalizer() if cfg.model.normalize_values and critic is not None else None),
        max_new_tokens_limit=limit,
    )


def _prompts(cfg: TrainConfig, tokenizer: Any) -> tuple[PromptSource, list[PromptItem], int]:
    train_items, skipped = tokenize_items(load_prompt_items(cfg.data.source, cfg.data.split), tokenizer,
                                          cfg.data.max_prompt_tokens)
    if not train_items:
        raise ConfigError(f"data.source={cfg.data.source!r}: every prompt is longer than data.max_prompt_tokens="
                          f"{cfg.data.max_prompt_tokens}; raise it", details={"key": "data.max_prompt_tokens"})
    eval_items: list[PromptItem] = []
    if cfg.eval.every > 0:
        eval_items, _ = tokenize_items(load_prompt_items(cfg.data.source, cfg.eval.split), tokenizer,
                                       cfg.data.max_prompt_tokens)
        eval_items = eval_items[: cfg.eval.max_prompts]
    return PromptSource(train_items, cfg.rollout.batch_size, cfg.seed, cfg.data.shuffle), eval_items, skipped


def _max_new_tokens_limit(cfg: TrainConfig, model: nn.Module, items: list[PromptItem]) -> int:
    """Longest response the model's context allows after the longest prompt (None-bounded models: 4096)."""
    n_pos = max_positions(model)
    if n_pos is None:
        return 4096
    longest = max(len(it.token_ids) for it in items)
    limit = n_pos - longest
    if limit < cfg.rollout.max_new_tokens:
        raise ConfigError(f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} does not fit: the model's context "
                          f"is {n_pos} tokens and the longest prompt has {longest}; use at most {max(limit, 0)} "
                          "or lower data.max_prompt_tokens", details={"key": "rollout.max_new_tokens"})
    return limit


def _kl_controller(cfg: TrainConfig) -> FixedKLController:
    if cfg.kl.adaptive:
        return AdaptiveKLController(cfg.kl.coef, cfg.kl.target, cfg.kl.horizon)
    return FixedKLController(cfg.kl.coef)


def _clip_controller(cfg: TrainConfig) -> AdaptiveClipEps | None:
    if not cfg.ppo.adaptive_clip:
        return None
    return AdaptiveClipEps(cfg.ppo.clip_eps, cfg.ppo.clip_eps_min, cfg.ppo.clip_eps_max)
