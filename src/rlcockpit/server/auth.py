"""Bearer-token access for the cockpit server (docs/control.md).

:class:`Access` is what ``create_app(..., access=...)`` takes: every read route calls
``access.require(request, "viewer")`` (server/deps.py) and every control route asks for its role.
While the store has no (active) users everyone may read and nobody may change anything; once a
user exists, every request needs a valid token (an API token or a session token) sent as
``Authorization: Bearer <token>`` — a bare token without the scheme is refused. A server bound to
a non-loopback address re-checks this on every request: when the last user is revoked while it
runs, nobody may read (the start-up rule "no network bind without users" holds for the server's
whole life). Failed token checks are limited per client address
(:class:`~rlcockpit.control.refusals.AuthThrottle`: 429 with Retry-After), and every refused
attempt goes to the audit log through the rate-limited
:class:`~rlcockpit.control.refusals.RefusalLog`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from rlcockpit.control import ControlPlane, Principal, RefusalLog
from rlcockpit.control.errors import AuthError, ForbiddenError
from rlcockpit.control.refusals import AuthThrottle
from rlcockpit.errors import ConfigError, RlcockpitError
from rlcockpit.records import AuditEntry
from rlcockpit.server.errors import TooManyAttempts

ANONYMOUS = Principal("anonymous", "viewer")
GUESSES = ("unknown",)  # failures that tested a secret and found it wrong: counted by the throttle


class Access:
    def __init__(self, control: ControlPlane, *, network_bound: bool = False,
                 throttle: AuthThrottle | None = None) -> None:
        self.control = control
        self.network_bound = network_bound
        self.throttle = throttle or AuthThrottle()

    def require(self, request: Request, role: str) -> Principal:
        """The caller, if their role is at least ``role``; else 401 / 403 / 429 (audited)."""
        try:
            token = bearer_token(request)
            self._not_throttled(request, token)
            who = self._who(token, role)
            if not who.can(role):
                raise ForbiddenError(f"{who.name} has role {who.role}; {request.method} {request.url.path} needs "
                                     f"the role {role} or higher", details={"reason": "role", "role": who.role,
                                                                             "needed": role, "user": who.name})
        except RlcockpitError as exc:
            self.refused(request, exc, role)
            raise
        request.state.principal = who
        return who

    def check(self, request: Request, fn: Any) -> Any:
        """``fn()`` (a check of a credential the request carries, e.g. a sign-in code) under the
        same throttle and audit as :meth:`require`."""
        try:
            self._not_throttled(request, "", always=True)
            return fn()
        except RlcockpitError as exc:
            self.refused(request, exc, "viewer")
            raise

    def refused(self, request: Request, exc: RlcockpitError, role: str) -> None:
        """Count a guess against the client's address and audit the refusal."""
        if exc.details.get("reason") in GUESSES:
            self.throttle.failed(client_address(request))
        self._audit_refusal(request, exc, role)

    def _not_throttled(self, request: Request, token: str | None, *, always: bool = False) -> None:
        """429 for a throttled address's credential this server never verified (a request with
        no token at all is refused as usual: it guesses nothing)."""
        if not (token or always):
            return
        wait = self.throttle.retry_after(client_address(request))
        if wait > 0 and not self.control.users.known(token):
            raise TooManyAttempts(wait)

    def _who(self, token: str | None, role: str) -> Principal:
        if self.control.users.any_active():
            return self.control.users.authenticate(token)
        if self.network_bound:
            raise AuthError("this server listens on a network address and its store has no active users "
                            "any more, so nobody may read; add a user (`rlcockpit users add NAME --role ROLE "
                            "--store URI`) or serve on 127.0.0.1", details={"reason": "no_users_network"})
        if token:
            raise AuthError("this store has no users, so no token is valid; create one with `rlcockpit users add "
                            "NAME --role ROLE --store URI`", details={"reason": "no_users"})
        if role != "viewer":
            raise AuthError("changes need a signed-in user and this store has none; create users with "
                            "`rlcockpit users add NAME --role operator|approver|admin --store URI`",
                            details={"reason": "no_users"})
        return ANONYMOUS

    def _audit_refusal(self, request: Request, exc: RlcockpitError, role: str) -> None:
        actor = str(exc.details.get("user") or "anonymous")
        route = getattr(request.scope.get("route"), "path", None)
        self.control.refusals.record(AuditEntry(actor=actor, action="access_denied", outcome="refused", details={
            "method": request.method, "path": request.url.path, "route": route, "needed": role,
            "code": exc.code, "status": exc.http_status, "reason": exc.details.get("reason"),
            "message": exc.message}))


def client_address(request: Request) -> str:
    """The peer address the throttle counts against (behind a reverse proxy: the proxy's)."""
    return request.client.host if request.client else "unknown"


def bearer_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; for GET requests also ``?access_token=``
    (RFC 6750 §2.3), because a browser's EventSource (the live stream) cannot send headers. Any
    other scheme, or a bare token, is refused (401, reason ``scheme``)."""
    header = request.headers.get("authorization", "").strip()
    if not header and request.method == "GET":
        return request.query_params.get("access_token") or None
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        shown = "a bare token" if not value else f"the scheme {scheme[:20]!r}"
        raise AuthError(f"the Authorization header carries {shown}; send 'Authorization: Bearer <token>' "
                        "(the word Bearer, a space, then the token)", details={"reason": "scheme"})
    return value.strip() or None


def control_for(settings: Any, store: Any) -> tuple[Access, ControlPlane]:
    """The control plane and access checks for ``serve``; refuses a non-loopback bind without users
    (and the access checks keep refusing if the last user is revoked later)."""
    control = store.control()
    refusals = RefusalLog(control, window_s=settings.refusal_window_s, burst=settings.refusal_burst)
    plane = ControlPlane.over(control, store.reader(), refusals=refusals)
    if not settings.is_loopback and not plane.users.any_active():
        raise ConfigError(
            f"--host {settings.host} would expose the cockpit without users or tokens; create users first "
            "(`rlcockpit users add NAME --role viewer --store URI`) or serve on 127.0.0.1 (an SSH tunnel: "
            "ssh -L 8765:127.0.0.1:8765 host)", details={"key": "host", "value": settings.host})
    return Access(plane, network_bound=not settings.is_loopback, throttle=throttle_for(settings)), plane


def throttle_for(settings: Any) -> AuthThrottle:
    return AuthThrottle(burst=settings.auth_fail_burst, refill_s=settings.auth_fail_refill_s)
