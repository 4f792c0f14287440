"""The review queue (docs/reward_model.md): samples the rule fallback flagged ``needs_review``,
labelled good / bad by a person (operator), the labels kept in the audit log and exported as
reward-model training rows. One call into :mod:`rlcockpit.control.review` per route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Body, Depends, Path, Query

from rlcockpit.control.errors import TicketError
from rlcockpit.control.review import LABELS, ReviewQueue, label_dict
from rlcockpit.server.deps import Operator, Plane, Viewer
from rlcockpit.server.query import I64_MAX, I64_MIN
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import control_router
from rlcockpit.server.serialize import sample_dict

router = control_router("/api/runs/{run}/review", "review")


def _queue(plane: Plane) -> ReviewQueue:
    return ReviewQueue(plane.store, plane.runs)


Queue = Annotated[ReviewQueue, Depends(_queue)]
Int = Annotated[int, Path(ge=I64_MIN, le=I64_MAX)]
LABEL_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["label"], "properties": {
        "label": {"type": "string", "enum": list(LABELS)},
        "note": {"type": "string", "maxLength": 2000}}}}}}}


@router.get("", summary="Samples flagged needs_review, newest first, with their latest label")
def queue(run: str, who: Viewer, q: Queue,
          status: Annotated[Literal["all", "open", "labelled"], Query()] = "all",
          limit: Annotated[int, Query(ge=1, le=1000)] = 50,
          offset: Annotated[int, Query(ge=0, le=I64_MAX)] = 0) -> SafeJSONResponse:
    q.runs.get_run(run)  # 404 for an unknown run
    items, total = q.queue(run, status=status, limit=limit, offset=offset)
    return json_response({"items": [{**sample_dict(s, token_arrays=False), "review": label_dict(lab)}
                                    for s, lab in items], "total": total, "offset": offset,
                          "limit": limit})


@router.post("/{step}/{sample_id}", summary="Label a needs_review sample good or bad (operator)",
             status_code=201, openapi_extra=LABEL_BODY)
def label(run: str, step: Int, sample_id: Int, who: Operator, q: Queue,
          payload: Annotated[dict[str, Any] | None, Body()] = None) -> SafeJSONResponse:
    data = dict(payload or {})
    if "label" not in data:
        raise TicketError("the request body needs label (good or bad)", details={"missing": ["label"]})
    lab = q.label(who, run, step, sample_id, str(data["label"]), str(data.get("note") or ""))
    return json_response({"step": step, "sample_id": sample_id, "review": label_dict(lab)},
                         status_code=201)


@router.get("/export", summary="The labels as reward-model training rows (prompt, response, +1/-1)")
def export(run: str, who: Viewer, q: Queue) -> SafeJSONResponse:
    q.runs.get_run(run)
    return json_response({"items": q.export(run)})
