"""Frozen value objects shared by every layer (stdlib only).

These are the nouns of DESIGN.md §5: a run, a metric point, a histogram, a sample, an event, a
finding, a phase record, a checkpoint record. The store maps them to rows; the telemetry SDK
builds them; the server serialises them with :func:`to_dict`.

Non-finite numbers in JSON. JSON has no NaN or infinity (Python's ``json`` writes bare ``NaN`` /
``Infinity`` tokens that strict parsers reject). rlcockpit writes a non-finite float that JSON
must keep as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` — the protobuf JSON mapping
for float fields — so the text stays strict JSON and still says which it was (a NaN detector needs
the difference): :func:`encode_value` writes it (findings' evidence, export files, refused ticket
values), :func:`decode_float` reads it back (and Python's bare tokens, which other loggers write).
A *typed number field* of the HTTP API or the control store (a curve's value, a sample's reward)
is a number or ``null`` instead (:func:`json_safe`; docs/server.md): a chart has no point there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RUN_STATUSES = ("running", "finished", "failed", "crashed", "stopped")
SEVERITIES = ("info", "yellow", "orange", "red", "black")


@dataclass(frozen=True)
class RunInfo:
    """One training run. ``run_id`` is unique within a store."""

    run_id: str
    project: str
    name: str
    status: str = "running"
    started_at: float = 0.0
    ended_at: float | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    last_step: int | None = None
    heartbeat_at: float | None = None


@dataclass(frozen=True)
class MetricPoint:
    step: int
    name: str
    value: float
    wall_time: float = 0.0


@dataclass(frozen=True)
class HistogramRecord:
    """A histogram of ``values`` at one step: ``len(edges) == len(counts) + 1``."""

    step: int
    name: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    wall_time: float = 0.0


@dataclass(frozen=True)
class SampleRecord:
    """One rollout sample: what the policy saw, said, and how it was judged.

    Per-token arrays (``tokens``, ``logprobs``, ``ref_logprobs``, ``token_kl``) are optional: the
    telemetry payload policy keeps them for the most recent steps and a seeded subset afterwards;
    ``has_token_arrays`` tells which samples have them.
    """

    step: int
    sample_id: int
    prompt: str
    response: str
    reward: float
    prompt_id: str = ""
    group_id: int = 0
    category: str = ""
    components: Mapping[str, float] = field(default_factory=dict)
    uncertainty: float | None = None
    flags: tuple[str, ...] = ()
    length: int = 0
    truncated: bool = False
    advantage: float | None = None
    value: float | None = None
    kl_sum: float | None = None
    kl_max: float | None = None
    tokens: tuple[str, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    ref_logprobs: tuple[float, ...] | None = None
    token_kl: tuple[float, ...] | None = None

    @property
    def has_token_arrays(self) -> bool:
        return self.logprobs is not None or self.token_kl is not None

    def without_token_arrays(self) -> SampleRecord:
        return dataclasses.replace(self, tokens=None, logprobs=None, ref_logprobs=None, token_kl=None)


@dataclass(frozen=True)
class EventRecord:
    """Something that happened at a step: a checkpoint, a phase change, a config change, a warning."""

    step: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    wall_time: float = 0.0


@dataclass(frozen=True)
class FindingRecord:
    """A diagnostic finding (DESIGN.md §6). ``status`` is raised / escalated / resolved."""

    step: int
    detector: str
    severity: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    patterns: tuple[str, ...] = ()
    status: str = "raised"
    wall_time: float = 0.0
    incident: str = ""  # findings close together share an incident id (diagnostics engine)
    finding_id: int | None = None  # set by the store when read back


@dataclass(frozen=True)
class SnapshotRecord:
    """Evidence kept on a red or black finding (DESIGN.md §6): gradient-norm histogram, per-layer
    gradient variance, head-gradient covariance, the triggering batch, the last samples, the metric
    window and the config, as one JSON ``payload``. ``kind`` names the payload's layout."""

    step: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    incident: str = ""
    snapshot_id: int | None = None  # set by the store when read back
    wall_time: float = 0.0


