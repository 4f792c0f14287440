"""What a fault is and how it is injected into a run.

A :class:`Fault` breaks a healthy tiny-world run at a chosen step (``onset``) through public
mechanisms only: config values, the reward-function hook (:mod:`rlcockpit.faults.rewards`), and a
trainer step hook that sends live-parameter requests (``trainer.live.request``) or acts on the
models (the reference model: :mod:`rlcockpit.faults.models`). Detectors never learn about faults:
the first faulted step is recorded as an event of kind ``"fault"`` for the benchmark and the UI,
and detectors never read events.

    fault = faults.get("lr_spike").with_onset(12)
    cfg = fault.apply(cfg)              # config part (reward wrapper, overrides)
    trainer = fault.apply(Trainer(cfg)) # step hook: live change / action at the onset

**When.** The first faulted step is ``onset`` (``first_step``). A live change is requested in the
hook before step ``onset - 1`` so the trainer applies it at that step's HOTFIX boundary; reward
faults corrupt the rewards of steps >= ``onset``; actions run before step ``onset``'s rollout (and
before every later step when ``repeat`` is set). ``onset = 0`` is a fault present from the start:
the live change is written into the config (a config-level mistake, no live change, no event of the
trainer), the reward is corrupted and the action runs from step 1 on. Onset 1 is refused (step 1 is
the first trained step: use 0 for "from the start").

**Variants.** ``with_variant(magnitude=, shape=)``: every built-in fault comes ``strong`` (the
catalog's values) and most also ``mild`` (``Fault.mild`` holds the replaced fields); as a ``step``
(the whole change at once) or a ``ramp`` over ``ramp`` = R steps: a live parameter moves
geometrically for multipliers (``actor_lr`` × 100 over R steps is × 100^(1/R) per step), linearly
where the target is 0; a reward corruption grows linearly; an action is called with the ramp's
progress (0..1]. A config-level (onset 0) live change cannot ramp.
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
from rlcockpit.trainer.live import LIVE_SPECS

if TYPE_CHECKING:
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

Action = Callable[["Trainer", float], Mapping[str, Any]]  # (trainer, ramp progress in (0, 1]) -> event payload
REQUESTER = "fault-injector"
SHAPES = ("step", "ramp")
MAGNITUDES = ("mild", "strong")
DEFAULT_RAMP = 15  # steps a ramp takes to reach the full change

# the config key of each live parameter (what LiveParams.from_config reads): an onset-0 fault writes there
CONFIG_KEYS: dict[str, str] = {
    "actor_lr": "optim.actor_lr", "critic_lr": "optim.critic_lr", "kl_coef": "kl.coef", "kl_target": "kl.target",
    "clip_eps": "ppo.clip_eps", "value_clip": "ppo.value_clip", "entropy_coef": "ppo.entropy_coef",
    "reward_scale": "reward.scale", "temperature": "rollout.temperature", "top_p": "rollout.top_p",
    "max_new_tokens": "rollout.max_new_tokens", "ppo_epochs": "ppo.epochs",
    "grad_clip_actor": "optim.grad_clip_actor", "grad_clip_embedding": "optim.grad_clip_embedding",
    "grad_clip_critic": "optim.grad_clip_critic",
}


@dataclass(frozen=True)
class RewardFault:
    """A reward-wrapper fault: the kind (see :mod:`rlcockpit.faults.rewards`) and its parameters."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveChange:
    """One live parameter's change: ``op`` "times" (multiply the current value by ``value``) or "set"."""

    key: str
    op: str
    value: float

    def __post_init__(self) -> None:
        if self.key not in LIVE_SPECS:
            raise ConfigError(f"LiveChange: {self.key!r} is not a live parameter (allowed: "
                              f"{', '.join(sorted(LIVE_SPECS))})", details={"key": self.key})
        if self.op not in ("times", "set"):
            raise ConfigError(f"LiveChange({self.key}): op {self.op!r} must be 'times' or 'set'",
                              details={"op": self.op})

    def at(self, base: float, frac: float) -> float | int:
        """The value at ramp progress ``frac`` (1.0 = the full change) from ``base``: geometric
        between two positive values, linear otherwise (e.g. towards 0)."""
        target = base * self.value if self.op == "times" else self.value
        if frac >= 1.0:
            value = target
        elif base > 0 and target > 0:
            value = base * (target / base) ** frac
        else:
            value = base + (target - base) * frac
        return int(round(value)) if LIVE_SPECS[self.key].type is int else float(value)

    def describe(self) -> str:
        return f"{self.key} x{self.value:g}" if self.op == "times" else f"{self.key} = {self.value:g}"


