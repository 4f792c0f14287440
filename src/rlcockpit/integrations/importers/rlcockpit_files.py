"""rlcockpit's own metric and sample exports, read back (format ``rlcockpit``).

This is what makes ``export`` -> ``import`` a round trip: the names are already catalog names (or
earlier ``import/...`` names) and are kept verbatim; NaN and +/-inf come back as they left (see
:mod:`rlcockpit.records`). Findings and events exports are for reading elsewhere;
they are not imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.aliases import NATIVE_SOURCE
from rlcockpit.integrations.importers._base import (
    ParsedImport,
    as_number,
    as_step,
    fail,
    first_object,
    iter_jsonl,
    optional_number,
)
from rlcockpit.integrations.records_io import ARRAY_FIELDS, FLOAT_FIELDS, KIND_KEY
from rlcockpit.records import SampleRecord

FORMAT = "rlcockpit"
_SAMPLE_KEYS = ("step", "sample_id", "prompt", "response", "reward")
_FIX = "Pass a file written by `rlcockpit export --what metrics|samples`"


def jsonl_kind(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    if isinstance(obj.get("metrics"), Mapping) and "step" in obj:
        return "metrics"
    if all(k in obj for k in _SAMPLE_KEYS):
        return "samples"
    if "detector" in obj and "severity" in obj:
        return "findings"
    if "kind" in obj and "payload" in obj:
        return "events"
    return None


def parquet_kind(path: Path) -> str | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError):
        return None
    kind = metadata.get(KIND_KEY)
    return kind.decode() if kind else None


def sniff(path: Path) -> bool:
    if path.suffix == ".parquet":
        return parquet_kind(path) is not None
    return jsonl_kind(first_object(path)) is not None


def _text(row: Mapping[str, Any], key: str, path: Path, where: str, default: str = "") -> str:
    value = row.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str):
        raise fail(path, where, f"{key!r} is {value!r}, not text", _FIX)
    return value


def _array(row: Mapping[str, Any], key: str, path: Path, where: str) -> tuple[float, ...] | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise fail(path, where, f"{key!r} is not a list", _FIX)
    return tuple(as_number(v, path, where, key) for v in value)


def sample_from_row(row: Mapping[str, Any], path: Path, where: str) -> SampleRecord:
    """A SampleRecord from one exported row, every field checked."""
    missing = [k for k in _SAMPLE_KEYS if k not in row]
    if missing:
        raise fail(path, where, f"lacks {', '.join(missing)}", _FIX)
    components = row.get("components") or {}
    if isinstance(components, list):  # pyarrow reads a map column as [(key, value), ...]
        components = dict(components)
    tokens = row.get("tokens")
    fields: dict[str, Any] = {
        "step": as_step(row["step"], path, where),
        "sample_id": as_step(row["sample_id"], path, where),
        "prompt": _text(row, "prompt", path, where), "response": _text(row, "response", path, where),
        "reward": as_number(row["reward"], path, where, "reward"),
        "prompt_id": _text(row, "prompt_id", path, where), "category": _text(row, "category", path, where),
        "group_id": as_step(row.get("group_id") or 0, path, where),
        "components": {str(k): as_number(v, path, where, f"component {k}") for k, v in components.items()},
        "flags": tuple(str(f) for f in row.get("flags") or ()),
        "length": as_step(row.get("length") or 0, path, where),
        "truncated": bool(row.get("truncated") or False),
        "tokens": None if tokens is None else tuple(str(t) for t in tokens),
    }
    for key in FLOAT_FIELDS:
        fields[key] = optional_number(row.get(key), path, where, key)
    for key in ARRAY_FIELDS:
        fields[key] = _array(row, key, path, where)
    return SampleRecord(**fields)


def _metrics_jsonl(path: Path, parsed: ParsedImport) -> None:
    for number, obj in iter_jsonl(path):
        where = f"line {number}"
        if not isinstance(obj.get("metrics"), Mapping):
            raise fail(path, where, 'has no "metrics" object', _FIX)
        step = as_step(obj.get("step"), path, where)
        for name, value in obj["metrics"].items():
            parsed.add_metric(step, name, as_number(value, path, where, name))


def _samples_jsonl(path: Path, parsed: ParsedImport) -> None:
    for number, obj in iter_jsonl(path):
        parsed.samples.append(sample_from_row(obj, path, f"line {number}"))


def _parquet(path: Path, kind: str, parsed: ParsedImport) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise fail(path, "", f"is not a readable Parquet file ({exc})", _FIX) from exc
    for index, row in enumerate(rows):
        where = f"row {index}"
        if kind == "metrics":
            step = as_step(row.get("step"), path, where)
            name = _text(row, "name", path, where)
            value = as_number(row.get("value"), path, where, "value")
            wall = optional_number(row.get("wall_time"), path, where, "wall_time") or 0.0
            parsed.add_metric(step, name, value, wall)
        else:
            parsed.samples.append(sample_from_row(row, path, where))


def read_file(path: Path, source: str | None) -> ParsedImport:
    parsed = ParsedImport()
    kind = parquet_kind(path) if path.suffix == ".parquet" else jsonl_kind(first_object(path))
    if kind not in ("metrics", "samples"):
        what = f"an rlcockpit {kind} export" if kind else "not an rlcockpit export"
        raise fail(path, "", f"is {what}; only metrics and samples exports can be imported", _FIX)
    if path.suffix == ".parquet":
        _parquet(path, kind, parsed)
    elif kind == "metrics":
        _metrics_jsonl(path, parsed)
    else:
        _samples_jsonl(path, parsed)
    if not parsed.metrics and not parsed.samples:
        raise fail(path, "", f"holds no {kind}", _FIX)
    parsed.sources.add(NATIVE_SOURCE)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": NATIVE_SOURCE,
                         "kind": kind})
    return parsed
