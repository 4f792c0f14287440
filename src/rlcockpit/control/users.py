"""People and their roles: add (the token is printed once), list, revoke, rotate a token, issue
one-time sign-in codes, exchange them for expiring sessions, and authenticate a bearer token
(docs/control.md "Roles and tokens", "Sign-in links and sessions")."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass
from typing import cast

from rlcockpit.control import tokens
from rlcockpit.control.errors import AuthError, ForbiddenError
from rlcockpit.control.roles import at_least, check_role
from rlcockpit.errors import ConfigError
from rlcockpit.records import AuditEntry, UserRecord
from rlcockpit.store.base import ControlStore
from rlcockpit.store.sessions import SessionRecord, SessionStore

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
RESERVED = ("policy", "trainer", "anonymous")  # actors the system itself uses in the audit log
VERIFIED_CACHE = 4096  # tokens remembered as verified (per process)
LEGACY_RECHECK_S = 10.0  # how long "does the store still hold scrypt hashes?" is cached
DAY_S = 86_400.0
TOKEN_TTL_S = 90 * DAY_S  # an API token's default life (`rlcockpit users add --expires-in`)
SIGNIN_TTL_S = 600.0  # a sign-in code's default life (`rlcockpit users signin --expires-in`)
SESSION_TTL_S = 12 * 3600.0  # a browser session's default life (ServerSettings.session_ttl_s)
TTL_RANGE_S = (60.0, 5 * 365 * DAY_S)
NEW_LINK = "ask an admin for a new sign-in link (`rlcockpit users signin NAME --store URI`)"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user with a role (``anonymous`` only when the store has no users yet).
    ``expires_at``: when the credential used ends (None: never); ``session``: the key id of the
    session token used (None for an API token)."""

    name: str
    role: str
    user_id: int | None = None
    expires_at: float | None = None
    session: str | None = None

    def can(self, role: str) -> bool:
        return at_least(self.role, role)


def check_ttl(ttl_s: float, what: str) -> float:
    lo, hi = TTL_RANGE_S
    if not lo <= ttl_s <= hi:
        raise ConfigError(f"{what} of {ttl_s:g} s is outside {lo:g} s .. {hi / DAY_S:g} days; give e.g. "
                          "10m, 12h or 90d", details={"ttl_s": ttl_s})
    return float(ttl_s)


