"""Shared read answers (docs/server.md "Time limits and load"): dashboards that watch one run ask
the same questions ("curves of run R", "its latest 20 samples"), 50 of them every 2 s. A read
route's answer is kept and given to every caller that asks the same path and query while the
run has not changed since (its status, last step and heartbeat, which every write moves) and for
at most ``read_cache_s`` — the bound for what changes without a write. Concurrent identical
requests do not each read the store (single flight): while one caller reads the new answer (the
run changed, or the kept one aged), the others get the kept one if it is younger than
2 × ``read_cache_s`` (the live stream brings what is newer), else they wait for the new one.

A kept answer costs no thread and no store read: the role check (without users) and the run's
version are looked up on the event loop — the version is re-read only when SQLite's
``data_version`` says another connection committed since (:class:`RunVersions`; a store without
it, and a role check against users, run on two small threads of their own, so they never wait
behind the heavy reads that hold the ``worker_threads``). Every shared answer carries a weak
``ETag`` (a hash of its body) and ``Cache-Control: no-cache``: a browser revalidates with
``If-None-Match`` and gets 304 without the body while the answer is the same. ``Server-Timing``
says what the route spent (``app;dur=`` ms) and how it was answered (``cache;desc=`` hit,
previous, read, or waited: it waited for the read of an identical request).

Only GET routes under ``/api/runs/{run}`` of the read routers are shared (not the live stream,
not control routes); the role check runs on every request, before the cache is looked at, so an
answer reaches only callers allowed to read. Only 200 answers are kept, at most ``MAX_ENTRIES``
and ``MAX_BYTES`` in all (oldest first out).
"""

from __future__ import annotations

import asyncio
import hashlib
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
MAX_RUNS = 4096  # run versions remembered (unknown runs are not)


@dataclass(frozen=True)
class _Entry:
    version: tuple
    at: float
    body: bytes
    media_type: str
    etag: str


class RunVersions:
    """A run's version ``(status, last_step, heartbeat_at, ended_at)``, read again only when the
    store changed since it was read (``reader.data_version()``, SQLite: one pragma, no table
    read) or it is ``max_age_s`` old (a run turns 'crashed' without a write). Call it on one
    thread (the event loop): ``data_version`` is per connection, and SQLite connections are
    per thread."""

    def __init__(self, reader: Any, max_age_s: float) -> None:
        self.reader = reader
        self.max_age_s = max_age_s
        self.changed = getattr(reader, "data_version", None)  # None: no cheap change check
        self._seen: dict[str, tuple[int, float, tuple]] = {}

    def get(self, run_id: str, limit_s: float) -> tuple:
        change = self.changed()
        now = time.monotonic()
        seen = self._seen.get(run_id)
        if seen is not None and seen[0] == change and now - seen[1] < self.max_age_s:
            return seen[2]
        with self.reader.deadline(limit_s):
            version = version_of(self.reader.get_run(run_id))
        if len(self._seen) >= MAX_RUNS:
            self._seen.clear()
        self._seen[run_id] = (change, now, version)
        return version


def version_of(run: Any) -> tuple:
    return (run.status, run.last_step, run.heartbeat_at, run.ended_at)


