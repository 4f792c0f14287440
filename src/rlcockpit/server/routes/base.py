"""What every route module starts from: its router, one of two kinds.

- :func:`read_router`: every route checks the viewer role (router-wide), answers JSON without
  NaN literals and documents the read errors (``READ_ERRORS``); its GET answers about one run
  are shared between callers while the run is unchanged (server/cache.py).
- :func:`control_router`: each route names the role its caller needs (``Viewer``, ``Operator``,
  ``Approver`` of deps.py) and the control errors (``CONTROL_ERRORS``, with 409) are documented.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from rlcockpit.server.cache import SharedReadRoute
from rlcockpit.server.deps import require_viewer
from rlcockpit.server.responses import (
    CONTROL_ERRORS,
    READ_ERRORS,
    SafeJSONResponse,
    error_responses,
)


def read_router(prefix: str, tag: str, *more_errors: int) -> APIRouter:
    return APIRouter(prefix=prefix, tags=[tag], dependencies=[Depends(require_viewer)],
                     default_response_class=SafeJSONResponse, route_class=SharedReadRoute,
                     responses=error_responses(*READ_ERRORS, *more_errors))


def control_router(prefix: str, tag: str) -> APIRouter:
    return APIRouter(prefix=prefix, tags=[tag], default_response_class=SafeJSONResponse,
                     responses=error_responses(*CONTROL_ERRORS))
