"""How the web UI is served fast without a build step (issue 29, docs/ui.md "Loading").

The UI is plain ES modules (``static/js``), so a browser that only follows imports finds them in
chained waves: index.html -> app.js -> its imports -> theirs... This module flattens that and
keeps the bytes down:

- ``GET /`` serves index.html with a ``<link rel="modulepreload">`` for **every** module app.js
  can load (its static imports, theirs, and the extension modules of ``js/extensions.js``), put in
  place of the ``<!-- modulepreload -->`` marker. The list is read from the files themselves (every
  relative ``"./x.js"`` string literal of a module, resolved against it), on each request of ``/``
  when a file changed, so it never goes stale and developers have nothing to regenerate.
- ``?v=`` on the stylesheet and the vendored chart library (``{{v:css/app.css}}`` in index.html)
  is the file's size and modification time; a request that carries it may be cached for a year
  (``immutable``). Everything else under ``/static`` is ``no-cache``: the browser revalidates it
  with its ETag (a 304 costs no body), so an edited module is seen on the next load.
- Text assets (JS, CSS, HTML, JSON, SVG) of at least :data:`GZIP_MIN_BYTES` are sent gzip-encoded
  to clients that accept it; each file is compressed once per version and kept in memory (the
  vendored chart library: 1.0 MB -> ~0.34 MB).
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.responses import FileResponse
from starlette.types import Scope

from rlcockpit.server.responses import json_response

GZIP_MIN_BYTES = 1024  # smaller assets gain less than the header costs
GZIP_LEVEL = 6  # once per file version, so a good ratio is worth the CPU
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
ONE_YEAR = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
PRELOAD_MARKER = "<!-- modulepreload -->"
ENTRY = "js/app.js"
_LITERAL = re.compile(r"""["'](\.\.?/[\w./-]+\.js)["']""")
_VERSIONED = re.compile(r"\{\{v:([\w./-]+)\}\}")


def module_graph(static_dir: Path, entry: str = ENTRY) -> list[str]:
    """Every module reachable from ``entry``, as paths relative to ``static_dir`` (entry first,
    then in the order found). A module's references are its relative ``"./x.js"`` literals: the
    ``import ... from``, bare ``import``, ``import("./x.js")`` and the ``EXTENSIONS`` list."""
    root = static_dir.resolve()
    seen: dict[str, None] = {}
    todo = [entry]
    while todo:
        rel = todo.pop(0)
        if rel in seen:
            continue
        path = root / rel
        if not path.is_file():
            continue
        seen[rel] = None
        for ref in _LITERAL.findall(path.read_text(encoding="utf-8")):
            target = (path.parent / ref).resolve()
            if target.is_relative_to(root) and target.is_file():
                todo.append(target.relative_to(root).as_posix())
    return list(seen)


def version(path: Path) -> str:
    """A short tag that changes whenever the file does (its size and modification time)."""
    st = path.stat()
    return hashlib.sha1(f"{st.st_size}-{st.st_mtime_ns}".encode()).hexdigest()[:10]


class IndexPage:
    """index.html with the module preloads and asset versions filled in, rebuilt when a file
    under ``static_dir`` changes (one stat per JS file and per versioned asset a request)."""

    def __init__(self, static_dir: Path) -> None:
        self.static_dir = static_dir
        self.index = static_dir / "index.html"
        self._key: tuple[Any, ...] | None = None
        self._html = ""
        self._lock = threading.Lock()

    def _state(self) -> tuple[Any, ...]:
        files = [self.index, *sorted((self.static_dir / "js").rglob("*.js"))]
        return tuple((str(p), st.st_mtime_ns, st.st_size) for p in files for st in (p.stat(),))

    def html(self) -> str:
        key = self._state()
        with self._lock:
            if key != self._key:
                self._html, self._key = self.render(), key
            return self._html

    def render(self) -> str:
        text = self.index.read_text(encoding="utf-8")
        links = "\n  ".join(f'<link rel="modulepreload" href="/static/{m}">'
                            for m in module_graph(self.static_dir)[1:])  # [0]: app.js itself
        text = text.replace(PRELOAD_MARKER, links)
        return _VERSIONED.sub(self._versioned, text)

    def _versioned(self, match: re.Match[str]) -> str:
        path = self.static_dir / match[1]
        return f"/static/{match[1]}?v={version(path)}" if path.is_file() else f"/static/{match[1]}"


class StaticAssets(StaticFiles):
    """StaticFiles with the cache headers and the gzip encoding described in the module doc."""

    def __init__(self, *, directory: Path) -> None:
        super().__init__(directory=directory)
        self._gzipped: dict[tuple[str, str], bytes] = {}  # (path, etag) -> gzip body
        self._lock = threading.Lock()

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if isinstance(response, FileResponse) and response.status_code == 200:
            response = await self._maybe_gzip(response, scope)
        if response.status_code in (200, 304):
            versioned = b"v=" in scope.get("query_string", b"")
            response.headers["Cache-Control"] = ONE_YEAR if versioned else REVALIDATE
        return response

    async def _maybe_gzip(self, response: FileResponse, scope: Scope) -> Response:
        media = (response.media_type or "").lower()
        size = int(response.headers.get("content-length", "0"))
        if size < GZIP_MIN_BYTES or not media.startswith(COMPRESSIBLE):
            return response
        response.headers["Vary"] = "Accept-Encoding"
        request = Headers(scope=scope)
        if "gzip" not in request.get("accept-encoding", ""):
            return response
        etag = response.headers["etag"].rstrip('"') + '-gz"'
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "etag")}
        headers.update({"ETag": etag, "Content-Encoding": "gzip"})
        if etag in [t.strip().removeprefix("W/") for t in request.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers={k: v for k, v in headers.items()
                                                      if k.lower() != "content-type"})
        path = str(response.path)
        with self._lock:
            body = self._gzipped.get((path, etag))
        if body is None:  # compressed once per version of the file, off the event loop
            body = await anyio.to_thread.run_sync(self._gzip, path, etag)
        return Response(body, headers=headers, media_type=response.media_type)

    def _gzip(self, path: str, etag: str) -> bytes:
        body = gzip.compress(Path(path).read_bytes(), GZIP_LEVEL, mtime=0)
        with self._lock:
            for old in [k for k in self._gzipped if k[0] == path]:
                del self._gzipped[old]  # an older version of the file
            self._gzipped[(path, etag)] = body
        return body


def mount_ui(app: FastAPI, static_dir: Path) -> None:
    """``/`` serves index.html (see :class:`IndexPage`), ``/static/...`` the assets (when the UI
    is present)."""
    page = IndexPage(static_dir)

    @app.get("/", include_in_schema=False)
    def ui_index() -> Any:
        if not page.index.is_file():
            return json_response({"status": "ok", "message": "the web UI is not installed "
                                  f"({page.index} is missing); the API is under /api, see "
                                  "/openapi.json"})
        return HTMLResponse(page.html(), headers={"Cache-Control": REVALIDATE})

    if static_dir.is_dir():
        app.mount("/static", StaticAssets(directory=static_dir), name="static")


__all__ = ["GZIP_MIN_BYTES", "IndexPage", "StaticAssets", "module_graph", "mount_ui", "version"]
