"""Request dependencies: the viewer check (the control plane's hook) and the store reader with
this request's time limit.

``require_viewer`` is on every read route. Without users (``app.state.access is None``) everyone
may read; the control helper's ``access`` object decides otherwise (``access.require(request,
"viewer")`` raises 401 / 403).
"""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

from fastapi import Depends, Request

from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.workers import nice_this_thread


def require_viewer(request: Request) -> None:
    nice_this_thread(request.app.state.settings.worker_nice)
    access = request.app.state.access
    if access is not None:
        access.require(request, "viewer")


def get_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


class TimedReader:
    """The app's store reader, each call bounded by the request's deadline.

    The deadline is fixed when the request starts (``query_timeout_s`` from then); every read
    the route makes shares it, so a route that makes five reads still answers in time. The
    deadline is applied on the thread that runs the read (SQLite's progress handler of that
    thread's connection), so one heavy request never slows the others.
    """

    def __init__(self, reader: Any, limit_s: float, niceness: int = 0) -> None:
        self._reader = reader
        self._limit_s = limit_s
        self._at = time.monotonic() + limit_s
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

    def _deadline(self) -> contextlib.AbstractContextManager:
        deadline = getattr(self._reader, "deadline", None)
        if deadline is None:  # a backend without interruptible queries
            return contextlib.nullcontext()
        return deadline(self._at - time.monotonic(), limit_s=self._limit_s)


def get_reader(request: Request) -> TimedReader:
    state = request.app.state
    return TimedReader(state.reader, state.settings.query_timeout_s, state.settings.worker_nice)


Reader = Annotated[TimedReader, Depends(get_reader)]
Settings = Annotated[ServerSettings, Depends(get_settings)]
