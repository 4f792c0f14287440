"""Where the models live and in which precision: every tensor placement of the trainer is here.

:class:`Placement` is built once in INIT from ``model.device``, ``model.ref_device`` and
``model.dtype`` and handed to what runs a model (rollout, scoring, update, evaluation):

- **devices.** ``auto`` is CUDA when available (data parallel: the rank's ``cuda:LOCAL_RANK``),
  else the CPU. The step's tensors (:class:`~rlcockpit.trainer.step.StepState`) stay on the CPU —
  metrics, samples, advantages and the ranks' reductions read them there; a forward gets its
  inputs moved to its model's device (:meth:`Placement.inputs`) and hands back what the step keeps
  (logprobs, values: ``[B, R]``, small) on the CPU. The UPDATE moves each micro-batch's targets to
  the device (:meth:`Placement.put`).
- **precision (mixed, as torch.amp intends).** Weights that train stay fp32 (master weights and
  AdamW states); frozen weights — the reference, LoRA's base — are stored in the compute dtype
  (half their memory); every forward runs under ``torch.autocast`` in that dtype; logits are cast
  to fp32 before softmax, so logprobs, losses and KL are fp32. fp16 adds a dynamic loss scaler
  (:func:`grad_scaler`, one per optimizer). bf16 autocast also works on the CPU, so the same code
  path is tested there end to end.
- **sampling.** The rollout generator lives on the actor's device (``torch.multinomial`` draws
  from a generator of the tensor's own device), so a resumed run continues its stream there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlcockpit.errors import ConfigError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(spec: str, key: str = "model.device", data_parallel: torch.device | None = None) -> torch.device:
    """``auto`` -> the data-parallel rank's CUDA device, else cuda when available, else cpu."""
    if spec == "auto":
        if data_parallel is not None and data_parallel.type == "cuda":
            return data_parallel
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={spec!r} but torch sees no CUDA device (torch {torch.__version__}); use "
                          f"{key}=auto or {key}=cpu", details={"key": key, "value": spec})
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"{key}={spec!r} but only {torch.cuda.device_count()} CUDA device(s) are visible",
                          details={"key": key, "value": spec})
    return device


def check_dtype(name: str, device: torch.device) -> torch.dtype:
    """The compute dtype of ``model.dtype``; bf16 needs a GPU that has it (Ampere or newer)."""
    dtype = DTYPES[name]
    if dtype is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("model.dtype='bf16' but this GPU has no bfloat16 support; use model.dtype=fp16 "
                          "(with the loss scaler) or fp32", details={"key": "model.dtype", "value": name})
    return dtype


def device_of(model: Any) -> torch.device:
    """The device a model's weights are on (a HF model's ``.device``, else its first parameter)."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(iter(model.parameters())).device


@dataclass(frozen=True)
class Placement:
    """Actor / critic device, reference device and compute dtype of a run."""

    device: torch.device
    ref_device: torch.device
    dtype: torch.dtype = torch.float32

    @classmethod
    def from_config(cls, cfg: Any, data_parallel: torch.device | None = None) -> Placement:
        """From a :class:`~rlcockpit.trainer.model_config.ModelConfig` (fails fast on a missing GPU)."""
        device = resolve_device(cfg.device, "model.device", data_parallel)
        ref = resolve_device(cfg.ref_device, "model.ref_device", data_parallel) if cfg.ref_device else device
        return cls(device, ref, check_dtype(cfg.dtype, device))

    @classmethod
    def cpu(cls) -> Placement:
        return cls(torch.device("cpu"), torch.device("cpu"))

    @property
    def mixed(self) -> bool:
        return self.dtype is not torch.float32

    @property
    def dtype_name(self) -> str:
        return next(k for k, v in DTYPES.items() if v is self.dtype)

    # ------------------------------------------------------------------ models

    def place(self, model: nn.Module, device: torch.device | None = None) -> nn.Module:
        """Move ``model`` to ``device`` (default: the actor's); frozen parameters are stored in the
        compute dtype, parameters that train stay fp32 (buffers such as rotary frequencies too)."""
        model.to(device or self.device)
        if self.mixed:
            for p in model.parameters():
                if not p.requires_grad and p.is_floating_point():
                    p.data = p.data.to(self.dtype)
        return model

    @contextlib.contextmanager
    def autocast(self, device: torch.device) -> Iterator[None]:
        """Forwards on ``device`` in the compute dtype (a no-op in fp32)."""
        if not self.mixed:
            yield
            return
        with torch.autocast(device_type=device.type, dtype=self.dtype):
            yield

    # ------------------------------------------------------------------ tensors

    def inputs(self, model: Any, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``tensors`` on ``model``'s device (a forward's inputs)."""
        device = device_of(model)
        return tuple(t.to(device, non_blocking=True) for t in tensors)

    def put(self, t: torch.Tensor) -> torch.Tensor:
        """A step tensor on the actor's device (UPDATE's targets: old logprobs, advantages, ...)."""
        return t.to(self.device, non_blocking=True)

    @staticmethod
    def keep(t: torch.Tensor) -> torch.Tensor:
        """What the step keeps, on the CPU in fp32 (logprobs, values)."""
        return t.detach().float().cpu()

    def generator(self, seed: int) -> torch.Generator:
        """A seeded sampling generator on the actor's device."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def describe(self) -> dict[str, str]:
        """For the run's ``model_size`` event: where the models went and in which precision."""
        return {"device": str(self.device), "ref_device": str(self.ref_device), "dtype": self.dtype_name}


def grad_scaler(placement: Placement) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaler (torch.amp): gradients are scaled up so small ones do not flush to
    zero in half precision, unscaled before clipping; an overflow skips the step and halves the scale.
    None for fp32 and bf16 (bf16 has fp32's exponent range)."""
    if placement.dtype is not torch.float16:
        return None
    return torch.amp.GradScaler(placement.device.type)
