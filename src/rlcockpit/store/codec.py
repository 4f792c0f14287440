"""Compact encodings shared by store backends.

- Per-token float arrays (logprobs, ref_logprobs, token_kl) are stored as little-endian float16
  blobs: 2 bytes a token, about 3 significant digits, range ±65504 (±inf and NaN survive).
- Tokens (strings) are stored as a length-prefixed UTF-8 blob: ``u32 count``, ``count`` lengths
  (u16, or u32 when a token is longer than 65535 bytes, told by the first byte), then the bytes.
  No separator character is reserved, so byte-level tokens round-trip exactly.
- Histogram edges are float64 blobs, counts int64 blobs.
"""

from __future__ import annotations

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
    if tokens is None:
        return None
    parts = [str(t).encode("utf-8") for t in tokens]
    lengths = [len(p) for p in parts]
    wide = bool(lengths) and max(lengths) > 0xFFFF
    dtype = "<u4" if wide else "<u2"
    header = struct.pack("<BI", 4 if wide else 2, len(parts))
    return header + np.asarray(lengths, dtype=dtype).tobytes() + b"".join(parts)


def decode_tokens(blob: bytes | None) -> tuple[str, ...] | None:
    if blob is None:
        return None
    width, count = struct.unpack_from("<BI", blob, 0)
    offset = struct.calcsize("<BI")
    lengths = np.frombuffer(blob, dtype="<u4" if width == 4 else "<u2", count=count, offset=offset)
    data = memoryview(blob)[offset + width * count:]
    out = []
    pos = 0
    for n in lengths.tolist():
        out.append(bytes(data[pos:pos + n]).decode("utf-8"))
        pos += n
    return tuple(out)
