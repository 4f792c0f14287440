"""Holding a step's records until the step is complete, so a step lands in one transaction.

A step's metrics, histograms and samples are held while the step is *open*. The step becomes
complete when (a) a record with a larger step arrives, (b) ``commit(step)`` is called, (c)
``flush()`` / ``close()`` is called, or (d) the open step has seen no new record for
``flush_interval_s``. Complete steps are written whole, so a crash never leaves half a step.

Events, findings, phases and checkpoints are not held: they describe the run's live state (the
current phase, an alert) and are written at the next write, whatever the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcockpit.records import Batch


@dataclass
class Parts:
    """Records waiting to be written, by kind."""

    metrics: list = field(default_factory=list)
    histograms: list = field(default_factory=list)
    samples: list = field(default_factory=list)
    events: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    phases: list = field(default_factory=list)
    checkpoints: list = field(default_factory=list)
    snapshots: list = field(default_factory=list)

    def extend(self, other: Parts) -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))

    def __len__(self) -> int:
        return sum(len(getattr(self, name)) for name in self.__dataclass_fields__)

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in self.__dataclass_fields__
                if getattr(self, name)}

    def batch(self) -> Batch:
        return Batch(metrics=tuple(self.metrics), histograms=tuple(self.histograms),
                     samples=tuple(self.samples), events=tuple(self.events),
                     findings=tuple(self.findings), phases=tuple(self.phases),
                     checkpoints=tuple(self.checkpoints), snapshots=tuple(self.snapshots))


STEP_KINDS = ("metrics", "histograms", "samples")


class StepAssembler:
    """Open steps and complete ("ready") records; single-threaded (the writer thread)."""

    def __init__(self) -> None:
        self.open: dict[int, Parts] = {}
        self.ready = Parts()
        self.newest_step: int | None = None
        self.last_add: float = 0.0

    def add_step_records(self, step: int, kind: str, records: list, now: float) -> None:
        if self.newest_step is None or step > self.newest_step:
            self.complete_before(step)
            self.newest_step = step
        parts = self.open.setdefault(step, Parts())
        getattr(parts, kind).extend(records)
        if step < self.newest_step:  # a late record of an older step: complete at once
            self.ready.extend(self.open.pop(step))
        self.last_add = now

    def add_live_records(self, kind: str, records: list) -> None:
        getattr(self.ready, kind).extend(records)

    def complete_before(self, step: int) -> None:
        for s in sorted(s for s in self.open if s < step):
            self.ready.extend(self.open.pop(s))

    def commit(self, step: int) -> None:
        self.complete_before(step + 1)

    def complete_all(self) -> None:
        for s in sorted(self.open):
            self.ready.extend(self.open.pop(s))

    def complete_if_idle(self, now: float, idle_s: float) -> None:
        if self.open and now - self.last_add >= idle_s:
            self.complete_all()

    def take_ready(self) -> Parts:
        parts, self.ready = self.ready, Parts()
        return parts
