"""Secrets of the control plane: ``<prefix><key_id>_<secret>``, shown once; only a salted hash of
the secret is stored.

Three kinds, told apart by their prefix (docs/control.md "Sign-in links and sessions"):

- ``rlc_``: a user's **API token** (scripts, CI, the CLI); expires (default 90 days).
- ``rlo_``: a **one-time sign-in code** (the sign-in link); good once, for minutes.
- ``rls_``: a **session token**, what a browser gets for a sign-in code; expires (default 12 h).

The public ``key_id`` finds the row without scanning; the secret (256 random bits from
``secrets.token_urlsafe``) is checked against ``HMAC-SHA256(salt, secret)`` with a constant-time
compare. An API token's expiry is part of its stored hash (``hmac-sha256-exp$<expires>$<hex>``,
the HMAC covering ``<expires>:<secret>``), so changing it in the table breaks the token, and the
audit chain's digest of the user row (details.state) covers it. A slow password hash buys nothing
for a 256-bit random secret and cost every failed check ~0.1 s of CPU (a flood slowed every
request, and a known key id answered slower than an unknown one); now every check costs the same
few microseconds. Hashes of older tokens (``hmac-sha256$hex`` without expiry, ``scrypt$n$r$p$hex``)
still verify; see :class:`rlcockpit.control.users.Users` for how their cost is kept constant too.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

PREFIX = "rlc_"  # an API token
SIGNIN_PREFIX = "rlo_"  # a one-time sign-in code
SESSION_PREFIX = "rls_"  # a session token
PREFIXES = (PREFIX, SIGNIN_PREFIX, SESSION_PREFIX)
KEY_ID_HEX = 12
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1  # ~16 MiB, tens of ms: the OWASP minimum for scrypt


@dataclass(frozen=True)
class NewToken:
    token: str  # shown once to the person, never stored
    key_id: str
    salt: str
    token_hash: str


HMAC_SCHEME = "hmac-sha256"
EXPIRING_SCHEME = "hmac-sha256-exp"
# what an unknown key id is checked against, so it costs what a known one costs
DUMMY_SALT = "00" * 16
DUMMY_HASH = f"{HMAC_SCHEME}${'0' * 64}"


def new_token(prefix: str = PREFIX, *, expires_at: float | None = None) -> NewToken:
    """A fresh secret; with ``expires_at`` its hash binds that expiry (API tokens)."""
    key_id = secrets.token_hex(KEY_ID_HEX // 2)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    stored = hash_secret(secret, salt) if expires_at is None else expiring_hash(secret, salt, expires_at)
    return NewToken(f"{prefix}{key_id}_{secret}", key_id, salt, stored)


def hash_secret(secret: str, salt: str) -> str:
    digest = hmac.new(bytes.fromhex(salt), secret.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"{HMAC_SCHEME}${digest}"


def expiring_hash(secret: str, salt: str, expires_at: float) -> str:
    expires = int(expires_at)
    digest = hmac.new(bytes.fromhex(salt), f"{expires}:{secret}".encode(), hashlib.sha256).hexdigest()
    return f"{EXPIRING_SCHEME}${expires}${digest}"


def expires_at(stored: str) -> float | None:
    """The expiry an API token's stored hash binds (None: a token made before expiries)."""
    scheme, _, rest = stored.partition("$")
    if scheme != EXPIRING_SCHEME:
        return None
    try:
        return float(int(rest.split("$", 1)[0]))
    except ValueError:
        return 0.0  # unreadable: treated as expired


def scrypt_hash(secret: str, salt: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """The hash of tokens made before the HMAC scheme (kept to verify them)."""
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=bytes.fromhex(salt), n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${digest.hex()}"


def is_legacy(stored: str) -> bool:
    return stored.startswith("scrypt$")


@functools.cache
def dummy_hash(legacy: bool) -> str:
    return scrypt_hash("dummy", DUMMY_SALT) if legacy else DUMMY_HASH


def kind_of(token: str) -> str | None:
    """The prefix of a token (``rlc_``, ``rlo_``, ``rls_``), or None."""
    return next((p for p in PREFIXES if isinstance(token, str) and token.startswith(p)), None)


def split_token(token: str, prefix: str = PREFIX) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed token of the kind ``prefix``, else None."""
    if not isinstance(token, str) or not token.startswith(prefix):
        return None
    key_id, sep, secret = token[len(prefix):].partition("_")
    if not sep or len(key_id) != KEY_ID_HEX or not secret or len(secret) > 256:
        return None
    if any(c not in "0123456789abcdef" for c in key_id):
        return None
    return key_id, secret


def verify_secret(secret: str, salt: str, stored: str) -> bool:
    try:
        if stored.startswith(HMAC_SCHEME + "$"):
            candidate = hash_secret(secret, salt)
        elif stored.startswith(EXPIRING_SCHEME + "$"):
            candidate = expiring_hash(secret, salt, float(stored.split("$")[1]))
        else:
            scheme, n, r, p, _ = stored.split("$")
            if scheme != "scrypt":
                return False
            candidate = scrypt_hash(secret, salt, int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(candidate.encode(), stored.encode())
