"""The severity policy: findings → actions (pure; the trainer executes them at HOTFIX).

Tiers and their default actions come from 001 Q12 (:data:`~rlcockpit.diagnostics.config.DEFAULT_ACTIONS`):

- yellow → alert (watch);
- orange → alert + save the triggering batch;
- red    → alert + snapshot + checkpoint + pause (call a person);
- black  → alert + snapshot + stop + roll back to the last checkpoint taken before the incident's
  first step.

``diagnostics.policy.actions`` overrides the list of any tier. Actions run in the fixed order of
:data:`ORDER` whatever order the config lists them in: evidence is saved (batch, snapshot,
checkpoint) before the run is paused, stopped or rolled back. A resolved finding only alerts.
Within one incident each (action, tier) runs once, so a second red detector joining an open red
incident does not pause the run again; an escalation to a higher tier runs that tier's actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rlcockpit.diagnostics.base import TIERS, severity_rank
from rlcockpit.diagnostics.config import ACTIONS, PolicyConfig
from rlcockpit.records import FindingRecord

ORDER = ACTIONS  # alert, save_batch, snapshot, checkpoint, pause, stop, rollback


@dataclass(frozen=True)
class Action:
    """One thing the trainer must do because of ``finding`` (the most severe trigger of this step)."""

    name: str
    step: int
    finding: FindingRecord

    @property
    def severity(self) -> str:
        return self.finding.severity

    @property
    def detector(self) -> str:
        return self.finding.detector

    @property
    def incident(self) -> str:
        return self.finding.incident


class Policy:
    """Remembers which (incident, action, tier) already ran; ``plan(findings)`` returns the new ones."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._done: set[tuple[str, str, str]] = set()

    def plan(self, findings: Iterable[FindingRecord]) -> list[Action]:
        """Actions for this step's findings: every finding alerts (if its tier alerts); the other
        actions run once per step, triggered by the most severe finding that asks for them."""
        alerts: list[Action] = []
        triggers: dict[str, FindingRecord] = {}
        for f in findings:
            if f.severity not in TIERS:
                continue  # "info" findings never page anyone
            wanted = self.config.actions_for(f.severity)
            if "alert" in wanted:
                alerts.append(Action("alert", f.step, f))
            if f.status == "resolved":
                continue
            for name in wanted:
                if name == "alert" or (f.incident, name, f.severity) in self._done:
                    continue
                known = triggers.get(name)
                if known is None or severity_rank(f.severity) > severity_rank(known.severity):
                    triggers[name] = f
        out = list(alerts)
        for name in ORDER:
            f = triggers.get(name)
            if f is not None:
                self._done.add((f.incident, name, f.severity))
                out.append(Action(name, f.step, f))
        return out


def plan(findings: Iterable[FindingRecord], config: PolicyConfig | None = None) -> list[Action]:
    """One-shot planning without memory (for tools and tests): findings → ordered actions."""
    return Policy(config).plan(findings)
