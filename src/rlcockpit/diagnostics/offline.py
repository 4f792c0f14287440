"""The same engine over a stored or imported run (``rlcockpit doctor``).

Reads every metric of a run at full resolution and its samples step by step (without token arrays),
replays them through :class:`~rlcockpit.diagnostics.engine.Engine` in step order, and returns a
:class:`DoctorReport`: the findings the replay raised, their incidents, each detector's status, its
coverage (steps it read or skipped, and the inputs the run lacks: :mod:`.coverage`), and the
findings recorded live during the run (if the trainer ran diagnostics).

The run's ``live_params_applied`` events are noted to the engine at their step, after that step's
observation, as the trainer does (it applies changes in HOTFIX, after DIAGNOSE): findings carry the
same ``recent_changes`` context offline as live.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.diagnostics.base import severity_rank
from rlcockpit.diagnostics.config import DiagnosticsConfig
from rlcockpit.diagnostics.coverage import CoverageCounter, DetectorCoverage
from rlcockpit.diagnostics.engine import Engine
from rlcockpit.diagnostics.incidents import Incident, group
from rlcockpit.records import EventRecord, FindingRecord, RunInfo, SampleRecord
from rlcockpit.store.base import SampleQuery, StoreReader

NAMES_PER_READ = 64
SAMPLE_PAGE = 2_000
FAILING = ("red", "black")
CHANGE_EVENT = "live_params_applied"


@dataclass(frozen=True)
class DoctorReport:
    run: RunInfo
    steps: int
    first_step: int | None
    last_step: int | None
    samples: int
    findings: tuple[FindingRecord, ...]
    incidents: tuple[Incident, ...]
    statuses: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    live_findings: tuple[FindingRecord, ...] = ()
    coverage: tuple[DetectorCoverage, ...] = ()

    @property
    def worst(self) -> str | None:
        levels = [f.severity for f in self.findings]
        return max(levels, key=severity_rank) if levels else None

    @property
    def exit_code(self) -> int:
        """2 when a red or black finding exists (for CI), else 0."""
        return 2 if any(f.severity in FAILING for f in self.findings) else 0


def iter_steps(reader: StoreReader, run_id: str, *, with_samples: bool = True
               ) -> Iterator[tuple[int, dict[str, float], list[SampleRecord], float]]:
    """(step, metrics, samples, wall_time) in step order; steps with samples but no metric too."""
    metrics, walls = _metric_rows(reader, run_id)
    samples = _samples_by_step(reader, run_id) if with_samples else {}
    for step in sorted(set(metrics) | set(samples)):
        yield step, metrics.get(step, {}), samples.get(step, []), walls.get(step, 0.0)


def diagnose_run(reader: StoreReader, run_id: str, config: DiagnosticsConfig | None = None, *,
                 with_samples: bool = True,
                 progress: Callable[[int, int], Any] | None = None,
                 baseline: Any = None) -> DoctorReport:
    """Replay a stored run through a fresh engine; ``progress(done, total)`` after each step;
    ``baseline``: a :class:`~rlcockpit.diagnostics.baseline.Baseline` for the baseline detector."""
    run = reader.get_run(run_id)
    engine = Engine.from_config(config or DiagnosticsConfig(), incident_prefix="doc",
                                baseline=baseline)
    steps = list(iter_steps(reader, run_id, with_samples=with_samples))
    found: list[FindingRecord] = []
    n_samples = 0
    counter = CoverageCounter(engine.detectors)
    changes = change_events(reader, run_id)
    for i, (step, metrics, samples, wall) in enumerate(steps):
        n_samples += len(samples)
        note_changes_before(engine, changes, step)
        found.extend(engine.observe(step, metrics, samples, wall))
        counter.count(engine.status, metrics, bool(samples))
        if progress is not None:
            progress(i + 1, len(steps))
    if run.status == "running":  # still marked running: has it gone silent? (heartbeat)
        found.extend(engine.tick(time.time()))
    elif steps:  # the log is complete: what only the whole of it shows (a few pasted lines)
        found.extend(engine.finish())
    return DoctorReport(
        run=run, steps=len(steps), first_step=steps[0][0] if steps else None,
        last_step=steps[-1][0] if steps else None, samples=n_samples, findings=tuple(found),
        incidents=tuple(group(found)), statuses=dict(engine.status), errors=dict(engine.errors),
        live_findings=tuple(reader.read_findings(run_id)),
        coverage=counter.result(engine.errors))


def change_events(reader: StoreReader, run_id: str) -> deque[EventRecord]:
    """The run's live-parameter changes in step order."""
    return deque(reader.read_events(run_id, kinds=[CHANGE_EVENT]))


def note_changes_before(engine: Engine, changes: deque[EventRecord], step: int) -> None:
    """Note (and drop from ``changes``) every change recorded at a step before ``step``."""
    while changes and changes[0].step < step:
        event = changes.popleft()
        engine.note_live_params(event.step, event.payload)


def _metric_rows(reader: StoreReader, run_id: str
                 ) -> tuple[dict[int, dict[str, float]], dict[int, float]]:
    names = sorted(reader.metric_names(run_id))
    rows: dict[int, dict[str, float]] = {}
    walls: dict[int, float] = {}
    for start in range(0, len(names), NAMES_PER_READ):
        chunk: Sequence[str] = names[start:start + NAMES_PER_READ]
        for name, series in reader.read_series(run_id, chunk).items():
            times = series.wall_times or (0.0,) * len(series.steps)
            for step, value, wall in zip(series.steps, series.values, times, strict=True):
                rows.setdefault(step, {})[name] = value
                walls[step] = max(walls.get(step, 0.0), wall)
    return rows, walls


def _samples_by_step(reader: StoreReader, run_id: str) -> dict[int, list[SampleRecord]]:
    out: dict[int, list[SampleRecord]] = {}
    offset = 0
    while True:
        page = reader.query_samples(run_id, SampleQuery(order="step_asc", limit=SAMPLE_PAGE,
                                                        offset=offset, include_token_arrays=False))
        for s in page.items:
            out.setdefault(s.step, []).append(s)
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return out