@dataclass(frozen=True)
class Fault:
    """One injectable failure. ``expected`` names the detectors or detector families that should
    fire, ``drives`` the metric the fault moves and ``baseline_keys`` the metrics whose comparison
    with a baseline run counts as its detection (all used by the benchmark only)."""

    name: str
    description: str
    expected: tuple[str, ...]
    how: str
    onset: int = 10
    live: tuple[LiveChange, ...] = ()
    reward: RewardFault | None = None
    action: Action | None = None
    repeat: bool = False  # the action runs again before every step after the onset too
    overrides: Mapping[str, Any] = field(default_factory=dict)  # dotted config keys, from step 0
    ramp: int = 0  # 0 = a step; R > 1 = the change is reached over R steps
    magnitude: str = "strong"
    mild: Mapping[str, Any] = field(default_factory=dict)  # fields replaced in the mild variant
    shapes: tuple[str, ...] = SHAPES  # the shapes this fault comes in
    algos: tuple[str, ...] = ("ppo", "grpo")  # the algorithms it means something for
    drives: str = ""  # catalog name of the metric the fault moves (ramps are judged against it)
    # the metrics the fault moves, as keys of the `baseline` detector (a finding comparing the run with a
    # healthy run of the same recipe counts for the fault when it names one of them)
    baseline_keys: tuple[str, ...] = ()
    # data parallel: the rank the fault acts on (None = every rank of any run); such a fault needs a
    # run of at least rank + 1 ranks (`rlcockpit faults run NAME --nproc 2`) and rank 0 records its event
    rank: int | None = None

    def __post_init__(self) -> None:
        if self.onset < 0 or self.onset == 1:
            raise ConfigError(f"fault {self.name}: onset={self.onset} must be 0 (present from the first step, "
                              "a config-level change) or >= 2 (step onset-1 is the healthy step the change is "
                              "requested in)", details={"onset": self.onset})
        if self.ramp < 0:
            raise ConfigError(f"fault {self.name}: ramp={self.ramp} must be >= 0 (0 = a step)",
                              details={"ramp": self.ramp})
        if self.magnitude not in MAGNITUDES:
            raise ConfigError(f"fault {self.name}: magnitude {self.magnitude!r} must be one of "
                              f"{', '.join(MAGNITUDES)}", details={"magnitude": self.magnitude})
        if self.onset == 0 and self.live and self.ramp > 1:
            raise ConfigError(f"fault {self.name}: a live change present from the start (onset 0) is a config "
                              "value and cannot ramp; use onset >= 2 for a ramp, or shape 'step'",
                              details={"onset": self.onset, "ramp": self.ramp})

    @property
    def distributed(self) -> bool:
        """A fault of data-parallel runs (it acts on one rank of several)."""
        return self.rank is not None

    def check_world(self, world_size: int) -> None:
        """A rank fault needs a run with that rank: ConfigError with the command that works."""
        if self.rank is not None and world_size <= self.rank:
            raise ConfigError(f"fault {self.name} acts on rank {self.rank} of a data-parallel run; this run has "
                              f"{world_size} rank(s): rlcockpit faults run {self.name} --nproc {self.rank + 1}",
                              details={"fault": self.name, "rank": self.rank, "world_size": world_size})

    def acts_on(self, trainer: Any) -> bool:
        """Whether this process is where the fault's action runs."""
        return self.rank is None or getattr(getattr(trainer, "group", None), "rank", 0) == self.rank

    # ------------------------------------------------------------------ variants

    @property
    def first_step(self) -> int:
        """The first step trained with the fault (onset 0: step 1)."""
        return max(self.onset, 1)

    @property
    def shape(self) -> str:
        return "ramp" if self.ramp > 1 else "step"

    @property
    def ramp_steps(self) -> int:
        return max(self.ramp, 1)

    def with_onset(self, onset: int | None) -> Fault:
        return self if onset is None else dataclasses.replace(self, onset=int(onset))

    def with_variant(self, *, magnitude: str | None = None, shape: str | None = None,
                     ramp: int | None = None) -> Fault:
        """The ``mild`` / ``strong`` and ``step`` / ``ramp`` variant (``ramp``: its length, default 15)."""
        fault = self
        if magnitude is not None and magnitude != self.magnitude:
            if magnitude != "mild" or not self.mild:
                raise ConfigError(f"fault {self.name} comes as {self.magnitude}" + (" or mild" if self.mild else "")
                                  + f", not {magnitude!r}", details={"magnitude": magnitude})
            fault = dataclasses.replace(fault, **dict(self.mild), magnitude="mild", mild={})
        if shape is not None:
            if shape not in fault.shapes:
                raise ConfigError(f"fault {self.name} comes as {', '.join(fault.shapes)}, not {shape!r}",
                                  details={"shape": shape})
            length = ramp or (fault.ramp if fault.ramp > 1 else DEFAULT_RAMP)
            fault = dataclasses.replace(fault, ramp=length if shape == "ramp" else 0)
        return fault

    def variant(self) -> str:
        """One line naming the variant, e.g. ``onset 0, step, mild`` or ``onset 112, ramp 15, strong``."""
        shape = f"ramp {self.ramp}" if self.shape == "ramp" else "step"
        return f"onset {self.onset}, {shape}, {self.magnitude}"

    # ------------------------------------------------------------------ injection

    def configure(self, cfg: TrainConfig) -> TrainConfig:
        """The run's config with this fault's overrides and reward wrapper (sets the wrapper's env); an
        onset-0 live change is written into the config."""
        data = to_dict(cfg)
        for key, value in self.overrides.items():
            _set_dotted(data, key, value)
        if self.onset == 0:
            for change in self.live:
                path = CONFIG_KEYS[change.key]
                _set_dotted(data, path, change.at(_get_dotted(data, path), 1.0))
        if self.reward is not None:
            inner = data["reward"]["fn"]
            if inner == fault_rewards.SPEC:
                raise ConfigError(f"fault {self.name}: the config already carries a reward fault; apply one "
                                  "fault per run", details={"key": "reward.fn"})
            os.environ[fault_rewards.ENV] = fault_rewards.encode(self.reward.kind, self.onset, inner,
                                                                 self.reward.params, self.ramp)
            data["reward"]["fn"] = fault_rewards.SPEC
        return from_dict(type(cfg), data)

    def install(self, trainer: Trainer) -> Trainer:
        """Add the step hook that injects the live change / action and records the ``fault`` event."""
        self.check_world(getattr(getattr(trainer, "group", None), "world_size", 1))
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
        """Both parts at once: a Trainer for ``cfg`` with this fault injected (``resume_from=`` too)."""
        from rlcockpit.trainer.trainer import Trainer

        return self.install(Trainer(self.configure(cfg), **kwargs))

    def summary(self) -> dict[str, Any]:
        return {"fault": self.name, "onset": self.onset, "first_step": self.first_step, "shape": self.shape,
                "ramp": self.ramp if self.shape == "ramp" else 0, "magnitude": self.magnitude,
                "description": self.description, "how": self.how, "expected": list(self.expected),
                "drives": self.drives}


