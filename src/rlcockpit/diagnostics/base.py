"""What a detector is (DESIGN.md §6, STYLE.md: Cockpit's quantities / instruments split).

The trainer and the importers produce *quantities* (catalog metrics and samples); a detector is an
*instrument* reading them. Each step the engine hands every detector a :class:`StepView`; the
detector updates its small window state and says what it sees *now*:

- ``None``: healthy;
- a :class:`Condition` (or a list of them, one per ``key``): a failure condition is present, at a
  severity, with a message and evidence;
- :data:`SKIPPED`: the inputs it reads are missing this step (never an exception);
- :data:`NO_REFERENCE`: a KL detector on a run that has no reference model (it declares
  ``kl/coef`` = 0 and logs no KL: TRL GRPO's default β = 0, verl without a KL loss or KL reward).

The engine, not the detector, turns conditions into findings: a finding is raised when a condition
starts, escalates or resolves (alert hygiene), and findings close together become one incident.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlcockpit.config import Config
from rlcockpit.records import SEVERITIES, SampleRecord

TIERS = ("yellow", "orange", "red", "black")  # 001 Q12; "info" findings never page anyone


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def int_or(value: object, default: int) -> int:
    """``int(value)``, or ``default`` when it is missing or not a number (evidence read back from
    a store may hold anything)."""
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class StepView:
    """One step as a detector sees it: catalog metrics (NaN kept), the step's samples, wall time."""

    step: int
    metrics: Mapping[str, float]
    samples: Sequence[SampleRecord] = ()
    wall_time: float = 0.0

    def get(self, name: str) -> float | None:
        """The metric's value (NaN and inf included), or None when it was not logged this step."""
        value = self.metrics.get(name)
        return None if value is None else float(value)

    def finite(self, name: str) -> float | None:
        """The metric's value when it is a finite number, else None."""
        value = self.get(name)
        return value if value is not None and math.isfinite(value) else None

    def matching(self, prefix: str) -> dict[str, float]:
        """Every metric whose name starts with ``prefix`` (templated names: grad/norm/layer/<name>)."""
        return {k: float(v) for k, v in self.metrics.items() if k.startswith(prefix)}


# The finding statuses that tell a person something new (the engine's "raised", "escalated" to a
# higher tier, "worsened" at its tier by ``worsen_factor``); "resolved" closes a finding.
NEWS = ("raised", "escalated", "worsened")


@dataclass(frozen=True)
class Condition:
    """A failure condition present at this step.

    ``key`` tells apart several conditions of one detector (e.g. "collapse" and "blowup");
    ``evidence`` holds the numbers a person needs to judge it. Put ``signal`` (a short human label
    such as "KL") and ``onset_step`` (the step the signal started moving) in the evidence when you
    know them: the engine uses them to name the first-moving signal of an incident.
    """

    severity: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    key: str = ""
    message_zh: str = ""

    def __post_init__(self) -> None:
        if self.severity not in TIERS:
            raise ValueError(f"Condition severity {self.severity!r} must be one of {TIERS}")


class _Skipped:
    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()


class _NoReference:
    def __repr__(self) -> str:
        return "NO_REFERENCE"


NO_REFERENCE = _NoReference()


@dataclass(frozen=True)
class NoConfig(Config):
    """A detector without thresholds."""


class Detector(abc.ABC):
    """Base class of every detector, built-in or your own.

    Subclasses set the class attributes and implement :meth:`update`. ``Config`` is a frozen
    :class:`rlcockpit.config.Config` dataclass whose defaults come from the seeds; YAML overrides
    arrive as ``diagnostics.detectors.<name>.<field>``.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""  # e.g. "kl", "entropy", "reward_hacking": what the benchmark checks
    reads: ClassVar[tuple[str, ...]] = ()  # catalog names; a trailing "/" means "every name under"
    reads_samples: ClassVar[bool] = False
    patterns: ClassVar[tuple[str, ...]] = ()  # failure-library ids
    signal: ClassVar[str] = ""  # short human label of the quantity watched, e.g. "KL"
    Config: ClassVar[type] = NoConfig

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.Config()

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        """Whether a log carrying the catalog ``names`` (and samples, when ``samples``) gives this
        detector what it cannot run without — the coverage ``doctor`` reports is measured against
        it. By default any input it reads; a detector whose other reads are context (a length to
        convert a KL per token, a learning rate beside a value loss) narrows it to what it skips
        without."""
        return any(_present(read, names) for read in cls.reads) or (cls.reads_samples and samples)

    @abc.abstractmethod
    def update(self, view: StepView) -> Condition | Sequence[Condition] | _Skipped | None:
        """Read this step, update the window state, report the conditions present now."""

    def tick(self, wall_time: float, last_step_wall: float | None
             ) -> Condition | Sequence[Condition] | None:
        """Called without a new step (heartbeat checks); most detectors ignore it."""
        return None

    def finish(self) -> Condition | Sequence[Condition] | None:
        """Called once when the log is known to be complete (``rlcockpit doctor`` on a run that is
        not running: an import, a finished or failed run): report what the whole log shows that no
        single step could — a check that held on every step of a log too short to confirm it (a few
        lines pasted from an issue). Most detectors have nothing to add."""
        return None


def _present(read: str, names: frozenset[str]) -> bool:
    """``read`` among ``names`` (a trailing "/" matches any name under it)."""
    return any(n.startswith(read) for n in names) if read.endswith("/") else read in names
