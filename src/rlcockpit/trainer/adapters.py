"""LoRA through ``peft`` (``model.lora.r > 0``): the actor and the critic's backbone train low-rank adapters.

- The actor is a ``peft`` model; its frozen base weights are stored in ``model.dtype``
  (trainer/devices.py), the adapters stay fp32.
- The reference is the *same* model with its adapters disabled (:class:`AdaptersDisabled`): no
  second copy of the weights, and exactly the base model (peft's ``disable_adapter``).
- The critic's backbone gets its own adapters; its value head trains in full.
- Checkpoints save the actor's adapters only (``save_pretrained`` of a peft model writes
  ``adapter_config.json`` + ``adapter_model.safetensors``); a resume or rollback loads them onto
  the base model of ``model.path`` (:func:`load_actor_weights`).
- Gradient statistics read the adapters: the layer groups are built from the parameters that train
  (lora_A / lora_B of each block), and the snapshot's "policy head" coordinates come from the last
  adapter matrix (the LM head itself is frozen).

Adapter initialisation draws from its own seeded RNG, so adding LoRA does not shift the run's
global torch stream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcockpit.errors import ConfigError
from rlcockpit.trainer.model_config import LoRAConfig

ADAPTER_FILE = "adapter_model.safetensors"


def peft_config(cfg: LoRAConfig, *, causal: bool) -> Any:
    from peft import LoraConfig, TaskType

    targets: Any = list(cfg.target_modules) if cfg.target_modules else "all-linear"
    return LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                      bias="none", task_type=TaskType.CAUSAL_LM if causal else None)


def add_adapters(model: nn.Module, cfg: LoRAConfig, *, seed: int, causal: bool = True) -> nn.Module:
    """``model`` wrapped with fresh LoRA adapters (B = 0: the wrapped model starts equal to the base)."""
    from peft import get_peft_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return get_peft_model(model, peft_config(cfg, causal=causal))
        except ValueError as exc:  # e.g. target modules that the model does not have
            raise ConfigError(f"model.lora: {exc}; check model.lora.target_modules={list(cfg.target_modules)} "
                              "against the model's module names (empty = every linear layer)",
                              details={"key": "model.lora.target_modules"}) from None


def load_adapters(base: nn.Module, adapter_dir: Path) -> nn.Module:
    """A checkpoint's adapters on ``base``, trainable (resume)."""
    from peft import PeftModel

    if not (adapter_dir / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter_dir} holds no LoRA adapters (no adapter_config.json): the checkpoint was "
                          "written without model.lora; resume with the run's own model.lora settings",
                          details={"key": "model.lora.r"})
    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)


def is_adapted(model: Any) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def load_actor_weights(actor: nn.Module, actor_dir: Path) -> None:
    """Load a checkpoint's actor into the running actor in place (the in-process rollback): the
    adapters of a LoRA actor, every weight of a full one."""
    if is_adapted(actor):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(actor, load_file(str(actor_dir / ADAPTER_FILE)))
        return
    from rlcockpit.trainer.models import load_causal_lm

    actor.load_state_dict(load_causal_lm(actor_dir).state_dict())


class AdaptersDisabled(nn.Module):
    """The frozen reference of a LoRA run: the actor's forward with its adapters switched off.

    The actor is held outside ``nn.Module``'s registry, so this view has no parameters of its own:
    nothing that walks the reference's parameters (freezing, counting, hashing) touches the actor's."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "actor", actor)

    def forward(self, **kwargs: Any) -> Any:
        with self.actor.disable_adapter():
            return self.actor(**kwargs)

    def get_base_model(self) -> nn.Module:
        return self.actor.get_base_model()

    @property
    def device(self) -> torch.device:
        return next(iter(self.actor.parameters())).device


def trainable_count(model: nn.Module | None) -> int:
    return 0 if model is None else int(sum(p.numel() for p in model.parameters() if p.requires_grad))
