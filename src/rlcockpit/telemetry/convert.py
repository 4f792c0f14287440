"""Turn what the training thread enqueued into records — on the writer thread.

The training thread only copies references into one queue item per call; validation, float
conversion, histogram binning and dict -> SampleRecord happen here, off the training loop. A value
that cannot be converted drops only itself (counted as ``invalid``), never the whole step. Steps and
integer sample fields must fit in 64 bits (every store's integer columns); a message shows at most
``records.ECHO_CHARS`` characters of the value it refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlcockpit.records import (
    INT64,
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    HistogramRecord,
    MetricPoint,
    PhaseRecord,
    SampleRecord,
    SnapshotRecord,
    cap,
    echo,
    int64_problem,
)
from rlcockpit.telemetry.drops import DropCounter

_SAMPLE_FIELDS = {f.name for f in dataclasses.fields(SampleRecord)}
MAX_BINS = 10_000  # bins of one histogram: np.histogram allocates per bin (10**9 bins: ~16 GB)


def as_step(step: Any) -> int:
    """An integer that fits the stores' 64-bit step and id columns (ints, numpy / torch integers,
    integral floats); TypeError or ValueError otherwise."""
    if type(step) is int:  # the common case: one range check
        if INT64[0] <= step <= INT64[1]:
            return step
        raise ValueError(f"integer {int64_problem(step)}")
    if isinstance(step, bool):
        raise TypeError(f"must be an integer, got {step!r}")
    try:
        value = int(step)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"must be an integer, not {type(step).__name__}") from exc
    if value != step:
        raise TypeError(f"must be an integer, got {echo(step, 40)}")
    problem = int64_problem(value)
    if problem:
        raise ValueError(f"integer {problem}")
    return value


def bins_problem(bins: Any) -> str | None:
    """Why ``bins`` (a count or a sequence of edges) is not a usable histogram binning, or None."""
    if isinstance(bins, bool):
        return f"bins must be an integer or a sequence of edges, got {bins!r}"
    if isinstance(bins, int) or (hasattr(bins, "__index__") and not hasattr(bins, "__len__")):
        n = int(bins)
        if 1 <= n <= MAX_BINS:
            return None
        return f"bins={echo(n, 40)} is outside 1..{MAX_BINS}; use at most {MAX_BINS} bins"
    try:
        n = len(bins)
    except TypeError:
        return f"bins must be an integer or a sequence of edges, got {echo(bins)}"
    if 2 <= n <= MAX_BINS + 1:
        return None
    return f"bins has {n} edges; give 2..{MAX_BINS + 1} edges (at most {MAX_BINS} bins)"


def to_float(value: Any) -> float:
    """Python / numpy / torch scalar -> float (a 0-d tensor on any device works)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().item()
    return float(value)


def to_array(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):  # torch: any device, any float dtype (bf16 has no numpy twin)
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64).ravel()


def metric_points(step: int, metrics: Mapping[str, Any], wall: float,
                  drops: DropCounter) -> list[MetricPoint]:
    out = []
    for name, value in metrics.items():
        try:
            out.append(MetricPoint(step=step, name=str(name), value=to_float(value),
                                   wall_time=wall))
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            drops.add("metrics", 1, "invalid",
                      f"{echo(name)}={echo(value)} is not a number ({type(exc).__name__})")
    return out


def histogram(step: int, payload: tuple, wall: float) -> HistogramRecord:
    """Bin the finite values (NaN/inf cannot be placed in a bin; the NaN detector uses metrics)."""
    name, values, bins = payload
    problem = bins_problem(bins)
    if problem:
        raise ValueError(f"histogram {echo(name)}: {problem}")
    arr = to_array(values)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        raise ValueError(f"histogram {echo(name)} at step {step} has no finite values")
    counts, edges = np.histogram(finite, bins=bins)
    return HistogramRecord(step=step, name=str(name), edges=tuple(edges.tolist()),
                           counts=tuple(int(c) for c in counts), wall_time=wall)


