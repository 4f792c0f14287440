"""Bearer tokens: ``rlc_<key_id>_<secret>``, shown once; only a salted scrypt hash of the secret is stored.

The public ``key_id`` finds the user's row without scanning; the secret (256 random bits from
``secrets.token_urlsafe``) is checked against ``scrypt(secret, salt)`` with a constant-time compare.
The cost parameters are stored with the hash (``scrypt$n$r$p$hex``), so they can be raised later.
"""

from __future__ import annotations

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


def new_token() -> NewToken:
    key_id = secrets.token_hex(KEY_ID_HEX // 2)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return NewToken(f"{PREFIX}{key_id}_{secret}", key_id, salt, hash_secret(secret, salt))


def hash_secret(secret: str, salt: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=bytes.fromhex(salt), n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${digest.hex()}"


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
        scheme, n, r, p, _ = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    candidate = hash_secret(secret, salt, int(n), int(r), int(p))
    return hmac.compare_digest(candidate.encode(), stored.encode())
