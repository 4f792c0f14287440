"""The control plane (DESIGN.md §7): users and roles, tickets and approvals, commands, the
hash-chained audit log, and the effect measurement of applied changes. See docs/control.md.

Layering: this package sees only :mod:`rlcockpit.records`, :mod:`rlcockpit.errors`,
:mod:`rlcockpit.config` and the store protocols; the trainer (``trainer/control_link.py``) and the
server (``server/routes/tickets.py`` and its siblings) import it, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.control.audit import ChainCheck
from rlcockpit.control.channel import Channel
from rlcockpit.control.config import ControlConfig
from rlcockpit.control.errors import AuthError, ConflictError, ForbiddenError, TicketError
from rlcockpit.control.refusals import RefusalLog
from rlcockpit.control.tickets import COMMANDS, SELF_APPROVED_COMMANDS, Tickets
from rlcockpit.control.users import Principal, Users
from rlcockpit.store.base import ControlStore, StoreReader


@dataclass
class ControlPlane:
    """What the server (and the CLI) use: users, tickets and the raw store, over one store."""

    store: ControlStore
    runs: StoreReader
    users: Users
    tickets: Tickets
    refusals: RefusalLog
    chain: ChainCheck  # the audit chain, verified incrementally for GET /api/audit?check=true

    @classmethod
    def over(cls, store: ControlStore, runs: StoreReader, *, refusals: RefusalLog | None = None
             ) -> ControlPlane:
        """``refusals``: how refused attempts are audited (default: a 60 s window, burst 10)."""
        refusals = refusals or RefusalLog(store)
        return cls(store, runs, Users(store), Tickets(store, runs, refusals), refusals, ChainCheck(store))


__all__ = [
    "COMMANDS",
    "SELF_APPROVED_COMMANDS",
    "AuthError",
    "Channel",
    "ConflictError",
    "ControlConfig",
    "ControlPlane",
    "ControlStore",
    "ForbiddenError",
    "Principal",
    "RefusalLog",
    "TicketError",
    "Tickets",
    "Users",
]
