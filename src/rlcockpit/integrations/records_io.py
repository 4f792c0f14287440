"""The file layout of rlcockpit's own exports, shared by :mod:`.export` and the ``rlcockpit`` importer.

JSON Lines (strict JSON, non-finite numbers as strings, see :mod:`rlcockpit.records`):

* metrics  — one line per step, ascending: ``{"step": N, "metrics": {catalog name: value}}``;
* samples  — one line per sample with every :class:`SampleRecord` field (token arrays as lists or
  ``null``);
* findings / events — one line per record with every field.

Parquet (pyarrow, schemas below, never inferred from the data so they are stable across runs):
metrics are stored long — one row per (step, name) — so the schema does not change with the metric
names. The schema metadata holds ``rlcockpit.kind`` (what the file holds) and
``rlcockpit.format_version``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rlcockpit.records import SampleRecord, encode_value

FORMAT_VERSION = "1"
KIND_KEY = b"rlcockpit.kind"
VERSION_KEY = b"rlcockpit.format_version"
KINDS = ("metrics", "samples", "findings", "events")

FLOAT_FIELDS = ("uncertainty", "advantage", "value", "kl_sum", "kl_max")  # optional floats
ARRAY_FIELDS = ("logprobs", "ref_logprobs", "token_kl")  # optional per-token float arrays


def parquet_schema(kind: str) -> Any:
    """The fixed pyarrow schema of one export kind."""
    import pyarrow as pa

    f64, i64, text = pa.float64(), pa.int64(), pa.string()

    def list_of(kind: Any) -> Any:
        # "element" is the child name Parquet files use; with it the schema read back is equal
        return pa.list_(pa.field("element", kind))

    fields = {
        "metrics": [("step", i64), ("name", text), ("value", f64), ("wall_time", f64)],
        "samples": [
            ("step", i64), ("sample_id", i64), ("prompt", text), ("response", text), ("reward", f64),
            ("prompt_id", text), ("group_id", i64), ("category", text),
            ("components", pa.map_(text, f64)), ("uncertainty", f64), ("flags", list_of(text)),
            ("length", i64), ("truncated", pa.bool_()), ("advantage", f64), ("value", f64),
            ("kl_sum", f64), ("kl_max", f64), ("tokens", list_of(text)),
            ("logprobs", list_of(f64)), ("ref_logprobs", list_of(f64)), ("token_kl", list_of(f64)),
        ],
        "findings": [
            ("step", i64), ("detector", text), ("severity", text), ("message", text),
            ("evidence", text), ("patterns", list_of(text)), ("status", text), ("wall_time", f64),
        ],
        "events": [("step", i64), ("kind", text), ("payload", text), ("wall_time", f64)],
    }[kind]
    metadata = {KIND_KEY: kind.encode(), VERSION_KEY: FORMAT_VERSION.encode()}
    return pa.schema([pa.field(n, t) for n, t in fields], metadata=metadata)


def sample_row(sample: SampleRecord) -> dict[str, Any]:
    """A SampleRecord as a plain dict (tuples as lists), the row of both JSONL and Parquet."""
    row: dict[str, Any] = {}
    for name in SampleRecord.__dataclass_fields__:
        value = getattr(sample, name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        row[name] = value
    return row


def json_line(value: Any) -> str:
    """One JSON Lines row: strict JSON (``allow_nan=False`` proves no bare NaN slipped through)."""
    return json.dumps(encode_value(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_text(value: Any) -> str:
    """Free-form mappings (finding evidence, event payload) as one JSON text column in Parquet."""
    return json.dumps(encode_value(value), ensure_ascii=False, allow_nan=False, sort_keys=True)

