"""Fitting a model into memory: gradient checkpointing, micro-batches with OOM recovery, memory metrics.

- **Gradient checkpointing** (``model.gradient_checkpointing``): each transformer block keeps only
  its input and recomputes its activations in the backward pass (``transformers``'
  ``gradient_checkpointing_enable``, non-reentrant). transformers only checkpoints a module in
  ``train()`` mode, and train mode would switch dropout on; so every dropout of the loaded models
  is set to p = 0 (TRL does the same for PPO / GRPO: dropout makes the old and new logprobs of
  the ratio disagree on identical weights) and UPDATE's forward + backward run in train mode
  (:func:`update_mode`), the rollout and scoring passes in eval mode.
- **Micro-batches** (``model.micro_batch_size``): :class:`MicroBatches` splits a minibatch (UPDATE)
  or a batch (SCORE) into micro-batches. UPDATE accumulates their gradients into the same token-mean
  loss as one pass over the minibatch (each micro-batch's loss is weighted by its share of the
  minibatch's tokens). ``0`` picks the size from the free CUDA memory (:func:`fit_micro_batch`) —
  the seed's GPU-aware micro-batching — and the whole minibatch on the CPU. A
  ``torch.OutOfMemoryError`` drops the partial work, halves the size and retries; each retry is
  recorded and the trainer logs it as an ``oom_retry`` event. The halved size is kept as a cap.
- **Memory metrics** (:class:`MemoryMeter`, CUDA only): ``sys/gpu_mem_gb`` (allocated at the end of
  the step, what the memory detector watches for leaks), ``sys/gpu_mem_reserved_gb`` (the peak the
  caching allocator reserved over the step) and ``sys/gpu_mem_peak_gb/<phase>`` (the peak allocated
  within each phase: where the memory goes).
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

R = TypeVar("R")
GB = 1e9
FREE_MEMORY_SHARE = 0.6  # of the free memory a micro-batch may plan for: the estimate is rough


def disable_dropout(model: nn.Module) -> nn.Module:
    """p = 0 on every dropout module (attention and residual dropout of HF models read them)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    for key in ("attention_dropout", "hidden_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "dropout"):
        if isinstance(getattr(getattr(model, "config", None), key, None), float):
            setattr(model.config, key, 0.0)
    return model


def enable_gradient_checkpointing(model: nn.Module) -> bool:
    """Checkpoint every block of a HF model (or a critic's backbone); False when it cannot."""
    target = model.backbone if hasattr(model, "backbone") else model  # the critic: its transformer
    if not getattr(target, "supports_gradient_checkpointing", False):
        return False
    kwargs = {"use_reentrant": False}  # non-reentrant: frozen inputs (LoRA) need no requires_grad trick
    if hasattr(target, "activation_checkpointing_enable"):  # transformers >= 5.x renamed it
        target.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        target.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return True


@contextlib.contextmanager
def update_mode(models: list[nn.Module | None], train: bool) -> Iterator[None]:
    """Train mode for UPDATE's forward + backward when it matters (gradient checkpointing, LoRA's
    dropout); eval mode again afterwards. Dropout elsewhere is 0, so train mode changes nothing else."""
    kept = [m for m in models if m is not None]
    if train:
        for m in kept:
            m.train()
    try:
        yield
    finally:
        for m in kept:
            m.eval()


# --------------------------------------------------------------------------- micro-batches


def sample_bytes(*, seq_len: int, response_len: int, hidden: int, layers: int, vocab: int,
                 dtype_bytes: int, checkpointing: bool) -> float:
    """Rough activation memory of one sample's forward + backward (Korthikanti et al. 2022, "Reducing
    Activation Recomputation in Large Transformer Models", §4: about 34·s·h bytes per layer in
    16-bit with a fused attention kernel, i.e. 17·s·h·dtype_bytes; with checkpointing only each
    block's input, s·h·dtype_bytes, plus one block recomputed), plus the response positions' logits
    in fp32 three times over (logits, log-softmax, its gradient)."""
    per_layer = seq_len * hidden * dtype_bytes
    blocks = layers * per_layer + 17 * per_layer if checkpointing else 17 * layers * per_layer
    return float(blocks + 3 * 4 * response_len * vocab)


def fit_micro_batch(free_bytes: float, per_sample_bytes: float, limit: int) -> int:
    """The largest micro-batch (a power of two, at most ``limit``) whose planned activations fit into
    FREE_MEMORY_SHARE of the free memory; at least 1."""
    if per_sample_bytes <= 0:
        return limit
    fits = int(free_bytes * FREE_MEMORY_SHARE // per_sample_bytes)
    if fits < 1:
        return 1
    return min(limit, 2 ** int(math.log2(fits)))


def free_cuda_bytes(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return float(free) + float(torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


class MicroBatches:
    """Runs a body over micro-batches of a set of indices, halving on OOM; ``events`` holds the retries."""

    def __init__(self, size: int, device: torch.device, model_config: Any = None, checkpointing: bool = False,
                 dtype_bytes: int = 4) -> None:
        self.size = size  # model.micro_batch_size: 0 = auto
        self.device = device
        self.model_config = model_config  # a HF config: hidden size, layers, vocabulary
        self.checkpointing = checkpointing
        self.dtype_bytes = dtype_bytes
        self.cap: int | None = None  # a size that ran out of memory, halved: never exceeded again
        self.events: list[dict[str, Any]] = []
        self.last_size = 0

    def planned(self, n: int, seq_len: int, response_len: int) -> int:
        """This call's micro-batch size for ``n`` samples of ``seq_len`` tokens."""
        size = self.size or self._auto(n, seq_len, response_len)
        size = min(size, n)
        return max(1, min(size, self.cap) if self.cap else size)

    def _auto(self, n: int, seq_len: int, response_len: int) -> int:
        free = free_cuda_bytes(self.device)
        cfg = self.model_config
        if free is None or cfg is None:
            return n  # the CPU: the whole minibatch in one pass
        per = sample_bytes(seq_len=seq_len, response_len=response_len, hidden=int(cfg.hidden_size),
                           layers=int(cfg.num_hidden_layers), vocab=int(cfg.vocab_size),
                           dtype_bytes=self.dtype_bytes, checkpointing=self.checkpointing)
        return fit_micro_batch(free, per, n)

    def run(self, indices: torch.Tensor, body: Callable[[torch.Tensor], R], *, phase: str, step: int,
            seq_len: int, response_len: int, reset: Callable[[], None] | None = None) -> list[R]:
        """``body(micro_indices)`` for each micro-batch, in order. On ``torch.OutOfMemoryError``:
        ``reset()`` (drop accumulated gradients), free the cache, halve, start the set again."""
        size = self.planned(len(indices), seq_len, response_len)
        while True:
            try:
                out = [body(chunk) for chunk in indices.split(size)]
                self.last_size = size
                return out
            except torch.OutOfMemoryError as exc:
                if size <= 1:
                    raise
                if reset is not None:
                    reset()
                release_cached(self.device)
                self.cap = size // 2
                self.events.append({"phase": phase, "step": step, "micro_batch_from": size,
                                    "micro_batch_to": size // 2, "samples": len(indices),
                                    "error": (str(exc).strip().splitlines() or [""])[0][:300]})
                size //= 2

    def take_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events


def release_cached(device: torch.device) -> None:
    gc.collect()  # the failed pass's tensors hang on the exception's frames until collected
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- metrics


class MemoryMeter:
    """Peak allocated GPU memory per phase and the step's allocated / reserved memory (CUDA only)."""

    def __init__(self, device: torch.device) -> None:
        self.on = device.type == "cuda"
        self.device = device
        self.peaks: dict[str, float] = {}
        self._reserved_peak = 0.0

    def phase_started(self) -> None:
        if self.on:
            torch.cuda.reset_peak_memory_stats(self.device)

    def phase_ended(self, phase: str) -> None:
        if not self.on:
            return
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), torch.cuda.max_memory_allocated(self.device) / GB)
        self._reserved_peak = max(self._reserved_peak, torch.cuda.max_memory_reserved(self.device) / GB)

    def step_metrics(self) -> dict[str, float]:
        """The catalog's ``sys/gpu_mem_*`` for the step just ended (empty on the CPU); resets the peaks."""
        if not self.on:
            return {}
        out = {"sys/gpu_mem_gb": torch.cuda.memory_allocated(self.device) / GB,
               "sys/gpu_mem_reserved_gb": max(self._reserved_peak, torch.cuda.memory_reserved(self.device) / GB)}
        out.update({f"sys/gpu_mem_peak_gb/{p.lower()}": v for p, v in self.peaks.items()})
        self.peaks, self._reserved_peak = {}, 0.0
        return out
