"""Records <-> SQLite rows. Kept apart from the SQL so both directions sit side by side.

Non-finite floats: SQLite stores ±inf as REAL but turns NaN into NULL. Metric values are never
missing, so NULL there means NaN. Sample floats can be legitimately missing (``None``), so a
sample row lists the fields that were NaN in ``nan_fields``; the reader restores them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rlcockpit.errors import NotFoundError, QueryTimeoutError, StoreError
from rlcockpit.records import (
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    PhaseRecord,
    SampleRecord,
    SnapshotRecord,
)
from rlcockpit.store import codec

SAMPLE_FLOAT_FIELDS = ("reward", "uncertainty", "advantage", "value", "kl_sum", "kl_max")
# the columns a SampleRecord is read from, in sample_from_row order
SAMPLE_COLUMNS = ("step", "sample_id", "category", "reward", "prompt_id", "group_id",
                  "has_token_arrays", "flags", "length", "truncated", "uncertainty", "advantage",
                  "value", "kl_sum", "kl_max", "nan_fields")
PAYLOAD_COLUMNS = ("prompt", "response", "components", "tokens", "logprobs", "ref_logprobs",
                   "token_kl")
ARRAY_COLUMNS = ("tokens", "logprobs", "ref_logprobs", "token_kl")


def columns(alias: str, names: tuple[str, ...]) -> str:
    """``columns("s", ("a", "b"))`` -> ``"s.a, s.b"``."""
    return ", ".join(f"{alias}.{n}" for n in names)


def json_default(obj: Any) -> Any:
    """numpy / torch scalars and arrays become plain lists and numbers; the rest becomes text."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


# one encoder for every call (json.dumps with options builds a new one each time);
# allow_nan: NaN/inf in payloads round-trip through Python's json (read back by our reader)
_ENCODER = json.JSONEncoder(default=json_default, allow_nan=True, ensure_ascii=False)


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def sample_rows(run_key: int, s: SampleRecord, wall_time: float, payload_id: int
                ) -> tuple[tuple, tuple]:
    """(narrow row, payload row) of one sample."""
    reward, uncertainty, advantage, value, kl_sum, kl_max = floats = (
        float(s.reward), _float_or_none(s.uncertainty), _float_or_none(s.advantage),
        _float_or_none(s.value), _float_or_none(s.kl_sum), _float_or_none(s.kl_max))
    nan_fields = None
    if any(v != v for v in floats if v is not None):  # v != v: NaN
        nan_fields = ",".join(f for f, v in zip(SAMPLE_FLOAT_FIELDS, floats, strict=True)
                              if v is not None and v != v)
    # int() / str(): records built elsewhere may carry numpy scalars, which sqlite3 cannot bind
    narrow = (run_key, int(s.step), int(s.sample_id), str(s.category), reward, str(s.prompt_id),
              int(s.group_id), int(s.has_token_arrays),
              json.dumps([str(f) for f in s.flags]) if s.flags else "[]", int(s.length),
              int(bool(s.truncated)), uncertainty, advantage, value, kl_sum, kl_max, nan_fields,
              wall_time, payload_id)
    # plain json.dumps reuses its cached encoder (fast) and writes NaN / Infinity
    components = s.components
    payload = (payload_id, str(s.prompt), str(s.response),
               json.dumps({str(k): float(v) for k, v in components.items()}) if components
               else "{}",
               codec.encode_tokens(s.tokens), codec.encode_f16(s.logprobs),
               codec.encode_f16(s.ref_logprobs), codec.encode_f16(s.token_kl))
    return narrow, payload


def sample_from_row(row: tuple, payload: tuple | None) -> SampleRecord:
    """``row`` in SAMPLE_COLUMNS order, ``payload`` in PAYLOAD_COLUMNS order."""
    (step, sample_id, category, reward, prompt_id, group_id, _has_arrays, flags, length, truncated,
     uncertainty, advantage, value, kl_sum, kl_max, nan_fields) = row
    floats = dict(zip(SAMPLE_FLOAT_FIELDS, (reward, uncertainty, advantage, value, kl_sum, kl_max),
                      strict=True))
    for name in (nan_fields or "").split(","):
        if name:
            floats[name] = math.nan
    if floats["reward"] is None:  # reward is required: NULL can only have been NaN
        floats["reward"] = math.nan
    prompt, response, components, tokens, logprobs, ref_logprobs, token_kl = payload
    return SampleRecord(
        step=step, sample_id=sample_id, prompt=prompt, response=response, prompt_id=prompt_id,
        group_id=group_id, category=category, components=json.loads(components),
        flags=tuple(json.loads(flags)), length=length, truncated=bool(truncated),
        tokens=codec.decode_tokens(tokens), logprobs=codec.decode_f16(logprobs),
        ref_logprobs=codec.decode_f16(ref_logprobs), token_kl=codec.decode_f16(token_kl),
        **floats)


