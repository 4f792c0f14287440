"""Resolve a parameter name against a run's published live-parameter specs and check a value.

The trainer publishes ``{name: {"type": "float"|"int", "lo", "hi", "help", "metric"}}`` for its
run; a ticket names a parameter by its live name (``kl_coef``), a dotted alias (``kl.coef``,
``ppo.clip_eps``, ``trainer.kl.coef``) or its metric (``kl/coef``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from rlcockpit.control.errors import TicketError


def resolve_name(name: str, specs: Mapping[str, Mapping[str, Any]]) -> str:
    """The canonical live-parameter name for ``name``; TicketError (with a suggestion) otherwise."""
    text = str(name or "").strip()
    if text.startswith("trainer."):
        text = text[len("trainer."):]
    candidates = [text, text.replace(".", "_"), text.rsplit(".", 1)[-1]]
    for candidate in candidates:
        if candidate in specs:
            return candidate
    for key, spec in specs.items():
        if spec.get("metric") == text:
            return key
    close = difflib.get_close_matches(text.replace(".", "_"), list(specs), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise TicketError(f"'{name}' is not a live parameter of this run{hint} (allowed: {', '.join(sorted(specs))})",
                      details={"param": name, "allowed": sorted(specs)})


def _short(value: int) -> str:
    return f"<an integer of {value.bit_length()} bits>"


def check_value(name: str, value: Any, spec: Mapping[str, Any]) -> float | int:
    """The value with its canonical type; TicketError for a wrong type, NaN / inf or out of range."""
    kind = spec.get("type", "float")
    lo, hi = float(spec["lo"]), float(spec["hi"])
    expected = "an integer" if kind == "int" else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TicketError(f"{name}={value!r} has the wrong type; expected {expected} in [{lo:g}, {hi:g}]",
                          details={"param": name, "value": repr(value), "expected": expected})
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise TicketError(f"{name}={_short(value)} is out of range; allowed: [{lo:g}, {hi:g}]",
                          details={"param": name, "value": _short(value), "range": [lo, hi]})
    if not math.isfinite(float(value)):
        raise TicketError(f"{name}={value!r} must be a finite number in [{lo:g}, {hi:g}]",
                          details={"param": name, "value": str(value), "range": [lo, hi]})
    if kind == "int":
        if float(value) != int(value):
            raise TicketError(f"{name}={value!r} has the wrong type; expected an integer",
                              details={"param": name, "value": value, "expected": expected})
        value = int(value)
    else:
        value = float(value)
    if not lo <= value <= hi:
        raise TicketError(f"{name}={value!r} is out of range; allowed: [{lo:g}, {hi:g}]",
                          details={"param": name, "value": value, "range": [lo, hi]})
    return value
