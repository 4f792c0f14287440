"""INIT: build everything a run needs from its config, failing fast with clear messages.

Nothing here touches the store until everything is built: a bad model path, reward function or
prompt file is reported before a run is created (:func:`open_run`, called last).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcockpit.errors import ConfigError
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer import adapters
from rlcockpit.trainer.advantage import Normalizers, RunningMeanStd, ValueNormalizer
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.controllers import (
    AdaptiveClipEps,
    AdaptiveKLController,
    Controllers,
    FixedKLController,
)
from rlcockpit.trainer.data import PromptItem, PromptSource, load_prompt_items, tokenize_items
from rlcockpit.trainer.devices import Placement
from rlcockpit.trainer.memory import disable_dropout, enable_gradient_checkpointing
from rlcockpit.trainer.models import (
    Critic,
    build_critic,
    freeze,
    load_causal_lm,
    load_tokenizer,
    max_positions,
    resolve_model_path,
)
from rlcockpit.trainer.rollout import stop_ids


@dataclass
class Models:
    """The networks of a run, their tokenizer, where they live and the ids that end a response."""

    tokenizer: Any
    actor: nn.Module
    reference: nn.Module  # frozen: the KL anchor (LoRA: the actor with its adapters disabled)
    critic: Critic | None  # PPO only
    placement: Placement = field(default_factory=Placement.cpu)
    stop: tuple[int, ...] = ()  # EOS ids (the tokenizer's and the model's generation_config's)


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


def build_components(cfg: TrainConfig, actor_dir: Path | None = None,
                     data_parallel_device: torch.device | None = None) -> Components:
    """Load models, prompts and the reward function. ``actor_dir`` (a checkpoint's actor: a full model
    or LoRA adapters) replaces the actor's initial weights; the reference always comes from
    ``model.path``. ``data_parallel_device``: the rank's device (``model.device=auto`` takes it)."""
    if cfg.model.threads > 0:
        torch.set_num_threads(cfg.model.threads)
    seed_everything(cfg.seed)
    placement = Placement.from_config(cfg.model, data_parallel_device)
    model_path = resolve_model_path(cfg.model.path)
    tokenizer = load_tokenizer(actor_dir or model_path)
    actor, reference, critic = _models(cfg, model_path, actor_dir, placement)
    source, eval_items, skipped = _prompts(cfg, tokenizer)
    reward_fn = RewardFunction.from_spec(cfg.reward.fn, cfg.reward.weights)
    reward_fn.configure(cfg.reward.rm)
    first = source.items[0]
    reward_fn.probe(first.prompt, first.meta)  # a broken function fails here, before any training
    limit = _max_new_tokens_limit(cfg, actor, source.items + eval_items)
    return Components(
        models=Models(tokenizer=tokenizer, actor=actor, reference=reference, critic=critic, placement=placement,
                      stop=stop_ids(tokenizer, actor)),
        prompts=Prompts(source=source, eval_items=eval_items, skipped=skipped),
        reward_fn=reward_fn,
        controllers=Controllers(kl=_kl_controller(cfg), clip=_clip_controller(cfg)),
        normalizers=Normalizers(
            reward=RunningMeanStd() if cfg.reward.normalize else None,
            value=ValueNormalizer() if cfg.model.normalize_values and critic is not None else None),
        max_new_tokens_limit=limit,
    )


def _models(cfg: TrainConfig, model_path: Path, actor_dir: Path | None,
            place: Placement) -> tuple[nn.Module, nn.Module, Critic | None]:
    """Actor, reference and critic, placed (trainer/devices.py), with gradient checkpointing and
    LoRA as configured (trainer/memory.py, trainer/adapters.py)."""
    m = cfg.model
    base = disable_dropout(load_causal_lm(model_path))
    if m.lora.r > 0:
        for p in base.parameters():
            p.requires_grad_(False)
        actor = adapters.load_adapters(base, actor_dir) if actor_dir is not None else \
            adapters.add_adapters(base, m.lora, seed=cfg.seed + 3)
        reference: nn.Module = adapters.AdaptersDisabled(actor)
    else:
        reference = freeze(base)
        actor = disable_dropout(load_causal_lm(actor_dir)) if actor_dir is not None else copy.deepcopy(reference)
        for p in actor.parameters():
            p.requires_grad_(True)
        place.place(reference, place.ref_device)
    place.place(actor)
    critic = None
    if cfg.algo == "ppo":
        critic_path = resolve_model_path(m.critic_path, "model.critic_path") if m.critic_path else model_path
        critic = place.place(build_critic(critic_path, m.value_head_init_std, cfg.seed,
                                          lora=m.lora if m.lora.r > 0 else None))
    if m.gradient_checkpointing:
        for model in (actor, critic):
            if model is not None and not enable_gradient_checkpointing(model):
                raise ConfigError(f"model.gradient_checkpointing=true but {type(model).__name__} does not "
                                  "support it; set model.gradient_checkpointing=false",
                                  details={"key": "model.gradient_checkpointing"})
    return actor, reference, critic


def open_run(cfg: TrainConfig, run_id: str | None, take_over: bool) -> Any:
    """Open (or, with ``run_id``, resume) the run in the store under the trainer's lease."""
    # telemetry.init, not rlcockpit.init: the facade reaches the integrations (layering)
    from rlcockpit.config import to_dict
    from rlcockpit.telemetry import LeaseOptions, TokenArrayPolicy, init, new_run_id

    t = cfg.telemetry
    policy = TokenArrayPolicy(recent_steps=t.token_arrays_recent_steps,
                              subset_per_step=t.token_arrays_subset_per_step, seed=t.token_arrays_seed)
    resume = run_id is not None
    run_id = run_id or new_run_id()
    name = cfg.name or f"{cfg.algo}-{run_id}"
    return init(project=cfg.project, name=name, store=t.store, config=to_dict(cfg), run_id=run_id, resume=resume,
                token_arrays=policy, spool_dir=t.spool_dir, spool_max_mb=t.spool_max_mb,
                lease=LeaseOptions(kind="trainer"), force=take_over)


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
