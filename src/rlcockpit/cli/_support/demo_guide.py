"""The demo's incident guide: when the first orange (or worse) finding of the run appears, the
terminal says once what was detected, where to look and which change to try.

The fix it proposes is generic: a live parameter whose value differs from the start of the run
(the scripted ``lr_spike`` multiplied ``actor_lr`` by 100, faults/catalog.py) is set back to its
old value through a ticket — requested by one person, approved by another (docs/control.md) —
and the effect is measured ``control.effect_steps`` steps after it is applied.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.diagnostics.base import severity_rank

log = logging.getLogger("rlcockpit.demo")
GUIDE_TITLE = "Incident detected"


@dataclass(frozen=True)
class GuideContext:
    """Where the newcomer acts: the cockpit URL (None without a server) and the demo's people."""

    url: str | None
    store: str
    effect_steps: int
    operator: str | None = None
    approver: str | None = None


class IncidentGuide:
    """Watches ``trainer.diagnosis.findings``; :meth:`check` prints the guide the first time one is
    orange or worse. Called as a step hook (after each HOTFIX) and once when training ends."""

    def __init__(self, ctx: GuideContext, baseline: Mapping[str, Any], print_fn: Any) -> None:
        self.ctx = ctx
        self.baseline = dict(baseline)  # the live parameters before the first step
        self.print = print_fn
        self.shown = False

    def __call__(self, trainer: Any, step: int) -> None:  # the step-hook signature
        try:
            self.check(trainer)
        except Exception as exc:  # fail soft: a step hook that raises would stop the training
            log.warning("the demo's incident guide failed at step %d: %s", step, exc, exc_info=True)

    def check(self, trainer: Any) -> bool:
        if self.shown:
            return False
        findings = list(trainer.diagnosis.findings)
        first = next((f for f in findings if severity_rank(f.severity) >= severity_rank("orange")), None)
        if first is None:
            return False
        self.shown = True
        trainer.telemetry.flush(timeout=2.0)  # written before the guide's Alerts link can be opened
        same = [f for f in findings if first.incident and f.incident == first.incident] or [first]
        changed = changed_params(self.baseline, trainer.live.params.as_dict())
        rollback = rollback_step(trainer, min(f.step for f in same))
        for line in guide_lines(same, first, changed, self.ctx, trainer.telemetry.run_id, rollback):
            self.print(line)
        return True


def rollback_step(trainer: Any, first_step: int) -> int | None:
    """Step of the newest healthy checkpoint before the incident (what a rollback would load)."""
    path = trainer.checkpoint_before(first_step)
    return None if path is None else int(json.loads((path / "meta.json").read_text("utf-8"))["step"])


def changed_params(before: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Live parameters whose value moved since the start: name -> (old, new)."""
    return {k: (before[k], now[k]) for k in sorted(before) if k in now and now[k] != before[k]}


def guide_lines(findings: list[Any], first: Any, changed: Mapping[str, tuple[Any, Any]],
                ctx: GuideContext, run_id: str, rollback: int | None = None) -> list[str]:
    from rlcockpit.diagnostics.incidents import group

    inc = group(findings)[0]
    lines = [f"=== {GUIDE_TITLE} at step {first.step} ({inc.severity}) ===",
             f"What: {inc.summary}",
             f"First-moving signal: {first_signal(inc)}"]
    if ctx.url:
        lines.append(f"Alerts: {ctx.url}#/run/{run_id}/alerts")
    else:
        lines.append(f"Explain it: rlcockpit doctor --store {ctx.store} --run {run_id}")
    lines += fix_lines(changed, inc.patterns, ctx, run_id, rollback)
    return lines


def first_signal(inc: Any) -> str:
    """The signal that moved first (the incident's first detector) and from which step."""
    if not inc.detectors:
        return inc.findings[0].detector
    det = inc.detectors[0]
    found = [f for f in inc.findings if f.detector == det]
    signal = next((str(f.evidence["signal"]) for f in found if f.evidence.get("signal")), det)
    onset = min(int(f.evidence.get("onset_step", f.step)) for f in found)
    return f"{signal} ({det}), from step {onset}"


def fix_lines(changed: Mapping[str, tuple[Any, Any]], patterns: tuple[str, ...], ctx: GuideContext,
              run_id: str, rollback: int | None = None) -> list[str]:
    library = f"failure library: {', '.join(patterns)}" if patterns else "the failure library"
    if not changed:
        return [f"Fix to try: see {library} (Alerts links the entries)."]
    name, (old, new) = next(iter(changed.items()))
    where = f"Tickets ({ctx.url}#/run/{run_id}/tickets)" if ctx.url else "Tickets"
    who_req = f" as {ctx.operator}" if ctx.operator else ""
    who_ok = f" as {ctx.approver}" if ctx.approver else " as a second person (an approver)"
    lines = [f"Cause: {name} went from {_num(old)} to {_num(new)} during the run ({library}).",
             f"Fix to try: in {where} request {name} = {_num(old)}{who_req}, approve it{who_ok}; "
             f"the effect is measured {ctx.effect_steps} steps after it is applied (control.effect_steps)."]
    if ctx.url:
        lines.append("  (On the Alerts page, 'Request a change' on the incident opens that form prefilled.)")
    if rollback is not None:
        lines.append(f"  That stops the cause; to undo the damage too, request a rollback to step {rollback} (the "
                     "last checkpoint before the incident) in the same form (command 'rollback'), or `rlcockpit "
                     f"rollback --run {run_id} --step {rollback}`; the fault does not strike again.")
    return lines


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
