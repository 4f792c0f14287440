"""Bearer tokens: ``rlc_<key_id>_<secret>``, shown once; only a salted hash of the secret is stored.

The public ``key_id`` finds the user's row without scanning; the secret (256 random bits from
``secrets.token_urlsafe``) is checked against ``HMAC-SHA256(salt, secret)`` with a constant-time
compare (``hmac-sha256$hex``). A slow password hash buys nothing for a 256-bit random secret (no
guess list exists to try) and cost every failed check ~0.1 s of CPU, which let anyone flood the
server and told them which key ids exist (a known id was slow, an unknown one fast). Now every
check costs the same few microseconds. Hashes of older tokens (``scrypt$n$r$p$hex``) still
verify; see :class:`rlcockpit.control.users.Users` for how their cost is kept constant too.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

PREFIX = "rlc_"
KEY_ID_HEX = 12
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1  # ~16 MiB, tens of ms: the OWASP minimum for scrypt


@dataclass(frozen=True)
class NewToken:
    token: str  # shown once to the person, never stored
    key_id: str
    salt: str
    token_hash: str


HMAC_SCHEME = "hmac-sha256"
# what an unknown key id is checked against, so it costs what a known one costs
DUMMY_SALT = "00" * 16
DUMMY_HASH = f"{HMAC_SCHEME}${'0' * 64}"


def new_token() -> NewToken:
    key_id = secrets.token_hex(KEY_ID_HEX // 2)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return NewToken(f"{PREFIX}{key_id}_{secret}", key_id, salt, hash_secret(secret, salt))


def hash_secret(secret: str, salt: str) -> str:
    digest = hmac.new(bytes.fromhex(salt), secret.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"{HMAC_SCHEME}${digest}"


def scrypt_hash(secret: str, salt: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """The hash of tokens made before the HMAC scheme (kept to verify them)."""
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=bytes.fromhex(salt), n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${digest.hex()}"


def is_legacy(stored: str) -> bool:
    return stored.startswith("scrypt$")


@functools.cache
def dummy_hash(legacy: bool) -> str:
    return scrypt_hash("dummy", DUMMY_SALT) if legacy else DUMMY_HASH


def split_token(token: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed token, else None."""
    if not isinstance(token, str) or not token.startswith(PREFIX):
        return None
    key_id, sep, secret = token[len(PREFIX):].partition("_")
    if not sep or len(key_id) != KEY_ID_HEX or not secret or len(secret) > 256:
        return None
    if any(c not in "0123456789abcdef" for c in key_id):
        return None
    return key_id, secret


def verify_secret(secret: str, salt: str, stored: str) -> bool:
    try:
        if stored.startswith(HMAC_SCHEME + "$"):
            candidate = hash_secret(secret, salt)
        else:
            scheme, n, r, p, _ = stored.split("$")
            if scheme != "scrypt":
                return False
            candidate = scrypt_hash(secret, salt, int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(candidate.encode(), stored.encode())
