"""The live tail: what a run wrote after a cursor, as server-sent-event messages.

Pure of the web framework: :class:`Tail` reads through a store reader (its ``TailReader`` role)
and returns the messages and the advanced cursor; the stream route (``routes/stream.py``) drives
it on its own thread every ``sse_poll_s``. "Live parameters" (``GET /api/runs/{run}/live``) are
another thing: ``routes/params.py``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlcockpit.records import to_dict
from rlcockpit.server.cursor import Cursor, encode
from rlcockpit.server.responses import json_safe
from rlcockpit.store.base import RunReader, StoreReader, TailReader

STEPS_PER_POLL = 200
ROWS_PER_POLL = 500
KINDS = (("findings", "finding"), ("phases", "phase"), ("events", "event"))


class TailSource(RunReader, TailReader, Protocol):
    """What a tail reads: the run's status (``get_run``) and what was written after its cursor."""


def message(kind: str, cursor: Cursor | None, data: Any) -> str:
    """One SSE message; ``data`` as one JSON line (non-finite numbers as null)."""
    text = json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))
    head = f"event: {kind}\n" + (f"id: {encode(cursor)}\n" if cursor is not None else "")
    return f"{head}data: {text}\n\n"


def _row_message(kind: str, cursor: Cursor, record: Any) -> str:
    return message(kind, cursor, to_dict(record))


def keepalive() -> str:
    return ": keep-alive\n\n"


class SharedReads:
    """The live streams' reads through one reader, each distinct read answered once per ``ttl_s``.

    Streams that follow the same run sit at the same cursor once they are live, so they ask the
    same questions ("rows after id 812", "steps after 40"); 50 dashboards polling 4 times a second
    made 200 identical polls a second. Now the first stream's answer serves the others for
    ``ttl_s`` (the poll interval): a message reaches a stream at most one interval later.
    """

    # get_run too: 50 streams asked for the run's status 200 times a second, the largest share of
    # the server's reads under load; a status change now shows within one poll interval
    CACHED = ("rows_after", "steps_after", "step_metrics", "get_run")
    MAX_ENTRIES = 4096

    class Miss(Exception):
        """Raised in :meth:`shared_only` mode by a read that has no shared answer."""

    def __init__(self, reader: StoreReader, *, ttl_s: float) -> None:
        self.reader = reader
        self.ttl_s = ttl_s
        self._data: dict[tuple, tuple[float, Any]] = {}
        self._busy: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.reader, name)
        if name not in self.CACHED:
            return fn
        return lambda *args, **kwargs: self._read(name, fn, args, kwargs)

    @contextlib.contextmanager
    def shared_only(self) -> Iterator[None]:
        """On this thread, answer only from shared answers; any other read raises :class:`Miss`
        (so a poll can run on the event loop without touching the store)."""
        self._local.shared_only = True
        try:
            yield
        finally:
            self._local.shared_only = False

    def _read(self, name: str, fn: Any, args: tuple, kwargs: dict) -> Any:
        key = (name, args, tuple(sorted(kwargs.items())))
        with self._lock:
            hit = self._fresh(key)
            busy = self._busy.setdefault(key, threading.Lock())
        if hit is not None:
            return hit[1]
        if getattr(self._local, "shared_only", False):
            raise self.Miss(name)
        with busy:  # one stream reads, the others wait for its answer
            with self._lock:
                hit = self._fresh(key)
            if hit is not None:
                return hit[1]
            value = fn(*args, **kwargs)
            with self._lock:
                if len(self._data) >= self.MAX_ENTRIES:
                    self._expire()
                self._data[key] = (time.monotonic(), value)
        return value

    def text(self, key: tuple, build: Any) -> str:
        """A message's text, built once for every stream at the same cursor (``key`` names the
        run, kind and cursor, which fix the message), kept like the reads."""
        key = ("text", *key)
        with self._lock:
            hit = self._fresh(key)
        if hit is not None:
            return hit[1]
        value = build()
        with self._lock:
            self._data[key] = (time.monotonic(), value)
        return value

    def fresh(self, name: str, *args: Any) -> Any:
        """Read now (not a shared answer) and share this answer from now on."""
        if getattr(self._local, "shared_only", False):
            raise self.Miss(name)
        value = getattr(self.reader, name)(*args)
        with self._lock:
            self._data[(name, args, ())] = (time.monotonic(), value)
        return value

    def _fresh(self, key: tuple) -> tuple[float, Any] | None:
        hit = self._data.get(key)
        return hit if hit is not None and time.monotonic() - hit[0] < self.ttl_s else None

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, (at, _) in self._data.items() if now - at >= self.ttl_s]:
            self._data.pop(key, None)
            self._busy.pop(key, None)


