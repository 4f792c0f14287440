"""``GET /api/runs/{run}/stream``: the live tail of a run as server-sent events.

Each stream polls every ``sse_poll_s`` through the app's shared reads
(:class:`~rlcockpit.server.tail.SharedReads`: streams at the same cursor share one answer): on
the event loop when every read of the poll has a shared answer (``Tail.poll_shared``: 50 streams
polling 4 times a second made 200 thread hops a second, most of the server's time on a loaded
machine), else on the stream's own single thread (niced, see workers.py). It sends a keep-alive
comment after ``keepalive_s`` of silence. At most ``max_streams`` are open at once. Every
``stream_auth_check_s`` (2 s) the stream checks its caller's token or session again (the same
check as every request): once it is revoked, rotated or expired, the stream sends one ``error``
message (the canonical 401 body) and ends, so revoking a user closes their open dashboards within
seconds. When the client goes away the generator is cancelled; its ``finally`` lets the thread
end, and the reader closes that thread's SQLite connection once it has (store/sqlite_conns.py),
so streams leave nothing behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from rlcockpit.errors import RlcockpitError
from rlcockpit.server.auth import bearer_token
from rlcockpit.server.cursor import Cursor, decode
from rlcockpit.server.query import I64_MAX, I64_MIN
from rlcockpit.server.routes.base import read_router
from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.tail import Tail, keepalive, message
from rlcockpit.server.workers import nice_this_thread

router = read_router("/api/runs/{run}", "stream", 503)
THREAD_PREFIX = "rlcockpit-sse"
RETRY_MS = 2000
NO_ID = ("null", "undefined")
# what decode() reads (or "no id yet"): the schema says so, and FastAPI refuses anything else (422)
CURSOR_PATTERN = r"^ *(null|undefined|v1\.(_|-?[0-9]{1,19})(\.[0-9]{1,19}){3}) *$"


class SharedChecks:
    """The streams' token re-checks, one per token and ``max_age_s``: 50 dashboards of one
    person (or of the anonymous reader) are checked once every interval, not 50 times."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._done: dict[str | None, tuple[float, RlcockpitError | None]] = {}

    def bind(self, request: Request, access: Any) -> _Check:
        try:
            token = bearer_token(request)
        except RlcockpitError:
            token = None
        return _Check(self, token, lambda: access.require(request, "viewer"))


class _Check:
    def __init__(self, checks: SharedChecks, token: str | None, run: Callable[[], Any]) -> None:
        self.checks, self.token, self.run = checks, token, run

    def shared(self) -> bool:
        """True when a check of this token within ``max_age_s`` passed (raises what it raised)."""
        done = self.checks._done.get(self.token)
        if done is None or time.monotonic() - done[0] >= self.checks.max_age_s:
            return False
        if done[1] is not None:
            raise done[1]
        return True

    def __call__(self) -> None:
        at = time.monotonic()
        try:
            self.run()
        except RlcockpitError as exc:
            self.checks._done[self.token] = (at, exc)
            raise
        if len(self.checks._done) > 10_000:
            self.checks._done.clear()
        self.checks._done[self.token] = (at, None)


@router.get("/stream", summary="Live server-sent events: step, finding, phase, event, run",
            response_class=StreamingResponse)
async def stream(request: Request, run: str,
                 cursor: Annotated[str | None, Query(
                     description="resume after this message id (v1.<step>.<finding>.<phase>.<event>)",
                     pattern=CURSOR_PATTERN, max_length=100)] = None,
                 after_step: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX,
                                                         description="start after this step "
                                                                     "(default: the last)")
                                       ] = None,
                 last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
    state = request.app.state
    # Last-Event-ID first: a browser reconnecting to a ?cursor= URL sends the newer id there;
    # "null" / "undefined" are what some clients send for "no id yet"
    resume = next((v for v in (last_event_id, cursor) if v and v.strip() not in NO_ID), None)
    parsed = decode(resume) if resume else None
    await run_in_threadpool(state.reader.get_run, run)  # 404 before the stream starts
    state.streams.acquire()  # 503 too_many_streams over max_streams
    access = state.access
    recheck = None if access is None else state.stream_checks.bind(request, access)
    body = _events(request, state.stream_reads, state.settings, run, parsed, after_step, recheck)
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _events(request: Request, reader: Any, settings: ServerSettings, run: str,
                  cursor: Cursor | None, after_step: int | None,
                  recheck: Callable[[], Any] | None) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_PREFIX,
                                initializer=nice_this_thread, initargs=(settings.worker_nice,))
    try:
        tail = await loop.run_in_executor(
            thread, lambda: Tail.start(reader, run, cursor=cursor, after_step=after_step))
        yield f"retry: {RETRY_MS}\n\n"
        quiet_since = checked = time.monotonic()
        while not await request.is_disconnected():
            if recheck is not None and time.monotonic() - checked >= settings.stream_auth_check_s:
                checked = time.monotonic()
                try:  # streams of one token share one check per interval: no hop for the others
                    recheck.shared() or await loop.run_in_executor(thread, recheck)
                except RlcockpitError as exc:  # revoked, rotated, expired: say so and end the stream
                    yield message("error", None, exc.to_dict())
                    return
            try:  # 49 of 50 streams at one cursor find their poll answered already: no hop
                poll = tail.poll_shared() or await loop.run_in_executor(thread, tail.poll)
            except RlcockpitError as exc:  # fail soft: say so, keep the cursor, try again
                yield message("error", None, exc.to_dict())
                await asyncio.sleep(settings.sse_poll_s)
                continue
            if poll.messages:  # one write for the poll: 50 streams x 11 messages a second made
                yield "".join(poll.messages)  # 550 sends a second, one per message
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settings.keepalive_s:
                yield keepalive()
                quiet_since = time.monotonic()
            if not poll.more:
                await asyncio.sleep(settings.sse_poll_s)
    finally:
        request.app.state.streams.release()
        thread.shutdown(wait=False)  # the thread's connection is closed once it has ended
