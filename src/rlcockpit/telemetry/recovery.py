"""What a run starts with when earlier writes of it failed: its spool and its missing steps.

At ``init()`` (new or resumed run) the run's spool file is opened if one is left (a process that
closed, or died, while its store could not be written); the store's ``telemetry_replayed`` markers
say how far it was already replayed, and the writer thread replays the rest first. Steps named in
``telemetry_lost`` events that the store still lacks start the run's missing-step count; a resumed
trainer rewrites them (trainer/refill.py) and the count falls back to 0.

:func:`missing_steps` answers the trainer's question before it resumes: which of the steps
``1..upto`` of a run are neither in the store nor waiting in its spool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.errors import ConfigError, NotFoundError
from rlcockpit.telemetry.delivery import LOST_EVENT, MISSING_METRIC, StepRanges
from rlcockpit.telemetry.policy import WriterOptions
from rlcockpit.telemetry.spool import REPLAYED_EVENT, Spool, default_spool_dir

MIB = 1024 * 1024


@dataclass
class Recovery:
    """A run's spool (None: spooling off) and the steps it misses in the store."""

    spool: Spool | None
    missing: StepRanges = field(default_factory=StepRanges)
    reported_missing: int = 0  # the run's last telemetry/missing_steps in the store


def spool_dir(store_uri: str, options: WriterOptions) -> Path:
    return Path(options.spool_dir).expanduser() if options.spool_dir else default_spool_dir(store_uri)


def open_spool(store_uri: str, run_id: str, options: WriterOptions) -> Spool | None:
    """The run's spool (an existing file is opened, not replayed); None with spool_max_mb=0."""
    if options.spool_max_mb <= 0:
        return None
    directory = spool_dir(store_uri, options)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"spool_dir {directory} is a file, not a directory; set spool_dir to a "
                          "directory (or remove the file)", details={"key": "spool_dir"})
    try:
        return Spool(directory, run_id, int(options.spool_max_mb * MIB))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot open the telemetry spool of run {run_id!r} in {directory}: "
                          f"{exc}", details={"key": "spool_dir"}) from exc


def recover(opened: Any, writer: Any, run_id: str, options: WriterOptions, *,
            resume: bool) -> Recovery:
    """The spool and missing steps of run ``run_id`` (a new run: an empty spool). A run to
    resume is first checked to be writable (``StoreWriter.check_writable``): a store that would
    refuse every write of it fails here, at setup, with a StoreError."""
    spool = open_spool(opened.uri, run_id, options)
    if not resume:
        return Recovery(spool)
    reader = opened.reader()
    try:
        try:
            reader.get_run(run_id)
        except NotFoundError:
            return Recovery(spool)  # init says so, with the store's URI
        if hasattr(writer, "check_writable"):
            writer.check_writable(run_id)
        if spool is not None and spool.spool_id:
            spool.replayed_seq = _replayed_through(reader, run_id, spool.spool_id)
        missing = StepRanges()
        for event in reader.read_events(run_id, kinds=[LOST_EVENT]):
            for lo, hi in event.payload.get("steps", ()):
                missing.add(range(int(lo), int(hi) + 1))
        missing.remove(_stored(reader, run_id, missing))
        latest = reader.latest(run_id, [MISSING_METRIC]).get(MISSING_METRIC)
    finally:
        reader.close()
    if spool is not None and spool.pending:
        missing.add(spool.spooled_steps())  # in the spool: missing until the writer replays it
    elif spool is not None:
        spool.remove_if_done()  # every frame is in the store (a crash before the file went)
    return Recovery(spool, missing, int(latest[1]) if latest else 0)


def missing_steps(store_uri: str, run_id: str, upto: int, options: WriterOptions | None = None,
                  first: int = 1, metric: str | None = None) -> list[int]:
    """The steps ``first..upto`` of a run whose every step is logged (the trainer's) that are
    neither in the store nor waiting in the run's spool (replayed when the run is resumed). With
    ``metric``, a step counts as stored only when it has that metric (one every step logs), so a
    step of which only late records landed is missing too."""
    from rlcockpit.store import open_store

    options = options or WriterOptions()
    opened = open_store(store_uri, create=False)
    try:
        reader = opened.reader()
        try:
            wanted = StepRanges([(first, upto)]) if upto >= first else StepRanges()
            if metric is not None:
                wanted.remove(reader.read_series(run_id, [metric], step_min=first,
                                                 step_max=upto)[metric].steps)
            else:
                wanted.remove(_stored(reader, run_id, wanted))
            spool = open_spool(opened.uri, run_id, options)
            if spool is not None and spool.pending:
                if spool.spool_id:
                    spool.replayed_seq = _replayed_through(reader, run_id, spool.spool_id)
                wanted.remove(spool.spooled_steps(metric))
        finally:
            reader.close()
    finally:
        opened.close()
    return [s for lo, hi in wanted.ranges() for s in range(lo, hi + 1)]


def _replayed_through(reader: Any, run_id: str, spool_id: str) -> int:
    seqs = [int(e.payload.get("seq", 0)) for e in reader.read_events(run_id, kinds=[REPLAYED_EVENT])
            if e.payload.get("spool") == spool_id]
    return max(seqs, default=0)


def _stored(reader: Any, run_id: str, steps: StepRanges) -> list[int]:
    """Which of ``steps`` the store holds (its complete steps, read a page at a time)."""
    found: list[int] = []
    for lo, hi in steps.ranges():
        after = lo - 1
        while after < hi:
            page = reader.steps_after(run_id, after, limit=1000)
            if not page:
                break
            found.extend(s for s, _ in page if s <= hi)
            after = page[-1][0]
    return found
