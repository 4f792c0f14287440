"""The cockpit server (DESIGN.md §8): FastAPI JSON API, live server-sent events, the static UI.

``create_app(ServerSettings(store=...))`` builds the app; ``rlcockpit serve`` runs it with uvicorn.
This package reads the store and the diagnostics and never imports the trainer (or torch).
See docs/server.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rlcockpit.server.settings import ServerSettings


def create_app(settings: ServerSettings, store: Any = None, **kwargs: Any) -> FastAPI:
    """See :func:`rlcockpit.server.app.create_app` (imported lazily: fastapi is heavy)."""
    from rlcockpit.server.app import create_app as _create_app

    return _create_app(settings, store, **kwargs)


__all__ = ["create_app"]
