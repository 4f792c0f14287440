"""Run-time knobs (``LiveParams``) and the in-process command inbox (``LiveControl``).

Every parameter a person (or a detector, through the control layer) may change while a run trains
is one field of :class:`LiveParams`, with a type and a valid range in :data:`LIVE_SPECS` — the
allow-list the control layer exposes. Changes are *requested* from any thread and *applied* by the
trainer only at a phase boundary (HOTFIX), so a step never sees half a change (DESIGN.md §3)::

    pending = trainer.live.request({"kl_coef": 0.1}, reason="KL too high", requested_by="alice")
    step = pending.result(timeout=60)     # the step at whose end the change was applied

The same inbox takes commands: ``checkpoint()``, ``pause()``, ``resume()``, ``stop()``.
Thread-safe; the value rules are the control plane's (:mod:`rlcockpit.control.params`).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlcockpit.control.params import check_value, unknown_parameter
from rlcockpit.errors import ConfigError

if TYPE_CHECKING:
    from rlcockpit.trainer.config import TrainConfig


@dataclass(frozen=True)
class LiveSpec:
    """Type, inclusive range and meaning of one live parameter."""

    name: str
    type: type
    lo: float
    hi: float
    help: str
    metric: str  # the catalog name under which the (effective) value is logged each step

    def published(self, lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
        """The spec as a run publishes it (``lo`` / ``hi``: this run's range when tightened); the
        form :func:`rlcockpit.control.params.check_value` checks a value against."""
        return {"type": "int" if self.type is int else "float", "lo": self.lo if lo is None else lo,
                "hi": self.hi if hi is None else hi, "help": self.help, "metric": self.metric}


LIVE_SPECS: dict[str, LiveSpec] = {s.name: s for s in (
    LiveSpec("actor_lr", float, 0.0, 1.0, "peak actor learning rate (the schedule scales it)", "optim/lr/actor"),
    LiveSpec("critic_lr", float, 0.0, 1.0, "peak critic learning rate", "optim/lr/critic"),
    LiveSpec("kl_coef", float, 0.0, 10.0, "KL coefficient beta (resets the adaptive controller's value)",
             "kl/coef"),
    LiveSpec("kl_target", float, 1e-6, 1000.0, "target per-sequence KL of the adaptive controller", "kl/target"),
    LiveSpec("clip_eps", float, 0.01, 1.0, "policy clip epsilon (the base value when adaptive)",
             "policy/clip_eps"),
    LiveSpec("value_clip", float, 0.0, 100.0, "value-loss clip range; 0 = unclipped", "value/clip_range"),
    LiveSpec("entropy_coef", float, 0.0, 1.0, "entropy bonus weight", "policy/entropy_coef"),
    LiveSpec("reward_scale", float, 0.0, 100.0, "multiplier on the total reward", "reward/scale"),
    LiveSpec("temperature", float, 0.05, 5.0, "rollout sampling temperature", "rollout/temperature"),
    LiveSpec("top_p", float, 0.05, 1.0, "rollout nucleus threshold", "rollout/top_p"),
    LiveSpec("max_new_tokens", int, 1, 4096, "maximum response length (bounded by the model's context)",
             "rollout/max_new_tokens"),
    LiveSpec("ppo_epochs", int, 1, 16, "passes over each rollout batch", "ppo/epochs"),
    LiveSpec("grad_clip_actor", float, 0.0, 1e6, "gradient-norm limit, actor without embeddings; 0 = off",
             "grad/clip/actor"),
    LiveSpec("grad_clip_embedding", float, 0.0, 1e6, "gradient-norm limit, actor embeddings; 0 = off",
             "grad/clip/embedding"),
    LiveSpec("grad_clip_critic", float, 0.0, 1e6, "gradient-norm limit, critic; 0 = off", "grad/clip/critic"),
)}


@dataclass(frozen=True)
class LiveParams:
    """The current value of every live parameter (a frozen snapshot; the trainer swaps it whole)."""

    actor_lr: float
    critic_lr: float
    kl_coef: float
    kl_target: float
    clip_eps: float
    value_clip: float
    entropy_coef: float
    reward_scale: float
    temperature: float
    top_p: float
    max_new_tokens: int
    ppo_epochs: int
    grad_clip_actor: float
    grad_clip_embedding: float
    grad_clip_critic: float

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> LiveParams:
        return cls(
            actor_lr=cfg.optim.actor_lr, critic_lr=cfg.optim.critic_lr, kl_coef=cfg.kl.coef,
            kl_target=cfg.kl.target, clip_eps=cfg.ppo.clip_eps, value_clip=cfg.ppo.value_clip,
            entropy_coef=cfg.ppo.entropy_coef, reward_scale=cfg.reward.scale,
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
            max_new_tokens=cfg.rollout.max_new_tokens, ppo_epochs=cfg.ppo.epochs,
            grad_clip_actor=cfg.optim.grad_clip_actor, grad_clip_embedding=cfg.optim.grad_clip_embedding,
            grad_clip_critic=cfg.optim.grad_clip_critic,
        )

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    def replaced(self, changes: Mapping[str, Any]) -> LiveParams:
        return dataclasses.replace(self, **changes)


def validate_changes(changes: Mapping[str, Any], bounds: Mapping[str, tuple[float, float]] | None = None,
                     ) -> dict[str, float | int]:
    """Check a change request against :data:`LIVE_SPECS`; returns the changes with canonical types.

    Raises :class:`ConfigError` for an empty request, an unknown key (with a suggestion), a wrong
    type, NaN/inf, or a value outside the allowed range (``bounds`` may tighten a spec's range).
    The rules are the control plane's (:mod:`rlcockpit.control.params`), so a ticket and an
    in-process request are refused alike.
    """
    if not isinstance(changes, Mapping) or not changes:
        raise ConfigError("a live-parameter request needs at least one change, e.g. {'kl_coef': 0.1}",
                          details={"allowed": sorted(LIVE_SPECS)})
    out: dict[str, float | int] = {}
    for key, value in changes.items():
        spec = LIVE_SPECS.get(key)
        if spec is None:
            raise unknown_parameter(key, LIVE_SPECS, ConfigError)
        lo, hi = (bounds or {}).get(key, (spec.lo, spec.hi))
        out[key] = check_value(key, value, spec.published(lo, hi), ConfigError)
    return out


_ids = itertools.count(1)


class PendingChange:
    """A queued request. ``result(timeout)`` blocks until the trainer applied it and returns that step."""

    def __init__(self, kind: str, changes: Mapping[str, Any], reason: str, requested_by: str) -> None:
        self.request_id = next(_ids)
        self.kind = kind  # "live_params" | "checkpoint" | "pause" | "resume" | "stop"
        self.changes = dict(changes)
        self.reason = reason
        self.requested_by = requested_by
        self.requested_at = time.time()
        self.info: dict[str, Any] = {}
        self._done = threading.Event()
        self._step: int | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} ({self.kind}) not applied within {timeout} s")
        if self._error is not None:
            raise self._error
        return int(self._step)  # type: ignore[arg-type]

    def resolve(self, step: int, **info: Any) -> None:
        self._step = step
        self.info.update(info)
        self._done.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def __repr__(self) -> str:
        return f"PendingChange(id={self.request_id}, kind={self.kind!r}, changes={self.changes!r})"


class LiveControl:
    """The trainer's inbox: validated live-parameter requests and commands, drained at HOTFIX."""

    def __init__(self, params: LiveParams) -> None:
        self._params = params
        self._bounds: dict[str, tuple[float, float]] = {}
        self._queue: deque[PendingChange] = deque()
        self._cond = threading.Condition()

    @property
    def params(self) -> LiveParams:
        return self._params

    def set_params(self, params: LiveParams) -> None:
        """Trainer only: install the values after applying a change (or restoring a checkpoint)."""
        self._params = params

    def tighten(self, key: str, lo: float, hi: float) -> None:
        """Trainer only: narrow a spec's range for this run (e.g. max_new_tokens by the context length)."""
        spec = LIVE_SPECS[key]
        self._bounds[key] = (max(spec.lo, lo), min(spec.hi, hi))

    def bounds(self, key: str) -> tuple[float, float]:
        spec = LIVE_SPECS[key]
        return self._bounds.get(key, (spec.lo, spec.hi))

    def request(self, changes: Mapping[str, Any], *, reason: str, requested_by: str) -> PendingChange:
        """Queue a live-parameter change; refused at once (ConfigError) when it is not allowed."""
        clean = validate_changes(changes, self._bounds)
        return self._put(PendingChange("live_params", clean, reason, requested_by))

    def checkpoint(self, *, reason: str = "on demand", requested_by: str = "user") -> PendingChange:
        return self._put(PendingChange("checkpoint", {}, reason, requested_by))

    def pause(self, *, reason: str = "", requested_by: str = "user") -> PendingChange:
        return self._put(PendingChange("pause", {}, reason, requested_by))

    def resume(self, *, reason: str = "", requested_by: str = "user") -> PendingChange:
        return self._put(PendingChange("resume", {}, reason, requested_by))

    def stop(self, *, reason: str = "", requested_by: str = "user") -> PendingChange:
        return self._put(PendingChange("stop", {}, reason, requested_by))

    def _put(self, item: PendingChange) -> PendingChange:
        with self._cond:
            self._queue.append(item)
            self._cond.notify_all()
        return item

    def drain(self) -> list[PendingChange]:
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
        return items

    def wait(self, timeout: float) -> bool:
        """Block until something is queued (or ``timeout``); True when the inbox is not empty."""
        with self._cond:
            if not self._queue:
                self._cond.wait(timeout)
            return bool(self._queue)

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)
