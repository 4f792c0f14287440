"""A project's saved dashboard layout (docs/ui.md, "All metrics and panels"): the panels users
added and arranged (kind, metrics, runs, x axis, y range, width, height, order), the order of the
metric sections, and the runs' tags and groups (the runs table). Any reader may save it — a layout
changes what the project's dashboards show, never a run — and the saver's name is kept with it."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import Body, Request

from rlcockpit.errors import StoreError
from rlcockpit.server.errors import ParameterError
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router
from rlcockpit.store.layouts import Layout, encode

router = read_router("/api", "layouts")

MAX_PANELS = 200
KINDS = ("line", "scatter", "hist")
VIEWS = ("time", "step")
WIDTHS = (1, 2, 3, 4)  # columns of the dashboard's four-column panel grid
HEIGHT_PX = (120, 1200)
_NAMES = {"type": "array", "items": {"type": "string"}}
_NUMBER = {"type": ["number", "null"]}
PANEL = {"type": "object", "properties": {
    "id": {"type": "string"}, "title": {"type": "string"}, "metrics": _NAMES, "runs": _NAMES, "log": {"type": "boolean"},
    "kind": {"type": "string", "enum": list(KINDS), "description": "lines (default), metric-vs-metric scatter "
             "(metrics[0] against x), or a histogram (metrics[0] names it)"},
    "x": {"type": "string", "description": "'' (the dashboard's axis), step, wall, rel, or a metric name"},
    "y_min": _NUMBER, "y_max": _NUMBER, "y_robust": {"type": "boolean", "description": "y range = 1st-99th percentile"},
    "width": {"type": "integer", "enum": list(WIDTHS)},
    "height": {"type": "integer", "minimum": HEIGHT_PX[0], "maximum": HEIGHT_PX[1], "description": "plot height in px"},
    "view": {"type": "string", "enum": list(VIEWS), "description": "a histogram over time or at one step"}}}
RUN_META = {"type": "object", "properties": {"tags": _NAMES, "group": {"type": "string"}}}
LAYOUT_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "properties": {"panels": {"type": "array", "maxItems": MAX_PANELS, "items": PANEL},
                                     "sections": {**_NAMES, "description": "the metric sections' order"},
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
    """The document as LAYOUT_BODY declares it (``panels``: objects with string ``id`` / ``title`` /
    ``x``, lists of strings ``metrics`` / ``runs``, booleans ``log`` / ``y_robust``, numbers or null
    ``y_min`` / ``y_max``, ``kind`` / ``view`` / ``width`` of their choices, ``height`` in range;
    ``sections``: strings; ``runs``: per run id ``tags`` (strings) and ``group``), JSON without NaN
    and within the store's size limit."""
    panels = payload.get("panels", [])
    if not isinstance(panels, list) or len(panels) > MAX_PANELS:
        raise ParameterError("panels", type(panels).__name__, f"give a list of at most {MAX_PANELS} panels")
    for panel in panels:
        if not (isinstance(panel, dict) and _fits(panel, strings=("id", "title", "x"), lists=("metrics", "runs"),
                                                   flags=("log", "y_robust"))):
            raise ParameterError("panels", str(panel)[:80], "each panel is an object with a list of metrics, "
                                 'e.g. {"title": "KL", "metrics": ["kl/mean"], "runs": [], "log": false}')
        _check_arrangement(panel)
    sections = payload.get("sections", [])
    if not (isinstance(sections, list) and all(isinstance(s, str) for s in sections)):
        raise ParameterError("sections", str(sections)[:80], 'give the sections in order, e.g. ["kl", "eval"]')
    runs = payload.get("runs", {})
    if not isinstance(runs, dict) or not all(isinstance(m, dict) and _fits(m, strings=("group",), lists=("tags",))
                                             for m in runs.values()):
        raise ParameterError("runs", str(runs)[:80], 'give {run_id: {"tags": [...], "group": "..."}}')
    try:
        encode(payload)
    except (StoreError, ValueError) as exc:
        raise ParameterError("layout", "…", str(exc)) from exc


def _check_arrangement(panel: dict[str, Any]) -> None:
    """A panel's kind, view, width, height and y range: each of its choices, the range ordered."""
    choices = {"kind": KINDS, "view": VIEWS, "width": WIDTHS}
    for key, allowed in choices.items():
        if key in panel and (isinstance(panel[key], bool) or panel[key] not in allowed):
            raise ParameterError(f"panels[].{key}", str(panel[key])[:40], f"use one of {', '.join(map(str, allowed))}")
    height = panel.get("height", HEIGHT_PX[0])
    if isinstance(height, bool) or not isinstance(height, int) or not HEIGHT_PX[0] <= height <= HEIGHT_PX[1]:
        raise ParameterError("panels[].height", str(height)[:40], f"give whole pixels from {HEIGHT_PX[0]} to {HEIGHT_PX[1]}")
    limits = [panel.get(k) for k in ("y_min", "y_max")]
    for key, v in zip(("y_min", "y_max"), limits, strict=True):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)):
            raise ParameterError(f"panels[].{key}", str(v)[:40], "give a finite number, or null for the chart's own range")
    if None not in limits and limits[0] >= limits[1]:
        raise ParameterError("panels[].y_min", f"{limits[0]} >= {limits[1]}", "y_min must be below y_max")


def _fits(obj: dict[str, Any], *, strings: tuple[str, ...] = (), lists: tuple[str, ...] = (),
          flags: tuple[str, ...] = ()) -> bool:
    """Each present key has its declared type (lists: of strings)."""
    return (all(isinstance(obj[k], str) for k in strings if k in obj)
            and all(isinstance(obj[k], list) and all(isinstance(x, str) for x in obj[k]) for k in lists if k in obj)
            and all(isinstance(obj[k], bool) for k in flags if k in obj))
