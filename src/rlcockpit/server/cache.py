"""Shared read answers (docs/server.md "Time limits and load"): dashboards that watch one run ask
the same questions ("curves of run R", "its latest 20 samples"), 50 of them every 2 s. A read
route's answer is kept and given to every caller that asks the same path and query while the
run has not changed since (its status, last step and heartbeat, which every write moves) and for
at most ``read_cache_s`` — the bound for what changes without a write (a ``running`` run turning
``crashed`` when its heartbeat ages). Concurrent identical requests wait for the first one's
answer instead of each reading the store (single flight).

Only GET routes under ``/api/runs/{run}`` of the read routers are shared (not the live stream,
not control routes); the role check runs on every request, before the cache is looked at, so an
answer reaches only callers allowed to read. Only 200 answers are kept, at most ``MAX_ENTRIES``
and ``MAX_BYTES`` in all (oldest first out).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

MAX_ENTRIES = 512
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class _Entry:
    version: tuple
    at: float
    body: bytes
    media_type: str


class ReadCache:
    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._entries: dict[tuple, _Entry] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    async def answer(self, key: tuple, version: tuple, compute: Callable[[], Awaitable[Response]]) -> Response:
        hit = self._fresh(key, version)
        if hit is None:
            async with self._locks.setdefault(key, asyncio.Lock()):
                hit = self._fresh(key, version)
                if hit is None:
                    self.misses += 1
                    started = time.monotonic()
                    response = await compute()
                    self._keep(key, version, started, response)
                    return response
        self.hits += 1
        return Response(hit.body, media_type=hit.media_type)

    def _fresh(self, key: tuple, version: tuple) -> _Entry | None:
        hit = self._entries.get(key)
        if hit is None or hit.version != version or time.monotonic() - hit.at >= self.max_age_s:
            return None
        return hit

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
            version = await run_in_threadpool(run_version, request)
            key = (request.url.path, request.url.query)
            return await cache.answer(key, version, lambda: handler(request))

        return shared