@dataclass
class Poll:
    messages: list[str] = field(default_factory=list)
    more: bool = False  # a page limit was hit: poll again at once


class Tail:
    """The stream's state: the run, the cursor and the last run status sent."""

    def __init__(self, reader: TailSource, run_id: str, cursor: Cursor) -> None:
        self.reader = reader
        self.run_id = run_id
        self.cursor = cursor
        self.status: str | None = None

    @classmethod
    def start(cls, reader: TailSource, run_id: str, *, cursor: Cursor | None,
              after_step: int | None) -> Tail:
        """Resume at ``cursor``; else start after ``after_step``: its later steps and every
        finding, phase and event of a later step. Without either, start at the present (only
        what is written from now on)."""
        if cursor is not None:
            return cls(reader, run_id, cursor)
        ids = reader.tail_start_ids(run_id, after_step)
        return cls(reader, run_id, Cursor(step=ids["step"], finding=ids["findings"],
                                          phase=ids["phases"], event=ids["events"]))

    def poll_shared(self) -> Poll | None:
        """The next poll answered from the streams' shared answers alone, on the calling thread
        (the event loop: no hop to the stream's thread, no store read); None, with nothing
        changed, when it needs a read (then :meth:`poll` on the stream's thread)."""
        reader = self.reader
        if not isinstance(reader, SharedReads):
            return None
        before = (self.cursor, self.status)
        with reader.shared_only():
            try:
                return self.poll()
            except SharedReads.Miss:
                self.cursor, self.status = before
                return None

    def poll(self) -> Poll:
        out = Poll()
        self._status(out)
        for table, kind in KINDS:
            self._rows(out, table, kind)
        self._steps(out)
        return out

    def _text(self, kind: str, build: Any) -> str:
        if isinstance(self.reader, SharedReads):
            return self.reader.text((self.run_id, kind, self.cursor), build)
        return build()

    def _status(self, out: Poll) -> None:
        # a new stream's first status is read afresh (the shared answer may be one poll old)
        if self.status is None and isinstance(self.reader, SharedReads):
            run = self.reader.fresh("get_run", self.run_id)
        else:
            run = self.reader.get_run(self.run_id)
        if run.status != self.status:
            self.status = run.status
            out.messages.append(message("run", self.cursor, {
                "status": run.status, "last_step": run.last_step, "ended_at": run.ended_at}))

    def _rows(self, out: Poll, table: str, kind: str) -> None:
        after = getattr(self.cursor, kind)
        found = self.reader.rows_after(self.run_id, table, after, limit=ROWS_PER_POLL)
        for row_id, record in found:
            self.cursor = self.cursor.advance(**{kind: row_id})
            out.messages.append(self._text(kind, functools.partial(_row_message, kind, self.cursor, record)))
        out.more = out.more or len(found) >= ROWS_PER_POLL

    def _steps(self, out: Poll) -> None:
        found = self.reader.steps_after(self.run_id, self.cursor.step, limit=STEPS_PER_POLL)
        if not found:
            return
        metrics = self.reader.step_metrics(self.run_id, found[0][0], found[-1][0])
        for step, wall_time in found:
            self.cursor = self.cursor.advance(step=step)
            out.messages.append(self._text("step", functools.partial(message, "step", self.cursor, {
                "step": step, "wall_time": wall_time, "metrics": metrics.get(step, {})})))
        out.more = out.more or len(found) >= STEPS_PER_POLL
