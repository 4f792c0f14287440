"""The store protocols (DESIGN.md §5). Backends keep their SQL and row mapping to themselves; every
other layer sees only these protocols and the records of :mod:`rlcockpit.records`."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rlcockpit.records import (
    AuditEntry,
    Batch,
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    HistogramRecord,
    LiveParamsRecord,
    PhaseRecord,
    RunInfo,
    SampleRecord,
    SnapshotRecord,
    TicketRecord,
    UserRecord,
)

if TYPE_CHECKING:
    from rlcockpit.store.lease import RunLease


@dataclass(frozen=True)
class Series:
    """One metric over steps. ``steps`` ascending; downsampled series keep every bucket's extremes."""

    name: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    wall_times: tuple[float, ...] = ()
    downsampled: bool = False


@dataclass(frozen=True)
class SampleQuery:
    """Filters for :meth:`StoreReader.query_samples`. ``None`` means "no filter"."""

    step_min: int | None = None
    step_max: int | None = None
    category: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    flags: tuple[str, ...] = ()  # every listed flag must be present
    prompt_id: str | None = None
    text: str | None = None  # substring of prompt or response, case-insensitive
    has_token_arrays: bool | None = None
    order: str = "step_asc"  # step_asc | step_desc | reward_asc | reward_desc
    limit: int = 50
    offset: int = 0
    include_token_arrays: bool = True  # False: page items come without per-token arrays (faster)


@dataclass(frozen=True)
class SamplePage:
    items: tuple[SampleRecord, ...]
    total: int
    offset: int
    limit: int
    # per item: whether the store holds its token arrays (also when the page left them out)
    has_token_arrays: tuple[bool, ...] = ()


@dataclass(frozen=True)
class RunSummary:
    run: RunInfo
    steps: int
    first_step: int | None
    last_step: int | None
    metric_names: tuple[str, ...]
    samples: int
    findings_by_severity: dict[str, int] = field(default_factory=dict)
    dropped_total: int = 0
    missing_steps: int = 0  # steps logged but not in the store: the latest telemetry/missing_steps


@dataclass(frozen=True)
class SampleHistogram:
    """Histogram of one numeric sample field over a step range (``len(edges) == len(counts)+1``).

    ``total`` counts the samples in range, ``finite`` those counted in a bin; the difference are
    samples whose value is missing, NaN or infinite.
    """

    field: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    total: int
    finite: int
    step_min: int | None = None
    step_max: int | None = None


SAMPLE_HISTOGRAM_FIELDS = ("reward", "length", "advantage", "value", "kl_sum", "kl_max",
                           "uncertainty")


@runtime_checkable
class StoreWriter(Protocol):
    """Used by exactly one thread (the telemetry writer thread)."""

    def create_run(self, run: RunInfo) -> None: ...

    def write_batch(self, run_id: str, batch: Batch) -> None:
        """Write everything in ``batch`` in one transaction (all or nothing)."""

    def set_run_status(self, run_id: str, status: str, *, ended_at: float | None = None) -> None: ...

    def heartbeat(self, run_id: str, wall_time: float, last_step: int | None) -> None: ...

    def strip_token_arrays(self, run_id: str, keep: Mapping[int, Collection[int]]) -> None:
        """For each step in ``keep``, drop the per-token arrays of the step's samples whose id is
        not in ``keep[step]`` (the token-array payload policy of the telemetry)."""

    def close(self) -> None: ...


# The read side, split into the roles its callers use. Each backend's reader implements every
# role (StoreReader); a caller names the role it needs, so what it reads is visible in its signature.


@runtime_checkable
class RunReader(Protocol):
    """Runs and their metrics: the runs table, the dashboard's curves and histograms, the comparison
    (server ``routes/runs.py``, exporters, ``store copy``)."""

    def list_runs(self) -> list[RunInfo]: ...

    def get_run(self, run_id: str) -> RunInfo:
        """Raises NotFoundError for an unknown run."""

    def summary(self, run_id: str) -> RunSummary: ...

    def get_lease(self, run_id: str) -> RunLease | None:
        """Who writes the run now: its lease (store/lease.py), None when nobody holds it."""

    def metric_names(self, run_id: str) -> list[str]: ...

    def histogram_names(self, run_id: str) -> list[str]: ...

    def read_series(
        self,
        run_id: str,
        names: Sequence[str],
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int | None = None,
    ) -> dict[str, Series]: ...

    def latest(self, run_id: str, names: Sequence[str] | None = None) -> dict[str, tuple[int, float]]:
        """Most recent (step, value) per metric name."""

    def read_histograms(
        self, run_id: str, name: str, *, step_min: int | None = None, step_max: int | None = None,
        max_points: int | None = None,
    ) -> list[HistogramRecord]:
        """Ascending steps; ``max_points`` keeps that many evenly spaced steps (first and last
        included)."""


@runtime_checkable
class SampleReader(Protocol):
    """Rollout samples: the sample explorer (``routes/samples.py``), the review queue, exports."""

    def query_samples(self, run_id: str, query: SampleQuery) -> SamplePage:
        """Filtered page; ties in the order are broken by (step, sample_id)."""

    def sample_histogram(
        self, run_id: str, field: str = "reward", bins: int = 50, *,
        step_min: int | None = None, step_max: int | None = None,
    ) -> SampleHistogram:
        """Histogram of a numeric sample field (one of SAMPLE_HISTOGRAM_FIELDS), computed by the
        store."""

    def get_sample(self, run_id: str, step: int, sample_id: int) -> SampleRecord: ...


