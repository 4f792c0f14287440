"""DIAGNOSE and the automatic part of HOTFIX: the diagnostics engine inside the trainer.

Each step :meth:`Diagnosis.observe` feeds the engine the step's metrics and the same
``SampleRecord`` s that were logged, writes the findings (with their incident ids) to the store and
plans the severity policy's actions (:mod:`rlcockpit.diagnostics.policy`). At the next phase
boundary the trainer calls :meth:`Diagnosis.act`: every action goes through one function,
``execute(action, ctx)`` (:attr:`Diagnosis.executor`; with a control plane the trainer wraps it in
INIT so each action becomes a ticket, ``ControlLink.ticketed``), and is recorded as an ``action``
event (action, detector, severity, incident, result). Actions reach the trainer through its port
(:class:`rlcockpit.trainer.port.TrainerPort`); the rollback loads a checkpoint with
:func:`rlcockpit.trainer.checkpoint.restore`.

Fail soft: an error in the engine, a detector or an action is logged as an event
(``diagnostics_error`` / ``detector_error`` / an ``action`` event with ``ok: false``) and training
goes on.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlcockpit.diagnostics import Engine, snapshots
from rlcockpit.diagnostics.config import DiagnosticsConfig
from rlcockpit.diagnostics.policy import Action, Policy
from rlcockpit.records import FindingRecord, SampleRecord
from rlcockpit.trainer.port import TrainerPort

log = logging.getLogger("rlcockpit.trainer.diagnosis")
HISTORY_STEPS = 100  # metric window and gradient ring (DESIGN.md §6: "the last 100 steps")
LAST_SAMPLES = 50
HEARTBEAT_PERIOD_S = 15.0  # how often the heartbeat thread asks the stall detector


@dataclass
class ActionContext:
    """What an action may touch: the trainer's port (pause, stop, checkpoint, rollback), this Diagnosis,
    the step."""

    trainer: TrainerPort
    diagnosis: Diagnosis
    step: int


Executor = Callable[[Action, ActionContext], Mapping[str, Any]]


class Diagnosis:
    """Owned by the trainer (``trainer.diagnosis``, built with it, so :attr:`executor` can be wrapped
    before the run starts); ``attach`` in INIT, ``observe`` in DIAGNOSE, ``act`` in HOTFIX."""

    def __init__(self, config: DiagnosticsConfig, telemetry: Any = None, *,
                 run_config: Mapping[str, Any] | None = None, gradstats: Any = None,
                 notifier: Any = None) -> None:
        self.config = config
        self.telemetry = telemetry
        self.run_config = dict(run_config or {})
        self.gradstats = gradstats
        self.notifier = notifier
        self.policy = Policy(config.policy)
        self.engine = Engine.from_config(config, incident_prefix=f"inc-{secrets.token_hex(2)}",
                                         baseline=_baseline(config)) if config.enabled else None
        self.history: deque[tuple[int, dict[str, float]]] = deque(maxlen=HISTORY_STEPS)
        self.last_samples: deque[SampleRecord] = deque(maxlen=LAST_SAMPLES)
        self.step_samples: dict[int, list[SampleRecord]] = {}
        self.incident_first_step: dict[str, int] = {}
        self.findings: list[FindingRecord] = []
        self.pending: list[Action] = []
        self.executor: Executor = execute
        self.port: TrainerPort | None = None  # the trainer the actions act on (attach)
        self._reported_errors: set[str] = set()
        self.sinks: list[Callable[[FindingRecord], Any]] = []  # ops: Prometheus, Alertmanager
        self._lock = threading.Lock()  # the engine is fed by DIAGNOSE and by the heartbeat thread
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None

    def attach(self, port: TrainerPort, telemetry: Any, run_config: Mapping[str, Any], gradstats: Any) -> None:
        """In INIT, once the run is open: actions need the trainer's port, findings the run's
        telemetry, snapshots its config and gradient ring."""
        from rlcockpit.diagnostics.notify import Notifier

        self.port, self.telemetry = port, telemetry
        self.run_config, self.gradstats = dict(run_config), gradstats
        if self.notifier is None and self.config.enabled:
            self.notifier = Notifier(self.config.policy, run_id=telemetry.run_id)
        self._start_heartbeat(port)

    def watch_ranks(self, ages: Any) -> None:
        """Data parallel, rank 0: the detectors that judge the ranks' heartbeats between steps
        (``rank_heartbeat``) read ``ages()`` -> {rank: seconds since its last heartbeat} on every
        heartbeat tick, so a lost rank is named while the group waits for it."""
        for det in self.engine.detectors if self.engine is not None else ():
            attach = getattr(det, "attach_monitor", None)
            if attach is not None:
                attach(ages)

    def _start_heartbeat(self, trainer: TrainerPort, period_s: float | None = None) -> None:
        """A daemon thread calls ``engine.tick`` so a hung phase is reported (stall detector's
        heartbeat) even though no DIAGNOSE comes; a paused run counts as alive."""
        if self.engine is None or self._beat is not None:
            return
        period = period_s or HEARTBEAT_PERIOD_S
        self.engine.touch(time.time())

        def beat() -> None:
            while not self._stop_beat.wait(period):
                self.heartbeat(paused=bool(trainer.paused))

        self._beat = threading.Thread(target=beat, name="rlcockpit-heartbeat", daemon=True)
        self._beat.start()

    def heartbeat(self, *, paused: bool = False, now: float | None = None) -> list[FindingRecord]:
        """One heartbeat check; the findings are stored and announced (no policy action: a hung
        trainer cannot act, a person has to look)."""
        now = time.time() if now is None else now
        with self._lock:
            if paused:
                self.engine.touch(now)  # type: ignore[union-attr]
                return []
            try:
                found = self.engine.tick(now)  # type: ignore[union-attr]
            except Exception as exc:  # fail soft, as in DIAGNOSE
                log.warning("heartbeat check failed: %s", exc, exc_info=True)
                return []
        for f in found:
            self._record(f)
            if self.notifier is not None:
                self.notifier.notify(f)
        return found

    # ------------------------------------------------------------------ DIAGNOSE

    def observe(self, step: int, metrics: Mapping[str, float], samples: Sequence[SampleRecord] = (),
                wall_time: float | None = None) -> list[FindingRecord]:
        """Run the detectors on this step, store the findings, plan the policy's actions."""
        if self.engine is None:
            return []
        wall = time.time() if wall_time is None else wall_time
        slim = [s.without_token_arrays() for s in samples]
        self.history.append((step, dict(metrics)))
        self.step_samples = {step: slim}  # the triggering batch of this step's findings
        try:
            with self._lock:
                found = self.engine.observe(step, metrics, samples, wall)
        except Exception as exc:  # fail soft: diagnostics must never stop training
            log.warning("diagnostics failed at step %d: %s", step, exc, exc_info=True)
            self.telemetry.event(step, "diagnostics_error", {"error": f"{type(exc).__name__}: {exc}"})
            found = []
        self._report_detector_errors(step)
        for f in found:
            self._record(f)
        self.last_samples.extend(slim)
        self.pending.extend(self.policy.plan(found))
        return found

    def note_change(self, step: int, payload: Mapping[str, Any]) -> None:
        """A ``live_params_applied`` event's payload, as recorded: context for later findings (the
        offline replay notes the stored event the same way), never a finding by itself."""
        if self.engine is None:
            return
        try:
            with self._lock:
                self.engine.note_live_params(step, payload)
        except Exception as exc:  # fail soft: context is not worth a training step
            log.warning("could not note the change at step %d: %s", step, exc, exc_info=True)

    def add_sink(self, fn: Callable[[FindingRecord], Any]) -> None:
        """Every finding, as recorded, also goes to ``fn`` (the cli wires Prometheus and
        Alertmanager here); a failing sink is logged, never raised."""
        self.sinks.append(fn)

    def _record(self, f: FindingRecord) -> None:
        self.findings.append(f)
        for sink in self.sinks:
            try:
                sink(f)
            except Exception as exc:  # fail soft: an alert channel must not stop training
                log.warning("finding sink %r failed: %s", sink, exc)
        if f.incident:
            self.incident_first_step.setdefault(f.incident, f.step)
        self.telemetry.finding(step=f.step, detector=f.detector, severity=f.severity, message=f.message,
                               evidence=f.evidence, patterns=f.patterns, status=f.status,
                               incident=f.incident)

    def _report_detector_errors(self, step: int) -> None:
        for name, error in self.engine.errors.items():  # type: ignore[union-attr]
            if name not in self._reported_errors:
                self._reported_errors.add(name)
                self.telemetry.event(step, "detector_error", {"detector": name, "error": error,
                                                              "status": "switched off for this run"})

    # ------------------------------------------------------------------ HOTFIX

    def act(self, step: int, *, rollback: bool = False) -> list[dict[str, Any]]:
        """Execute the planned actions on the attached trainer (``rollback=True``: only the rollbacks,
        after the step's commit; otherwise every other action). Each one is recorded as an ``action``
        event."""
        mine = [a for a in self.pending if (a.name == "rollback") == rollback]
        if not mine:
            return []
        if self.port is None:
            raise RuntimeError("Diagnosis.act before attach(): no trainer to act on")
        self.pending = [a for a in self.pending if a not in mine]
        ctx = ActionContext(self.port, self, step)
        return [self._run(action, ctx) for action in mine]

    def _run(self, action: Action, ctx: ActionContext) -> dict[str, Any]:
        try:
            result = {"ok": True, **dict(self.executor(action, ctx) or {})}
        except Exception as exc:  # fail soft: a failed action is recorded, the run goes on
            log.warning("action %s for %s failed: %s", action.name, action.detector, exc, exc_info=True)
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        payload = {"action": action.name, "detector": action.detector, "severity": action.severity,
                   "incident": action.incident, "finding_step": action.step, "result": result}
        self.telemetry.event(ctx.step, "action", payload)
        return payload

    def firing_reads(self, trigger: str) -> list[str]:
        """Catalog names read by the trigger and by every detector firing now (the metric window)."""
        if self.engine is None:
            return []
        firing = {trigger} | {name for name, _ in self.engine.active()}
        return sorted({r for det in self.engine.detectors if det.name in firing for r in det.reads})

    def close(self) -> None:
        self._stop_beat.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        if self.notifier is not None:
            self.notifier.close()


