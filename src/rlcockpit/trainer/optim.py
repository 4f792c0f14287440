"""Optimizers, the warm-up schedule and guarded, per-group gradient clipping.

- AdamW with weight decay only on non-embedding matrices (seed 000 §4.3).
- lr(step) = peak * warm-up factor * schedule factor; the peak is a live parameter, so it is set
  on the param groups before every optimizer step rather than owned by a torch scheduler.
- Gradient clipping with separate limits: actor embeddings (3.0), the rest of the actor (1.0), the
  critic (1.0) — seed 000 §4.3: one global limit let the embedding gradient blow up the KL.
- The NaN guard: a non-finite loss or gradient norm skips that optimizer step (grads are zeroed),
  is counted, and the run continues.
- Data parallel (a ``group`` of several ranks): after ``backward`` the gradients are averaged over
  the ranks (:meth:`rlcockpit.trainer.distributed.Group.mean_grads`), so clipping, the guard and the
  step see the same global gradient on every rank; a non-finite loss on any rank skips the step on
  all of them. ``local_norm`` keeps this rank's norm before the reduction.
- Micro-batches (trainer/memory.py) accumulate their gradients (``backward`` per micro-batch) before
  the one guarded step (``finish``); fp16's loss scaler is unscaled before the norms are measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from rlcockpit.trainer.config import OptimConfig
from rlcockpit.trainer.models import ParamGroups, param_groups

if TYPE_CHECKING:
    from rlcockpit.trainer.distributed import Group


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str, min_ratio: float) -> float:
    """Multiplier on the peak lr for training step ``step`` (1-based)."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    if schedule == "linear":
        return 1.0 - (1.0 - min_ratio) * progress
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_adamw(groups: ParamGroups, cfg: OptimConfig, lr: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        [{"params": groups.decay, "weight_decay": cfg.weight_decay},
         {"params": groups.no_decay, "weight_decay": 0.0}],
        lr=lr, betas=tuple(cfg.betas), eps=1e-8,  # type: ignore[arg-type]
    )


def group_norm(params: list[nn.Parameter]) -> float:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def scale_grads(params: list[nn.Parameter], norm: float, limit: float) -> None:
    """clip_grad_norm_ for an already measured norm; ``limit`` 0 disables clipping."""
    if limit > 0 and norm > limit:
        coef = limit / (norm + 1e-6)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)


@dataclass
class StepGrads:
    """Pre-clip gradient norms of one optimizer step (or why it was skipped)."""

    total: float
    layers: dict[str, float] = field(default_factory=dict)
    skipped: bool = False
    local: float = math.nan  # data parallel: this rank's norm before the gradients were averaged


class GuardedOptimizer:
    """One model's AdamW plus its clip groups: ``zero_grad`` → ``backward`` per micro-batch →
    ``finish`` (guard → clip → step); ``step(loss, limits)`` does all of it for one loss. With fp16
    a ``scaler`` (torch.amp.GradScaler, trainer/devices.py) scales the loss before ``backward`` and
    unscales the gradients before they are measured and clipped."""

    def __init__(self, model: nn.Module, cfg: OptimConfig, lr: float, *, split_embedding: bool,
                 group: Group | None = None, scaler: torch.amp.GradScaler | None = None) -> None:
        self.groups = param_groups(model)
        self.optimizer = make_adamw(self.groups, cfg, lr)
        self.split_embedding = split_embedding
        self.skipped_total = 0
        self.group = group if group is not None and group.distributed else None
        self.scaler = scaler

    def set_lr(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def step(self, loss: torch.Tensor, limit: float, embedding_limit: float) -> StepGrads:
        self.zero_grad()
        return self.finish(limit, embedding_limit, ok=self.backward(loss))

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> bool:
        """Accumulate ``loss``'s gradients; False (and no backward) when the loss is not finite."""
        if not torch.isfinite(loss):
            return False
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return True

    def finish(self, limit: float, embedding_limit: float, *, ok: bool) -> StepGrads:
        """The optimizer step on the accumulated gradients (``ok``: every loss was finite)."""
        local = math.nan
        if self.group is not None:  # every rank reduces, even one whose loss is not finite
            local, ok = self.group.mean_grads(self.groups.all, ok)
        if not ok:
            return self._skip(math.nan, local=local)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        layers = {name: group_norm(ps) for name, ps in self.groups.by_layer.items()}
        total = math.sqrt(sum(n * n for n in layers.values()))
        if not math.isfinite(total):  # with fp16: an overflow, the scaler halves its scale
            return self._skip(total, layers, local, unscaled=True)
        if self.split_embedding:
            emb = layers.get("embedding", 0.0)
            rest = math.sqrt(max(0.0, total * total - emb * emb))
            scale_grads(self.groups.embedding, emb, embedding_limit)
            scale_grads(self.groups.rest, rest, limit)
        else:
            scale_grads(self.groups.all, total, limit)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return StepGrads(total, layers, local=local)

    def _skip(self, total: float, layers: dict[str, float] | None = None, local: float = math.nan,
              unscaled: bool = False) -> StepGrads:
        if self.scaler is not None and unscaled:
            self.scaler.update()  # the overflow was recorded by unscale_: the scale shrinks
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_total += 1
        return StepGrads(total, layers or {}, skipped=True, local=local)


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]).clone()


def update_ratio(before: torch.Tensor, model: nn.Module) -> float:
    """||theta_after - theta_before|| / ||theta_before|| over one UPDATE phase (``update/ratio/*``)."""
    after = flat_params(model)
    denom = float(torch.linalg.vector_norm(before))
    return float(torch.linalg.vector_norm(after - before)) / denom if denom > 0 else math.nan
