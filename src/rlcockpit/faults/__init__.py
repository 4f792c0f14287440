"""Fault injection for the tiny world: break a healthy run on purpose, at a known step.

Used by ``rlcockpit faults``, ``rlcockpit demo`` (its scripted incident) and
``benchmarks/detection.py``. Nothing else imports this package; in particular the diagnostics never
do (an import-linter contract checks it), so a detector cannot know that a fault was injected.

    from rlcockpit import faults
    fault = faults.get("lr_spike").with_onset(12)
    trainer = fault.trainer(cfg)        # = fault.apply(Trainer(fault.apply(cfg)))
"""

from __future__ import annotations

import difflib

from rlcockpit.errors import NotFoundError
from rlcockpit.faults.base import Fault, LiveChange, RewardFault


def available() -> dict[str, Fault]:
    """Every built-in fault by name, in catalog order."""
    from rlcockpit.faults.catalog import FAULTS

    return {f.name: f for f in FAULTS}


def get(name: str) -> Fault:
    """The fault called ``name``; an unknown name raises NotFoundError with a suggestion."""
    found = available()
    if name not in found:
        close = difflib.get_close_matches(name, list(found), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise NotFoundError(f"unknown fault {name!r}{hint} (known: {', '.join(found)})",
                            details={"fault": name, "known": list(found)})
    return found[name]


__all__ = ["Fault", "LiveChange", "RewardFault", "available", "get"]