# --------------------------------------------------------------------------- the executor


def execute(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    """Carry out one policy action; returns what happened (the ``result`` of the action event)."""
    handler = _HANDLERS.get(action.name)
    if handler is None:
        raise ValueError(f"unknown action {action.name!r}")
    return handler(action, ctx)


def _alert(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    notifier = ctx.diagnosis.notifier
    if notifier is None:
        return {"notified": []}
    return {"notified": list(notifier.notify(action.finding))}


def _pause(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    log.warning("step %d: pausing the run for a person (%s finding of %s); resume with "
                "trainer.live.resume() or from the cockpit, or press Ctrl-C to stop with a checkpoint",
                ctx.step, action.severity, action.detector)
    ctx.trainer.live.pause(reason=f"{action.severity} finding of {action.detector}: {action.finding.message}",
                           requested_by=f"diagnostics:{action.detector}")
    return {"paused": True, "resume": "trainer.live.resume() (or the control layer)"}


def _stop(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    ctx.trainer.live.stop(reason=f"{action.severity} finding of {action.detector}: {action.finding.message}",
                          requested_by=f"diagnostics:{action.detector}")
    return {"stopped": True}


def _checkpoint(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    return {"checkpoint": ctx.trainer.checkpoint(ctx.step, "incident")}


def _save_batch(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    samples = ctx.diagnosis.step_samples.get(action.step, [])
    payload = snapshots.batch_payload(action.finding, samples)
    ctx.diagnosis.telemetry.snapshot(action.step, "batch", payload, incident=action.incident)
    return {"snapshot": "batch", "samples": len(payload["batch"]), "bytes": snapshots.size_of(payload)}


def _snapshot(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    d = ctx.diagnosis
    payload = snapshots.diagnostic_payload(
        action.finding, d.gradstats.window() if d.gradstats is not None else None,
        d.step_samples.get(action.step, []), list(d.last_samples),
        snapshots.metric_window(d.history, d.firing_reads(action.detector)), d.run_config)
    d.telemetry.snapshot(action.step, "diagnostic", payload, incident=action.incident)
    return {"snapshot": "diagnostic", "bytes": snapshots.size_of(payload),
            "grad_steps": len(payload["grad_norm_hist"]["steps"])}


def _rollback(action: Action, ctx: ActionContext) -> Mapping[str, Any]:
    """Back to the last checkpoint taken before the incident's first step, loaded in-process."""
    first = ctx.diagnosis.incident_first_step.get(action.incident, action.step)
    path = ctx.trainer.checkpoint_before(first)
    if path is None:
        ctx.trainer.stop_requested = True  # nothing healthy to go back to: stop rather than go on
        return {"rolled_back": False, "incident_first_step": first, "stopped": True,
                "reason": f"no checkpoint of this run before step {first}"}
    to_step = ctx.trainer.rollback_to(path)
    return {"rolled_back": True, "mode": "in-process", "checkpoint": str(path), "to_step": to_step,
            "incident_first_step": first, "resume": f"rlcockpit train --resume {path}"}


_HANDLERS: dict[str, Callable[[Action, ActionContext], Mapping[str, Any]]] = {
    "alert": _alert, "save_batch": _save_batch, "snapshot": _snapshot, "checkpoint": _checkpoint,
    "pause": _pause, "stop": _stop, "rollback": _rollback,
}


def _baseline(config: DiagnosticsConfig) -> Any:
    """The run named by ``diagnostics.baseline``, read once at setup (fail fast: a wrong reference
    stops the run before its first step, with a fix-it message)."""
    if not config.baseline:
        return None
    from rlcockpit.diagnostics.baseline import load_baseline_ref
    from rlcockpit.store import open_store

    return load_baseline_ref(config.baseline, open_store)