class ReadCache:
    def __init__(self, max_age_s: float, niceness: int = 0, reader: Any = None) -> None:
        self.max_age_s = max_age_s
        self._entries: dict[tuple, _Entry] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._bytes = 0
        self.counts = {"hit": 0, "previous": 0, "read": 0, "not_modified": 0}
        self.versions = RunVersions(reader, max_age_s) if reader is not None else None
        self.passed = PassedChecks(min(1.0, max_age_s))
        self.checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlcockpit-check",
                                         initializer=nice_this_thread, initargs=(niceness,))

    async def answer(self, key: tuple, version: tuple, compute: Callable[[], Awaitable[Response]],
                     if_none_match: str | None = None, started: float | None = None) -> Response:
        """The kept answer of ``key`` at ``version``, else the one ``compute`` reads (once for all
        the callers asking at the same time); 304 when ``if_none_match`` names its ETag."""
        started = time.perf_counter() if started is None else started
        found = await self._find(key, version, compute)
        if isinstance(found, Response):  # not kept (not a 200): as the route answered
            return found
        entry, how = found
        return self._send(entry, how, if_none_match, started)

    async def _find(self, key: tuple, version: tuple, compute: Callable[[], Awaitable[Response]]
                    ) -> tuple[_Entry, str] | Response:
        hit = self._young(key)
        if hit is not None and hit.version == version:
            self.counts["hit"] += 1
            return hit, "hit"
        kept = self._young(key, 2 * self.max_age_s)
        if kept is not None and self._reading(key):  # another caller is reading the new answer
            self.counts["previous"] += 1
            return kept, "previous"
        async with self._locks.setdefault(key, asyncio.Lock()):
            hit = self._young(key)
            if hit is not None and hit.version == version:  # read by the caller we waited for
                self.counts["hit"] += 1
                return hit, "waited"
            self.counts["read"] += 1
            at = time.monotonic()
            response = await compute()
            entry = self._keep(key, version, at, response)
            return response if entry is None else (entry, "read")

    def _send(self, entry: _Entry, how: str, if_none_match: str | None, started: float) -> Response:
        timing = f"cache;desc={how}, app;dur={(time.perf_counter() - started) * 1000:.2f}"
        headers = {"etag": entry.etag, "cache-control": "no-cache", "server-timing": timing}
        if if_none_match is not None and _matches(if_none_match, entry.etag):
            self.counts["not_modified"] += 1
            return Response(status_code=304, headers=headers)
        return Response(entry.body, media_type=entry.media_type, headers=headers)

    def close(self) -> None:
        self.checks.shutdown(wait=False)

    def _young(self, key: tuple, max_age_s: float | None = None) -> _Entry | None:
        hit = self._entries.get(key)
        limit = self.max_age_s if max_age_s is None else max_age_s
        return hit if hit is not None and time.monotonic() - hit.at < limit else None

    def _reading(self, key: tuple) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    def _keep(self, key: tuple, version: tuple, at: float, response: Response) -> _Entry | None:
        body = getattr(response, "body", None)
        if response.status_code != 200 or not isinstance(body, bytes) or len(body) > MAX_BYTES // 8:
            return None
        old = self._entries.pop(key, None)
        self._bytes -= len(old.body) if old else 0
        while self._entries and (len(self._entries) >= MAX_ENTRIES or self._bytes + len(body) > MAX_BYTES):
            gone_key = next(iter(self._entries))
            self._bytes -= len(self._entries.pop(gone_key).body)
            self._locks.pop(gone_key, None)
        etag = f'W/"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
        entry = _Entry(version, at, body, response.media_type or "application/json", etag)
        self._entries[key] = entry
        self._bytes += len(body)
        return entry


def _matches(if_none_match: str, etag: str) -> bool:
    """``If-None-Match`` against ``etag`` by the weak comparison of RFC 9110 §13.1.2."""
    if if_none_match.strip() == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in if_none_match.split(","))


def run_version(request: Request) -> tuple:
    """The caller's role check, then what the run's version is now (a 404 for an unknown run)."""
    from rlcockpit.server.deps import require_viewer

    require_viewer(request)
    return version_of(request.app.state.reader.get_run(request.path_params["run"]))


class PassedChecks:
    """Viewer checks that passed, by token, given again while the store is unchanged (no user
    added, revoked or rotated: every such change is a commit, which moves ``data_version``) and
    for at most ``reuse_s`` (a session's expiry is a time, not a write). The live streams reuse a
    token's check the same way for ``stream_auth_check_s``."""

    def __init__(self, reuse_s: float) -> None:
        self.reuse_s = reuse_s
        self._passed: dict[str | None, tuple[int, float]] = {}

    def passed(self, token: str | None, change: int) -> bool:
        seen = self._passed.get(token)
        return seen is not None and seen[0] == change and time.monotonic() - seen[1] < self.reuse_s

    def remember(self, token: str | None, change: int, at: float) -> None:
        if len(self._passed) >= MAX_RUNS:
            self._passed.clear()
        self._passed[token] = (change, at)


async def checked_version(request: Request, cache: ReadCache) -> tuple:
    """:func:`run_version`, on the event loop when the store says when it changed: the run's
    version from :class:`RunVersions`, the role check without users inline, against users on a
    check thread unless the same token passed it since the last change (:class:`PassedChecks`)."""
    from rlcockpit.errors import RlcockpitError
    from rlcockpit.server.auth import bearer_token
    from rlcockpit.server.deps import require_viewer

    state = request.app.state
    versions = cache.versions
    if versions is None or versions.changed is None:
        return await asyncio.get_running_loop().run_in_executor(cache.checks, run_version, request)
    change = versions.changed()
    if state.access is None:
        require_viewer(request)
    else:
        try:
            token = bearer_token(request)
        except RlcockpitError:  # refused (and audited) by the full check below
            token = ""
        if token == "" or not cache.passed.passed(token, change):
            at = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(cache.checks, require_viewer, request)
            cache.passed.remember(token, change, at)
    return versions.get(request.path_params["run"], state.settings.query_timeout_s)


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
            started = time.perf_counter()
            version = await checked_version(request, cache)
            key = (request.scope["path"], request.scope["query_string"])
            return await cache.answer(key, version, lambda: handler(request),
                                      request.headers.get("if-none-match"), started)

        return shared
