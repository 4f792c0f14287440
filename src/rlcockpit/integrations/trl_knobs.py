"""The knobs of a TRL trainer an operator may change by ticket, and how each is applied at a step
boundary (docs/integrations.md). What TRL reads per step:

- ``learning_rate`` — the peak (base) learning rate: every optimizer group and the scheduler's
  ``base_lrs`` are scaled by new / old, so a warm-up or decay schedule continues from the new peak;
- ``beta`` — the KL coefficient (``trainer.beta``; only when the run started with beta > 0: with
  beta = 0 TRL loads no reference model);
- ``temperature`` — sampling (``generation_config`` / ``generation_kwargs``) and the fused LM head
  that computes the log-probabilities (re-attached with the new temperature, as TRL's
  ``add_fused_lm_head`` does at start-up);
- ``max_completion_length`` — ``trainer.max_completion_length`` and ``max_new_tokens``;
- ``epsilon`` — the clip range (``epsilon_low``; ``epsilon_high`` keeps its offset).

A change reaches the next generation: with ``steps_per_generation > 1`` the completions already
generated for the coming steps are used as they are (TRL buffers them).
"""

from __future__ import annotations

import types
from typing import Any

from rlcockpit.integrations.loop_control import LiveParam


def knobs_of(trainer: Any) -> dict[str, LiveParam]:
    """The live parameters this trainer supports, with their current values and allowed ranges."""
    args, out = trainer.args, {}
    lr = float(args.learning_rate)
    out["learning_rate"] = LiveParam(lr, lo=0.0, hi=max(100 * lr, 1e-6), metric="optim/lr/actor",
                                     help="peak learning rate (optimizer groups and scheduler scaled by new / old)")
    if float(getattr(trainer, "beta", 0.0) or 0.0) > 0:
        out["beta"] = LiveParam(float(trainer.beta), lo=0.0, hi=10.0, metric="kl/coef",
                                help="KL coefficient vs the reference model")
    if hasattr(trainer, "temperature"):
        out["temperature"] = LiveParam(float(trainer.temperature), lo=0.05, hi=5.0,
                                       help="sampling temperature (and of the log-probabilities)")
    if isinstance(getattr(trainer, "max_completion_length", None), int):
        n = int(trainer.max_completion_length)
        out["max_completion_length"] = LiveParam(n, lo=1, hi=max(4 * n, n + 1),
                                                 help="longest completion in tokens", metric="response/length_max")
    if hasattr(trainer, "epsilon_low"):
        out["epsilon"] = LiveParam(float(trainer.epsilon_low), lo=0.0, hi=1.0, metric="policy/clip_eps",
                                   help="clip range of the importance ratio (epsilon_low; epsilon_high keeps its offset)")
    return out


def apply_change(trainer: Any, name: str, value: Any) -> None:
    """Set knob ``name`` to ``value`` on a live trainer; raises with the reason when it cannot."""
    if name == "learning_rate":
        _learning_rate(trainer, float(value))
    elif name == "beta":
        trainer.beta = float(value)
    elif name == "temperature":
        _temperature(trainer, float(value))
    elif name == "max_completion_length":
        trainer.max_completion_length = int(value)
        _generation(trainer, "max_new_tokens", int(value))
    elif name == "epsilon":
        offset = float(trainer.epsilon_high) - float(trainer.epsilon_low)
        trainer.epsilon_low, trainer.epsilon_high = float(value), float(value) + offset
    else:
        raise ValueError(f"{name} is not a knob of {type(trainer).__name__}")


def _learning_rate(trainer: Any, new: float) -> None:
    old = float(trainer.args.learning_rate)
    if old <= 0:
        raise ValueError("the run started with learning_rate 0: no scale to change it by")
    ratio = new / old
    for group in trainer.optimizer.param_groups:
        group["lr"] = group["lr"] * ratio
        if "initial_lr" in group:
            group["initial_lr"] = group["initial_lr"] * ratio
    scheduler = getattr(trainer, "lr_scheduler", None)
    scheduler = getattr(scheduler, "scheduler", scheduler)  # accelerate wraps it (AcceleratedScheduler)
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [b * ratio for b in scheduler.base_lrs]
        if hasattr(scheduler, "_last_lr"):  # what the Trainer logs as learning_rate for the next step
            scheduler._last_lr = [group["lr"] for group in trainer.optimizer.param_groups]
    trainer.args.learning_rate = new


def _generation(trainer: Any, key: str, value: Any) -> None:
    config = getattr(trainer, "generation_config", None)
    if config is not None:
        setattr(config, key, value)
    kwargs = getattr(trainer, "generation_kwargs", None)
    if isinstance(kwargs, dict):
        kwargs[key] = value


def _temperature(trainer: Any, value: float) -> None:
    trainer.temperature = value
    _generation(trainer, "temperature", value)
    try:
        from trl.trainer.utils import add_fused_lm_head
    except ImportError:  # an older TRL computes log-probabilities from trainer.temperature itself
        return
    cast = bool(getattr(trainer.args, "cast_lm_head_to_fp32", False))
    model = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    _reattach(model, value, cast, ("log_probs", "entropy"), add_fused_lm_head)
    if getattr(trainer, "ref_model", None) is not None:
        _reattach(trainer.ref_model, value, cast, ("log_probs",), add_fused_lm_head)


def _reattach(model: Any, temperature: float, cast: bool, outputs: tuple[str, ...], add: Any) -> None:
    """Re-attach TRL's fused LM head with a new temperature on the class's own forward (no stacking)."""
    if "forward" in vars(model):
        model.forward = types.MethodType(type(model).forward, model)
    add(model, temperature=temperature, cast_lm_head_to_fp32=cast, outputs=outputs)
