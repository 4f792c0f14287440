"""People and their roles: add (the token is printed once), list, revoke, authenticate a bearer token."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass

from rlcockpit.control import tokens
from rlcockpit.control.errors import AuthError
from rlcockpit.control.roles import at_least, check_role
from rlcockpit.errors import ConfigError
from rlcockpit.records import AuditEntry, UserRecord
from rlcockpit.store.base import ControlStore

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
RESERVED = ("policy", "trainer", "anonymous")  # actors the system itself uses in the audit log
VERIFIED_CACHE = 4096  # tokens remembered as verified (per process)
LEGACY_RECHECK_S = 10.0  # how long "does the store still hold scrypt hashes?" is cached


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user with a role (``anonymous`` only when the store has no users yet)."""

    name: str
    role: str
    user_id: int | None = None

    def can(self, role: str) -> bool:
        return at_least(self.role, role)


class Users:
    def __init__(self, store: ControlStore) -> None:
        self.store = store
        self._verified: dict[str, int] = {}  # sha256(token) -> user_id: verified once per token and process
        self._lock = threading.Lock()
        self._legacy: tuple[float, bool] = (-1e18, False)  # (checked at, any scrypt hash among users)

    def add(self, name: str, role: str, *, by: str = "cli") -> tuple[UserRecord, str]:
        """Create a user; returns the record and the token (shown once, only its hash is kept)."""
        check_role(role)
        if not _NAME.match(name or "") or name in RESERVED or ":" in name:
            raise ConfigError(f"user name {name!r} is not allowed: use 1-64 letters, digits, '_', '.', '@', '-' "
                              f"(not {', '.join(RESERVED)})", details={"name": name})
        new = tokens.new_token()
        user = UserRecord(name=name, role=role, key_id=new.key_id, salt=new.salt, token_hash=new.token_hash,
                          created_at=time.time(), created_by=by)
        audit = AuditEntry(actor=by, action="user_added", details={"name": name, "role": role})
        return self.store.add_user(user, audit), new.token

    def list(self) -> list[UserRecord]:
        return self.store.list_users()

    def revoke(self, name: str, *, by: str = "cli") -> UserRecord:
        user = self.store.revoke_user(name, time.time(), AuditEntry(actor=by, action="user_revoked",
                                                                   details={"name": name}))
        with self._lock:
            self._verified = {k: v for k, v in self._verified.items() if v != user.user_id}
        return user

    def any_active(self) -> bool:
        return self.store.count_active_users() > 0

    def authenticate(self, token: str | None) -> Principal:
        """The user of a bearer token; AuthError (with ``details.reason``) when it is missing,
        malformed, unknown or revoked."""
        if not token:
            raise AuthError("this needs a bearer token: send 'Authorization: Bearer <token>' (create one with "
                            "`rlcockpit users add NAME --role ROLE --store URI`)", details={"reason": "missing"})
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
        return Principal(user.name, user.role, user.user_id)

    def _secret_ok(self, token: str, secret: str, user: UserRecord | None) -> bool:
        """Constant cost whether or not the key id exists: an unknown id is checked against a dummy
        hash, and while the store still holds scrypt hashes (tokens made before the HMAC scheme)
        every failed check costs one scrypt, so no failure is faster than another."""
        fingerprint = hashlib.sha256(token.encode("utf-8")).hexdigest()
        with self._lock:
            if user is not None and self._verified.get(fingerprint) == user.user_id:
                return True
        legacy = self._legacy_present()
        if user is None:
            tokens.verify_secret(secret, tokens.DUMMY_SALT, tokens.dummy_hash(legacy))
            return False
        if not tokens.verify_secret(secret, user.salt, user.token_hash):
            if legacy and not tokens.is_legacy(user.token_hash):
                tokens.verify_secret(secret, tokens.DUMMY_SALT, tokens.dummy_hash(True))
            return False
        with self._lock:
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[fingerprint] = user.user_id  # type: ignore[assignment]
        return True

    def _legacy_present(self) -> bool:
        checked, legacy = self._legacy
        now = time.monotonic()
        if now - checked > LEGACY_RECHECK_S:
            legacy = any(tokens.is_legacy(u.token_hash) for u in self.store.list_users() if u.revoked_at is None)
            self._legacy = (now, legacy)
        return legacy
