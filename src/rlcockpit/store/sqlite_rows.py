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

from rlcockpit.records import (
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    PhaseRecord,
    SampleRecord,
)
from rlcockpit.store import codec

SAMPLE_FLOAT_FIELDS = ("reward", "uncertainty", "advantage", "value", "kl_sum", "kl_max")
SAMPLE_COLUMNS = (
    "step, sample_id, category, reward, prompt_id, group_id, has_token_arrays, flags, length, "
    "truncated, uncertainty, advantage, value, kl_sum, kl_max, nan_fields"
)
PAYLOAD_COLUMNS = "prompt, response, components, tokens, logprobs, ref_logprobs, token_kl"


def json_default(obj: Any) -> Any:
    """numpy / torch scalars and arrays become plain lists and numbers; the rest becomes text."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


def dumps(obj: Any) -> str:
    # allow_nan: NaN/inf in payloads round-trip through Python's json (read back by our reader)
    return json.dumps(obj, default=json_default, allow_nan=True, ensure_ascii=False)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def sample_rows(run_key: int, s: SampleRecord, wall_time: float) -> tuple[tuple, tuple]:
    """(narrow row, payload row) of one sample."""
    floats = [_float_or_none(getattr(s, f)) for f in SAMPLE_FLOAT_FIELDS]
    nan_fields = ",".join(f for f, v in zip(SAMPLE_FLOAT_FIELDS, floats, strict=True)
                          if v is not None and math.isnan(v)) or None
    reward, uncertainty, advantage, value, kl_sum, kl_max = floats
    narrow = (run_key, int(s.step), int(s.sample_id), str(s.category), reward, str(s.prompt_id),
              int(s.group_id), int(s.has_token_arrays), dumps(list(s.flags)), int(s.length),
              int(bool(s.truncated)), uncertainty, advantage, value, kl_sum, kl_max, nan_fields,
              wall_time)
    payload = (run_key, int(s.step), int(s.sample_id), str(s.prompt), str(s.response),
               dumps({str(k): float(v) for k, v in dict(s.components).items()}),
               codec.encode_tokens(s.tokens), codec.encode_f16(s.logprobs),
               codec.encode_f16(s.ref_logprobs), codec.encode_f16(s.token_kl))
    return narrow, payload


def sample_from_row(row: tuple, payload: tuple | None) -> SampleRecord:
    """``row`` in SAMPLE_COLUMNS order, ``payload`` in PAYLOAD_COLUMNS order (None: not read)."""
    (step, sample_id, category, reward, prompt_id, group_id, _has_arrays, flags, length, truncated,
     uncertainty, advantage, value, kl_sum, kl_max, nan_fields) = row
    floats = dict(zip(SAMPLE_FLOAT_FIELDS, (reward, uncertainty, advantage, value, kl_sum, kl_max),
                      strict=True))
    for name in (nan_fields or "").split(","):
        if name:
            floats[name] = math.nan
    if floats["reward"] is None:  # reward is required: NULL can only have been NaN
        floats["reward"] = math.nan
    prompt, response, components, tokens, logprobs, ref_logprobs, token_kl = payload or (
        "", "", "{}", None, None, None, None)
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
            float(f.wall_time) or now)


def finding_from_row(row: tuple) -> FindingRecord:
    step, detector, severity, message, evidence, patterns, status, wall_time = row
    return FindingRecord(step=step, detector=detector, severity=severity, message=message,
                         evidence=json.loads(evidence), patterns=tuple(json.loads(patterns)),
                         status=status, wall_time=wall_time)


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
