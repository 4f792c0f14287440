"""Tickets: request, approve / reject / cancel, commands, and the detectors' automatic tickets.

Lifecycle (DESIGN.md §7): ``requested -> approved | rejected | cancelled -> applied -> evaluated``
(``failed`` when the trainer could not apply an approved ticket). Every change of state is one
compare-and-set in the store together with its audit entry; every refusal is audited too
(``outcome="refused"``) and then raised, so nothing changes and the attempt is on record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rlcockpit.control.errors import ConflictError, ForbiddenError, TicketError
from rlcockpit.control.params import check_value, resolve_name
from rlcockpit.control.refusals import RefusalLog
from rlcockpit.control.users import Principal
from rlcockpit.errors import RlcockpitError
from rlcockpit.records import AuditEntry, TicketRecord, encode_value
from rlcockpit.store.base import ControlStore, StoreReader

COMMANDS = ("pause", "resume", "stop", "checkpoint", "rollback")
# Non-destructive emergency brakes: approved by the policy at once (the audit says so); the rest
# of the commands, like every parameter change, need a second person.
SELF_APPROVED_COMMANDS = ("pause", "checkpoint")
OPEN_RUN_STATUSES = ("running", "crashed")  # crashed = heartbeat lost; it may be resumed
MAX_TEXT = 2000


class Tickets:
    def __init__(self, store: ControlStore, runs: StoreReader, refusals: RefusalLog | None = None) -> None:
        self.store = store
        self.runs = runs
        self.refusals = refusals or RefusalLog(store)

    # ------------------------------------------------------------------ requests

    def request(self, who: Principal, run_id: str, param: str, value: Any, reason: str) -> TicketRecord:
        """A live-parameter change; validated against the run's published specs."""
        attempt = {"param": param, "value": _shown(value), "reason": reason}
        with self._refusals(who, "ticket_requested", run_id, None, attempt):
            _need(who, "operator", "request a change")
            reason = _text(reason, "reason", "why the change is needed")
            self._open_run(run_id)
            specs, values = self._published(run_id)
            name = resolve_name(param, specs)
            clean = check_value(name, value, specs[name])
        ticket = TicketRecord(run_id=run_id, kind="param", target=name, value=clean, reason=reason,
                              requested_by=who.name, previous=values.get(name))
        return self.store.create_ticket(ticket, _entry(who.name, "ticket_requested", run_id, {
            "kind": "param", "param": name, "value": clean, "current": values.get(name), "reason": reason}))

    def command(self, who: Principal, run_id: str, command: str, reason: str,
                args: Mapping[str, Any] | None = None) -> TicketRecord:
        """pause / resume / stop / checkpoint / rollback (args ``{"step": N}`` or ``{"checkpoint": path}``)."""
        attempt = {"command": command, "args": dict(args or {}), "reason": reason}
        with self._refusals(who, "command_requested", run_id, None, attempt):
            _need(who, "operator", "send a command")
            if command not in COMMANDS:
                raise TicketError(f"unknown command {command!r}; choose one of {', '.join(COMMANDS)}",
                                  details={"command": command, "allowed": list(COMMANDS)})
            reason = _text(reason, "reason", "why the command is needed")
            self._open_run(run_id)
            clean = self._command_args(run_id, command, args or {})
        ticket = TicketRecord(run_id=run_id, kind="command", target=command, value=clean, reason=reason,
                              requested_by=who.name)
        ticket = self.store.create_ticket(ticket, _entry(who.name, "ticket_requested", run_id, {
            "kind": "command", "command": command, "args": clean, "reason": reason}))
        if command in SELF_APPROVED_COMMANDS:
            ticket = self._approve_by_policy(ticket, f"{command} is a safe command, approved at once")
        return ticket

    def _approve_by_policy(self, ticket: TicketRecord, comment: str) -> TicketRecord:
        now = time.time()
        done = self.store.transition(ticket.ticket_id, ("requested",),  # type: ignore[arg-type]
                                     {"status": "approved", "decided_by": "policy", "decided_at": now,
                                      "comment": comment},
                                     _entry("policy", "ticket_approved", ticket.run_id, {"comment": comment}))
        return done or self.store.get_ticket(ticket.ticket_id)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ decisions

    def approve(self, who: Principal, ticket_id: int, comment: str = "") -> TicketRecord:
        return self._decide(who, ticket_id, "approved", comment)

    def reject(self, who: Principal, ticket_id: int, comment: str) -> TicketRecord:
        return self._decide(who, ticket_id, "rejected", comment)

    def _decide(self, who: Principal, ticket_id: int, status: str, comment: str) -> TicketRecord:
        action = "ticket_" + status
        ticket = self._ticket_or_refuse(who, action, ticket_id)
        with self._refusals(who, action, ticket.run_id, ticket_id, {"comment": comment}):
            _need(who, "approver", "approve or reject tickets")
            if status == "rejected":
                comment = _text(comment, "comment", "why the ticket is rejected")
            if ticket.requested_by == who.name:
                raise ForbiddenError(f"{who.name} requested ticket {ticket_id} and cannot decide it; another "
                                     "approver must", details={"reason": "own_ticket", "ticket_id": ticket_id})
            _pending(ticket, ("requested",), "decided")
            if status == "approved":
                self._open_run(ticket.run_id)
            changes = {"status": status, "decided_by": who.name, "decided_at": time.time(),
                       "comment": _within(str(comment or ""), "comment")}
            done = self.store.transition(ticket_id, ("requested",), changes,
                                         _entry(who.name, action, ticket.run_id, {"comment": changes["comment"]}))
            if done is None:  # someone else decided in between
                _pending(self.store.get_ticket(ticket_id), (), "decided")
        return done  # type: ignore[return-value]

    def cancel(self, who: Principal, ticket_id: int, comment: str = "") -> TicketRecord:
        ticket = self._ticket_or_refuse(who, "ticket_cancelled", ticket_id)
        with self._refusals(who, "ticket_cancelled", ticket.run_id, ticket_id, {"comment": comment}):
            _need(who, "operator", "cancel tickets")
            if ticket.requested_by != who.name and not who.can("admin"):
                raise ForbiddenError(f"only the requester ({ticket.requested_by}) or an admin can cancel "
                                     f"ticket {ticket_id}", details={"reason": "not_requester"})
            _pending(ticket, ("requested", "approved"), "cancelled")
            changes = {"status": "cancelled", "comment": _within(str(comment or ""), "comment")}
            done = self.store.transition(ticket_id, ("requested", "approved"), changes,
                                         _entry(who.name, "ticket_cancelled", ticket.run_id, changes))
            if done is None:
                _pending(self.store.get_ticket(ticket_id), (), "cancelled")
        return done  # type: ignore[return-value]

    # ------------------------------------------------------------------ helpers

    def refuse(self, actor: str, action: str, run_id: str | None, ticket_id: int | None,
               error: RlcockpitError, attempt: Mapping[str, Any] | None = None) -> None:
        """Record a refused attempt in the audit log (size-bounded and rate-limited: refusals.py)."""
        self.refusals.record(AuditEntry(actor=actor, action=action, outcome="refused", run_id=run_id,
                                           ticket_id=ticket_id, details={
                                               "code": error.code, "status": error.http_status,
                                               "message": error.message, **dict(attempt or {})}))

    def _refusals(self, who: Principal, action: str, run_id: str | None, ticket_id: int | None,
                  attempt: Mapping[str, Any]):
        return _Refusals(self, who.name, action, run_id, ticket_id, attempt)

    def _ticket_or_refuse(self, who: Principal, action: str, ticket_id: int) -> TicketRecord:
        with self._refusals(who, action, None, None, {"ticket_id": ticket_id}):
            return self.store.get_ticket(ticket_id)

    def _open_run(self, run_id: str) -> None:
        run = self.runs.get_run(run_id)  # NotFoundError -> 404
        if run.status not in OPEN_RUN_STATUSES:
            raise ConflictError(f"run {run_id!r} is {run.status}; tickets are only taken for running runs",
                                details={"run_id": run_id, "status": run.status, "reason": "run_not_running"})

    def _published(self, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        latest = self.store.read_live_params(run_id, limit=1)
        if not latest:
            raise ConflictError(f"run {run_id!r} has not published its live parameters (it was started without "
                                "the control channel: control.enabled=false, or not by `rlcockpit train`)",
                                details={"run_id": run_id, "reason": "no_live_params"})
        return dict(latest[0].specs), dict(latest[0].values)

    def _command_args(self, run_id: str, command: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if command != "rollback":
            if args:
                raise TicketError(f"command {command} takes no arguments, got {sorted(args)}",
                                  details={"command": command})
            return {}
        checkpoints = self.runs.read_checkpoints(run_id)
        step, path = args.get("step"), args.get("checkpoint")
        if step is None and path is None and checkpoints:
            return {"step": checkpoints[-1].step, "checkpoint": checkpoints[-1].path}
        for cp in reversed(checkpoints):
            if (step is not None and not isinstance(step, bool) and cp.step == step) or cp.path == path:
                return {"step": cp.step, "checkpoint": cp.path}
        shown = sorted({cp.step for cp in checkpoints})
        raise TicketError(f"run {run_id!r} has no checkpoint {args!r} to roll back to (checkpoint steps: {shown})",
                          details={"command": command, "args": dict(args), "checkpoint_steps": shown})


class _Refusals:
    """``with``: an RlcockpitError raised inside is audited as a refusal, then re-raised."""

    def __init__(self, tickets: Tickets, actor: str, action: str, run_id: str | None, ticket_id: int | None,
                 attempt: Mapping[str, Any]) -> None:
        self.args = (tickets, actor, action, run_id, ticket_id, attempt)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if isinstance(exc, RlcockpitError):
            tickets, actor, action, run_id, ticket_id, attempt = self.args
            tickets.refuse(actor, action, run_id, ticket_id, exc, {k: _shown(v) for k, v in attempt.items()})
        return False


def _need(who: Principal, role: str, what: str) -> None:
    if not who.can(role):
        raise ForbiddenError(f"{who.name} has role {who.role}; to {what} the role {role} or higher is needed",
                             details={"reason": "role", "role": who.role, "needed": role})


def _text(value: Any, field: str, what: str) -> str:
    text = str(value or "").strip() if isinstance(value, (str, type(None))) else ""
    if not text:
        raise TicketError(f"the {field} is required: say {what}", details={"field": field})
    return _within(text, field)


def _within(text: str, field: str) -> str:
    """``text`` whole, or a 422 naming the limit (a reason or comment is never cut silently)."""
    if len(text) > MAX_TEXT:
        raise TicketError(f"the {field} is {len(text)} characters long; at most {MAX_TEXT} are kept: shorten it",
                          details={"field": field, "limit": MAX_TEXT, "length": len(text)})
    return text


def _pending(ticket: TicketRecord, allowed: tuple[str, ...], verb: str) -> None:
    if ticket.status not in allowed:
        raise ConflictError(f"ticket {ticket.ticket_id} is {ticket.status} and cannot be {verb} now",
                            details={"ticket_id": ticket.ticket_id, "status": ticket.status,
                                     "reason": "ticket_not_pending"})


def _entry(actor: str, action: str, run_id: str, details: Mapping[str, Any]) -> AuditEntry:
    return AuditEntry(actor=actor, action=action, run_id=run_id, details=dict(details))


def _shown(value: Any) -> Any:
    """A JSON-safe picture of an attempted value (NaN / ±inf as records.encode_value spells them,
    non-JSON types as text)."""
    if isinstance(value, (bool, int, str, float)) or value is None:
        return encode_value(value)
    if isinstance(value, Mapping):
        return {str(k): _shown(v) for k, v in value.items()}
    return repr(value)

