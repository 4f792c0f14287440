"""Export a stored run's metrics, samples, findings or events as JSON Lines or Parquet.

Reads only through the :class:`StoreReader` protocol. The file layouts are described in
:mod:`rlcockpit.integrations.records_io`; non-finite numbers in JSON follow
:mod:`rlcockpit.records`. Metrics and samples exports can be imported back
(``rlcockpit import --format rlcockpit``), which is how a run moves between stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rlcockpit.errors import ConfigError
from rlcockpit.integrations.records_io import json_line, json_text, parquet_schema, sample_row
from rlcockpit.records import EventRecord, FindingRecord, SampleRecord
from rlcockpit.store.base import RunReader, SampleQuery, SampleReader, StoreReader

WHATS = ("metrics", "samples", "findings", "events")
FORMATS = ("jsonl", "parquet")
NAMES_PER_READ = 64  # metric names per read_series call
SAMPLES_PER_PAGE = 2_000
PARQUET_ROWS = 50_000  # rows per Parquet row group


def metric_rows(reader: RunReader, run_id: str) -> dict[int, dict[str, tuple[float, float]]]:
    """step -> {name: (value, wall time)} for every metric of the run, full resolution."""
    names = sorted(reader.metric_names(run_id))
    steps: dict[int, dict[str, tuple[float, float]]] = {}
    for start in range(0, len(names), NAMES_PER_READ):
        chunk = names[start:start + NAMES_PER_READ]
        for name, series in reader.read_series(run_id, chunk).items():
            walls = series.wall_times or (0.0,) * len(series.steps)
            for step, value, wall in zip(series.steps, series.values, walls, strict=True):
                steps.setdefault(step, {})[name] = (value, wall)
    return steps


def iter_samples(reader: SampleReader, run_id: str) -> Iterator[SampleRecord]:
    """Every sample of the run, by (step, sample_id), token arrays included where stored."""
    offset = 0
    while True:
        page = reader.query_samples(run_id, SampleQuery(order="step_asc", limit=SAMPLES_PER_PAGE,
                                                        offset=offset))
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def _finding_row(f: FindingRecord, *, text_mappings: bool) -> dict[str, Any]:
    evidence = json_text(f.evidence) if text_mappings else dict(f.evidence)
    return {"step": f.step, "detector": f.detector, "severity": f.severity, "message": f.message,
            "evidence": evidence, "patterns": list(f.patterns), "status": f.status,
            "wall_time": f.wall_time}


def _event_row(e: EventRecord, *, text_mappings: bool) -> dict[str, Any]:
    payload = json_text(e.payload) if text_mappings else dict(e.payload)
    return {"step": e.step, "kind": e.kind, "payload": payload, "wall_time": e.wall_time}


def _rows(reader: StoreReader, run_id: str, what: str, *, parquet: bool) -> Iterator[dict[str, Any]]:
    """The rows of one export kind (JSONL metrics are per step; Parquet metrics per point)."""
    if what == "metrics":
        for step, values in sorted(metric_rows(reader, run_id).items()):
            if parquet:
                for name in sorted(values):
                    yield {"step": step, "name": name, "value": values[name][0],
                           "wall_time": values[name][1]}
            else:
                yield {"step": step, "metrics": {n: values[n][0] for n in sorted(values)}}
    elif what == "samples":
        yield from (sample_row(s) for s in iter_samples(reader, run_id))
    elif what == "findings":
        yield from (_finding_row(f, text_mappings=parquet) for f in reader.read_findings(run_id))
    else:
        yield from (_event_row(e, text_mappings=parquet) for e in reader.read_events(run_id))


def _check(what: str, fmt: str, out: str | Path | None) -> None:
    if what not in WHATS:
        raise ConfigError(f"--what {what!r} is not one of {', '.join(WHATS)}")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise ConfigError("Parquet is binary: pass --out FILE.parquet (stdout is for jsonl only)")


def write_jsonl(rows: Iterator[dict[str, Any]], stream: IO[str]) -> int:
    count = 0
    for row in rows:
        stream.write(json_line(row) + "\n")
        count += 1
    return count


def write_parquet(rows: Iterator[dict[str, Any]], what: str, path: Path) -> int:
    """Stream rows into row groups of PARQUET_ROWS, so memory stays bounded for large runs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema(what)
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        for chunk in _chunks(rows, PARQUET_ROWS):
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
            count += len(chunk)
        if count == 0:  # an empty run still gets a valid file with the schema
            writer.write_table(schema.empty_table())
    return count


def _chunks(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def export_run(reader: StoreReader, run_id: str, *, what: str, fmt: str,
               out: str | Path | None = None, stdout: IO[str] | None = None) -> int:
    """Write one kind of a run's records to ``out`` (or ``stdout`` for JSONL); returns the count
    of lines (JSONL) or rows (Parquet). Raises NotFoundError for an unknown run."""
    _check(what, fmt, out)
    reader.get_run(run_id)  # fail fast with NotFoundError before creating any file
    rows = _rows(reader, run_id, what, parquet=fmt == "parquet")
    if out is None:
        if stdout is None:
            raise ConfigError("JSONL export needs --out FILE or a stream to write to")
        return write_jsonl(rows, stdout)
    # write next to the target and rename, so a failed export never leaves a truncated file
    target = Path(out)
    partial = target.with_name(f".{target.name}.partial")
    try:
        if fmt == "parquet":
            count = write_parquet(rows, what, partial)
        else:
            with partial.open("w", encoding="utf-8") as handle:
                count = write_jsonl(rows, handle)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return count