class _Injector:
    """The step hook: live requests before step ``first - 1 + k`` (k < R), event + action before ``first``."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.requested: dict[str, Any] = {}
        self.pending: Any = None
        self.base: dict[str, float] | None = None
        self.done: set[tuple[str, int]] = set()  # ramp points already requested / acted (never twice, even after a rollback)
        self.announced = False

    def __call__(self, trainer: Trainer, step: int) -> None:
        # A fault is an event in time: it strikes once. A rollback to a checkpoint before the onset
        # replays those steps without striking again, as it would after a real one-off mistake.
        self._request_live(trainer, step)
        fault, first = self.fault, self.fault.first_step
        if fault.action is not None and step > first and (fault.repeat or self._ramping(step)) \
                and fault.acts_on(trainer):
            fault.action(trainer, self._progress(step))
        if step == first and not self.announced:
            self._announce(trainer, step)

    def _request_live(self, trainer: Trainer, step: int) -> None:
        fault = self.fault
        if not fault.live or fault.onset == 0:  # onset 0: the change is in the config
            return
        k = step - (fault.first_step - 1)  # request k is applied at the end of this step: trained from first + k
        if not 0 <= k < fault.ramp_steps or ("live", k) in self.done:
            return
        if k == 0:
            self.base = {c.key: getattr(trainer.live.params, c.key) for c in fault.live}
        if self.base is None:
            return
        self.done.add(("live", k))
        frac = (k + 1) / fault.ramp_steps
        values = {c.key: c.at(self.base[c.key], frac) for c in fault.live}
        pending = trainer.live.request(values, reason=f"fault injection: {fault.name}"
                                       + (f" (ramp {k + 1}/{fault.ramp_steps})" if fault.ramp_steps > 1 else ""),
                                       requested_by=REQUESTER)
        if k == 0:
            self.requested, self.pending = values, pending

    def _ramping(self, step: int) -> bool:
        if step >= self.fault.first_step + self.fault.ramp_steps or ("action", step) in self.done:
            return False
        self.done.add(("action", step))
        return True

    def _progress(self, step: int) -> float:
        return min(1.0, (step - self.fault.first_step + 1) / self.fault.ramp_steps)

    def _announce(self, trainer: Trainer, step: int) -> None:
        fault = self.fault
        self.announced = True
        payload = fault.summary()
        if self.requested:
            payload["live"] = self.requested
            payload["live_applied_at"] = self.pending.result(0) if self.pending.done() else None
        if fault.onset == 0 and fault.live:
            payload["config"] = {CONFIG_KEYS[c.key]: c.describe() for c in fault.live}
        if fault.reward is not None:
            payload["reward"] = {"kind": fault.reward.kind, **dict(fault.reward.params)}
        if fault.rank is not None:
            payload["rank"] = fault.rank
        if fault.action is not None and fault.acts_on(trainer):
            if fault.distributed:  # rank 0 records the event; this rank acts (a freeze never returns)
                fault.action(trainer, self._progress(step))
                return
            payload["action"] = dict(fault.action(trainer, self._progress(step)))
        trainer.telemetry.event(step, "fault", payload)

    def __repr__(self) -> str:
        return f"FaultInjector({self.fault.name!r}, {self.fault.variant()})"


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _get_dotted(data: Mapping[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node