class Users:
    def __init__(self, store: ControlStore) -> None:
        self.store = store
        self.sessions = cast(SessionStore, store)
        self._verified: dict[str, tuple[str, int]] = {}  # sha256(token) -> (kind, row id), per process
        self._lock = threading.Lock()
        self._legacy: tuple[float, bool] = (-1e18, False)  # (checked at, any scrypt hash among users)

    # ------------------------------------------------------------------ users and API tokens

    def add(self, name: str, role: str, *, by: str = "cli", ttl_s: float = TOKEN_TTL_S) -> tuple[UserRecord, str]:
        """Create a user; returns the record and the API token (shown once, only its hash is
        kept), which expires after ``ttl_s``."""
        check_role(role)
        if not _NAME.match(name or "") or name in RESERVED or ":" in name:
            raise ConfigError(f"user name {name!r} is not allowed: use 1-64 letters, digits, '_', '.', '@', '-' "
                              f"(not {', '.join(RESERVED)})", details={"name": name})
        new = tokens.new_token(expires_at=time.time() + check_ttl(ttl_s, "a token's life"))
        user = UserRecord(name=name, role=role, key_id=new.key_id, salt=new.salt, token_hash=new.token_hash,
                          created_at=time.time(), created_by=by)
        audit = AuditEntry(actor=by, action="user_added", details={"name": name, "role": role})
        return self.store.add_user(user, audit), new.token

    def rotate(self, name: str, *, by: str = "cli", ttl_s: float = TOKEN_TTL_S) -> tuple[UserRecord, str]:
        """A new API token for ``name``: the old one, their sign-in codes and sessions stop working."""
        expires = time.time() + check_ttl(ttl_s, "a token's life")
        new = tokens.new_token(expires_at=expires)
        audit = AuditEntry(actor=by, action="user_token_rotated", details={"name": name, "expires_at": expires})
        user = self.sessions.rotate_user(name, new.key_id, new.salt, new.token_hash, time.time(), audit)
        self._forget(user.user_id)
        return user, new.token

    def list(self) -> list[UserRecord]:
        return self.store.list_users()

    def revoke(self, name: str, *, by: str = "cli") -> UserRecord:
        user = self.store.revoke_user(name, time.time(), AuditEntry(actor=by, action="user_revoked",
                                                                   details={"name": name}))
        self._forget(user.user_id)
        return user

    def any_active(self) -> bool:
        return self.store.count_active_users() > 0

    # ------------------------------------------------------------------ sign-in codes and sessions

    def issue_signin(self, name: str, *, by: str = "cli", ttl_s: float = SIGNIN_TTL_S) -> tuple[str, float]:
        """A one-time sign-in code for ``name`` and when it expires (the code is shown once)."""
        user = self.store.find_user(name=name)
        if user is None or user.revoked_at is not None or user.user_id is None:
            raise ConfigError(f"no active user named {name!r}; `rlcockpit users list` shows them",
                              details={"name": name})
        now = time.time()
        expires = now + check_ttl(ttl_s, "a sign-in code's life")
        new = tokens.new_token(tokens.SIGNIN_PREFIX)
        self.sessions.add_session(SessionRecord(user.user_id, "signin", new.key_id, new.salt, new.token_hash,
                                                now, expires, by), AuditEntry(
            actor=by, action="signin_issued", details={"name": name, "expires_at": expires}))
        return new.token, expires

    def redeem(self, code: str, *, ttl_s: float = SESSION_TTL_S) -> tuple[str, Principal]:
        """Exchange a sign-in code (once) for a session token that lives ``ttl_s``."""
        parts = tokens.split_token(code, tokens.SIGNIN_PREFIX)
        if parts is None:
            raise AuthError("the sign-in code is malformed (expected rlo_<key>_<secret>, the end of a sign-in "
                            f"link); {NEW_LINK}", details={"reason": "malformed"})
        row = self.sessions.find_session(parts[0])
        if not self._row_ok(code, parts[1], row, "signin"):
            raise AuthError(f"the sign-in code is not valid; {NEW_LINK}", details={"reason": "unknown"})
        user = self._user_of(row)  # type: ignore[arg-type]
        if row.used_at is not None:  # type: ignore[union-attr]
            raise AuthError(f"this sign-in link was used already (each works once); {NEW_LINK}",
                            details={"reason": "used", "user": user.name})
        self._check_row(row, user)  # type: ignore[arg-type]
        now = time.time()
        new = tokens.new_token(tokens.SESSION_PREFIX)
        session = SessionRecord(user.user_id or 0, "session", new.key_id, new.salt, new.token_hash, now,
                                now + check_ttl(ttl_s, "a session's life"), "signin")
        stored = self.sessions.redeem_signin(parts[0], now, session, AuditEntry(
            actor=user.name, action="session_started", details={"via": "signin", "expires_at": session.expires_at}))
        if stored is None:  # another request redeemed it first (or it expired in between)
            raise AuthError(f"this sign-in link was used already (each works once); {NEW_LINK}",
                            details={"reason": "used", "user": user.name})
        return new.token, Principal(user.name, user.role, user.user_id, stored.expires_at, new.key_id)

    def start_session(self, who: Principal, *, ttl_s: float = SESSION_TTL_S) -> tuple[str, Principal]:
        """A session for a caller signed in with their API token (a browser given the token)."""
        if who.session is not None or who.user_id is None:
            raise ForbiddenError("a session cannot start another one; sign in again with a sign-in link or an "
                                 "API token", details={"reason": "session", "user": who.name})
        now = time.time()
        new = tokens.new_token(tokens.SESSION_PREFIX)
        session = SessionRecord(who.user_id, "session", new.key_id, new.salt, new.token_hash, now,
                                now + check_ttl(ttl_s, "a session's life"), "token")
        self.sessions.add_session(session, AuditEntry(actor=who.name, action="session_started", details={
            "via": "token", "expires_at": session.expires_at}))
        return new.token, Principal(who.name, who.role, who.user_id, session.expires_at, new.key_id)

    def end_session(self, who: Principal) -> bool:
        """Sign out: the caller's session token stops working (an API token is left alone)."""
        if who.session is None or who.user_id is None:
            return False
        audit = AuditEntry(actor=who.name, action="session_ended", details={"session": who.session})
        return self.sessions.revoke_sessions(who.user_id, time.time(), key_id=who.session, audit=audit) > 0

    # ------------------------------------------------------------------ authentication

    def authenticate(self, token: str | None) -> Principal:
        """The user of a bearer token (an API or a session token); AuthError (with
        ``details.reason``) when it is missing, malformed, unknown, revoked or expired."""
        if not token:
            raise AuthError("this needs a bearer token: send 'Authorization: Bearer <token>' (create one with "
                            "`rlcockpit users add NAME --role ROLE --store URI`)", details={"reason": "missing"})
        kind = tokens.kind_of(token)
        if kind == tokens.SIGNIN_PREFIX:
            raise AuthError("this is a one-time sign-in code, not a token: open the sign-in link in a browser, "
                            "or POST {\"code\": \"rlo_…\"} to /api/session for a session token",
                            details={"reason": "signin_code"})
        if kind == tokens.SESSION_PREFIX:
            return self._session(token)
        parts = tokens.split_token(token)
        if parts is None:
            raise AuthError("the bearer token is malformed (expected rlc_<key>_<secret> as printed by "
                            "`rlcockpit users add`)", details={"reason": "malformed"})
        user = self.store.find_user(key_id=parts[0])
        ok = self._secret_ok(token, parts[1], user)  # the same cost for a known and an unknown key id
        if user is None or not ok:
            raise AuthError("the bearer token is not valid; ask an admin for a new one", details={"reason": "unknown"})
        if user.revoked_at is not None:
            raise AuthError(f"the token of user {user.name!r} was revoked; ask an admin for a new one",
                            details={"reason": "revoked", "user": user.name})
        expires = tokens.expires_at(user.token_hash)
        if expires is not None and time.time() >= expires:
            raise AuthError(f"the token of user {user.name!r} expired; ask an admin for a new one (`rlcockpit "
                            "users rotate NAME --store URI`)", details={"reason": "expired", "user": user.name})
        return Principal(user.name, user.role, user.user_id, expires)

    def known(self, token: str | None) -> bool:
        """Whether this process verified ``token`` before (its revocation and expiry are still
        checked): such a caller is not held back by the failed-attempt limiter."""
        if not token:
            return False
        with self._lock:
            return hashlib.sha256(token.encode("utf-8")).hexdigest() in self._verified

    def _session(self, token: str) -> Principal:
        parts = tokens.split_token(token, tokens.SESSION_PREFIX)
        if parts is None:
            raise AuthError("the session token is malformed (expected rls_<key>_<secret>); sign in again",
                            details={"reason": "malformed"})
        row = self.sessions.find_session(parts[0])
        if not self._row_ok(token, parts[1], row, "session"):
            raise AuthError(f"the session token is not valid; {NEW_LINK}", details={"reason": "unknown"})
        user = self._user_of(row)  # type: ignore[arg-type]
        self._check_row(row, user)  # type: ignore[arg-type]
        return Principal(user.name, user.role, user.user_id, row.expires_at, row.key_id)  # type: ignore[union-attr]

    def _user_of(self, row: SessionRecord) -> UserRecord:
        user = self.sessions.find_user_by_id(row.user_id)
        if user is None or user.revoked_at is not None:
            raise AuthError(f"the user of this sign-in was revoked; {NEW_LINK}",
                            details={"reason": "revoked", "user": user.name if user else "anonymous"})
        return user

    @staticmethod
    def _check_row(row: SessionRecord, user: UserRecord) -> None:
        what = "sign-in link" if row.kind == "signin" else "session"
        if row.revoked_at is not None:
            raise AuthError(f"this {what} was ended (signed out, or the user's token was rotated); {NEW_LINK}",
                            details={"reason": "revoked", "user": user.name})
        if time.time() >= row.expires_at:
            raise AuthError(f"this {what} expired; {NEW_LINK}", details={"reason": "expired", "user": user.name})

    def _row_ok(self, token: str, secret: str, row: SessionRecord | None, kind: str) -> bool:
        """A code's or session's secret, at the cost of one HMAC whether or not the key id exists."""
        fingerprint = hashlib.sha256(token.encode("utf-8")).hexdigest()
        if row is not None and row.session_id is not None:
            with self._lock:
                if self._verified.get(fingerprint) == ("s", row.session_id):
                    return row.kind == kind
        if row is None or not tokens.verify_secret(secret, row.salt, row.token_hash):
            if row is None:
                tokens.verify_secret(secret, tokens.DUMMY_SALT, tokens.DUMMY_HASH)
            return False
        if kind == "session" and row.session_id is not None:
            self._remember(fingerprint, ("s", row.session_id))
        return row.kind == kind

    def _secret_ok(self, token: str, secret: str, user: UserRecord | None) -> bool:
        """Constant cost whether or not the key id exists: an unknown id is checked against a dummy
        hash, and while the store still holds scrypt hashes (tokens made before the HMAC scheme)
        every failed check costs one scrypt, so no failure is faster than another."""
        fingerprint = hashlib.sha256(token.encode("utf-8")).hexdigest()
        with self._lock:
            if user is not None and self._verified.get(fingerprint) == ("u", user.user_id):
                return True
        legacy = self._legacy_present()
        if user is None:
            tokens.verify_secret(secret, tokens.DUMMY_SALT, tokens.dummy_hash(legacy))
            return False
        if not tokens.verify_secret(secret, user.salt, user.token_hash):
            if legacy and not tokens.is_legacy(user.token_hash):
                tokens.verify_secret(secret, tokens.DUMMY_SALT, tokens.dummy_hash(True))
            return False
        self._remember(fingerprint, ("u", user.user_id or 0))
        return True

    def _remember(self, fingerprint: str, identity: tuple[str, int]) -> None:
        with self._lock:
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[fingerprint] = identity

    def _forget(self, user_id: int | None) -> None:
        with self._lock:
            self._verified = {k: v for k, v in self._verified.items() if not (v[0] == "u" and v[1] == user_id)}

    def _legacy_present(self) -> bool:
        checked, legacy = self._legacy
        now = time.monotonic()
        if now - checked > LEGACY_RECHECK_S:
            legacy = any(tokens.is_legacy(u.token_hash) for u in self.store.list_users() if u.revoked_at is None)
            self._legacy = (now, legacy)
        return legacy
