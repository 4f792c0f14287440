"""The audit log (append-only, hash-chained; docs/control.md) and who the caller is in it
(``/api/me``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from rlcockpit.records import to_dict
from rlcockpit.server.deps import Plane, Viewer
from rlcockpit.server.query import I64_MAX
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import control_router

router = control_router("/api", "control")


@router.get("/audit", summary="The audit log (append-only, hash-chained), oldest first")
def audit(who: Viewer, plane: Plane, run: str | None = None,
          after: Annotated[int, Query(ge=0, le=I64_MAX)] = 0, limit: Annotated[int, Query(ge=1, le=10000)] = 500,
          check: Annotated[bool, Query(description="also verify the chain (incrementally: the entries "
                                                   "since the last check; all of it every 5 minutes)")
                           ] = False) -> SafeJSONResponse:
    plane.refusals.flush()  # the counts of finished refusal windows, before reading
    items = plane.store.read_audit(run_id=run, after_seq=after, limit=limit)
    body: dict[str, Any] = {"items": [to_dict(e) for e in items]}
    if check:
        result = plane.chain.check()
        body["verify"] = {"ok": result.ok, "entries": result.entries, "broken_seq": result.broken_seq,
                          "message": result.message()}
    return json_response(body)


@router.get("/me", summary="Who the token belongs to, and whether the store has users")
def me(who: Viewer, plane: Plane) -> SafeJSONResponse:
    return json_response({"name": who.name, "role": who.role, "users_exist": plane.users.any_active()})
