"""Sign-in (docs/control.md "Sign-in links and sessions"): ``POST /api/session`` exchanges a
one-time sign-in code (the sign-in link's) or the caller's API token for an expiring session
token; ``DELETE /api/session`` ends the caller's session (sign-out).

A code is good once and for minutes, so the browser history entry of a sign-in link holds
nothing usable after the page has exchanged it. Failed exchanges count against the client
address like failed token checks (auth.Access: 429 with Retry-After past the limit).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Request

from rlcockpit.control import Principal
from rlcockpit.control.errors import TicketError
from rlcockpit.server.deps import Plane, Viewer
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import control_router

router = control_router("/api", "session")
CODE = {"type": "string", "minLength": 1, "maxLength": 400, "pattern": "^rlo_",
        "description": "the one-time sign-in code (the end of a sign-in link, rlo_…)"}
SESSION_BODY = {"requestBody": {"required": False, "content": {"application/json": {"schema": {
    "anyOf": [{"type": "object", "required": ["code"], "properties": {"code": CODE}}, {"type": "null"}],
    "description": "{\"code\": \"rlo_…\"}; without a body, the API token of the Authorization header "
                   "is exchanged"}}}}}


def _session(token: str, who: Principal, status: int = 201) -> SafeJSONResponse:
    return json_response({"token": token, "expires_at": who.expires_at, "name": who.name, "role": who.role},
                         status_code=status)


@router.post("/session", summary="Start a session: a one-time sign-in code (or your API token) for an "
                                 "expiring session token", status_code=201, openapi_extra=SESSION_BODY)
def start(request: Request, plane: Plane,
          payload: Annotated[dict[str, Any] | None, Body()] = None) -> SafeJSONResponse:
    access = request.app.state.access
    ttl_s = request.app.state.settings.session_ttl_s
    if payload and "code" in payload:
        code = payload["code"]
        if not isinstance(code, str):
            raise TicketError("code must be a string (rlo_…, the end of a sign-in link)",
                              details={"parameter": "code"})
        token, who = access.check(request, lambda: plane.users.redeem(code.strip(), ttl_s=ttl_s))
        return _session(token, who)
    caller = access.require(request, "viewer")
    if caller.user_id is None:
        raise TicketError("send {\"code\": \"rlo_…\"} (a sign-in link's code) or sign in with your API token "
                          "(Authorization: Bearer rlc_…)", details={"missing": ["code"]})
    token, who = access.check(request, lambda: plane.users.start_session(caller, ttl_s=ttl_s))
    return _session(token, who)


@router.delete("/session", summary="Sign out: end the caller's session token")
def end(who: Viewer, plane: Plane) -> SafeJSONResponse:
    return json_response({"ended": plane.users.end_session(who)})
