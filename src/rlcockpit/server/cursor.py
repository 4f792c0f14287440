"""The live stream's resume cursor: the last step and the last finding / phase / event row sent.

Sent as each SSE message's ``id:``; a client that reconnects with ``Last-Event-ID`` (browsers do
it by themselves) or ``?cursor=`` continues exactly after it: no step is missed or sent twice.
Text form ``v1.<step>.<finding>.<phase>.<event>`` with ``_`` for "no step yet".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlcockpit.server.errors import ParameterError

VERSION = "v1"


@dataclass(frozen=True)
class Cursor:
    step: int | None = None  # last step delivered (None: none yet)
    finding: int = 0  # last finding row id delivered
    phase: int = 0
    event: int = 0

    def advance(self, **changes: int) -> Cursor:
        return replace(self, **changes)


def encode(cursor: Cursor) -> str:
    step = "_" if cursor.step is None else str(cursor.step)
    return f"{VERSION}.{step}.{cursor.finding}.{cursor.phase}.{cursor.event}"


def decode(text: str) -> Cursor:
    """Parse a cursor; raises ParameterError (422 invalid_parameter) naming the expected form when
    it is not one (the route's schema pattern refuses most of them before)."""
    parts = text.strip().split(".")
    try:
        if len(parts) != 5 or parts[0] != VERSION:
            raise ValueError(text)
        step = None if parts[1] == "_" else int(parts[1])
        finding, phase, event = (int(p) for p in parts[2:])
        if min(finding, phase, event) < 0 or max(finding, phase, event, abs(step or 0)) >= 2**63:
            raise ValueError(text)
    except ValueError:
        raise ParameterError("cursor", text[:200], f"not a stream cursor; it looks like "
                             f"'{VERSION}.<step>.<finding>.<phase>.<event>' (the id of a message "
                             "this server sent); drop it to start from now") from None
    return Cursor(step=step, finding=finding, phase=phase, event=event)
