"""Live parameters: resolve a name against a run's published specs and check a value — the one
implementation of these rules, used by the control plane (tickets) and by the trainer's own inbox
(``trainer/live.py``).

The trainer publishes ``{name: {"type": "float"|"int", "lo", "hi", "help", "metric"}}`` for its
run; a ticket names a parameter by its live name (``kl_coef``), a dotted alias (``kl.coef``,
``ppo.clip_eps``, ``trainer.kl.coef``) or its metric (``kl/coef``).

A refusal names the parameter, the value and what is allowed; its ``details`` are ``param``,
``value`` and ``expected`` or ``range`` (``allowed`` for an unknown name). The caller chooses the
error it reports in: :class:`TicketError` (``invalid_ticket``, HTTP 422) for a ticket, the
trainer a :class:`~rlcockpit.errors.ConfigError` for a request made in its own process.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from typing import Any

from rlcockpit.control.errors import TicketError
from rlcockpit.errors import RlcockpitError

ErrorType = type[RlcockpitError]


def resolve_name(name: str, specs: Mapping[str, Mapping[str, Any]], error: ErrorType = TicketError) -> str:
    """The canonical live-parameter name for ``name``; ``error`` (with a suggestion) otherwise."""
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
    raise unknown_parameter(name, specs, error, guess=text.replace(".", "_"))


def unknown_parameter(name: Any, allowed: Collection[str], error: ErrorType = TicketError, *,
                      guess: str | None = None) -> RlcockpitError:
    """The error for a name that is not a live parameter, with the closest allowed name."""
    close = difflib.get_close_matches(str(name) if guess is None else guess, list(allowed), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    names = sorted(allowed)
    return error(f"'{name}' is not a live parameter{hint} (allowed: {', '.join(names)})",
                 details={"param": name, "allowed": names})


def _short(value: int) -> str:
    return f"<an integer of {value.bit_length()} bits>"


def check_value(name: str, value: Any, spec: Mapping[str, Any], error: ErrorType = TicketError) -> float | int:
    """The value with its canonical type (``spec["type"]`` ``"int"`` or ``"float"``); ``error`` for
    a wrong type, NaN / inf or a value outside ``[spec["lo"], spec["hi"]]``."""
    kind = spec.get("type", "float")
    lo, hi = spec["lo"], spec["hi"]
    allowed = f"[{lo!r}, {hi!r}]"
    expected = "an integer" if kind == "int" else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name}={value!r} has the wrong type; expected {expected} in {allowed}",
                    details={"param": name, "value": repr(value), "expected": expected})
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise error(f"{name}={_short(value)} is out of range; allowed: {allowed}",
                    details={"param": name, "value": _short(value), "range": [lo, hi]})
    if not math.isfinite(float(value)):
        raise error(f"{name}={value!r} must be a finite number in {allowed}",
                    details={"param": name, "value": str(value), "range": [lo, hi]})
    if kind == "int":
        if float(value) != int(value):
            raise error(f"{name}={value!r} has the wrong type; expected an integer",
                        details={"param": name, "value": value, "expected": expected})
        value = int(value)
    else:
        value = float(value)
    if not lo <= value <= hi:
        raise error(f"{name}={value!r} is out of range; allowed: {allowed}",
                    details={"param": name, "value": value, "range": [lo, hi]})
    return value