def sample(step: int, raw: SampleRecord | Mapping[str, Any]) -> SampleRecord:
    """A normalised SampleRecord at ``step`` (the step given to log_samples wins).

    Per-token float arrays become float16 numpy arrays — what the store keeps — in one C call
    each, instead of tuples of Python floats.
    """
    if isinstance(raw, SampleRecord):
        fields = dict(raw.__dict__)
    elif isinstance(raw, Mapping):
        if not _SAMPLE_FIELDS.issuperset(raw):
            unknown = sorted(map(str, set(raw) - _SAMPLE_FIELDS))
            raise TypeError(f"unknown sample field(s) {echo(unknown)}; "
                            f"SampleRecord fields are {sorted(_SAMPLE_FIELDS)}")
        fields = dict(raw)
    else:
        raise TypeError(f"a sample must be a SampleRecord or a dict, got {type(raw).__name__}")
    fields["step"] = step
    return SampleRecord(**_normalise(fields))


def _normalise(f: dict[str, Any]) -> dict[str, Any]:
    """Coerce each given field to its record type; a no-op check for values already right
    (integers: a range check)."""
    for name, value in f.items():
        if value is None:
            continue
        if type(value) is _EXACT.get(name):
            if type(value) is int and not INT64[0] <= value <= INT64[1]:
                raise ValueError(f"sample field {name}: integer {int64_problem(value)}")
            continue  # already the record's type: the common case, no call
        fix = _NORMALISERS.get(name)
        if fix is not None:
            try:
                f[name] = fix(value)
            except (TypeError, ValueError, OverflowError) as exc:
                error = TypeError if isinstance(exc, TypeError) else ValueError
                raise error(f"sample field {name}: {cap(str(exc))}") from None
    return f


def _float(value: Any) -> float:
    return value if type(value) is float else to_float(value)


def _int(value: Any) -> int:
    return value if type(value) is int else as_step(value)


def _str(value: Any) -> str:
    return value if type(value) is str else str(value)


def _f16(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().float().numpy()
    return np.asarray(values, dtype=np.float16).ravel()


def _components(values: Mapping[str, Any]) -> dict[str, float]:
    return {_str(k): _float(v) for k, v in values.items()}


def _strings(values: Any) -> tuple[str, ...]:
    return tuple(_str(x) for x in values)


def _tokens(values: Any) -> tuple:
    # kept as given (the store's encoder turns non-str tokens into text in one pass)
    if hasattr(values, "tolist"):
        values = values.tolist()
    return tuple(values)


_NORMALISERS = {
    "sample_id": _int, "group_id": _int, "length": _int, "reward": _float,
    "uncertainty": _float, "advantage": _float, "value": _float, "kl_sum": _float,
    "kl_max": _float, "prompt": _str, "response": _str, "category": _str, "prompt_id": _str,
    "truncated": bool, "components": _components, "flags": _strings, "tokens": _tokens,
    "logprobs": _f16, "ref_logprobs": _f16, "token_kl": _f16,
}


# fields whose value needs no work when it already has exactly this type
_EXACT = {"sample_id": int, "group_id": int, "length": int, "reward": float,
          "uncertainty": float, "advantage": float, "value": float, "kl_sum": float,
          "kl_max": float, "prompt": str, "response": str, "category": str, "prompt_id": str,
          "truncated": bool}


def event(step: int, payload: tuple, wall: float) -> EventRecord:
    kind, data = payload
    return EventRecord(step=step, kind=str(kind), payload=dict(data or {}), wall_time=wall)


def finding(step: int, payload: dict, wall: float) -> FindingRecord:
    return FindingRecord(step=step, wall_time=wall, **payload)


def snapshot(step: int, payload: tuple, wall: float) -> SnapshotRecord:
    kind, data, incident = payload
    return SnapshotRecord(step=step, kind=str(kind), payload=data, incident=str(incident),
                          wall_time=wall)


def phase(step: int, payload: tuple, wall: float) -> PhaseRecord:
    name, status, duration_s, progress = payload
    return PhaseRecord(step=step, phase=str(name), status=str(status),
                       duration_s=None if duration_s is None else to_float(duration_s),
                       progress=None if progress is None else to_float(progress), wall_time=wall)


def checkpoint(step: int, payload: tuple, wall: float) -> CheckpointRecord:
    path, reason = payload
    return CheckpointRecord(step=step, path=str(path), reason=str(reason), wall_time=wall)
