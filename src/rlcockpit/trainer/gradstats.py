"""Gradient statistics kept for diagnostic snapshots (DESIGN.md §6, seed 000 §2 "诊断快照").

A ring buffer over the last 100 steps, filled in UPDATE right after each optimizer step, cheap by
construction — one number per layer group per minibatch, never per parameter:

- ``grad_norm``: the actor's pre-clip gradient norm, mean over the step's minibatches (the same
  value as the metric ``grad/norm/actor``) → the snapshot's histogram;
- ``layer_var``: per layer group (``embedding``, ``block_<i>``, ``head``) the variance of the
  layer's gradient *entries*, Var(g) = E[g²] − E[g]² over all its parameters, of the gradient the
  optimizer applied (after clipping), averaged over the step's minibatches → the heatmap;
- ``head_rows``: 16 seeded coordinates of the policy head's gradient (``lm_head``; with tied
  embeddings that is the token embedding's gradient) and 16 of the critic's value head, one row per
  minibatch (the last 64) → their covariance. With LoRA the layer groups hold the adapters (the
  parameters that train) and the policy coordinates come from the last adapter matrix.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from torch import nn

from rlcockpit.trainer.optim import StepGrads

CAPACITY = 100
HEAD_COORDS = 16
HEAD_ROWS = 64


def seeded_coords(numel: int, k: int, seed: int) -> torch.Tensor:
    """``k`` distinct flat indices in [0, numel), the same for a given seed."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(numel, generator=gen)[:min(k, numel)].sort().values


def layer_entry_var(params: list[nn.Parameter]) -> float | None:
    """Variance of every gradient entry of a layer group (None when it has no gradient)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        return None
    n = sum(g.numel() for g in grads)
    # two reductions per tensor, no temporaries: sum(g) and ||g|| (combined in float64)
    total = float(torch.stack([g.sum() for g in grads]).double().sum())
    sq = float(torch.stack([torch.linalg.vector_norm(g) for g in grads]).double().square().sum())
    mean = total / n
    return max(0.0, sq / n - mean * mean)


class _Head:
    """A head weight and its seeded coordinates."""

    def __init__(self, weight: nn.Parameter | None, k: int, seed: int) -> None:
        self.weight = weight
        self.idx = seeded_coords(weight.numel(), k, seed) if weight is not None else None

    def read(self) -> list[float] | None:
        if self.weight is None or self.weight.grad is None:
            return None
        return self.weight.grad.detach().reshape(-1)[self.idx].double().tolist()


class GradStats:
    """The last ``capacity`` steps of gradient statistics; ``window()`` returns plain lists."""

    def __init__(self, layers: dict[str, list[nn.Parameter]], policy_head: nn.Parameter | None,
                 value_head: nn.Parameter | None, *, seed: int = 0, capacity: int = CAPACITY,
                 coords: int = HEAD_COORDS, head_rows: int = HEAD_ROWS) -> None:
        self.layers = layers
        self.policy = _Head(policy_head, coords, seed)
        self.value = _Head(value_head, coords, seed + 1)
        self.steps: deque[int] = deque(maxlen=capacity)
        self.grad_norm: deque[float] = deque(maxlen=capacity)
        self.layer_var: deque[list[float | None]] = deque(maxlen=capacity)
        self.head_rows: deque[list[float]] = deque(maxlen=head_rows)
        self._norms: list[float] = []
        self._vars: list[dict[str, float | None]] = []
        self._policy_row: list[float] | None = None

    @classmethod
    def for_models(cls, actor: nn.Module, critic: nn.Module | None,
                   layers: dict[str, list[nn.Parameter]], seed: int = 0) -> GradStats:
        out_emb = actor.get_output_embeddings() if hasattr(actor, "get_output_embeddings") else None
        policy_head = getattr(out_emb, "weight", None)
        if policy_head is None or not policy_head.requires_grad:  # LoRA: the head is frozen, read the last adapter
            adapters = [p for p in actor.parameters() if p.requires_grad and p.ndim == 2]
            policy_head = adapters[-1] if adapters else None
        value_head = getattr(getattr(critic, "value_head", None), "weight", None)
        return cls(layers, policy_head, value_head, seed=seed)

    def begin_step(self) -> None:
        self._norms, self._vars, self._policy_row = [], [], None

    def after_actor(self, grads: StepGrads) -> None:
        """Right after the actor's optimizer step (its gradients are still in ``.grad``)."""
        self._policy_row = None
        if grads.skipped:
            return
        self._norms.append(grads.total)
        self._vars.append({name: layer_entry_var(ps) for name, ps in self.layers.items()})
        row = self.policy.read()
        if row is not None and self.value.weight is None:
            self.head_rows.append(row)  # GRPO: no critic, policy coordinates only
        else:
            self._policy_row = row

    def after_critic(self, grads: StepGrads) -> None:
        row = self.value.read() if not grads.skipped else None
        if self._policy_row is not None and row is not None:
            self.head_rows.append(self._policy_row + row)
        self._policy_row = None

    def end_step(self, step: int) -> None:
        if not self._norms:
            return  # every optimizer step of this UPDATE was skipped: nothing measured
        self.steps.append(int(step))
        self.grad_norm.append(sum(self._norms) / len(self._norms))
        self.layer_var.append([_mean([v[name] for v in self._vars]) for name in self.layers])

    def head_labels(self) -> list[str]:
        labels = [f"policy[{i}]" for i in (self.policy.idx.tolist() if self.policy.idx is not None else [])]
        if self.value.weight is not None and self.value.idx is not None:
            labels += [f"critic[{i}]" for i in self.value.idx.tolist()]
        return labels

    def window(self) -> dict[str, Any]:
        """Plain Python lists for the snapshot builders (:mod:`rlcockpit.diagnostics.snapshots`)."""
        return {"steps": list(self.steps), "grad_norm": list(self.grad_norm),
                "layers": list(self.layers), "layer_var": [list(r) for r in self.layer_var],
                "head_labels": self.head_labels(), "head_rows": [list(r) for r in self.head_rows]}


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None
