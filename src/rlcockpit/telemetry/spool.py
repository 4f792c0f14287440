"""The local spool: whole steps kept on disk while the store cannot be written at all.

When a write fails because the store is unavailable (disk full, I/O error, a corrupt page, a
ClickHouse outage, a lock held past every retry), the writer appends the batch to this run's spool
file instead of dropping it, and appends every later batch behind it (order kept) until the store
answers again; then the frames are replayed in order and the file is removed.

One file per run, ``<spool_dir>/<run_id>.spool``: append-only JSON lines, a header line (format,
run id, a random spool id) and then one frame per batch (``{"seq": n, "parts": {kind: [record,
...]}}``; floats with Python's ``NaN`` / ``Infinity`` tokens, so every value round-trips). A line
cut short by a crash is dropped when the file is opened again. The file never grows past
``max_bytes``: a batch that does not fit is refused (the caller counts it as lost).

Exactly once: each replayed write carries an event ``telemetry_replayed`` naming the spool id and
the last frame it holds, in the same write as the frames' records; a spool opened again (the run
resumed after a crash) starts after the last frame the store has a marker for. Steps, histograms
and samples are keyed by (run, step, name / sample id) in every store, so a frame written twice
would not duplicate them either; the marker keeps the append-only records (events, findings,
phases, checkpoints) from being written twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
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
    SnapshotRecord,
)
from rlcockpit.telemetry.assembly import Parts

FORMAT = 1
SUFFIX = ".spool"
REPLAYED_EVENT = "telemetry_replayed"
_CLASSES = {"metrics": MetricPoint, "histograms": HistogramRecord, "samples": SampleRecord,
            "events": EventRecord, "findings": FindingRecord, "phases": PhaseRecord,
            "checkpoints": CheckpointRecord, "snapshots": SnapshotRecord}
_FIELDS = {kind: tuple(f.name for f in dataclasses.fields(cls)) for kind, cls in _CLASSES.items()}
_TUPLES = {"edges", "counts", "flags", "patterns", "tokens"}  # tuple fields (JSON gives lists)
_F16 = {"logprobs", "ref_logprobs", "token_kl"}  # per-token float arrays: float16, as convert.py
_ENCODER = json.JSONEncoder(allow_nan=True, ensure_ascii=True, separators=(",", ":"),
                            default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def default_spool_dir(store_uri: str) -> Path:
    """Where a store's spool goes when ``spool_dir`` is not set: beside a SQLite file
    (``runs.db`` -> ``runs.db-spool/``) or a chDB directory (``DIR-spool/``); for a ClickHouse
    server, ``$XDG_CACHE_HOME/rlcockpit/spool/<host>_<port>_<database>/`` (``~/.cache`` by
    default)."""
    from rlcockpit.store.uri import parse_store_uri

    uri = parse_store_uri(store_uri)
    if uri.scheme in ("sqlite", "chdb"):
        return Path(f"{uri.path}-spool")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{uri.host}_{uri.port or ''}_{uri.database}")
    return cache / "rlcockpit" / "spool" / name


class Spool:
    """The spool file of one run. Single-threaded: the writer thread (and ``init`` before it)."""

    def __init__(self, directory: Path, run_id: str, max_bytes: int) -> None:
        self.path = Path(directory) / f"{_safe(run_id)}{SUFFIX}"
        self.run_id = run_id
        self.max_bytes = int(max_bytes)
        self.spool_id = ""
        self.last_seq = 0  # highest frame sequence number in the file
        self.replayed_seq = 0  # frames up to this one are in the store
        self._read_offset = 0  # where the first frame after replayed_seq starts (0: not known yet)
        self._size = 0
        if self.path.is_file():
            self._open_existing()

    # ------------------------------------------------------------------ state

    @property
    def pending(self) -> bool:
        """Frames in the file that the store has not confirmed."""
        return self.last_seq > self.replayed_seq

    @property
    def size(self) -> int:
        return self._size

    def spooled_steps(self, metric: str | None = None) -> list[int]:
        """The steps of the frames not yet replayed (read from the file); with ``metric``, only
        the steps whose frames hold that metric."""
        steps: set[int] = set()
        for _, parts, _ in self.frames():
            if metric is None:
                steps.update(step_set(parts))
            else:
                steps.update(int(m.step) for m in parts.metrics if m.name == metric)
        return sorted(steps)

    # ------------------------------------------------------------------ writing

    def append(self, parts: Parts) -> str | None:
        """Append ``parts`` as one frame. None when written; else why not (full, or an OSError)."""
        seq = self.last_seq + 1
        try:  # ASCII JSON: a text that is no UTF-8 (a lone surrogate) round-trips as an escape
            line = (_ENCODER.encode({"seq": seq, "parts": encode_parts(parts)}) + "\n").encode()
        except (TypeError, ValueError) as exc:
            return f"the batch could not be encoded for the spool: {exc}"
        header = b"" if self._size else self._header()
        if self._size + len(header) + len(line) > self.max_bytes:
            return (f"the spool {self.path} is full ({self._size} of {self.max_bytes} bytes; "
                    f"raise spool_max_mb or free the store)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(header + line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            self._resync()
            return f"the spool {self.path} could not be written: {exc}"
        self._size += len(header) + len(line)
        self.last_seq = seq
        return None

    def mark_replayed(self, seq: int, next_offset: int) -> None:
        """Frames up to ``seq`` are in the store; the next one starts at ``next_offset``."""
        self.replayed_seq = max(self.replayed_seq, seq)
        self._read_offset = next_offset

    def remove_if_done(self) -> bool:
        """Delete the file once every frame is in the store; True when no spool is left."""
        if self.pending:
            return False
        if self._size or self.path.exists():
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                return False  # kept: every frame is marked replayed, so it replays nothing
        self._size = self._read_offset = self.last_seq = self.replayed_seq = 0
        self.spool_id = ""
        return True

    # ------------------------------------------------------------------ reading

    def frames(self) -> Iterator[tuple[int, Parts, int]]:
        """(seq, parts, offset after the frame) of every frame after ``replayed_seq``."""
        if not self.pending:
            return
        with open(self.path, "rb") as f:
            f.seek(self._read_offset)
            if self._read_offset == 0:
                f.readline()  # the header
            while True:
                line = f.readline()
                if not line.endswith(b"\n"):
                    return
                frame = json.loads(line)
                if frame["seq"] > self.replayed_seq:
                    yield frame["seq"], decode_parts(frame["parts"]), f.tell()

    def _header(self) -> bytes:
        self.spool_id = self.spool_id or secrets.token_hex(8)
        return (json.dumps({"rlcockpit_spool": FORMAT, "run_id": self.run_id, "id": self.spool_id,
                            "created_at": time.time()}) + "\n").encode("utf-8")

    def _open_existing(self) -> None:
        """Read the header and the last frame's number; cut a line a crash left unfinished."""
        self._resync()
        with open(self.path, "rb") as f:
            header = f.readline()
            if not header.endswith(b"\n"):
                self._size = 0
                return
            meta = json.loads(header)
            if meta.get("rlcockpit_spool") != FORMAT or meta.get("run_id") != self.run_id:
                raise ValueError(f"{self.path} is not a spool of run {self.run_id!r} "
                                 f"(format {FORMAT}); move it away")
            self.spool_id = str(meta["id"])
            for line in f:
                self.last_seq = int(json.loads(line)["seq"])

    def _resync(self) -> None:
        """Truncate the file after its last complete line (a torn append, a failed write)."""
        if not self.path.is_file():
            self._size = 0
            return
        with open(self.path, "r+b") as f:
            end = f.seek(0, os.SEEK_END)
            keep, pos = 0, end
            while pos > 0:  # backwards, a block at a time, to the last newline
                start = max(0, pos - (1 << 16))
                f.seek(start)
                found = f.read(pos - start).rfind(b"\n")
                if found >= 0:
                    keep = start + found + 1
                    break
                pos = start
            if keep != end:
                f.truncate(keep)
        self._size = keep


def step_set(parts: Parts) -> set[int]:
    """The steps whose metrics, histograms or samples ``parts`` holds."""
    return {int(r.step) for kind in ("metrics", "histograms", "samples")
            for r in getattr(parts, kind)}


def encode_parts(parts: Parts) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for kind, fields in _FIELDS.items():
        records = getattr(parts, kind)
        if records:
            out[kind] = [{f: getattr(r, f) for f in fields} for r in records]
    return out


def decode_parts(data: dict[str, list[dict[str, Any]]]) -> Parts:
    parts = Parts()
    for kind, rows in data.items():
        cls = _CLASSES[kind]
        getattr(parts, kind).extend(cls(**_restore(row)) for row in rows)
    return parts


def _restore(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if value is None:
            continue
        if name in _TUPLES:
            row[name] = tuple(value)
        elif name in _F16:
            row[name] = np.asarray(value, dtype=np.float16)
    return row


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
