"""A project's saved dashboard layout (docs/ui.md, "All metrics and panels"): the panels users
added (any metrics, any runs) and the runs' tags and groups (the runs table). Any reader may save it — a layout changes what the
project's dashboards show, never a run — and the saver's name is kept with it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Request

from rlcockpit.errors import StoreError
from rlcockpit.server.errors import ParameterError
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router
from rlcockpit.store.layouts import Layout, encode

router = read_router("/api", "layouts")

MAX_PANELS = 200
_NAMES = {"type": "array", "items": {"type": "string"}}
PANEL = {"type": "object", "properties": {"id": {"type": "string"}, "title": {"type": "string"},
                                          "metrics": _NAMES, "runs": _NAMES, "log": {"type": "boolean"}}}
RUN_META = {"type": "object", "properties": {"tags": _NAMES, "group": {"type": "string"}}}
LAYOUT_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "properties": {"panels": {"type": "array", "maxItems": MAX_PANELS, "items": PANEL},
                                     "runs": {"type": "object", "additionalProperties": RUN_META,
                                              "description": "tags and group per run id (the runs table)"}},
    "description": "the layout document (at most 64 KiB of JSON)"}}}}}


def _public(layout: Layout | None, project: str) -> dict[str, Any]:
    if layout is None:
        return {"project": project, "layout": None, "updated_at": None, "updated_by": None}
    return {"project": project, "layout": layout.layout, "updated_at": layout.updated_at,
            "updated_by": layout.updated_by}


@router.get("/projects/{project}/layout", summary="The project's saved dashboard layout "
                                                  "(null when none was saved)")
def get_layout(project: str, request: Request) -> SafeJSONResponse:
    return json_response(_public(request.app.state.store.layouts().get(project), project))


@router.put("/projects/{project}/layout", summary="Save the project's dashboard layout "
                                                  "({\"panels\": [...], \"runs\": {...}})",
            openapi_extra=LAYOUT_BODY)
def put_layout(project: str, request: Request,
               payload: Annotated[dict[str, Any], Body(description="the layout document")]
               ) -> SafeJSONResponse:
    check_layout(payload)
    who = getattr(request.state, "principal", None)
    saved = request.app.state.store.layouts().put(project, payload, by=getattr(who, "name", "") or "")
    return json_response(_public(saved, project))


def check_layout(payload: dict[str, Any]) -> None:
    """The document as LAYOUT_BODY declares it (``panels``: objects with string ``id`` / ``title``,
    lists of strings ``metrics`` / ``runs``, boolean ``log``; ``runs``: per run id ``tags``
    (strings) and ``group``), JSON without NaN and within the store's size limit."""
    panels = payload.get("panels", [])
    if not isinstance(panels, list) or len(panels) > MAX_PANELS:
        raise ParameterError("panels", type(panels).__name__, f"give a list of at most {MAX_PANELS} panels")
    for panel in panels:
        if not (isinstance(panel, dict) and _fits(panel, strings=("id", "title"), lists=("metrics", "runs"),
                                                   flags=("log",))):
            raise ParameterError("panels", str(panel)[:80], "each panel is an object with a list of metrics, "
                                 'e.g. {"title": "KL", "metrics": ["kl/mean"], "runs": [], "log": false}')
    runs = payload.get("runs", {})
    if not isinstance(runs, dict) or not all(isinstance(m, dict) and _fits(m, strings=("group",), lists=("tags",))
                                             for m in runs.values()):
        raise ParameterError("runs", str(runs)[:80], 'give {run_id: {"tags": [...], "group": "..."}}')
    try:
        encode(payload)
    except (StoreError, ValueError) as exc:
        raise ParameterError("layout", "…", str(exc)) from exc


def _fits(obj: dict[str, Any], *, strings: tuple[str, ...] = (), lists: tuple[str, ...] = (),
          flags: tuple[str, ...] = ()) -> bool:
    """Each present key has its declared type (lists: of strings)."""
    return (all(isinstance(obj[k], str) for k in strings if k in obj)
            and all(isinstance(obj[k], list) and all(isinstance(x, str) for x in obj[k]) for k in lists if k in obj)
            and all(isinstance(obj[k], bool) for k in flags if k in obj))
