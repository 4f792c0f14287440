"""HOTFIX, the boundary between two steps, and the live control it applies (DESIGN.md §3).

:class:`HotfixBoundary` is one part of :class:`rlcockpit.trainer.trainer.Trainer` (which inherits
it): the order of the boundary (:meth:`~HotfixBoundary.hotfix`), the live inbox's items applied
there (live-parameter changes; the pause, resume, stop and checkpoint commands), the pause loop,
the sampling schedule's stage changes, and data parallel, the boundary record rank 0 publishes and
the other ranks apply. Checkpoints themselves are written by :mod:`.checkpointing`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcockpit.trainer import checkpoint as ckpt
from rlcockpit.trainer.live import LiveParams, PendingChange

if TYPE_CHECKING:
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.control_link import ControlLink
    from rlcockpit.trainer.controllers import Controllers
    from rlcockpit.trainer.diagnosis import Diagnosis
    from rlcockpit.trainer.distributed import Group
    from rlcockpit.trainer.live import LiveControl
    from rlcockpit.trainer.phases import PhaseClock
    from rlcockpit.trainer.rollout import SamplingSchedule

log = logging.getLogger("rlcockpit.trainer")


class HotfixBoundary:
    """The trainer's HOTFIX boundary and live control: a part of ``Trainer``, which sets these
    attributes in its ``__init__`` and INIT; the boundary writes checkpoints and rolls back through
    :class:`~rlcockpit.trainer.checkpointing.Checkpointing` and logs phase times with the loop's
    ``_log_durations``."""

    cfg: TrainConfig
    group: Group
    live: LiveControl
    clock: PhaseClock
    diagnosis: Diagnosis
    control: ControlLink | None
    controllers: Controllers | None
    schedule: SamplingSchedule
    telemetry: Any
    step: int
    paused: bool
    stop_requested: bool
    last_checkpoint: str | None
    _checkpoint_requests: list[PendingChange]
    _boundary: dict[str, Any]

    def hotfix(self, step: int) -> None:
        """The boundary between two steps, in this order:

        1. the diagnostics' actions (alert, save batch, snapshot, checkpoint, pause, stop), through
           the executor (with a control plane each one is a ticket);
        2. the control plane's approved tickets (parameter changes, commands; not rollbacks);
        3. the sampling schedule's next stage, then every queued live-parameter change and command
           (the inbox: tickets, actions, a person at the terminal);
        4. the pause loop (tickets are still taken while paused);
        5. periodic and requested checkpoints;
        6. the step's phase times, then the step commit;
        7. last, rollbacks: a black finding's (diagnostics) and an approved rollback ticket (control),
           each loading a checkpoint in-process (``rollback_to``, trainer/checkpoint.py);
        8. data parallel: rank 0 publishes what this boundary did; the other ranks apply it
           (:meth:`_follow_hotfix`).
        """
        if not self.group.is_main:
            self._follow_hotfix(step)
            return
        self.diagnosis.act(step)
        if self.control is not None:
            self.control.before_hotfix(step)
        self._schedule_sampling(step + 1)
        with self.clock.phase("HOTFIX", step):
            self.apply_now(step)
        self._wait_while_paused(step)
        every = self.cfg.checkpoint.every
        periodic = step > 0 and every > 0 and step % every == 0
        requests = self._take_checkpoint_requests()
        if periodic or requests:  # DIAGNOSE's and HOTFIX's times go into the store with the checkpoint
            self._log_durations(step)
        if periodic:
            self.checkpoint(step, "periodic")
        for item in requests:
            path = self.checkpoint(step, "on_demand")
            item.resolve(step, path=path)
        self._log_durations(step)  # CHECKPOINT's own time: re-logged from the checkpoint on resume
        self.telemetry.commit(step)
        self.diagnosis.act(step, rollback=True)
        if self.control is not None:
            self.control.after_hotfix(step)
        if self.group.distributed:
            self.group.publish(self._boundary_record())

    def _boundary_record(self) -> dict[str, Any]:
        """What the other ranks must apply at this boundary to hold rank 0's state."""
        ctl = self.controllers
        record = {**self._boundary, "live": self.live.params.as_dict(), "kl": ctl.kl.state_dict(),
                  "clip": ctl.clip.state_dict() if ctl.clip else None, "stop": self.stop_requested,
                  "step": self.step}
        self._boundary = {"checkpoints": [], "rollback": None}
        return record

    def _follow_hotfix(self, step: int) -> None:
        """The other ranks' HOTFIX: wait for rank 0's record (as long as it is paused), add this
        rank's RNG states to the checkpoints it wrote, roll back with it, take its live parameters,
        controllers and stop flag."""
        with self.clock.phase("HOTFIX", step):
            record = self.group.receive()
            for path in record["checkpoints"]:  # the RNG streams have not moved since the step ended
                ckpt.save_rank_rng(Path(path), self.group.rank, self)
                self.last_checkpoint = path
            if record["rollback"]:
                self.rollback_to(Path(record["rollback"]))
            self.live.set_params(LiveParams(**record["live"]))
            self.controllers.kl.load_state_dict(record["kl"])
            if self.controllers.clip is not None and record["clip"] is not None:
                self.controllers.clip.load_state_dict(record["clip"])
            self.stop_requested = bool(record["stop"])
        self.clock.take_durations()

    def _schedule_sampling(self, next_step: int) -> None:
        """At a stage start, the schedule's temperature and top-p go through the live inbox (applied
        in this HOTFIX, recorded as ``live_params_applied``): nothing changes silently, and a ticket
        may still change them within the stage."""
        stage = self.schedule.starting(next_step)
        if stage is not None:
            index, temperature, top_p, n = stage
            self.live.request({"temperature": temperature, "top_p": top_p},
                              reason=f"rollout.schedule={self.cfg.rollout.schedule} stage {index + 1}: "
                                     f"{n} samples per prompt from step {next_step}",
                              requested_by="sampling_schedule")

    # ------------------------------------------------------------------ the live inbox (trainer/live.py)

    def apply_now(self, step: int) -> None:
        """Apply what the live inbox holds right away (HOTFIX; the control link: commands, replays)."""
        for item in self.live.drain():
            self._handle(item, step)

    def _handle(self, item: PendingChange, step: int) -> None:
        """One inbox item: a live-parameter change, or a command (checkpoint, pause, resume, stop)."""
        if item.kind == "live_params":
            self._apply_live(item, step)
            return
        if item.kind == "checkpoint":
            self._checkpoint_requests.append(item)  # written after the other items, in HOTFIX
            return
        if item.kind == "pause":
            self.paused, kind = True, "paused"
        elif item.kind == "resume":
            self.paused, kind = False, "resumed"
        else:
            self.stop_requested, kind = True, "stop_requested"
        self.telemetry.event(step, kind, {"reason": item.reason, "requested_by": item.requested_by})
        item.resolve(step)

    def _apply_live(self, item: PendingChange, step: int) -> None:
        before = self.live.params
        after = before.replaced(item.changes)
        ctl = self.controllers
        if "kl_coef" in item.changes:
            ctl.kl.coef = after.kl_coef
        if "kl_target" in item.changes and self.cfg.kl.adaptive:
            ctl.kl.target = after.kl_target
        if "clip_eps" in item.changes and ctl.clip is not None:
            ctl.clip.base_eps = after.clip_eps
        self.live.set_params(after)
        keys = sorted(item.changes)
        payload = {"request_id": item.request_id, "step": step, "reason": item.reason, "requested_by": item.requested_by,
                   "before": {k: getattr(before, k) for k in keys}, "after": {k: getattr(after, k) for k in keys}}
        self.telemetry.event(step, "live_params_applied", payload)
        self.diagnosis.note_change(step, payload)  # context for the findings that follow, not a cause
        item.resolve(step)

    def _wait_while_paused(self, step: int) -> None:
        if not self.paused:
            return
        with self.clock.phase("PAUSED", step):
            while self.paused and not self.stop_requested:
                if self.control is not None:
                    self.control.while_paused(step)
                if self.live.wait(0.2):
                    for item in self.live.drain():
                        self._handle(item, step)

    def _take_checkpoint_requests(self) -> list[PendingChange]:
        items, self._checkpoint_requests = self._checkpoint_requests, []
        return items
