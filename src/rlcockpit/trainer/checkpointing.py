"""Checkpoints as the trainer takes them, and the end of a run (DESIGN.md §3).

:class:`Checkpointing` is one part of :class:`rlcockpit.trainer.trainer.Trainer` (which inherits
it): writing a checkpoint (periodic, on demand, at the end) and what happens when one cannot be
written (``checkpoint.on_error``), the rollback target and the in-process rollback, the state an
exact resume needs, what a resumed run records (``time/checkpoint_s`` again, the refill note of
trainer/refill.py, the checkpoint pruning keeps for it), and :meth:`~Checkpointing.finish`: the
final checkpoint and closing the run with its status. The files themselves are ``checkpoint.py``'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcockpit.trainer import checkpoint as ckpt

if TYPE_CHECKING:
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.control_link import ControlLink
    from rlcockpit.trainer.diagnosis import Diagnosis
    from rlcockpit.trainer.distributed import Group
    from rlcockpit.trainer.phases import PhaseClock
    from rlcockpit.trainer.setup import Models

log = logging.getLogger("rlcockpit.trainer")


@dataclass(frozen=True)
class TrainResult:
    run_id: str
    status: str  # finished | stopped | failed
    step: int
    metrics: dict[str, float]
    checkpoint: str | None
    store: str


class Checkpointing:
    """The trainer's checkpoints and its end: a part of ``Trainer``, which sets these attributes in
    its ``__init__`` and INIT."""

    cfg: TrainConfig
    group: Group
    clock: PhaseClock
    diagnosis: Diagnosis
    control: ControlLink | None
    models: Models | None
    telemetry: Any
    step: int
    last_metrics: dict[str, float]
    last_checkpoint: str | None
    resume_from: Path | None
    resume_note: dict[str, Any] | None
    _boundary: dict[str, Any]

    def checkpoint(self, step: int, reason: str) -> str | None:
        """Save a checkpoint; None when it could not be written (``checkpoint.on_error``)."""
        with self.clock.phase("CHECKPOINT", step):
            path = ckpt.checkpoint_dir(self.cfg.checkpoint.dir, self.telemetry.run_id, step)
            try:
                ckpt.save_checkpoint(path, actor=self.models.actor, tokenizer=self.models.tokenizer,
                                     critic=self.models.critic, state=self.state_dict(), reason=reason)
            except Exception as exc:  # a full disk must not end the run with a traceback: the policy says
                self._checkpoint_failed(step, reason, path, exc)
                return None
            if self.group.distributed:
                self._boundary["checkpoints"].append(str(path))  # the other ranks add their RNG states
            self.telemetry.checkpoint(step, str(path), reason=reason)
            # in the store before training goes on: a rollback ticket is validated against the
            # stored checkpoints (a checkpoint write already takes far longer than this flush)
            self.telemetry.flush(timeout=2.0)
            if reason == "periodic":  # after the flush: whether the store lost steps is known now
                ckpt.prune(path.parent, self.cfg.checkpoint.keep, protect=self._refill_anchor())
        self.last_checkpoint = str(path)
        return str(path)

    def checkpoint_before(self, first_step: int) -> Path | None:
        """The newest healthy checkpoint of this run taken before ``first_step`` (a rollback's target)."""
        return ckpt.checkpoint_before(self.cfg.checkpoint.dir, self.telemetry.run_id, first_step)

    def rollback_to(self, path: Path) -> int:
        """Load checkpoint ``path`` into this running trainer; returns the step it goes back to."""
        step = ckpt.restore(self, path)
        ckpt.restore_rank_rng(self, path, self.group.rank)
        if self.group.distributed and self.group.is_main:
            self._boundary["rollback"] = str(path)  # the other ranks roll back with it
        return step

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs besides the weights (trainer/checkpoint.py)."""
        state = ckpt.trainer_state(self)
        if self.group.distributed:
            state["world_size"] = self.group.world_size
        return state

    def _refill_anchor(self) -> Path | None:
        """While the store misses steps of this run (telemetry/spool), the checkpoint a resume
        would refill them from: pruning keeps it."""
        first = getattr(self.telemetry, "first_missing_step", None)
        return self.checkpoint_before(first) if first is not None else None

    def _after_resume(self) -> None:
        """A resumed run re-logs its checkpoint step's time/checkpoint_s (logged after the checkpoint,
        so a kill right after it lost it) and says why it resumed where it did (trainer/refill.py)."""
        duration = ckpt.checkpoint_duration(self.resume_from)
        # only when this store already holds the run (a resume), not a new run branched off the
        # checkpoint into a store of its own (the detection benchmark's fault runs)
        same_run = getattr(self.telemetry, "info", None) is not None and \
            self.telemetry.info.last_step is not None
        if duration is not None and self.step > 0 and same_run:
            self.telemetry.log(self.step, {"time/checkpoint_s": duration})
        if self.resume_note:
            self.telemetry.event(self.step, "resume_refill", self.resume_note)
            # marked missing until logged again (a refill) or for good (no checkpoint before them)
            self.telemetry.mark_missing(s for lo, hi in self.resume_note["missing"] for s in range(lo, hi + 1))

    # ------------------------------------------------------------------ end

    def finish(self, status: str, reason: str | None) -> TrainResult:
        """Final checkpoint (unless failed), close the run with its status."""
        failure = None
        try:
            saved = bool(self.last_checkpoint and self.last_checkpoint.endswith(f"step_{self.step:07d}"))
            if self.telemetry is not None and reason and self.cfg.checkpoint.at_end and self.step > 0 and not saved:
                self._final_checkpoint(reason)
        except ckpt.CheckpointError as exc:  # checkpoint.on_error=stop: the run fails, said once
            status, failure = "failed", exc
            self._record_failure(exc)
        finally:
            self.clock.close()
            self.diagnosis.close()
            lease = getattr(self.telemetry, "lease", None)
            if self.control is not None and not (lease is not None and lease.lost):  # else: the new holder's tickets
                self.control.close(status, self.step)
            if self.telemetry is not None:
                self.telemetry.close(status=status)
        if failure is not None:
            raise failure
        run_id = self.telemetry.run_id if self.telemetry is not None else ""
        return TrainResult(run_id, status, self.step, dict(self.last_metrics), self.last_checkpoint,
                           self.cfg.telemetry.store)

    def _final_checkpoint(self, reason: str) -> None:
        """The checkpoint at the end: rank 0 writes it, then (data parallel, not after Ctrl-C, when
        the ranks may not all get here) every other rank adds its RNG states."""
        if self.group.is_main:
            self.checkpoint(self.step, reason)
            self.telemetry.log(self.step, {"time/checkpoint_s": self.clock.take_durations()["CHECKPOINT"]})
        if self.group.distributed and reason != "interrupted":
            self.group.barrier()
            if not self.group.is_main:
                path = ckpt.checkpoint_dir(self.cfg.checkpoint.dir, self.telemetry.run_id, self.step)
                ckpt.save_rank_rng(path, self.group.rank, self)
                self.last_checkpoint = str(path)

    def _checkpoint_failed(self, step: int, reason: str, path: Path, exc: BaseException) -> None:
        """A checkpoint that could not be written: an event, a loud warning (the partial directory
        is gone: save_checkpoint); checkpoint.on_error=stop raises CheckpointError (one line)."""
        text = ckpt.failure_text(exc)
        policy = self.cfg.checkpoint.on_error
        self.telemetry.event(step, "checkpoint_failed", {"reason": reason, "path": str(path), "error": text,
                                                         "on_error": policy})
        log.warning("CHECKPOINT FAILED at step %d (%s): %s; %s", step, path, text,
                    "training goes on without it (checkpoint.on_error=continue)" if policy == "continue"
                    else "stopping (checkpoint.on_error=stop)")
        if policy == "stop":
            raise ckpt.CheckpointError(
                f"the checkpoint of step {step} could not be written to {path}: {text}; free space under "
                "checkpoint.dir (or set checkpoint.on_error=continue to train on without it)",
                details={"step": step, "path": str(path)}) from None

    def _record_failure(self, exc: BaseException) -> None:
        """The run_failed event of a run that ends on an exception (one line of it)."""
        if self.telemetry is None or not self.group.is_main:
            return
        message = getattr(exc, "message", None) or str(exc)
        self.telemetry.event(self.step, "run_failed", {"exception": type(exc).__name__,
                                                       "message": (message.strip().splitlines() or [""])[0][:2000]})