@runtime_checkable
class DiagnosticsReader(Protocol):
    """What was recorded beside the metrics: findings, snapshots, phases, events and checkpoints (the
    alerts page, ``routes/diagnostics.py``; rollback targets; ``rlcockpit doctor``)."""

    def read_events(
        self, run_id: str, *, kinds: Sequence[str] | None = None, step_min: int | None = None,
        step_max: int | None = None, limit: int | None = None,
    ) -> list[EventRecord]:
        """Ascending (step, insertion order); ``limit`` keeps the most recent ``limit``."""

    def read_findings(
        self, run_id: str, *, step_min: int | None = None, severities: Sequence[str] | None = None,
        incident: str | None = None,
    ) -> list[FindingRecord]:
        """Ascending; each record carries its ``finding_id`` and ``incident``."""

    def read_snapshots(self, run_id: str, *, incident: str | None = None,
                       with_payload: bool = False) -> list[SnapshotRecord]:
        """Ascending; without ``with_payload`` the (large) payloads are left out."""

    def get_snapshot(self, run_id: str, snapshot_id: int) -> SnapshotRecord:
        """Raises NotFoundError for an unknown snapshot."""

    def read_phases(self, run_id: str, *, limit: int | None = None) -> list[PhaseRecord]:
        """Ascending; ``limit`` keeps the most recent ``limit``."""

    def read_checkpoints(self, run_id: str) -> list[CheckpointRecord]: ...


@runtime_checkable
class TailReader(Protocol):
    """The live tail (the server's SSE stream, ``server/tail.py``): what was written after a cursor."""

    def steps_after(self, run_id: str, after_step: int | None, *, limit: int = 1000
                    ) -> list[tuple[int, float]]:
        """(step, wall_time) of complete steps above ``after_step`` (None: from the first),
        ascending, at most ``limit``."""

    def step_metrics(self, run_id: str, step_min: int, step_max: int
                     ) -> dict[int, dict[str, float]]:
        """Every scalar metric of each step in the range: ``{step: {name: value}}``."""

    def rows_after(self, run_id: str, kind: str, after_id: int | None, *, limit: int = 1000
                   ) -> list[tuple[int, FindingRecord | PhaseRecord | EventRecord]]:
        """(row id, record) of ``kind`` ("findings", "phases", "events") written after row
        ``after_id``, in write order."""

    def tail_start_ids(self, run_id: str, after_step: int | None = None
                       ) -> dict[str, int | None]:
        """Where a live tail starts: per kind, the row id just before the first row of a step
        above ``after_step`` (None: the highest id); ``"step"``: ``after_step`` or the last
        complete step."""


@runtime_checkable
class StoreReader(RunReader, SampleReader, DiagnosticsReader, TailReader, Protocol):
    """Every read role of one store; safe to use from other threads and processes while a writer
    writes. What the server holds (bounding each request's reads with :meth:`deadline`) and what
    ``open_store(uri).reader()`` returns."""

    def deadline(self, seconds: float | None, *, limit_s: float | None = None
                 ) -> AbstractContextManager[None]:
        """A context manager: this thread's reads that run past ``seconds`` from now stop with
        :class:`~rlcockpit.errors.QueryTimeoutError` (the server's 504); other threads' reads run
        on. ``None``: no limit; ``limit_s`` is the limit the error names (default ``seconds``)."""

    def close(self) -> None: ...


@runtime_checkable
class ControlStore(Protocol):
    """The control plane's tables (DESIGN.md §7): users, published live parameters, tickets and
    the hash-chained audit log. Safe to use from several processes (the server and the trainers);
    every state change and its audit entry are written in one transaction."""

    def add_user(self, user: UserRecord, audit: AuditEntry) -> UserRecord:
        """Raises StoreError when the name is taken."""

    def find_user(self, *, key_id: str | None = None, name: str | None = None) -> UserRecord | None: ...

    def list_users(self) -> list[UserRecord]: ...

    def revoke_user(self, name: str, at: float, audit: AuditEntry) -> UserRecord:
        """Raises NotFoundError for an unknown name."""

    def count_active_users(self) -> int: ...

    def publish_live_params(self, record: LiveParamsRecord) -> LiveParamsRecord:
        """Append a version of the run's live parameters (raises NotFoundError for an unknown run)."""

    def read_live_params(self, run_id: str, *, limit: int | None = None) -> list[LiveParamsRecord]:
        """Ascending versions; ``limit`` keeps the most recent ``limit``."""

    def create_ticket(self, ticket: TicketRecord, audit: AuditEntry) -> TicketRecord:
        """Insert; the returned record has its ``ticket_id`` (the audit entry gets it too)."""

    def get_ticket(self, ticket_id: int) -> TicketRecord:
        """Raises NotFoundError for an unknown ticket."""

    def list_tickets(self, *, run_id: str | None = None, statuses: Sequence[str] | None = None,
                     limit: int | None = None) -> list[TicketRecord]:
        """Ascending ticket ids; ``limit`` keeps the most recent ``limit``."""

    def transition(self, ticket_id: int, from_statuses: Sequence[str], changes: Mapping[str, object],
                   audit: AuditEntry | None) -> TicketRecord | None:
        """Compare-and-set: apply ``changes`` only if the ticket's status is in ``from_statuses``
        (with the audit entry, in one transaction); None when it was not."""

    def append_audit(self, entry: AuditEntry) -> AuditEntry:
        """Append one entry, chained to the last one (seq, at, prev_hash, hash filled in)."""

    def read_audit(self, *, run_id: str | None = None, after_seq: int | None = None,
                   limit: int | None = None) -> list[AuditEntry]:
        """Ascending seq; ``limit`` keeps the first ``limit`` after ``after_seq``."""

    def audit_high_water(self) -> int:
        """The highest audit seq ever written (also when rows were removed since)."""

    def close(self) -> None: ...
