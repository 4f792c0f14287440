"""How rlcockpit's JSON files carry non-finite numbers.

JSON has no NaN or infinity. Python's ``json`` writes the bare tokens ``NaN`` / ``Infinity``, which
many parsers reject, and ``null`` would lose the difference between NaN and +/-inf that a NaN
detector needs. rlcockpit therefore writes strict JSON and encodes a non-finite float as the
string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` — the convention of the protobuf JSON mapping
for float fields. Readers accept those strings and also the bare tokens Python writes (verl's file
logger writes them), so both round-trip.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_value(value: Any) -> Any:
    """A JSON-safe copy of ``value``: non-finite floats as strings, tuples as lists."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Mapping):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    return value


def dumps(obj: Any) -> str:
    """One line of strict JSON (``allow_nan=False`` proves no bare NaN slipped through)."""
    return json.dumps(encode_value(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def decode_float(value: Any) -> float | None:
    """A float from a JSON value: numbers, booleans (0/1) and the non-finite strings; else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return NONFINITE.get(value)
    return None
