"""The store side of signing in (docs/control.md "Sign-in links and sessions"): one-time sign-in
codes and the expiring browser sessions they are exchanged for, one table (``sessions``, schema
v8) in the control store. Only a salted hash of each secret is kept, as for users' tokens
(control/tokens.py); the control plane (control/users.py) decides what is valid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rlcockpit.records import AuditEntry, UserRecord

KINDS = ("signin", "session")  # a one-time sign-in code, a session token


@dataclass(frozen=True)
class SessionRecord:
    """A sign-in code (``kind="signin"``: good once, until ``expires_at``) or a session
    (``kind="session"``: good until ``expires_at``, ``revoked_at`` or the user's revocation or
    token rotation)."""

    user_id: int
    kind: str
    key_id: str
    salt: str
    token_hash: str
    created_at: float
    expires_at: float
    created_by: str = ""
    used_at: float | None = None  # a sign-in code: when it was exchanged
    revoked_at: float | None = None
    session_id: int | None = None


@runtime_checkable
class SessionStore(Protocol):
    """What :class:`~rlcockpit.control.users.Users` needs beyond the users table (implemented by
    the SQLite control store, which ClickHouse stores use for their control plane too)."""

    def add_session(self, record: SessionRecord, audit: AuditEntry | None) -> SessionRecord: ...

    def find_session(self, key_id: str) -> SessionRecord | None: ...

    def redeem_signin(self, key_id: str, at: float, session: SessionRecord, audit: AuditEntry
                      ) -> SessionRecord | None:
        """Compare-and-set: mark the sign-in code ``key_id`` used (only if it is unused,
        unrevoked and unexpired at ``at``) and insert ``session``, in one transaction; the
        stored session, or None when the code was not redeemable."""

    def revoke_sessions(self, user_id: int, at: float, *, key_id: str | None = None,
                        audit: AuditEntry | None = None) -> int:
        """Revoke the user's codes and sessions (only ``key_id``'s when given); how many."""

    def rotate_user(self, name: str, key_id: str, salt: str, token_hash: str, at: float,
                    audit: AuditEntry) -> UserRecord:
        """Give the user a new token (key id, salt, hash) and revoke their codes and sessions,
        in one transaction (NotFoundError for an unknown or revoked name)."""

    def find_user_by_id(self, user_id: int) -> UserRecord | None: ...
