"""Shared read answers (docs/server.md "Time limits and load"): dashboards that watch one run ask
the same questions ("curves of run R", "its latest 20 samples"), 50 of them every 2 s. A read
route's answer is kept and given to every caller that asks the same path and query while the
run has not changed since (its status, last step and heartbeat, which every write moves) and for
at most ``read_cache_s`` — the bound for what changes without a write. Concurrent identical
requests do not each read the store (single flight): while one caller reads the new answer (the
run changed, or the kept one aged), the others get the kept one if it is younger than
2 × ``read_cache_s`` (the live stream brings what is newer), else they wait for the new one. The role
check and the version read run on two small threads of their own, so a cached answer never
waits behind the heavy reads that hold the ``worker_threads``.

Only GET routes under ``/api/runs/{run}`` of the read routers are shared (not the live stream,
not control routes); the role check runs on every request, before the cache is looked at, so an
answer reaches only callers allowed to read. Only 200 answers are kept, at most ``MAX_ENTRIES``
and ``MAX_BYTES`` in all (oldest first out).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from rlcockpit.server.workers import nice_this_thread

MAX_ENTRIES = 512
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class _Entry:
    version: tuple
    at: float
    body: bytes
    media_type: str


class ReadCache:
    def __init__(self, max_age_s: float, niceness: int = 0) -> None:
        self.max_age_s = max_age_s
        self._entries: dict[tuple, _Entry] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._bytes = 0
        self.counts = {"hit": 0, "previous": 0, "read": 0}
        self.checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlcockpit-check",
                                         initializer=nice_this_thread, initargs=(niceness,))

    async def answer(self, key: tuple, version: tuple, compute: Callable[[], Awaitable[Response]]) -> Response:
        hit = self._young(key)
        if hit is not None and hit.version == version:
            self.counts["hit"] += 1
            return Response(hit.body, media_type=hit.media_type)
        kept = self._young(key, 2 * self.max_age_s)
        if kept is not None and self._reading(key):  # another caller is reading the new answer
            self.counts["previous"] += 1
            return Response(kept.body, media_type=kept.media_type)
        async with self._locks.setdefault(key, asyncio.Lock()):
            hit = self._young(key)
            if hit is not None and hit.version == version:  # read by the caller we waited for
                self.counts["hit"] += 1
                return Response(hit.body, media_type=hit.media_type)
            self.counts["read"] += 1
            started = time.monotonic()
            response = await compute()
            self._keep(key, version, started, response)
            return response

    def close(self) -> None:
        self.checks.shutdown(wait=False)

    def _young(self, key: tuple, max_age_s: float | None = None) -> _Entry | None:
        hit = self._entries.get(key)
        limit = self.max_age_s if max_age_s is None else max_age_s
        return hit if hit is not None and time.monotonic() - hit.at < limit else None

    def _reading(self, key: tuple) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    def _keep(self, key: tuple, version: tuple, at: float, response: Response) -> None:
        body = getattr(response, "body", None)
        if response.status_code != 200 or not isinstance(body, bytes) or len(body) > MAX_BYTES // 8:
            return
        old = self._entries.pop(key, None)
        self._bytes -= len(old.body) if old else 0
        while self._entries and (len(self._entries) >= MAX_ENTRIES or self._bytes + len(body) > MAX_BYTES):
            gone_key = next(iter(self._entries))
            self._bytes -= len(self._entries.pop(gone_key).body)
            self._locks.pop(gone_key, None)
        self._entries[key] = _Entry(version, at, body, response.media_type or "application/json")
        self._bytes += len(body)


def run_version(request: Request) -> tuple:
    """The caller's role check, then what the run's version is now (a 404 for an unknown run)."""
    from rlcockpit.server.deps import require_viewer

    require_viewer(request)
    run = request.app.state.reader.get_run(request.path_params["run"])
    return (run.status, run.last_step, run.heartbeat_at, run.ended_at)


class SharedReadRoute(APIRoute):
    """A read route whose GET answers are shared through the app's :class:`ReadCache`."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        if "GET" not in self.methods or "{run}" not in self.path or self.path.endswith("/stream"):
            return handler

        async def shared(request: Request) -> Response:
            cache: ReadCache | None = getattr(request.app.state, "read_cache", None)
            if cache is None:
                return await handler(request)
            loop = asyncio.get_running_loop()
            version = await loop.run_in_executor(cache.checks, run_version, request)
            key = (request.url.path, request.url.query)
            return await cache.answer(key, version, lambda: handler(request))

        return shared
