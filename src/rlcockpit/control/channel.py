"""The trainer's side of the control plane: one run's approved tickets, in and out of the store.

The trainer (``rlcockpit.trainer.control_link``) polls :meth:`Channel.approved` at each phase
boundary. Marking a ticket applied is a compare-and-set ``approved -> applied`` done *before* the
change reaches the model, so it happens at most once; a crash between the two is repaired on
``--resume`` by :meth:`Channel.replays` (the store is the truth: an applied ticket missing from the
checkpoint's list of applied tickets is re-applied at its step, never marked twice).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from rlcockpit.records import AuditEntry, LiveParamsRecord, TicketRecord
from rlcockpit.store.base import ControlStore

DONE = ("applied", "evaluated")


class Channel:
    def __init__(self, store: ControlStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.actor = f"trainer:{run_id}"

    def publish(self, step: int, values: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]],
                source: str) -> LiveParamsRecord:
        return self.store.publish_live_params(LiveParamsRecord(run_id=self.run_id, step=step, values=dict(values),
                                                                specs=dict(specs), source=source))

    def approved(self) -> list[TicketRecord]:
        return self.store.list_tickets(run_id=self.run_id, statuses=("approved",))

    def mark_applied(self, ticket: TicketRecord, *, boundary_step: int, checkpoint: str | None,
                     previous: Any = None, effect: Mapping[str, Any] | None = None) -> TicketRecord | None:
        """approved -> applied (None when the ticket was cancelled in the meantime)."""
        changes = {"status": "applied", "boundary_step": boundary_step, "applied_step": boundary_step + 1,
                   "checkpoint": checkpoint, "applied_at": time.time(), "previous": previous,
                   "effect": dict(effect) if effect is not None else None}
        return self.store.transition(ticket.ticket_id, ("approved",), changes,  # type: ignore[arg-type]
                                     self._entry("ticket_applied", {
                                         "target": ticket.target, "value": ticket.value, "previous": previous,
                                         "boundary_step": boundary_step, "applied_step": boundary_step + 1,
                                         "checkpoint": checkpoint}))

    def mark_failed(self, ticket: TicketRecord, error: str, *, from_statuses: Collection[str] = ("approved",)
                    ) -> TicketRecord | None:
        return self.store.transition(ticket.ticket_id, tuple(from_statuses),  # type: ignore[arg-type]
                                     {"status": "failed", "error": error[:2000]},
                                     self._entry("ticket_failed", {"error": error[:2000]}, outcome="failed"))

    def record_effect(self, ticket: TicketRecord, effect: Mapping[str, Any]) -> TicketRecord | None:
        """applied -> evaluated with the measured effect."""
        summary = {k: effect.get(k) for k in ("ks_pvalue", "ks_statistic", "reward_mean_delta",
                                              "reward_var_change") if k in effect}
        return self.store.transition(ticket.ticket_id, ("applied",),  # type: ignore[arg-type]
                                     {"status": "evaluated", "effect": dict(effect), "evaluated_at": time.time()},
                                     self._entry("ticket_evaluated", summary))

    def awaiting_effect(self) -> list[TicketRecord]:
        return [t for t in self.store.list_tickets(run_id=self.run_id, statuses=("applied",))
                if t.kind == "param" and t.rolled_back_by is None]

    def replays(self, applied_in_checkpoint: Collection[int]) -> list[TicketRecord]:
        """Parameter tickets the store says were applied but the restored state does not contain."""
        done = self.store.list_tickets(run_id=self.run_id, statuses=DONE)
        return [t for t in done if t.kind == "param" and t.rolled_back_by is None
                and t.ticket_id not in set(applied_in_checkpoint)]

    def mark_rolled_back(self, tickets: Collection[TicketRecord], by: int) -> None:
        for t in tickets:
            self.store.transition(t.ticket_id, DONE, {"rolled_back_by": by},  # type: ignore[arg-type]
                                  self._entry("ticket_rolled_back", {"by_ticket": by, "target": t.target}))

    def automatic(self, detector: str, action: str, details: Mapping[str, Any], reason: str) -> TicketRecord:
        """A diagnostics action as a ticket: requested by ``detector:<name>``, approved by ``policy``."""
        requester = f"detector:{detector}"
        ticket = self.store.create_ticket(
            TicketRecord(run_id=self.run_id, kind="command", target=action, value=dict(details), reason=reason,
                         requested_by=requester),
            AuditEntry(actor=requester, action="ticket_requested", run_id=self.run_id,
                       details={"kind": "command", "command": action, "args": dict(details), "reason": reason}))
        comment = "the diagnostics policy acts on its own findings"
        approved = self.store.transition(ticket.ticket_id, ("requested",),  # type: ignore[arg-type]
                                         {"status": "approved", "decided_by": "policy", "decided_at": time.time(),
                                          "comment": comment},
                                         AuditEntry(actor="policy", action="ticket_approved", run_id=self.run_id,
                                                    details={"comment": comment}))
        return approved or ticket

    def note(self, action: str, ticket: TicketRecord | None, details: Mapping[str, Any],
             outcome: str = "ok") -> None:
        """An audit entry without a state change (e.g. a ticket re-applied after a resume)."""
        self.store.append_audit(AuditEntry(actor=self.actor, action=action, outcome=outcome, run_id=self.run_id,
                                           ticket_id=ticket.ticket_id if ticket else None, details=dict(details)))

    def _entry(self, action: str, details: Mapping[str, Any], outcome: str = "ok") -> AuditEntry:
        return AuditEntry(actor=self.actor, action=action, outcome=outcome, run_id=self.run_id,
                          details=dict(details))
