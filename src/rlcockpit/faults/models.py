"""Faults that act on the frozen reference model (torch is imported here only, when one runs).

- :func:`sync_reference`: the actor's weights copied into the reference (a botched "reference
  refresh").
- :func:`perturb_reference`: the reference swapped for a slightly different checkpoint -- the SFT
  weights plus seeded Gaussian noise of ``sigma`` × each tensor's own standard deviation (× the
  ramp's progress). The noise comes from its own generator, so the run's random streams are not
  touched.
- :class:`PromptTemplateReference`: the reference scores each response given a prompt with another
  template -- ``prefix`` tokens (e.g. a system line the actor never saw) put before the prompt --
  while the actor rolled out without them. A wrapper around the reference module, installed with
  :func:`mismatch_reference_template`; the trainer calls it exactly like the model it wraps.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

BASE_ATTR = "_rlcockpit_fault_base"  # the reference's weights before a perturbation (ramps rescale from them)


def sync_reference(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
    """Copy the actor's weights into the frozen reference (a botched 'reference refresh')."""
    with torch.no_grad():
        trainer.models.reference.load_state_dict(trainer.models.actor.state_dict())
    return {"reference": "weights copied from the actor"}


def perturb_reference(sigma: float, seed: int = 1234) -> Any:
    """An action: the reference's weights become base + ``sigma`` × frac × std(tensor) × N(0, 1)."""

    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        ref = trainer.models.reference
        base = getattr(ref, BASE_ATTR, None)
        if base is None:
            base = {name: p.detach().clone() for name, p in ref.named_parameters()}
            setattr(ref, BASE_ATTR, base)
        gen = torch.Generator().manual_seed(seed)  # the same noise at every ramp point, scaled
        with torch.no_grad():
            for name, p in ref.named_parameters():
                scale = float(base[name].float().std()) if p.numel() > 1 else 0.0
                p.copy_(base[name] + torch.randn(p.shape, generator=gen).to(p.dtype) * (sigma * frac * scale))
        return {"reference": f"SFT weights + {sigma * frac:g} x std Gaussian noise per tensor (seed {seed})"}

    return action


def mismatch_reference_template(prefix: str) -> Any:
    """An action: wrap the reference so it scores every response after ``prefix`` + the prompt."""

    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        models = trainer.models
        if not isinstance(models.reference, PromptTemplateReference):
            ids = models.tokenizer(prefix)["input_ids"]
            models.reference = PromptTemplateReference(models.reference, ids)
        return {"reference": f"scores responses given {prefix!r} + the prompt (the actor saw the prompt alone)"}

    return action


class PromptTemplateReference(nn.Module):
    """The reference model fed ``prefix_ids`` + prompt + response; returns logits aligned with the input
    without the prefix, so the trainer reads the response positions where it always does."""

    def __init__(self, inner: nn.Module, prefix_ids: list[int]) -> None:
        super().__init__()
        if not prefix_ids:
            raise ValueError("PromptTemplateReference needs at least one prefix token")
        self.inner = inner
        self.register_buffer("prefix", torch.tensor([prefix_ids], dtype=torch.long), persistent=False)
        self._keep = "logits_to_keep" in inspect.signature(inner.forward).parameters

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, use_cache: bool = False,
                logits_to_keep: int | None = None, **kwargs: Any) -> Any:
        b, k = input_ids.shape[0], self.prefix.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        ids = torch.cat([self.prefix.expand(b, k), input_ids], dim=1)
        mask = torch.cat([torch.ones(b, k, dtype=attention_mask.dtype), attention_mask], dim=1)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # the prefix, then the prompt right after it
        args: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                                "use_cache": False}
        if logits_to_keep and self._keep:
            args["logits_to_keep"] = logits_to_keep
        logits = self.inner(**args).logits
        logits = logits[:, -logits_to_keep:] if logits_to_keep else logits[:, k:]
        return SimpleNamespace(logits=logits)
