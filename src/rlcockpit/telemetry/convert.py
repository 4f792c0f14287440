"""Turn what the training thread enqueued into records — on the writer thread.

The training thread only copies references into one queue item per call; validation, float
conversion, histogram binning and dict -> SampleRecord happen here, off the training loop. A value
that cannot be converted drops only itself (counted as ``invalid``), never the whole step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlcockpit.records import (
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    HistogramRecord,
    MetricPoint,
    PhaseRecord,
    SampleRecord,
)
from rlcockpit.telemetry.drops import DropCounter

_SAMPLE_FIELDS = {f.name for f in dataclasses.fields(SampleRecord)}
_ARRAY_FIELDS = ("logprobs", "ref_logprobs", "token_kl")
_OPTIONAL_FLOATS = ("uncertainty", "advantage", "value", "kl_sum", "kl_max")


def as_step(step: Any) -> int:
    if isinstance(step, bool):
        raise TypeError(f"step must be an integer, got {step!r}")
    value = int(step)
    if value != step:
        raise TypeError(f"step must be an integer, got {step!r}")
    return value


def to_float(value: Any) -> float:
    """Python / numpy / torch scalar -> float (a 0-d tensor on any device works)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().item()
    return float(value)


def to_array(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64).ravel()


def metric_points(step: int, metrics: Mapping[str, Any], wall: float,
                  drops: DropCounter) -> list[MetricPoint]:
    out = []
    for name, value in metrics.items():
        try:
            out.append(MetricPoint(step=step, name=str(name), value=to_float(value),
                                   wall_time=wall))
        except (TypeError, ValueError, RuntimeError) as exc:
            drops.add("metrics", 1, "invalid", f"{name}={value!r} is not a number ({exc})")
    return out


def histogram(step: int, payload: tuple, wall: float) -> HistogramRecord:
    """Bin the finite values (NaN/inf cannot be placed in a bin; the NaN detector uses metrics)."""
    name, values, bins = payload
    arr = to_array(values)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        raise ValueError(f"histogram {name!r} at step {step} has no finite values")
    counts, edges = np.histogram(finite, bins=bins)
    return HistogramRecord(step=step, name=str(name), edges=tuple(edges.tolist()),
                           counts=tuple(int(c) for c in counts), wall_time=wall)


def sample(step: int, raw: SampleRecord | Mapping[str, Any]) -> SampleRecord:
    """A normalised SampleRecord at ``step`` (the step given to log_samples wins)."""
    if isinstance(raw, SampleRecord):
        fields = {f: getattr(raw, f) for f in _SAMPLE_FIELDS}
    elif isinstance(raw, Mapping):
        unknown = set(raw) - _SAMPLE_FIELDS
        if unknown:
            raise TypeError(f"unknown sample field(s) {sorted(unknown)}; SampleRecord fields "
                            f"are {sorted(_SAMPLE_FIELDS)}")
        fields = dict(raw)
    else:
        raise TypeError(f"a sample must be a SampleRecord or a dict, got {type(raw).__name__}")
    fields["step"] = step
    return SampleRecord(**_normalise(fields))


def _normalise(f: dict[str, Any]) -> dict[str, Any]:
    f["sample_id"] = as_step(f["sample_id"])
    f["reward"] = to_float(f["reward"])
    f["prompt"], f["response"] = str(f["prompt"]), str(f["response"])
    for name in _OPTIONAL_FLOATS:
        if f.get(name) is not None:
            f[name] = to_float(f[name])
    if "components" in f:
        f["components"] = {str(k): to_float(v) for k, v in dict(f["components"]).items()}
    if "flags" in f:
        f["flags"] = tuple(str(x) for x in f["flags"])
    for name in _ARRAY_FIELDS:
        if f.get(name) is not None:
            f[name] = tuple(to_array(f[name]).tolist())
    if f.get("tokens") is not None:
        f["tokens"] = tuple(str(t) for t in f["tokens"])
    if "length" in f:
        f["length"] = int(f["length"])
    return f


def event(step: int, payload: tuple, wall: float) -> EventRecord:
    kind, data = payload
    return EventRecord(step=step, kind=str(kind), payload=dict(data or {}), wall_time=wall)


def finding(step: int, payload: dict, wall: float) -> FindingRecord:
    return FindingRecord(step=step, wall_time=wall, **payload)


def phase(step: int, payload: tuple, wall: float) -> PhaseRecord:
    name, status, duration_s, progress = payload
    return PhaseRecord(step=step, phase=str(name), status=str(status),
                       duration_s=None if duration_s is None else to_float(duration_s),
                       progress=None if progress is None else to_float(progress), wall_time=wall)


def checkpoint(step: int, payload: tuple, wall: float) -> CheckpointRecord:
    path, reason = payload
    return CheckpointRecord(step=step, path=str(path), reason=str(reason), wall_time=wall)
