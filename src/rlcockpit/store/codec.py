"""Compact encodings shared by store backends.

- Per-token float arrays (logprobs, ref_logprobs, token_kl) are stored as little-endian float16
  blobs: 2 bytes a token, about 3 significant digits, range ±65504 (±inf and NaN survive).
- Tokens (strings) are stored as one UTF-8 blob: a mode byte, ``u32 count``, then the tokens
  joined by NUL; if a token itself contains NUL the blob holds a JSON array instead, so every
  token string (byte-level tokens included) round-trips exactly.
- Histogram edges are float64 blobs, counts int64 blobs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

import numpy as np

_F16 = np.dtype("<f2")
_F64 = np.dtype("<f8")
_I64 = np.dtype("<i8")


def encode_f16(values: Sequence[float] | None) -> bytes | None:
    if values is None:
        return None
    return np.asarray(values, dtype=_F16).tobytes()


def decode_f16(blob: bytes | None) -> tuple[float, ...] | None:
    if blob is None:
        return None
    return tuple(np.frombuffer(blob, dtype=_F16).astype(np.float64).tolist())


def encode_f64(values: Sequence[float]) -> bytes:
    return np.asarray(values, dtype=_F64).tobytes()


def decode_f64(blob: bytes) -> tuple[float, ...]:
    return tuple(np.frombuffer(blob, dtype=_F64).tolist())


def encode_i64(values: Sequence[int]) -> bytes:
    return np.asarray(values, dtype=_I64).tobytes()


def decode_i64(blob: bytes) -> tuple[int, ...]:
    return tuple(int(x) for x in np.frombuffer(blob, dtype=_I64).tolist())


def encode_tokens(tokens: Sequence[str] | None) -> bytes | None:
    """``b"Z" + u32 count + NUL-joined UTF-8``; tokens that contain NUL fall back to JSON
    (``b"J" + u32 count + JSON array``). One C-level join either way, no per-token Python work."""
    if tokens is None:
        return None
    try:
        joined = "\0".join(tokens)
    except TypeError:  # token ids or other non-str tokens: store their text form
        tokens = [str(t) for t in tokens]
        joined = "\0".join(tokens)
    count = len(tokens)
    if joined.count("\0") == max(count - 1, 0):
        return b"Z" + struct.pack("<I", count) + joined.encode("utf-8")
    return b"J" + struct.pack("<I", count) + json.dumps(list(tokens)).encode("utf-8")


def decode_tokens(blob: bytes | None) -> tuple[str, ...] | None:
    if blob is None:
        return None
    mode, (count,) = blob[:1], struct.unpack_from("<I", blob, 1)
    text = blob[5:].decode("utf-8")
    if mode == b"J":
        return tuple(json.loads(text))
    return tuple(text.split("\0")) if count else ()
