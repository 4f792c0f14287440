"""The diagnostics engine: runs every detector on each step, with alert hygiene and incidents.

The same engine runs live in the trainer's DIAGNOSE phase and offline over a stored or imported run
(``rlcockpit doctor``). Hygiene: a finding is emitted when a condition *starts* ("raised"),
*escalates* to a higher tier ("escalated"), *worsens* at its tier by ``worsen_factor`` in its own
units (evidence ``magnitude``: "worsened") or *resolves* after ``resolve_after`` absent steps
(``resolve_after_severe`` for orange and above: a failure that recurs within them stays one
finding)
("resolved") — never every step. Raised findings within ``incident_window`` steps of an open
incident join it; the incident's summary names the first-moving signal (:mod:`.incidents`).

Changes are context, not causes (issue 10, point 3): :meth:`Engine.note_change` tells the engine that
live parameters changed at a step. Nothing is raised for it; a finding raised or escalated within
``incident_window`` steps after a change carries it in its evidence as ``recent_changes`` (list of
``{step, changes: {name: {before, after}}, by}``), and the incident summary mentions it.

Fail soft: a detector that raises is marked "error", reported once as an event-like status and
skipped from then on; it never stops training.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.diagnostics.base import (
    NO_REFERENCE,
    SKIPPED,
    Condition,
    Detector,
    StepView,
    int_or,
    severity_rank,
)
from rlcockpit.diagnostics.config import DiagnosticsConfig
from rlcockpit.diagnostics.coverage import NO_REFERENCE_STATUS
from rlcockpit.records import FindingRecord, SampleRecord, encode_value

log = logging.getLogger("rlcockpit.diagnostics")
CHANGES_KEPT = 256  # noted changes remembered (a ramp changes a parameter every step)
RECENT_CHANGES_MAX = 10  # the most recent ones a finding's evidence carries


@dataclass
class _Active:
    severity: str
    since: int
    incident: str
    absent: int = 0
    last: Condition | None = None
    hold: bool = True  # False for heartbeat (tick) conditions: they end when steps come again
    magnitude: float | None = None  # the condition's size when it was last emitted ("worsened")


@dataclass
class _Incident:
    incident_id: str
    first_step: int
    last_step: int
    open_keys: set = field(default_factory=set)


class Engine:
    """``Engine.from_config(cfg)``; then ``observe(step, metrics, samples)`` each step."""

    def __init__(self, detectors: Sequence[Detector], config: DiagnosticsConfig | None = None,
                 *, incident_prefix: str = "inc") -> None:
        self.config = config or DiagnosticsConfig()
        self.detectors = list(detectors)
        self.status: dict[str, str] = {d.name: "waiting" for d in self.detectors}
        self.errors: dict[str, str] = {}
        self._active: dict[tuple[str, str], _Active] = {}
        self._incidents: list[_Incident] = []
        self._prefix = incident_prefix
        self._last_step_wall: float | None = None
        self._last_step = 0
        self._changes: deque[dict[str, Any]] = deque(maxlen=CHANGES_KEPT)

    @classmethod
    def from_config(cls, config: DiagnosticsConfig | None = None, *, baseline: Any = None,
                    **kwargs: Any) -> Engine:
        """Every enabled detector with its config; ``baseline`` (a
        :class:`~rlcockpit.diagnostics.baseline.Baseline`, loaded by the caller from
        ``config.baseline``) goes to the detectors that compare with one."""
        from rlcockpit.diagnostics import registry

        config = config or DiagnosticsConfig()
        found = registry.available()
        dets = [found[name](cfg) for name, cfg in config.detector_configs().items()]
        for det in dets:
            if baseline is not None and hasattr(det, "set_baseline"):
                det.set_baseline(baseline)
        return cls(dets, config, **kwargs)

    # ------------------------------------------------------------------ per step

    def observe(self, step: int, metrics: Mapping[str, Any],
                samples: Sequence[SampleRecord] = (), wall_time: float = 0.0
                ) -> list[FindingRecord]:
        """Feed one step; return the findings it raised, escalated or resolved."""
        view = StepView(step=int(step), metrics=_as_floats(metrics), samples=tuple(samples),
                        wall_time=float(wall_time))
        self._last_step_wall = view.wall_time or self._last_step_wall
        self._last_step = max(self._last_step, view.step)
        out: list[FindingRecord] = []
        for det in self.detectors:
            if det.name in self.errors:
                continue
            try:
                result = det.update(view)
            except Exception as exc:  # fail soft: one broken detector must not stop the others
                self._fail(det, exc)
                continue
            out.extend(self._absorb(det, view.step, view.wall_time, result))
        return out

    def tick(self, wall_time: float) -> list[FindingRecord]:
        """Heartbeat checks between steps (a stalled trainer logs no step)."""
        # the last step seen: a heartbeat finding is "after step N" (no step came since)
        step = max([self._last_step, *(a.since for a in self._active.values())])
        return self._between_steps(lambda det: det.tick(wall_time, self._last_step_wall), step,
                                   wall_time)

    def finish(self) -> list[FindingRecord]:
        """The log is complete: each detector's :meth:`~Detector.finish` conditions, raised at the
        last step seen (not held open: nothing follows them)."""
        return self._between_steps(lambda det: det.finish(), self._last_step,
                                   self._last_step_wall or 0.0)

    def _between_steps(self, call: Any, step: int, wall: float) -> list[FindingRecord]:
        """Conditions that come without a new step (``call(det)``), raised at ``step``, not held."""
        out: list[FindingRecord] = []
        for det in self.detectors:
            if det.name in self.errors:
                continue
            try:
                result = call(det)
            except Exception as exc:  # fail soft, as in observe()
                self._fail(det, exc)
                continue
            if result is not None:
                out.extend(self._raise_or_escalate(det, step, wall, _as_list(result), hold=False))
        return out

    def touch(self, wall_time: float) -> None:
        """Count ``wall_time`` as a sign of life (a paused run is not a hung one)."""
        self._last_step_wall = float(wall_time)

    def note_change(self, step: int, changes: Mapping[str, Any], source: str, *,
                    before: Mapping[str, Any] | None = None) -> None:
        """Live parameters changed at ``step`` (applied after that step's observation): ``changes``
        maps a name to its new value, ``before`` to its old one, ``source`` says who asked. Context
        for later findings only: a change never raises a finding by itself."""
        old = before or {}
        entry = {"step": int(step), "by": str(source),
                 "changes": {str(k): {"before": old.get(k), "after": v} for k, v in changes.items()}}
        if entry["changes"]:
            self._changes.append(_json_safe(entry))

    def note_live_params(self, step: int, payload: Mapping[str, Any]) -> None:
        """:meth:`note_change` from a ``live_params_applied`` event payload (``after``, ``before``,
        ``requested_by``), as the trainer records it: live and offline read the same fields."""
        after = payload.get("after")
        if not isinstance(after, Mapping):
            return  # not a payload this engine understands: no context rather than a crash
        before = payload.get("before")
        self.note_change(step, after, str(payload.get("requested_by") or "unknown"),
                         before=before if isinstance(before, Mapping) else None)

    def recent_changes(self, step: int, onset: int | None = None) -> list[dict[str, Any]]:
        """Changes noted before ``step`` and at most ``incident_window`` steps before the onset
        (``step`` when not given), oldest first, at most :data:`RECENT_CHANGES_MAX`."""
        first = min(step, step if onset is None else onset) - self.config.incident_window
        found = [c for c in self._changes if first <= c["step"] < step]
        return found[-RECENT_CHANGES_MAX:]

    def active(self) -> dict[tuple[str, str], str]:
        """(detector, key) → severity of every condition currently open."""
        return {k: a.severity for k, a in self._active.items()}

    def open_incident(self) -> str | None:
        return self._incidents[-1].incident_id if self._incidents and \
            self._incidents[-1].open_keys else None

    # ------------------------------------------------------------------ hygiene

    def _absorb(self, det: Detector, step: int, wall: float, result: Any) -> list[FindingRecord]:
        if result is SKIPPED or result is NO_REFERENCE:
            self.status[det.name] = "skipped" if result is SKIPPED else NO_REFERENCE_STATUS
            return []
        conditions = _as_list(result)
        out = self._raise_or_escalate(det, step, wall, conditions)
        present = {c.key for c in conditions}
        for (name, key), active in list(self._active.items()):
            if name != det.name or key in present:
                continue
            active.absent += 1
            if active.absent >= self._resolve_steps(active):
                out.append(self._resolve(det, key, active, step, wall))
        firing = [a.severity for (n, _), a in self._active.items() if n == det.name]
        self.status[det.name] = f"firing:{max(firing, key=severity_rank)}" if firing else "ok"
        return out

    def _resolve_steps(self, active: _Active) -> int:
        """Absent steps that resolve a condition of ``severity``: orange and above hold longer (the
        tiers that act — save a batch, call a person — stay open until the run has been quiet long
        enough to trust; a spike that recurs within them is the same open finding)."""
        if active.hold and severity_rank(active.severity) >= severity_rank("orange"):
            return max(self.config.resolve_after, self.config.resolve_after_severe)
        return self.config.resolve_after

    def _raise_or_escalate(self, det: Detector, step: int, wall: float,
                           conditions: Iterable[Condition], hold: bool = True
                           ) -> list[FindingRecord]:
        out = []
        for cond in conditions:
            active = self._active.get((det.name, cond.key))
            if active is None and unchanged(cond.evidence):
                continue  # "fell to -0.5 from -0.5": no change is no finding (issue 10, point 7)
            if active is None:
                incident = self._join_incident(step, (det.name, cond.key))
                self._active[(det.name, cond.key)] = _Active(cond.severity, step, incident, 0,
                                                             cond, hold, magnitude_of(cond))
                out.append(self._finding(det, cond, step, wall, "raised", incident))
                continue
            active.absent = 0
            active.last = cond
            if severity_rank(cond.severity) > severity_rank(active.severity):
                active.severity = cond.severity
                active.magnitude = magnitude_of(cond)
                self._touch_incident(active.incident, step)
                out.append(self._finding(det, cond, step, wall, "escalated", active.incident))
            elif self._worsened(active, cond):
                active.magnitude = magnitude_of(cond)
                self._touch_incident(active.incident, step)
                worse = Condition(active.severity, cond.message, cond.evidence, cond.key,
                                  cond.message_zh)
                out.append(self._finding(det, worse, step, wall, "worsened", active.incident))
        return out

    def _worsened(self, active: _Active, cond: Condition) -> bool:
        """An open condition at its tier that grew ``worsen_factor``× in its own units since it was
        last emitted (a loss spike of 48 held open, then the loss at 1e4): news, not noise."""
        factor, now = self.config.worsen_factor, magnitude_of(cond)
        return bool(factor and now is not None and active.magnitude
                    and now >= factor * active.magnitude)

    def _resolve(self, det: Detector, key: str, active: _Active, step: int,
                 wall: float) -> FindingRecord:
        del self._active[(det.name, key)]
        for inc in self._incidents:
            inc.open_keys.discard((det.name, key))
        last = active.last
        message = f"resolved: {last.message}" if last else "resolved"
        evidence = {**(dict(last.evidence) if last else {}), "raised_step": active.since,
                    "message_zh": f"已恢复：{last.message_zh}" if last and last.message_zh else ""}
        if key:  # incidents match a resolution to its raised finding by (detector, key)
            evidence["key"] = key
        return FindingRecord(step=step, detector=det.name, severity=active.severity,
                             message=message, evidence=_json_safe(evidence),
                             patterns=tuple(det.patterns),
                             status="resolved", wall_time=wall, incident=active.incident)

    def _join_incident(self, step: int, key: tuple[str, str]) -> str:
        window = self.config.incident_window
        for inc in reversed(self._incidents):
            if step - inc.last_step <= window:
                inc.last_step = max(inc.last_step, step)
                inc.open_keys.add(key)
                return inc.incident_id
            break
        inc = _Incident(f"{self._prefix}-{step}-{len(self._incidents) + 1}", step, step, {key})
        self._incidents.append(inc)
        return inc.incident_id

    def _touch_incident(self, incident_id: str, step: int) -> None:
        for inc in self._incidents:
            if inc.incident_id == incident_id:
                inc.last_step = max(inc.last_step, step)

    def _finding(self, det: Detector, cond: Condition, step: int, wall: float, status: str,
                 incident: str) -> FindingRecord:
        evidence = dict(cond.evidence)
        evidence.setdefault("signal", det.signal or det.name)
        evidence.setdefault("onset_step", step)
        if cond.key:
            evidence.setdefault("key", cond.key)
        if cond.message_zh:
            evidence.setdefault("message_zh", cond.message_zh)
        evidence.setdefault("family", det.family)
        changes = self.recent_changes(step, int_or(evidence.get("onset_step"), step))
        if changes:  # context for whoever reads the finding, never its cause
            evidence["recent_changes"] = changes
        return FindingRecord(step=step, detector=det.name, severity=cond.severity,
                             message=cond.message, evidence=_json_safe(evidence),
                             patterns=tuple(det.patterns), status=status, wall_time=wall,
                             incident=incident)

    def _fail(self, det: Detector, exc: Exception) -> None:
        self.errors[det.name] = f"{type(exc).__name__}: {exc}"
        self.status[det.name] = "error"
        log.warning("detector %s failed and is switched off for this run: %s", det.name, exc,
                    exc_info=True)


# (now, before) evidence pairs the built-in detectors use for a level they say has moved
CHANGE_PAIRS = (("mean_now", "mean_reference"), ("mean_now", "reference_mean"),
                ("length_now", "length_reference"), ("reward_now", "reward_reference"),
                ("to", "from"), ("after", "before"))


def magnitude_of(cond: Condition) -> float | None:
    """The condition's size in its own units (evidence ``magnitude``: larger is worse), or None."""
    value = cond.evidence.get("magnitude") if cond.evidence else None
    try:
        value = abs(float(value))
    except (TypeError, ValueError):
        return None
    return value if value == value and value != float("inf") else None


def unchanged(evidence: Mapping[str, Any]) -> bool:
    """True when the evidence reports a level moving from a value to the same value as shown
    (three significant digits): such a condition is never raised as a finding."""
    for now_key, before_key in CHANGE_PAIRS:
        now, before = evidence.get(now_key), evidence.get(before_key)
        if isinstance(now, (int, float)) and isinstance(before, (int, float)) \
                and f"{float(now):.3g}" == f"{float(before):.3g}":
            return True
    return False


def _as_list(result: Any) -> list[Condition]:
    if result is None:
        return []
    if isinstance(result, Condition):
        return [result]
    return [c for c in result if c is not None]


def _as_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            continue  # strings and arrays are not catalog scalars
    return out


def _json_safe(v: Any) -> Any:
    """Evidence as strict JSON: numpy scalars as numbers, NaN / ±inf as "NaN" / "Infinity" /
    "-Infinity" (records.encode_value: the evidence must still say it)."""
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return _json_safe(v.item())
    return encode_value(v)
