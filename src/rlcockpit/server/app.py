"""``create_app``: the FastAPI application (DESIGN.md §8, the contract in docs/server.md).

Routes are plain ``def`` (SQLite blocks; FastAPI runs them on its thread pool), one module per
resource group in ``routes/``. The control plane (issue 6) plugs in through ``access`` (the role
check of every route, see deps.py) and ``control`` (its routers are included when given).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import Response
from starlette.middleware.gzip import GZipMiddleware

from rlcockpit._version import __version__
from rlcockpit.errors import ConfigError
from rlcockpit.server import handlers, workers
from rlcockpit.server.auth import Access, throttle_for
from rlcockpit.server.cache import ReadCache
from rlcockpit.server.deps import Reader, require_viewer
from rlcockpit.server.guard import Guard
from rlcockpit.server.routes import CONTROL_ROUTERS, READ_ROUTERS
from rlcockpit.server.routes.stream import SharedChecks
from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.tail import SharedReads
from rlcockpit.server.ui_assets import mount_ui

BUNDLED_STATIC = Path(__file__).parent / "static"
JSON_GZIP_MIN_BYTES = 1024
JSON_GZIP_LEVEL = 4  # per response: fast (~100 MB/s), a 3-5x smaller series
MetricsHook = Callable[[Any], tuple[bytes, str]]
__all__ = ["CONTROL_ROUTERS", "READ_ROUTERS", "create_app"]


def create_app(settings: ServerSettings, store: Any = None, *, access: Any = None,
               control: Any = None, metrics: MetricsHook | None = None) -> FastAPI:
    """Build the app. ``store`` is an opened store (``open_store``); when None it is opened from
    ``settings.store`` (fails fast if the file is missing). ``access`` checks the role of every
    route (None: no users, everyone reads; with ``control`` it defaults to that plane's checks);
    ``control`` is the control plane, whose routers are included when given. ``metrics`` serves
    ``GET /metrics`` (the cli passes the Prometheus exporter of rlcockpit.integrations:
    ``metrics(reader) -> (body, content type)``)."""
    if not settings.is_loopback and access is None and control is None:
        raise ConfigError(f"host {settings.host} would expose the cockpit without access checks; pass "
                          "access= and control= (rlcockpit.server.auth.control_for) or bind 127.0.0.1",
                          details={"key": "host", "value": settings.host})
    if store is None:
        from rlcockpit.store import open_store

        store = open_store(settings.store, create=False)
    reader = store.reader()
    if control is not None and access is None:
        access = Access(control, network_bound=not settings.is_loopback, throttle=throttle_for(settings))

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        workers.limit_threads(settings.worker_threads)
        workers.nice_this_thread(settings.worker_nice)  # the event loop's thread
        yield
        if control is not None:
            control.refusals.flush(force=True)  # counted refusals are not lost at shutdown
        if read_cache is not None:
            read_cache.close()
        reader.close()

    # no /docs or /redoc: their pages load scripts from a CDN, and the cockpit works offline
    app = FastAPI(title="rlcockpit", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, summary="Live telemetry, diagnostics and audited control of RL "
                                          "post-training runs (PPO, GRPO).")
    app.state.settings = settings
    app.state.store = store
    app.state.reader = reader
    app.state.access = access
    app.state.control = control
    app.state.streams = workers.StreamSlots(settings.max_streams)
    app.state.stream_reads = SharedReads(reader, ttl_s=settings.sse_poll_s)
    app.state.stream_checks = SharedChecks(settings.stream_auth_check_s)
    read_cache = (ReadCache(settings.read_cache_s, settings.worker_nice, reader)
                  if settings.read_cache_s > 0 else None)
    app.state.read_cache = read_cache
    handlers.install(app)
    for router in READ_ROUTERS + (CONTROL_ROUTERS if control is not None else ()):
        app.include_router(router)
    if metrics is not None:
        mount_metrics(app, metrics)
    mount_ui(app, Path(settings.static_dir) if settings.static_dir else BUNDLED_STATIC)
    document_caps(app, settings)
    # JSON of 1 KiB and more is gzip-encoded for clients that accept it (the live stream,
    # text/event-stream, never: GZipMiddleware passes it through unbuffered; static assets come
    # precompressed from ui_assets.StaticAssets)
    app.add_middleware(GZipMiddleware, minimum_size=JSON_GZIP_MIN_BYTES, compresslevel=JSON_GZIP_LEVEL)
    app.add_middleware(Guard, host_names=settings.host_names(), max_body_bytes=settings.max_body_bytes,
                       paths=lambda: app.openapi()["paths"])
    return app


def document_caps(app: FastAPI, settings: ServerSettings) -> None:
    """The OpenAPI schema states this server's limits (``max_points`` of series / compare and of
    histograms), so a client (or Schemathesis) knows the largest value it may ask for."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for path, ops in schema["paths"].items():
                cap = settings.max_histogram_points if path.endswith("/histograms") else settings.max_points
                for op in ops.values():
                    for param in op.get("parameters", []):
                        if param["name"] == "max_points":
                            _set_maximum(param["schema"], cap)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def _set_maximum(schema: dict[str, Any], cap: int) -> None:
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "integer":
            option["maximum"] = cap


def mount_metrics(app: FastAPI, metrics: MetricsHook) -> None:
    """``GET /metrics``: the Prometheus exposition (docs/ops.md), behind the viewer check like
    every read route, its store reads bounded by the request's deadline."""

    @app.get("/metrics", include_in_schema=False, dependencies=[Depends(require_viewer)])
    def prometheus_metrics(reader: Reader) -> Response:
        body, content_type = metrics(reader)
        return Response(body, media_type=content_type)
