"""Copy runs between stores (SQLite <-> ClickHouse, or any two URIs), then prove the copy.

Everything goes through the :class:`StoreReader` / :class:`StoreWriter` protocols, so any pair of
backends works. The proof reads both stores back and compares, per run and per kind of record,
a count and a SHA-256 over the records in a canonical order (row ids, which each store assigns
itself, are left out; floats are compared by their exact ``repr``; NaN equals NaN).

The control plane (users, tickets, the audit chain) is not copied: the chain's hashes vouch for
the store they were written in (docs/store.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rlcockpit.errors import StoreError
from rlcockpit.records import (
    Batch,
    EventRecord,
    FindingRecord,
    MetricPoint,
    RunInfo,
    SampleRecord,
)
from rlcockpit.store.base import RunReader, SampleQuery, SampleReader, StoreReader, StoreWriter

CHUNK = 20_000  # records per written batch
PAGE = 5_000  # samples per read page
KINDS = ("metrics", "histograms", "samples", "events", "findings", "snapshots", "phases",
         "checkpoints")


@dataclass
class RunCheck:
    """Counts and digests of one run in one store, per kind of record."""

    run_id: str
    counts: dict[str, int] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)


def copy_run(src: StoreReader, dst: StoreWriter, run_id: str,
             progress: Callable[[str], None] | None = None) -> None:
    """Write run ``run_id`` of ``src`` into ``dst`` (which must not have it yet)."""
    run = src.get_run(run_id)
    dst.create_run(RunInfo(run_id=run.run_id, project=run.project, name=run.name,
                           status="running", started_at=run.started_at, config=run.config))
    say = progress or (lambda _msg: None)
    for name in src.metric_names(run_id):
        series = src.read_series(run_id, [name])[name]
        points = [MetricPoint(s, name, v, w) for s, v, w in
                  zip(series.steps, series.values, series.wall_times, strict=True)]
        for chunk in _chunks(points):
            dst.write_batch(run_id, Batch(metrics=chunk))
        say(f"{run_id}: metric {name}: {len(points)} points")
    for name in src.histogram_names(run_id):
        for chunk in _chunks(src.read_histograms(run_id, name)):
            dst.write_batch(run_id, Batch(histograms=chunk))
    copied = 0
    for page in _sample_pages(src, run_id):
        dst.write_batch(run_id, Batch(samples=page))
        copied += len(page)
    say(f"{run_id}: {copied} samples")
    snapshots = src.read_snapshots(run_id, with_payload=True)
    dst.write_batch(run_id, Batch(events=src.read_events(run_id),
                                  findings=src.read_findings(run_id),
                                  snapshots=snapshots, phases=src.read_phases(run_id),
                                  checkpoints=src.read_checkpoints(run_id)))
    dst.set_run_status(run_id, run.status if run.status != "crashed" else "running",
                       ended_at=run.ended_at)
    dst.heartbeat(run_id, run.heartbeat_at or run.started_at, run.last_step)


def check_run(reader: StoreReader, run_id: str) -> RunCheck:
    """Count and digest every kind of record of ``run_id`` as ``reader`` returns it."""
    check = RunCheck(run_id)
    streams: dict[str, Iterator] = {
        "metrics": _metric_rows(reader, run_id),
        "histograms": ((n, h.step, h.edges, h.counts, h.wall_time)
                       for n in reader.histogram_names(run_id)
                       for h in reader.read_histograms(run_id, n)),
        "samples": (_sample_row(s) for page in _sample_pages(reader, run_id) for s in page),
        "events": (_event_row(e) for e in reader.read_events(run_id)),
        "findings": (_finding_row(f) for f in reader.read_findings(run_id)),
        "snapshots": ((s.step, s.kind, s.incident, s.wall_time, _canon(s.payload))
                      for s in reader.read_snapshots(run_id, with_payload=True)),
        "phases": ((p.step, p.phase, p.status, p.duration_s, p.progress, p.wall_time)
                   for p in reader.read_phases(run_id)),
        "checkpoints": ((c.step, c.path, c.reason, c.wall_time)
                        for c in reader.read_checkpoints(run_id)),
    }
    for kind, found in streams.items():
        digest, n = hashlib.sha256(), 0
        for row in found:
            digest.update(repr(row).encode("utf-8"))
            digest.update(b"\n")
            n += 1
        check.counts[kind] = n
        check.digests[kind] = digest.hexdigest()
    return check


def compare(a: RunCheck, b: RunCheck) -> list[str]:
    """What differs between two checks of the same run (empty: identical)."""
    return [f"{kind}: {a.counts[kind]} rows ({a.digests[kind][:12]}) vs {b.counts[kind]} rows "
            f"({b.digests[kind][:12]})" for kind in KINDS
            if (a.counts[kind], a.digests[kind]) != (b.counts[kind], b.digests[kind])]


def runs_to_copy(src: RunReader, dst: RunReader, wanted: list[str] | None) -> list[str]:
    """The runs to copy: ``wanted`` (each must exist in ``src``) or all of ``src``; a run already
    in ``dst`` is refused (copy into a fresh store, or choose the runs with --run)."""
    available = [r.run_id for r in src.list_runs()]
    runs = list(wanted) if wanted else available
    missing = [r for r in runs if r not in available]
    if missing:
        raise StoreError(f"run(s) {', '.join(missing)} not in the source store; it has "
                         f"{', '.join(available[:10]) or 'no runs'}", details={"missing": missing})
    present = {r.run_id for r in dst.list_runs()}
    clash = [r for r in runs if r in present]
    if clash:
        raise StoreError(f"run(s) {', '.join(clash)} already in the destination store; copy into "
                         "another store or pick other runs with --run", details={"runs": clash})
    return runs


def _chunks(items: list) -> Iterator[list]:
    for start in range(0, len(items), CHUNK):
        yield items[start:start + CHUNK]


def _sample_pages(reader: SampleReader, run_id: str) -> Iterator[list[SampleRecord]]:
    """Every sample in (step, sample id) order, a page at a time; pages by step range, so a
    page costs the same at the end of a large run as at its start."""
    after = None
    while True:
        page = reader.query_samples(run_id, SampleQuery(
            step_min=None if after is None else after[0], order="step_asc", limit=PAGE))
        items = [s for s in page.items if after is None or (s.step, s.sample_id) > after]
        if not page.items:
            return
        if not items:  # a step with more than PAGE samples: move by offset within it
            items = _rest_of_step(reader, run_id, after)
            if not items:
                return
        yield items
        after = (items[-1].step, items[-1].sample_id)


def _rest_of_step(reader: SampleReader, run_id: str, after: tuple[int, int]) -> list[SampleRecord]:
    out, offset = [], 0
    while True:
        page = reader.query_samples(run_id, SampleQuery(step_min=after[0], step_max=after[0],
                                                        order="step_asc", limit=PAGE,
                                                        offset=offset))
        out += [s for s in page.items if s.sample_id > after[1]]
        offset += PAGE
        if offset >= page.total:
            return out


def _metric_rows(reader: RunReader, run_id: str) -> Iterator[tuple]:
    for name in reader.metric_names(run_id):
        s = reader.read_series(run_id, [name])[name]
        yield from ((name, st, v, w) for st, v, w in
                    zip(s.steps, s.values, s.wall_times, strict=True))


def _sample_row(s: SampleRecord) -> tuple:
    return (s.step, s.sample_id, s.prompt, s.response, s.reward, s.prompt_id, s.group_id,
            s.category, _canon(s.components), s.uncertainty, tuple(s.flags), s.length,
            s.truncated, s.advantage, s.value, s.kl_sum, s.kl_max, s.tokens, s.logprobs,
            s.ref_logprobs, s.token_kl)


def _event_row(e: EventRecord) -> tuple:
    return (e.step, e.kind, _canon(e.payload), e.wall_time)


def _finding_row(f: FindingRecord) -> tuple:
    return (f.step, f.detector, f.severity, f.message, _canon(f.evidence), tuple(f.patterns),
            f.status, f.wall_time, f.incident)


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)
