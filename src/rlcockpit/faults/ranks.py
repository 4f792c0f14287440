"""Faults of data-parallel runs: one rank made slow, its parameters nudged, its gradients scaled, or
its process frozen.

They act on one rank (``Fault.rank``, rank 1 by default) of a run of at least two ranks
(``rlcockpit faults run NAME --nproc 2``); the other ranks run healthy, rank 0 records the ``fault``
event. torch is imported only when one runs.

- :func:`slow_actor`: a forward pre-hook on that rank's actor sleeps ``delay_s`` on every call --
  a slow GPU, a throttled node: its ROLLOUT (one forward per generated token) and UPDATE take
  longer, and every other rank waits at the next collective (``straggler``).
- :func:`nudge_actor`: one weight of that rank's actor moved by ``delta`` -- a rank whose update
  was applied differently (a non-deterministic kernel, a corrupted all-reduce): the replicas differ
  from then on (``rank_divergence``, at the next parameter-hash check, ``distributed.hash_every``).
- :func:`scale_gradients`: every gradient of that rank's actor multiplied by ``factor`` in the
  backward pass, before the all-reduce -- a bad data shard or faulty hardware on one rank: its
  local gradient norm stands out (``rank_grad_outlier``) while the averaged update keeps the
  replicas equal.
- :func:`freeze_rank`: the rank's process stops itself (SIGSTOP) -- a hung or lost node as the
  others see it: no heartbeat, the group blocks at its next collective (``rank_heartbeat``) until
  ``distributed.timeout_s``; the frozen process is left for the launcher (torchrun) to kill.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

HOOK_ATTR = "_rlcockpit_fault_slow"
GRAD_ATTR = "_rlcockpit_fault_grad"


def _hooked(module: Any, attr: str, install: Any) -> dict[str, float]:
    """The mutable setting of a hook installed once on ``module`` (a ramp only changes ``value``):
    ``install(state)`` registers hooks that read ``state["value"]``."""
    state = getattr(module, attr, None)
    if state is None:
        state = {"value": 0.0}
        install(state)
        setattr(module, attr, state)
    return state


def slow_actor(delay_s: float) -> Any:
    """An action: every forward call of this rank's actor sleeps ``delay_s`` × the ramp's progress."""

    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        actor = trainer.models.actor

        def install(state: dict[str, float]) -> None:
            actor.register_forward_pre_hook(lambda module, args: time.sleep(state["value"]))

        state = _hooked(actor, HOOK_ATTR, install)
        state["value"] = delay_s * frac
        return {"rank": trainer.group.rank, "actor_forward_delay_s": state["value"]}

    return action


def nudge_actor(delta: float) -> Any:
    """An action: the first element of this rank's first actor parameter moves by ``delta``."""

    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        import torch

        name, param = next(iter(trainer.models.actor.named_parameters()))
        with torch.no_grad():
            param.view(-1)[0] += delta * frac
        return {"rank": trainer.group.rank, "parameter": name, "delta": delta * frac}

    return action


def scale_gradients(factor: float) -> Any:
    """An action: this rank's actor gradients × ``factor`` (× the ramp's progress) as they are computed."""

    def action(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
        actor = trainer.models.actor

        def install(state: dict[str, float]) -> None:
            for p in actor.parameters():
                if p.requires_grad:
                    p.register_hook(lambda g: g * state["value"])

        state = _hooked(actor, GRAD_ATTR, install)
        state["value"] = 1.0 + (factor - 1.0) * frac
        return {"rank": trainer.group.rank, "gradient_factor": state["value"]}

    return action


def freeze_rank(trainer: Any, frac: float = 1.0) -> Mapping[str, Any]:
    """An action: this rank's process stops (SIGSTOP); it never returns while stopped."""
    os.kill(os.getpid(), signal.SIGSTOP)
    return {"rank": trainer.group.rank, "signal": "SIGSTOP"}  # only after a SIGCONT