def event_row(run_key: int, e: EventRecord, now: float) -> tuple:
    return (run_key, int(e.step), str(e.kind), dumps(dict(e.payload)), float(e.wall_time) or now)


def event_from_row(row: tuple) -> EventRecord:
    step, kind, payload, wall_time = row
    return EventRecord(step=step, kind=kind, payload=json.loads(payload), wall_time=wall_time)


def finding_row(run_key: int, f: FindingRecord, now: float) -> tuple:
    return (run_key, int(f.step), str(f.detector), str(f.severity), str(f.message),
            dumps(dict(f.evidence)), dumps(list(f.patterns)), str(f.status),
            float(f.wall_time) or now, str(f.incident))


FINDING_COLUMNS = ("finding_id, step, detector, severity, message, evidence, patterns, status, "
                   "wall_time, incident")


def finding_from_row(row: tuple) -> FindingRecord:
    finding_id, step, detector, severity, message, evidence, patterns, status, wall, incident = row
    return FindingRecord(step=step, detector=detector, severity=severity, message=message,
                         evidence=json.loads(evidence), patterns=tuple(json.loads(patterns)),
                         status=status, wall_time=wall, incident=incident or "",
                         finding_id=finding_id)


def snapshot_row(run_key: int, s: SnapshotRecord, now: float) -> tuple:
    return (run_key, int(s.step), str(s.kind), dumps(dict(s.payload)), float(s.wall_time) or now,
            str(s.incident))


SNAPSHOT_COLUMNS = "snapshot_id, step, kind, payload, wall_time, incident"


def snapshot_from_row(row: tuple, *, with_payload: bool = True) -> SnapshotRecord:
    snapshot_id, step, kind, payload, wall_time, incident = row
    return SnapshotRecord(step=step, kind=kind,
                          payload=json.loads(payload) if with_payload else {},
                          incident=incident or "", snapshot_id=snapshot_id, wall_time=wall_time)


def phase_row(run_key: int, p: PhaseRecord, now: float) -> tuple:
    return (run_key, int(p.step), str(p.phase), str(p.status), _float_or_none(p.duration_s),
            _float_or_none(p.progress), float(p.wall_time) or now)


def phase_from_row(row: tuple) -> PhaseRecord:
    step, phase, status, duration_s, progress, wall_time = row
    return PhaseRecord(step=step, phase=phase, status=status, duration_s=duration_s,
                       progress=progress, wall_time=wall_time)


def checkpoint_row(run_key: int, c: CheckpointRecord, now: float) -> tuple:
    return (run_key, int(c.step), str(c.path), str(c.reason), float(c.wall_time) or now)


def checkpoint_from_row(row: tuple) -> CheckpointRecord:
    step, path, reason, wall_time = row
    return CheckpointRecord(step=step, path=path, reason=reason, wall_time=wall_time)


def config_json(config: Mapping[str, Any]) -> str:
    return dumps(dict(config))


def evenly_spaced(items: list, n: int) -> list:
    """At most ``n`` items, evenly spaced, first and last kept (both readers' point budget)."""
    if n < 2:
        raise StoreError(f"max_points={n} must be at least 2", details={"max_points": n})
    if len(items) <= n:
        return items
    last = len(items) - 1
    return [items[round(i * last / (n - 1))] for i in range(n)]


def query_timeout(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"the query ran past its time limit of {seconds:g} s and was stopped; "
                             "ask for a narrower step range, fewer points or a more selective "
                             "filter (or raise the server's query_timeout_s)",
                             details={"limit_s": seconds})


def run_not_found(run_id: str) -> NotFoundError:
    return NotFoundError(f"run {run_id!r} is not in this store (list runs with `rlcockpit runs "
                         "--store URI`)", details={"run_id": run_id})
