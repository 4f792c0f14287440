"""The control plane's errors: each maps to an HTTP status through its ``code`` (api.md)."""

from __future__ import annotations

from rlcockpit.errors import RlcockpitError


class AuthError(RlcockpitError):
    """No token, a malformed, unknown or revoked token (HTTP 401)."""

    code = "unauthorized"
    http_status = 401


class ForbiddenError(RlcockpitError):
    """The caller's role does not allow the action, or an approver approves their own ticket (403)."""

    code = "forbidden"
    http_status = 403


class ConflictError(RlcockpitError):
    """The ticket or run is not in a state that allows the action (approving twice, a finished run)."""

    code = "conflict"
    http_status = 409


class TicketError(RlcockpitError):
    """A ticket's content is invalid: unknown parameter, wrong type, out of range, NaN, no reason."""

    code = "invalid_ticket"
    http_status = 422