@dataclass(frozen=True)
class PhaseRecord:
    """The trainer entered or finished a phase (ROLLOUT, SCORE, ...)."""

    step: int
    phase: str
    status: str  # "started" | "finished" | "failed"
    duration_s: float | None = None
    progress: float | None = None
    wall_time: float = 0.0


@dataclass(frozen=True)
class CheckpointRecord:
    step: int
    path: str
    reason: str = "periodic"
    wall_time: float = 0.0


@dataclass(frozen=True)
class Batch:
    """Everything written in one store transaction. A step's metrics and samples travel together."""

    metrics: Sequence[MetricPoint] = ()
    histograms: Sequence[HistogramRecord] = ()
    samples: Sequence[SampleRecord] = ()
    events: Sequence[EventRecord] = ()
    findings: Sequence[FindingRecord] = ()
    phases: Sequence[PhaseRecord] = ()
    checkpoints: Sequence[CheckpointRecord] = ()
    snapshots: Sequence[SnapshotRecord] = ()

    def __len__(self) -> int:
        return sum(
            len(x)
            for x in (self.metrics, self.histograms, self.samples, self.events, self.findings,
                      self.phases, self.checkpoints, self.snapshots)
        )


def to_dict(record: Any) -> dict[str, Any]:
    """JSON-friendly dict of a record (non-finite floats become None)."""
    out = dataclasses.asdict(record)
    return {k: json_safe(v) for k, v in out.items()}


def json_safe(v: Any) -> Any:
    """Plain JSON data for typed number fields: NaN / ±inf become None (JSON has neither),
    mappings get string keys, tuples become lists. The API's and the control store's converter;
    a value JSON must keep as it was goes through :func:`encode_value` first."""
    return _plain_json(v, _as_null)


NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_value(value: Any) -> Any:
    """A strict-JSON copy of ``value``: non-finite floats as ``"NaN"`` / ``"Infinity"`` /
    ``"-Infinity"``, mappings with string keys, tuples as lists."""
    return _plain_json(value, _nonfinite_name)


def _as_null(_: float) -> None:
    return None


