"""The request guard: one ASGI middleware in front of every route (docs/server.md, "Hardening").

In order, before any route, dependency or token check runs:

1. **Host allow-list** (DNS rebinding): a page on another site that rebinds its name to
   127.0.0.1 sends its own name in ``Host``; only the loopback names, the bound address and
   ``ServerSettings.allowed_hosts`` are answered (400 ``host_not_allowed`` otherwise).
2. **OPTIONS** is answered 204 with the ``Allow`` methods of the path (no CORS: the cockpit is
   same-origin, so no cross-origin preflight ever succeeds).
3. **Body size**: a declared ``Content-Length`` over ``max_body_bytes`` is refused with 413 at
   once, and a streamed body is cut off (413) as soon as it passes the limit, so an
   unauthenticated client cannot make the server read or hold a large body.
4. **Security headers** on every response: no framing (``X-Frame-Options``, CSP
   ``frame-ancestors``), a same-origin content policy, ``nosniff``, no referrer (the live
   stream's URL may carry a token).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from rlcockpit.server.responses import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# style-src allows inline styles: the charting library styles its tooltips inline
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = ((b"x-frame-options", b"DENY"), (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                    (b"cross-origin-opener-policy", b"same-origin"))


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body passes the limit (rendered as 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than the server's limit of {limit} "
                              "bytes (max_body_bytes)")


class Guard:
    def __init__(self, app: Any, *, host_names: frozenset[str] | None, max_body_bytes: int,
                 paths: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self.host_names = host_names
        self.max_body_bytes = max_body_bytes
        self.paths = paths  # the OpenAPI "paths" object: which methods each path template has
        self._allow: list[tuple[Any, set[str]]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        host = _host(scope)
        if self.host_names is not None and host not in self.host_names:
            await _refuse(send, 400, "host_not_allowed", f"Host {host!r} is not one this server "
                          "answers (a DNS-rebinding guard); open it by its loopback address, or "
                          "add the name with --allowed-host", {"host": host[:200]})
            return
        if scope["method"] == "OPTIONS":
            await self._options(scope, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _refuse(send, 413, "too_large", BodyTooLarge(self.max_body_bytes).detail,
                          {"limit": self.max_body_bytes, "content_length": declared})
            return
        await self.app(scope, _limited(receive, self.max_body_bytes), send)

    async def _options(self, scope: Scope, send: Send) -> None:
        path = scope["path"]
        if self._allow is None:
            self._allow = [(compile_path(p)[0], {m.upper() for m in ops})
                           for p, ops in self.paths().items()]
        methods = {m for regex, ms in self._allow if regex.match(path) for m in ms}
        if path == "/" or path.startswith("/static/"):  # the UI (not in the OpenAPI schema)
            methods |= {"GET", "HEAD"}
        if not methods:
            await _refuse(send, 404, "not_found", f"no such route {scope['path'][:200]}",
                          {"path": scope["path"][:200]})
            return
        allow = ", ".join(sorted(methods | {"OPTIONS"}))
        await send({"type": "http.response.start", "status": 204,
                    "headers": [(b"allow", allow.encode())]})
        await send({"type": "http.response.body", "body": b""})


def _with_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {k.lower() for k, _ in message.get("headers", [])}
            message["headers"] = [*message.get("headers", []),
                                  *(h for h in SECURITY_HEADERS if h[0] not in names)]
        await send(message)

    return wrapped


def _limited(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return wrapped


def _host(scope: Scope) -> str:
    """The Host header's name, lower case, without the port ('' when missing)."""
    raw = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").strip().lower()
    if raw.startswith("["):  # [::1]:8765
        return raw[1:raw.find("]")] if "]" in raw else raw
    return raw.rsplit(":", 1)[0] if raw.count(":") == 1 else raw


def _content_length(scope: Scope) -> int | None:
    value = dict(scope.get("headers") or []).get(b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def _refuse(send: Send, status: int, code: str, message: str, details: dict) -> None:
    body = json.dumps(error_body(code, message, details), ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
