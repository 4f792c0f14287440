"""A run's live parameters (docs/control.md): the knobs a ticket may change, as the trainer
published them (value, type, range) and their history. Not to be confused with the live stream
of server-sent events (``routes/stream.py``) or with query parameters (``server/query.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from rlcockpit.records import to_dict
from rlcockpit.server.deps import Plane, Viewer
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import control_router

router = control_router("/api", "control")


@router.get("/runs/{run}/live", summary="Current live parameters (with type and range) and their history")
def live_params(run: str, who: Viewer, plane: Plane,
                limit: Annotated[int, Query(ge=1, le=10000)] = 200) -> SafeJSONResponse:
    plane.runs.get_run(run)
    history = plane.store.read_live_params(run, limit=limit)
    current = to_dict(history[-1]) if history else None
    return json_response({"current": current, "history": [to_dict(h) for h in history]})