def _nonfinite_name(v: float) -> str:
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _plain_json(v: Any, nonfinite: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return nonfinite(v)
    if isinstance(v, Mapping):
        return {str(k): _plain_json(x, nonfinite) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain_json(x, nonfinite) for x in v]
    return v


def decode_float(value: Any) -> float | None:
    """A float from a JSON value: numbers, booleans (0/1) and the non-finite strings; else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return NONFINITE.get(value)
    return None


def state_digest(record: Any) -> str:
    """sha256 of a record's canonical JSON: the state of a ticket or user an audit entry vouches for."""
    import hashlib
    import json

    canonical = json.dumps(json_safe(to_dict(record)), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


MAX_TEXT = 2000  # characters of one text kept in an audit entry or an error body
MAX_ITEMS = 50  # list items or mapping keys kept
INT64 = (-(2**63), 2**63 - 1)
ECHO_CHARS = 200  # characters of a value a warning or an error message may show


def echo(value: Any, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters and marked with its full length: what a warning
    or an error may show of a value it refuses (a 10 MB string is never echoed whole)."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value)} chars)"
    if isinstance(value, int) and value.bit_length() > 256:  # repr refuses > 4300 digits anyway
        return f"<an integer of {value.bit_length()} bits>"
    try:
        return cap(repr(value), limit)
    except Exception as exc:  # a broken __repr__ must not hide the message it is part of
        return f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"


def cap(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marked with its full length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def int64_problem(value: int) -> str | None:
    """Why ``value`` cannot be stored as a 64-bit integer (every store's step and id columns),
    or None when it can."""
    if INT64[0] <= value <= INT64[1]:
        return None
    return f"{echo(value, 40)} does not fit in 64 bits"


def bounded(v: Any, *, depth: int = 4) -> Any:
    """:func:`json_safe` data cut to size: texts at ``MAX_TEXT`` characters (marked with the
    original length), at most ``MAX_ITEMS`` list items or keys, ``depth`` levels, integers
    outside 64 bits as text. What any client sends may be stored or echoed only like this."""
    if isinstance(v, str):
        return v if len(v) <= MAX_TEXT else f"{v[:MAX_TEXT]}... ({len(v)} characters)"
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if INT64[0] <= v <= INT64[1] else f"<an integer of {v.bit_length()} bits>"
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if depth <= 0:
        return bounded(repr(v))
    if isinstance(v, Mapping):
        items = list(v.items())
        out = {bounded(str(k)): bounded(x, depth=depth - 1) for k, x in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            out["..."] = f"{len(items) - MAX_ITEMS} more keys"
        return out
    if isinstance(v, (list, tuple)):
        out_list = [bounded(x, depth=depth - 1) for x in v[:MAX_ITEMS]]
        if len(v) > MAX_ITEMS:
            out_list.append(f"... {len(v) - MAX_ITEMS} more items")
        return out_list
    return bounded(repr(v))


# ---------------------------------------------------------------------- control plane (DESIGN.md §7)

ROLES = ("viewer", "operator", "approver", "admin")  # each role may do what the ones before it may
TICKET_STATUSES = ("requested", "approved", "rejected", "cancelled", "applied", "evaluated", "failed")
AUDIT_GENESIS = "0" * 64  # the "previous hash" of the first audit entry


@dataclass(frozen=True)
class UserRecord:
    """A person (or script) with a role. Only a salted hash of the bearer token is stored; the
    token's public ``key_id`` part finds the row."""

    name: str
    role: str
    key_id: str
    salt: str
    token_hash: str
    created_at: float = 0.0
    created_by: str = ""
    revoked_at: float | None = None
    user_id: int | None = None


@dataclass(frozen=True)
class TicketRecord:
    """A requested change of one live parameter (``kind="param"``) or a command (``kind="command"``:
    pause, resume, stop, checkpoint, rollback) for one run, through its whole life:
    requested -> approved | rejected | cancelled -> applied -> evaluated (or failed)."""

    run_id: str
    kind: str
    target: str  # parameter name (canonical) or command name
    value: Any = None  # the new value (param) or the command's arguments (dict)
    reason: str = ""
    requested_by: str = ""
    requested_at: float = 0.0
    status: str = "requested"
    previous: Any = None  # the value before the change, recorded when applied
    decided_by: str | None = None
    decided_at: float | None = None
    comment: str | None = None
    boundary_step: int | None = None  # the HOTFIX (end of step) where it was applied = checkpoint step
    applied_step: int | None = None  # the first step trained with the change (boundary_step + 1)
    checkpoint: str | None = None
    applied_at: float | None = None
    effect: Mapping[str, Any] | None = None
    evaluated_at: float | None = None
    error: str | None = None
    rolled_back_by: int | None = None
    updated_at: float = 0.0
    ticket_id: int | None = None


@dataclass(frozen=True)
class LiveParamsRecord:
    """The live parameters a trainer publishes for its run: specs (type, range, help, metric) and
    current values, at start and on every change. The control plane validates tickets against it."""

    run_id: str
    step: int
    values: Mapping[str, Any]
    specs: Mapping[str, Mapping[str, Any]]
    source: str = "start"  # start | resume | ticket:<id> | live | rollback
    wall_time: float = 0.0
    version: int | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One append-only audit entry; ``hash`` chains it to the previous entry (tamper evidence)."""

    actor: str
    action: str
    outcome: str = "ok"  # ok | refused | failed
    run_id: str | None = None
    ticket_id: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    at: float = 0.0
    seq: int | None = None
    prev_hash: str = ""
    hash: str = ""

    def content(self) -> dict[str, Any]:
        """The hashed fields (everything except the hashes themselves)."""
        return {"seq": self.seq, "at": self.at, "actor": self.actor, "action": self.action,
                "outcome": self.outcome, "run_id": self.run_id, "ticket_id": self.ticket_id,
                "details": json_safe(dict(self.details))}

    def chain_hash(self, prev_hash: str) -> str:
        """sha256 over the previous hash and the canonical JSON of :meth:`content`."""
        import hashlib
        import json

        canonical = json.dumps(self.content(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                               allow_nan=False)
        return hashlib.sha256((prev_hash + "\n" + canonical).encode("utf-8")).hexdigest()
