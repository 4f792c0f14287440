"""Tickets and commands (docs/control.md): request a live-parameter change, list and read
tickets, approve / reject / cancel one, and send a command (pause, resume, stop, checkpoint,
rollback).

Thin routes: the role check (deps.py), then one call into :mod:`rlcockpit.control`. Errors use
the canonical shape of every other route; refusals are audited by the control plane before the
error is answered.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Path, Query

from rlcockpit.control import COMMANDS
from rlcockpit.control.errors import TicketError
from rlcockpit.control.tickets import MAX_TEXT
from rlcockpit.records import TICKET_STATUSES, to_dict
from rlcockpit.server.deps import Approver, Operator, Plane, Viewer
from rlcockpit.server.query import I64_MAX, I64_MIN, choices, csv_of
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import control_router

router = control_router("/api", "control")

JsonBody = Annotated[dict[str, Any] | None, Body()]
TicketId = Annotated[int, Path(ge=I64_MIN, le=I64_MAX)]


def _body(payload: dict[str, Any] | None, *required: str) -> dict[str, Any]:
    data = dict(payload or {})
    missing = [k for k in required if k not in data]
    if missing:
        raise TicketError(f"the request body needs {', '.join(missing)} (JSON object)",
                          details={"missing": missing})
    return data


def _body_schema(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    """The documented request body (the route reads a plain dict and checks it itself, so a
    refusal is audited like every other refused attempt)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": required, "properties": properties}}}}}


TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT, "pattern": r"\S",
        "description": f"at most {MAX_TEXT} characters (a longer one is refused with 422, never cut)"}
COMMENT = {"type": "string", "maxLength": MAX_TEXT}
TICKET_BODY = _body_schema(["param", "value", "reason"], param={"type": "string", "minLength": 1,
                           "description": "live parameter: kl_coef, kl.coef, trainer.kl.coef or kl/coef"},
                           value={"type": "number", "description": "within the run's published range"},
                           reason=TEXT)
REJECT_BODY = _body_schema(["comment"], comment={**TEXT, "description": "why it is rejected (required)"})
# approve and cancel: the body may be absent or null; a comment is optional
OPTIONAL_COMMENT = {"requestBody": {"required": False, "content": {"application/json": {"schema": {
    "anyOf": [{"type": "object", "properties": {"comment": COMMENT}}, {"type": "null"}]}}}}}
COMMAND_BODY = _body_schema(["command", "reason"], command={"type": "string", "enum": list(COMMANDS)},
                            reason=TEXT, args={"type": "object", "description": "rollback: {step} or "
                                               "{checkpoint}"})


def _ticket(ticket: Any, status: int = 200) -> SafeJSONResponse:
    return json_response({"ticket": to_dict(ticket)}, status_code=status)


@router.post("/runs/{run}/tickets", summary="Request a live-parameter change (operator)",
             status_code=201, openapi_extra=TICKET_BODY)
def request_ticket(run: str, who: Operator, plane: Plane, payload: JsonBody = None) -> SafeJSONResponse:
    data = _body(payload, "param", "value")
    ticket = plane.tickets.request(who, run, data["param"], data["value"], data.get("reason", ""))
    return _ticket(ticket, 201)


@router.get("/runs/{run}/tickets", summary="A run's tickets, oldest first")
def list_tickets(run: str, who: Viewer, plane: Plane,
                 status: Annotated[str | None, Query(pattern=csv_of(TICKET_STATUSES),
                                                     description="comma-separated statuses")] = None,
                 limit: Annotated[int, Query(ge=1, le=10000)] = 500) -> SafeJSONResponse:
    statuses = choices("status", status, TICKET_STATUSES, "ticket status")
    plane.runs.get_run(run)  # 404 for an unknown run
    items = plane.store.list_tickets(run_id=run, statuses=statuses or None, limit=limit)
    return json_response({"items": [to_dict(t) for t in items]})


@router.get("/tickets/{ticket_id}", summary="One ticket with its effect measurement")
def get_ticket(ticket_id: TicketId, who: Viewer, plane: Plane) -> SafeJSONResponse:
    return _ticket(plane.store.get_ticket(ticket_id))


@router.post("/tickets/{ticket_id}/approve", summary="Approve a ticket (approver, not the requester)",
             openapi_extra=OPTIONAL_COMMENT)
def approve(ticket_id: TicketId, who: Approver, plane: Plane, payload: JsonBody = None) -> SafeJSONResponse:
    return _ticket(plane.tickets.approve(who, ticket_id, str(_body(payload).get("comment") or "")))


@router.post("/tickets/{ticket_id}/reject", summary="Reject a ticket with a comment (approver)",
             openapi_extra=REJECT_BODY)
def reject(ticket_id: TicketId, who: Approver, plane: Plane, payload: JsonBody = None) -> SafeJSONResponse:
    return _ticket(plane.tickets.reject(who, ticket_id, _body(payload).get("comment") or ""))


@router.post("/tickets/{ticket_id}/cancel", summary="Cancel a pending ticket (its requester or an admin)",
             openapi_extra=OPTIONAL_COMMENT)
def cancel(ticket_id: TicketId, who: Operator, plane: Plane, payload: JsonBody = None) -> SafeJSONResponse:
    return _ticket(plane.tickets.cancel(who, ticket_id, str(_body(payload).get("comment") or "")))


@router.post("/runs/{run}/commands", summary="pause / resume / stop / checkpoint / rollback (operator)",
             status_code=201, openapi_extra=COMMAND_BODY)
def command(run: str, who: Operator, plane: Plane, payload: JsonBody = None) -> SafeJSONResponse:
    data = _body(payload, "command")
    args = data.get("args") or {}
    if not isinstance(args, dict):
        raise TicketError("args must be a JSON object, e.g. {\"step\": 20}", details={"args": str(args)})
    return _ticket(plane.tickets.command(who, run, str(data["command"]), data.get("reason", ""), args), 201)
