"""What a fault is and how it is injected into a run.

A :class:`Fault` breaks a healthy tiny-world run at a chosen step (``onset``) through public
mechanisms only: config values, the reward-function hook (:mod:`rlcockpit.faults.rewards`), and a
trainer step hook that sends live-parameter requests (``trainer.live.request``) or acts on the
models at the onset. Detectors never learn about faults: the onset is recorded as an event of kind
``"fault"`` for the benchmark and the UI, and detectors never read events.

    fault = faults.get("lr_spike").with_onset(12)
    cfg = fault.apply(cfg)              # config part (reward wrapper, overrides)
    trainer = fault.apply(Trainer(cfg)) # step hook: live change / action at the onset

The first faulted step is ``onset``: a live change is requested in the hook before step
``onset - 1`` so the trainer applies it at that step's HOTFIX boundary; reward faults corrupt the
rewards of steps >= ``onset``; actions run before step ``onset``'s rollout (and before every later
step when ``repeat`` is set).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlcockpit.config import from_dict, to_dict
from rlcockpit.errors import ConfigError
from rlcockpit.faults import rewards as fault_rewards

if TYPE_CHECKING:
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.live import LiveParams
    from rlcockpit.trainer.trainer import Trainer

LiveChange = Callable[["LiveParams"], Mapping[str, Any]]
Action = Callable[["Trainer"], Mapping[str, Any]]
REQUESTER = "fault-injector"


@dataclass(frozen=True)
class RewardFault:
    """A reward-wrapper fault: the kind (see :mod:`rlcockpit.faults.rewards`) and its parameters."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    """One injectable failure. ``expected`` names the detectors or detector families that should
    fire (used by the benchmark only)."""

    name: str
    description: str
    expected: tuple[str, ...]
    how: str
    onset: int = 10
    live: LiveChange | None = None
    reward: RewardFault | None = None
    action: Action | None = None
    repeat: bool = False  # the action runs again before every step after the onset too
    overrides: Mapping[str, Any] = field(default_factory=dict)  # dotted config keys, from step 0

    def __post_init__(self) -> None:
        if self.onset < 2:
            raise ConfigError(f"fault {self.name}: onset={self.onset} must be >= 2 (step 1 is the healthy "
                              "baseline the change is requested from)", details={"onset": self.onset})

    def with_onset(self, onset: int | None) -> Fault:
        return self if onset is None else dataclasses.replace(self, onset=int(onset))

    # ------------------------------------------------------------------ injection

    def configure(self, cfg: TrainConfig) -> TrainConfig:
        """The run's config with this fault's overrides and reward wrapper (sets the wrapper's env)."""
        data = to_dict(cfg)
        for key, value in self.overrides.items():
            _set_dotted(data, key, value)
        if self.reward is not None:
            inner = data["reward"]["fn"]
            if inner == fault_rewards.SPEC:
                raise ConfigError(f"fault {self.name}: the config already carries a reward fault; apply one "
                                  "fault per run", details={"key": "reward.fn"})
            os.environ[fault_rewards.ENV] = fault_rewards.encode(self.reward.kind, self.onset, inner,
                                                                 self.reward.params)
            data["reward"]["fn"] = fault_rewards.SPEC
        return from_dict(type(cfg), data)

    def install(self, trainer: Trainer) -> Trainer:
        """Add the step hook that injects the live change / action and records the ``fault`` event."""
        if self.reward is not None and trainer.cfg.reward.fn != fault_rewards.SPEC:
            raise ConfigError(f"fault {self.name} corrupts the reward: apply it to the config before building "
                              "the Trainer (cfg = fault.apply(cfg); trainer = fault.apply(Trainer(cfg)))",
                              details={"key": "reward.fn"})
        trainer.add_step_hook(_Injector(self))
        return trainer

    def apply(self, target: Any) -> Any:
        """``apply(cfg) -> cfg`` (config part) or ``apply(trainer) -> trainer`` (step hook)."""
        if hasattr(target, "add_step_hook"):
            return self.install(target)
        if dataclasses.is_dataclass(target) and hasattr(target, "reward"):
            return self.configure(target)
        raise ConfigError(f"fault {self.name}: apply() takes a TrainConfig or a Trainer, not "
                          f"{type(target).__name__}", details={"fault": self.name})

    def trainer(self, cfg: TrainConfig, **kwargs: Any) -> Trainer:
        """Both parts at once: a Trainer for ``cfg`` with this fault injected."""
        from rlcockpit.trainer.trainer import Trainer

        return self.install(Trainer(self.configure(cfg), **kwargs))

    def summary(self) -> dict[str, Any]:
        return {"fault": self.name, "onset": self.onset, "description": self.description, "how": self.how,
                "expected": list(self.expected)}


class _Injector:
    """The step hook: live request before step ``onset - 1`` runs, event + action before ``onset``."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.requested: dict[str, Any] = {}
        self.pending: Any = None
        self.announced = False

    def __call__(self, trainer: Trainer, step: int) -> None:
        # A fault is an event in time: it strikes once. A rollback to a checkpoint before the onset
        # replays those steps without striking again, as it would after a real one-off mistake.
        fault = self.fault
        if fault.live is not None and step == fault.onset - 1 and not self.requested:
            self.requested = dict(fault.live(trainer.live.params))
            self.pending = trainer.live.request(self.requested, reason=f"fault injection: {fault.name}",
                                                requested_by=REQUESTER)
        if fault.action is not None and fault.repeat and step > fault.onset:
            fault.action(trainer)
        if step != fault.onset or self.announced:
            return
        self.announced = True
        payload = fault.summary()
        if self.requested:
            payload["live"] = self.requested
            payload["live_applied_at"] = self.pending.result(0) if self.pending.done() else None
        if fault.reward is not None:
            payload["reward"] = {"kind": fault.reward.kind, **dict(fault.reward.params)}
        if fault.action is not None:
            payload["action"] = dict(fault.action(trainer))
        trainer.telemetry.event(step, "fault", payload)

    def __repr__(self) -> str:
        return f"FaultInjector({self.fault.name!r}, onset={self.fault.onset})"


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
