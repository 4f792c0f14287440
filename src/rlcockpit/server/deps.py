"""Request dependencies: the role check of every route and the store reader with this request's
time limit.

:func:`require_role` is the one role check: read routes ask for ``viewer`` (router-wide), control
routes name their caller with :data:`Viewer`, :data:`Operator` or :data:`Approver`. Without users
(``app.state.access is None``) everyone may read; otherwise the control plane's
:class:`~rlcockpit.server.auth.Access` decides (``access.require(request, role)`` raises 401 / 403,
audited).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request

from rlcockpit.control import ControlPlane, Principal
from rlcockpit.control.errors import AuthError
from rlcockpit.server.auth import ANONYMOUS
from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.workers import nice_this_thread
from rlcockpit.store.base import DiagnosticsReader, RunReader, SampleReader, StoreReader


@functools.cache
def require_role(role: str) -> Callable[[Request], Principal]:
    """The dependency that admits a caller whose role is at least ``role`` and returns them. One
    function per role, so a route that asks for the same role as its router is checked once."""

    def caller(request: Request) -> Principal:
        nice_this_thread(request.app.state.settings.worker_nice)
        access = request.app.state.access
        if access is not None:
            return access.require(request, role)
        if role != "viewer":  # control routes exist only with the control plane, which sets access
            raise AuthError(f"this server has no control plane; {request.url.path} needs the role {role}",
                            details={"reason": "no_control", "needed": role})
        return ANONYMOUS

    caller.__name__ = f"require_{role}"
    return caller


require_viewer = require_role("viewer")  # every read route (router-wide) and GET /metrics


async def get_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


class TimedReader:
    """The app's store reader, each call bounded by the request's deadline (every role of
    :class:`~rlcockpit.store.base.StoreReader`; a route's annotation names the role it reads).

    The deadline is fixed when the route makes its first read (``query_timeout_s`` from then;
    not from when the request arrived: under load a request waits for a worker thread, and that
    wait is not the store's — counting it made 3.8-9.7 % of 50 dashboards' requests 504); every
    read the route makes shares it, so a route that makes five reads still answers in time. The
    deadline is applied on the thread that runs the read (SQLite's progress handler of that
    thread's connection), so one heavy request never slows the others.
    """

    def __init__(self, reader: StoreReader, limit_s: float, niceness: int = 0) -> None:
        self._reader = reader
        self._limit_s = limit_s
        self._at: float | None = None
        self._niceness = niceness

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._reader, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            nice_this_thread(self._niceness)  # the thread that does the work yields to a trainer
            with self._deadline():
                return fn(*args, **kwargs)

        return call

    def _deadline(self) -> contextlib.AbstractContextManager[None]:
        if self._at is None:
            self._at = time.monotonic() + self._limit_s
        return self._reader.deadline(self._at - time.monotonic(), limit_s=self._limit_s)


async def get_plane(request: Request) -> ControlPlane:
    """The control plane (its routes are included only when ``create_app`` was given one)."""
    return request.app.state.control


async def get_reader(request: Request) -> TimedReader:
    """The app's reader, bounded by this request's deadline (async: it only wraps the reader,
    so it costs no hop to the thread pool)."""
    state = request.app.state
    return TimedReader(state.reader, state.settings.query_timeout_s, state.settings.worker_nice)


Reader = Annotated[StoreReader, Depends(get_reader)]  # every role (e.g. the cost ledger's reads)
Runs = Annotated[RunReader, Depends(get_reader)]
Samples = Annotated[SampleReader, Depends(get_reader)]
Diagnostics = Annotated[DiagnosticsReader, Depends(get_reader)]
Settings = Annotated[ServerSettings, Depends(get_settings)]
Plane = Annotated[ControlPlane, Depends(get_plane)]
Viewer = Annotated[Principal, Depends(require_viewer)]
Operator = Annotated[Principal, Depends(require_role("operator"))]
Approver = Annotated[Principal, Depends(require_role("approver"))]
