"""The dashboard clients of benchmarks/server_load.py: plain HTTP/1.1 over asyncio streams.

Each client is one browser tab: one kept-alive connection for its polls (the six calls the
dashboard repeats every ``refresh_s``, one after the other) and one for its live stream. Like a
browser's HTTP cache it sends back the ``ETag`` of its last answer of a path as
``If-None-Match`` (a 304 is an answer, not an error) and asks for gzip (a gzip body is not
decoded: nothing reads it). The client is hand-written, not httpx, because the load generator
shares the machine: httpx spent ~1 ms of CPU per request (0.23 cores at 32 requests/s, niced
below the server), so its own queue for the CPU was most of what it measured; this one costs a
few tens of microseconds per request.

What each request records: the latency the client saw (send to last body byte) and what the
server says it spent (``Server-Timing: app;dur=<ms>``, from the route's start to its answer —
server/cache.py), and the client's own scheduling delay (how late a 50 ms sleep of its event
loop wakes up), so a slow answer can be told apart from a starved load generator.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

POLLS = ("/series?names={series}&max_points=500", "/latest", "/samples?limit=20", "/findings",
         "/phases", "")
LAG_TICK_S = 0.05


class Connection:
    """One kept-alive HTTP/1.1 connection; :meth:`get` reopens it when the server closed it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str, headers: dict[str, str], stats: dict) -> tuple[int, dict, bytes]:
        """GET once more when a kept-alive connection was closed under the request (a browser
        retries an idempotent request then; counted in ``stats["retried"]``)."""
        reused = self.writer is not None
        try:
            return await self._get(target, headers)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.close()
            if not reused:
                raise
            stats["retried"] += 1
            return await self._get(target, headers)

    async def _get(self, target: str, headers: dict[str, str]) -> tuple[int, dict, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        lines = [f"GET {target} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept-Encoding: gzip",
                 *(f"{k}: {v}" for k, v in headers.items())]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status, head = await read_head(self.reader)
        body = await read_body(self.reader, head, status)
        if head.get("connection", "").lower() == "close":
            self.close()
        return status, head, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    first, *rest = raw.decode("latin-1").split("\r\n")
    head = {}
    for line in rest:
        name, sep, value = line.partition(":")
        if sep:
            head[name.strip().lower()] = value.strip()
    return int(first.split(" ", 2)[1]), head


async def read_body(reader: asyncio.StreamReader, head: dict[str, str], status: int) -> bytes:
    if "content-length" in head:
        return await reader.readexactly(int(head["content-length"]))
    if head.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while chunk := await read_chunk(reader):
            parts.append(chunk)
        await reader.readuntil(b"\r\n")  # the empty trailer
        return b"".join(parts)
    return b"" if status in (204, 304) or 100 <= status < 200 else await reader.read()


async def read_chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    data = await reader.readexactly(size + 2) if size else b""
    return data[:-2]


def server_ms(head: dict[str, str]) -> tuple[float | None, str | None]:
    """(``app;dur`` in ms, the ``cache;desc`` outcome) from a ``Server-Timing`` header."""
    dur = desc = None
    for metric in head.get("server-timing", "").split(","):
        name, *params = (p.strip() for p in metric.split(";"))
        values = dict(p.partition("=")[::2] for p in params)
        if name == "app" and "dur" in values:
            dur = float(values["dur"])
        elif name == "cache" and "desc" in values:
            desc = values["desc"]
    return dur, desc


def new_stats() -> dict:
    return {"requests": 0, "errors": 0, "streams": 0, "stream_messages": 0, "latencies": [],
            "server_latencies": [], "lags": [], "statuses": {}, "cache": {}, "errors_by": {},
            "slowest_by_route": {}, "retried": 0}


async def run_clients(url: str, run: str, n: int, seconds: float, refresh_s: float, series: str,
                      etags: bool = True) -> dict:
    parts = urlsplit(url)
    stats = new_stats()
    stop = time.monotonic() + seconds
    lag = asyncio.create_task(_lag(stop, stats))
    await asyncio.gather(*(_one_client(parts.hostname, parts.port, run, stop, refresh_s, series, etags, stats)
                           for _ in range(n)))
    await lag
    return stats


async def _lag(stop: float, stats: dict) -> None:
    while time.monotonic() < stop:
        at = time.monotonic()
        await asyncio.sleep(LAG_TICK_S)
        stats["lags"].append(time.monotonic() - at - LAG_TICK_S)


async def _one_client(host: str, port: int, run: str, stop: float, refresh_s: float, series: str,
                      etags: bool, stats: dict) -> None:
    stream = asyncio.create_task(_stream(host, port, run, stop, stats))
    conn, seen = Connection(host, port), {}
    paths = [f"/api/runs/{run}" + p.format(series=series) for p in POLLS]
    while time.monotonic() < stop:
        started = time.monotonic()
        for path in paths:
            await _poll(conn, path, seen if etags else None, run, stats)
        await asyncio.sleep(max(0.0, refresh_s - (time.monotonic() - started)))
    conn.close()
    stream.cancel()


async def _poll(conn: Connection, path: str, seen: dict | None, run: str, stats: dict) -> None:
    headers = {"If-None-Match": seen[path]} if seen is not None and path in seen else {}
    t0 = time.monotonic()
    head: dict[str, str] = {}
    try:
        code, head, body = await conn.get(path, headers, stats)
        status = str(code) if code in (200, 304) else f"{code} {body[:120]!r}"
    except Exception as exc:  # a failed request is counted, the client goes on
        status = type(exc).__name__
        conn.close()
    took = time.monotonic() - t0
    if seen is not None and "etag" in head:
        seen[path] = head["etag"]
    dur, desc = server_ms(head)
    route = path.split("?")[0].replace(f"/api/runs/{run}", "") or "/run"
    stats["requests"] += 1
    stats["latencies"].append(took)
    if dur is not None:
        stats["server_latencies"].append(dur / 1000)
    if desc is not None:
        stats["cache"][desc] = stats["cache"].get(desc, 0) + 1
    stats["statuses"][status[:3]] = stats["statuses"].get(status[:3], 0) + 1
    slowest = stats["slowest_by_route"]
    slowest[route] = round(max(slowest.get(route, 0.0), took * 1000), 1)
    if status not in ("200", "304"):
        stats["errors"] += 1
        key = f"{route} {status}"
        stats["errors_by"][key] = stats["errors_by"].get(key, 0) + 1


async def _stream(host: str, port: int, run: str, stop: float, stats: dict) -> None:
    conn = Connection(host, port)
    try:
        conn.reader, conn.writer = await asyncio.open_connection(host, port)
        conn.writer.write(f"GET /api/runs/{run}/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          "Accept: text/event-stream\r\n\r\n".encode("latin-1"))
        status, _ = await read_head(conn.reader)
        if status != 200:
            return
        stats["streams"] += 1
        while time.monotonic() < stop and (chunk := await read_chunk(conn.reader)):
            stats["stream_messages"] += chunk.startswith(b"event:") + chunk.count(b"\nevent:")
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        return  # the benchmark ends the stream by cancelling it
    finally:
        conn.close()
