"""The PPO / GRPO trainer as an explicit phase machine (DESIGN.md §3).

    INIT → ROLLOUT → SCORE → ADVANTAGE → UPDATE → (EVAL) → DIAGNOSE → HOTFIX → (CHECKPOINT) → ROLLOUT …

:meth:`Trainer.run` reads top to bottom; each phase is one method, which times the phase and calls
the module named after it: INIT ``setup.py``, ROLLOUT ``rollout.py``, SCORE ``score.py``, ADVANTAGE
``advantage.py``, UPDATE ``update.py``, EVAL ``evaluation.py``, DIAGNOSE ``diagnosis.py``. HOTFIX,
the boundary between two steps, reads here in :meth:`Trainer.hotfix`; the diagnostics' actions and
the control link act on the trainer through its port (``port.py``), checkpoints are saved, restored
and rolled back by ``checkpoint.py``. Every phase is timed (``time/<phase>_s``), recorded as a phase
record (started / finished / failed) and watched for overruns. Live parameters change only in
HOTFIX. Everything a step measures is logged once per step, then the step is committed as one unit.

Data parallel (``group``, trainer/distributed.py): every rank runs this loop on its shard of the
prompts; ADVANTAGE and UPDATE reduce over the group; DIAGNOSE gathers the ranks' steps to rank 0,
the run's only store writer, which logs the global metrics, every sample and the per-rank ``dist/*``
metrics. Rank 0 alone reads the control plane and runs HOTFIX; the other ranks wait at the boundary
for its record (live parameters, controllers, checkpoints, rollback, stop) and apply it, so every
rank changes at the same step.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcockpit.config import to_dict
from rlcockpit.records import SampleRecord
from rlcockpit.rewards import RewardFunction
from rlcockpit.trainer import checkpoint as ckpt
from rlcockpit.trainer import step_metrics as sm
from rlcockpit.trainer.advantage import Normalizers, compute_advantages
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.control_link import ControlLink
from rlcockpit.trainer.controllers import Controllers
from rlcockpit.trainer.diagnosis import Diagnosis
from rlcockpit.trainer.distributed import FollowerRun, Group, merge_states, param_hash
from rlcockpit.trainer.evaluation import Evaluator
from rlcockpit.trainer.live import LiveControl, LiveParams, PendingChange
from rlcockpit.trainer.memory import MemoryMeter
from rlcockpit.trainer.phases import PhaseClock
from rlcockpit.trainer.rollout import SamplingSchedule, sample_responses
from rlcockpit.trainer.samples import TokenText, build_samples, histogram_values
from rlcockpit.trainer.score import score_batch
from rlcockpit.trainer.setup import Models, Prompts, build_components, open_run
from rlcockpit.trainer.step import StepState
from rlcockpit.trainer.update import Updater

log = logging.getLogger("rlcockpit.trainer")
StepObserver = Callable[[int, dict[str, float]], Any]
StepHook = Callable[["Trainer", int], Any]
PhaseListener = Callable[[str, int, float, bool], Any]  # (phase, step, duration_s, ok)


@dataclass(frozen=True)
class TrainResult:
    run_id: str
    status: str  # finished | stopped | failed
    step: int
    metrics: dict[str, float]
    checkpoint: str | None
    store: str


class Trainer:
    """``Trainer(cfg).run()``; ``trainer.live`` is the thread-safe inbox for live changes and commands.

    The diagnostics' actions and the control link act on it through its port
    (:class:`rlcockpit.trainer.port.TrainerPort`: the inbox, ``checkpoint``, ``apply_now``,
    ``checkpoint_before``, ``rollback_to``, ``validation_rewards``)."""

    def __init__(self, config: TrainConfig, *, resume_from: str | Path | None = None,
                 observers: Sequence[StepObserver] = (), control_store: Any = None,
                 group: Group | None = None, take_over: bool = False) -> None:
        self.cfg = config
        self.group = group or Group.single()  # data parallel: this rank of the run's process group
        self.live = LiveControl(LiveParams.from_config(config))
        self.observers: list[StepObserver] = list(observers)
        self.step_hooks: list[StepHook] = []
        self.phase_listeners: list[PhaseListener] = []
        self.resume_from = Path(resume_from) if resume_from else None
        self.resume_note: dict[str, Any] | None = None  # why resume_from was chosen (trainer/refill.py)
        self.take_over = take_over  # take the run's lease even from a live holder (train --force)
        self.telemetry: Any = None
        self.diagnosis = Diagnosis(config.diagnostics)
        # tickets and commands from the store's control plane (docs/control.md); None = not controlled
        self.control = ControlLink(control_store, config.control) \
            if control_store is not None and config.control.enabled and self.group.is_main else None
        # built in INIT (trainer/setup.py)
        self.models: Models | None = None  # tokenizer, actor, frozen reference, critic
        self.prompts: Prompts | None = None  # training source and validation prompts
        self.reward_fn: RewardFunction | None = None
        self.controllers: Controllers | None = None  # beta and epsilon between steps
        self.normalizers: Normalizers | None = None  # running reward and value normalisation
        self.step = 0
        self.last_metrics: dict[str, float] = {}
        self.last_checkpoint: str | None = None
        self.paused = self.stop_requested = False
        self.nonfinite_total = 0
        self.prev_kl_mean = math.nan
        self._checkpoint_requests: list[PendingChange] = []
        self._eval_pending: dict[str, float] = {}
        self._step_started = 0.0
        self.schedule = SamplingSchedule(config.rollout.schedule, config.train.steps, config.rollout.n_samples)
        self.memory = MemoryMeter(torch.device("cpu"))  # INIT puts it on the actor's device
        self._boundary: dict[str, Any] = {"checkpoints": [], "rollback": None}  # rank 0's, for the other ranks
        self.clock = PhaseClock(config.timeouts.limit, abort=config.timeouts.on_timeout == "abort",
                                on_start=self._phase_started, on_end=self._phase_ended,
                                on_overrun=self._phase_overrun)

    def add_step_hook(self, fn: StepHook) -> None:
        """Called as ``fn(trainer, step)`` before each step's ROLLOUT (fault injection, experiments).
        A hook may change models or send live requests; what it raises stops the run (fail fast)."""
        self.step_hooks.append(fn)

    def add_phase_listener(self, fn: PhaseListener) -> None:
        """Called as ``fn(phase, step, duration_s, ok)`` when a phase ends (the ops stack: phase
        histograms, spans, log lines); what it raises is logged, never raised into the loop."""
        self.phase_listeners.append(fn)

    def add_observer(self, fn: StepObserver) -> None:
        """Called in DIAGNOSE with (step, metrics); the diagnostics engine plugs in here."""
        self.observers.append(fn)

    # ------------------------------------------------------------------ the loop

    def run(self) -> TrainResult:
        self.init()
        try:
            if self.step == 0:
                self.evaluate(0)
                self.hotfix(0)
            while self.step < self.cfg.train.steps and not self.stop_requested:
                for hook in list(self.step_hooks):
                    hook(self, self.step + 1)
                state = self.rollout(self.step + 1)
                self.score(state)
                self.advantage(state)
                self.update(state)
                if self._eval_due(state.step):
                    self.evaluate(state.step)
                self.diagnose(state)
                self.step = state.step
                self.hotfix(state.step)
        except KeyboardInterrupt:
            self.finish("stopped", reason="interrupted")
            raise
        except BaseException as exc:
            self._record_failure(exc)
            self.finish("failed", reason=None)
            raise
        return self.finish("stopped" if self.stop_requested else "finished", reason="end")

    # ------------------------------------------------------------------ phases

    def init(self) -> None:
        """Load models, prompts and reward function (fail fast), restore a checkpoint, open the run."""
        t0 = time.perf_counter()
        g = self.group
        g.check_divides(self.cfg.rollout.batch_size, "the prompts of a step", "rollout.batch_size")
        g.check_divides(self.cfg.ppo.minibatch_size, "the samples of a minibatch", "ppo.minibatch_size")
        state = ckpt.load_state(self.resume_from) if self.resume_from else None
        actor_dir = self.resume_from / "actor" if self.resume_from else None
        parts = build_components(self.cfg, actor_dir, g.device)  # the same seed on every rank: the same models
        self.models, self.prompts, self.reward_fn = parts.models, parts.prompts, parts.reward_fn
        self.controllers, self.normalizers = parts.controllers, parts.normalizers
        m, place = self.models, self.models.placement
        self.updater = Updater(m.actor, m.critic, self.controllers, self.cfg, group=g, place=place)
        self.memory = MemoryMeter(place.device)  # sys/gpu_mem_* on CUDA (trainer/memory.py)
        self.entropy_uniform = sm.entropy_uniform(m.actor)  # log V: fixed for the run
        self.rollout_gen = place.generator(g.seed(self.cfg.seed))  # its own samples per rank, on the actor's device
        self.token_text = TokenText(m.tokenizer)
        self.evaluator = Evaluator(self.prompts.eval_items, self.cfg.eval, m.tokenizer, self.reward_fn, place, m.stop)
        self.live.tighten("max_new_tokens", 1, parts.max_new_tokens_limit)
        if self.controllers.clip is not None:
            self.live.tighten("clip_eps", self.cfg.ppo.clip_eps_min, self.cfg.ppo.clip_eps_max)
        if state is not None:
            ckpt.restore_trainer_state(self, state, self.resume_from)
            ckpt.restore_rank_rng(self, self.resume_from, g.rank)
        if g.is_main:
            self.telemetry = open_run(self.cfg, state["run_id"] if state else None, self.take_over)
            g.broadcast(self.telemetry.run_id)
            if g.distributed:
                self.telemetry.log(self.step, {"dist/world_size": float(g.world_size)})
            self.diagnosis.attach(self, self.telemetry, to_dict(self.cfg), self.updater.gradstats)
            if g.distributed:
                self.diagnosis.watch_ranks(g.heartbeat_ages)
        else:  # rank 0 writes the run; the others know its id (their checkpoint files go under it)
            self.telemetry = FollowerRun(g.broadcast(None))
        if self.reward_fn.observer is not None:  # e.g. the fusion LSTM of the reward model
            self.add_observer(self.reward_fn.observer)
        if self.control is not None:
            self.control.attach(self, self.telemetry.run_id)
            self.add_observer(self.control.observe)
            # the diagnostics' actions become tickets (requested by the detector, approved by the policy)
            self.diagnosis.executor = self.control.ticketed(self.diagnosis.executor)
        duration = time.perf_counter() - t0
        self._phase_ended("INIT", self.step, duration, True)
        if state is None:
            self.clock.durations["INIT"] = duration  # logged as time/init_s at step 0
        self.telemetry.event(self.step, "model_size", {**sm.model_size(m.actor, m.critic), **place.describe()})
        if state is not None:
            self._after_resume()
        if self.prompts.skipped:
            self.telemetry.event(self.step, "prompts_skipped", {"count": self.prompts.skipped,
                                                                "max_prompt_tokens": self.cfg.data.max_prompt_tokens})

    def rollout(self, step: int) -> StepState:
        self._step_started = time.perf_counter()
        with self.clock.phase("ROLLOUT", step):
            live, n = self.live.params, self.n_samples(step)
            # every rank draws the same global batch and keeps its shard: a prompt's samples stay together
            items = [it for it in self.group.shard(self.prompts.source.next_batch()) for _ in range(n)]
            m = self.models
            batch, responses = sample_responses(
                m.actor, [it.token_ids for it in items], m.tokenizer, max_new_tokens=live.max_new_tokens,
                temperature=live.temperature, top_p=live.top_p, generator=self.rollout_gen, place=m.placement,
                stop=m.stop)
            return StepState(step, items, [i // n for i in range(len(items))], batch, responses)

    def score(self, state: StepState) -> None:
        """Rewards, old and reference logprobs, critic values (frozen forward passes, no grad)."""
        with self.clock.phase("SCORE", state.step):
            score_batch(state, models=self.models, reward_fn=self.reward_fn, temperature=self.live.params.temperature,
                        kl_estimator=self.cfg.kl.estimator, value_norm=self.normalizers.value,
                        micro=self.updater.micro)
        self._log_oom_retries()

    def advantage(self, state: StepState) -> None:
        with self.clock.phase("ADVANTAGE", state.step):
            live, ctl = self.live.params, self.controllers
            state.kl_coef = ctl.kl.coef  # this step's beta and epsilon: the controllers move after UPDATE
            state.clip_eps = ctl.clip.eps if ctl.clip else live.clip_eps
            self.nonfinite_total += compute_advantages(
                state, reward_scale=live.reward_scale, reward_clip=self.cfg.reward.clip,
                normalizers=self.normalizers, algo=self.cfg.algo, ppo=self.cfg.ppo,
                group_size=self.n_samples(state.step), group=self.group)

    def update(self, state: StepState) -> None:
        """Epochs x minibatches of the PPO losses, then the KL and clip controllers move (trainer/update.py)."""
        with self.clock.phase("UPDATE", state.step):
            state.update_stats = self.updater.run(
                state, self.live.params,
                on_epoch=lambda e, n: self.telemetry.phase(state.step, "UPDATE", "running", progress=e / n))
        self._log_oom_retries()

    def evaluate(self, step: int) -> None:
        """Validation prompts, fixed sampling seed; logged at ``step`` and shown to the observers."""
        if not self.prompts.eval_items or self.cfg.eval.every <= 0 or not self.group.is_main:
            return
        with self.clock.phase("EVAL", step):
            metrics = self.evaluator.run(self.models.actor, step, self.live.params.max_new_tokens)
            self.telemetry.log(step, metrics)
        self._eval_pending = metrics
        if step == 0:  # no DIAGNOSE before the first step: show the baseline to the observers here
            self._eval_pending = {}
            self.last_metrics = dict(metrics)
            for fn in list(self.observers):
                self._call_observer(fn, step, dict(metrics))

    def diagnose(self, state: StepState) -> None:
        """Log the step (metrics, histograms, samples), run the step observers and the NaN guard.
        Data parallel: the ranks' steps are gathered to rank 0, which logs them as one step; the
        other ranks get the global metrics for their observers (e.g. a reward model's history)."""
        with self.clock.phase("DIAGNOSE", state.step):
            ranks = None
            if self.group.distributed:
                gathered = self.group.gather((state, self._rank_report(state.step)))
                if not self.group.is_main:
                    self._follow_diagnose(state.step)
                    return
                state, ranks = merge_states([s for s, _ in gathered]), [r for _, r in gathered]
            metrics = self._step_metrics(state)
            if ranks is not None:
                metrics.update(sm.rank_metrics(ranks, self.group.heartbeat_ages()))
            samples = self._log_step(state, metrics)
            self._guard(state)
            seen = {**metrics, **self._eval_pending}
            self._eval_pending = {}
            for fn in list(self.observers):
                self._call_observer(fn, state.step, seen)
            self.diagnosis.observe(state.step, seen, samples)
            if self.group.distributed:
                self.group.broadcast(seen)
        self.last_metrics = seen

    def _rank_report(self, step: int) -> dict[str, Any]:
        """What this rank tells rank 0 about its step: wall and phase times, its gradient norm before
        the all-reduce, memory and (every ``distributed.hash_every`` steps) its parameter hash."""
        self.group.heartbeat()
        every = self.cfg.distributed.hash_every
        return {"step_s": time.perf_counter() - self._step_started,
                "time": {p: d for p, d in self.clock.durations.items() if p in sm.RANK_PHASES},
                "grad_norm": self.updater.local_grad_norm, "rss_gb": sm.rss_gb(),
                "hash": param_hash(self.models.actor, self.models.critic) if every and step % every == 0 else None}

    def _follow_diagnose(self, step: int) -> None:
        """The other ranks' DIAGNOSE: the global metrics from rank 0, shown to this rank's observers."""
        seen = self.group.broadcast(None)
        for fn in list(self.observers):
            self._call_observer(fn, step, seen)
        self.last_metrics = seen

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

    # ------------------------------------------------------------------ the port (trainer/port.py)

    def apply_now(self, step: int) -> None:
        """Apply what the live inbox holds right away (HOTFIX; the control link: commands, replays)."""
        for item in self.live.drain():
            self._handle(item, step)

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

    def validation_rewards(self, step: int) -> list[float] | None:
        """Total reward per validation prompt (fixed sampling seed), timed as an EVAL phase; the
        control plane measures a ticket's effect on these."""
        if not self.prompts.eval_items:
            return None
        with self.clock.phase("EVAL", step):
            totals, _ = self.evaluator.score(self.models.actor, step, self.live.params.max_new_tokens)
        return [float(x) for x in totals]

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs besides the weights (trainer/checkpoint.py)."""
        state = ckpt.trainer_state(self)
        if self.group.distributed:
            state["world_size"] = self.group.world_size
        return state

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

    # ------------------------------------------------------------------ failures (checkpoint.py)

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

    def _refill_anchor(self) -> Path | None:
        """While the store misses steps of this run (telemetry/spool), the checkpoint a resume
        would refill them from: pruning keeps it."""
        first = getattr(self.telemetry, "first_missing_step", None)
        return self.checkpoint_before(first) if first is not None else None

    def _log_oom_retries(self) -> None:
        """An out-of-memory error that halved the micro-batches (trainer/memory.py): one event each."""
        for retry in self.updater.micro.take_events():
            self.telemetry.event(retry["step"], "oom_retry", retry)
            log.warning("step %d: out of memory in %s; micro-batch %d -> %d, retried", retry["step"], retry["phase"],
                        retry["micro_batch_from"], retry["micro_batch_to"])

    def _log_durations(self, step: int) -> None:
        durations = self.clock.take_durations()
        if durations:
            self.telemetry.log(step, {f"time/{p.lower()}_s": d for p, d in durations.items()})

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

    # ------------------------------------------------------------------ helpers

    def n_samples(self, step: int) -> int:
        """Samples per prompt at ``step``: rollout.n_samples, or the rollout.schedule's stage."""
        return self.schedule.n_samples(step)

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

    def _eval_due(self, step: int) -> bool:
        every = self.cfg.eval.every
        return every > 0 and (step % every == 0 or step == self.cfg.train.steps)

    def _step_metrics(self, state: StepState) -> dict[str, float]:
        live = self.live.params
        stats = dict(state.update_stats)
        skipped = int(stats.pop("update/skipped/actor", 0) + stats.pop("update/skipped/critic", 0))
        state.update_stats["skipped"] = skipped
        metrics = {**sm.reward_metrics(state, live.reward_scale), **sm.kl_metrics(state),
                   **sm.response_metrics(state), **sm.advantage_metrics(state), **sm.value_metrics(state), **stats}
        metrics["reward/nonfinite_total"] = float(self.nonfinite_total)
        metrics["update/skipped_total"] = float(self.updater.skipped_total)
        metrics["policy/entropy_uniform"] = self.entropy_uniform
        if self.cfg.algo == "grpo":
            metrics["reward/frac_zero_std_groups"] = state.zero_std_groups / self.cfg.rollout.batch_size
        if math.isfinite(self.prev_kl_mean):  # no previous step, no cycle delta
            metrics["kl/cycle_delta"] = metrics["kl/mean"] - self.prev_kl_mean
        self.prev_kl_mean = metrics["kl/mean"]
        critic_lr = self.updater.critic_opt.lr if self.updater.critic_opt else None
        metrics.update(sm.live_metrics(live, kl_coef=state.kl_coef, clip_eps=state.clip_eps,
                                       actor_lr=self.updater.actor_opt.lr, critic_lr=critic_lr,
                                       has_critic=self.models.critic is not None,
                                       adaptive_kl=self.cfg.kl.adaptive))
        wall = time.perf_counter() - self._step_started
        generated = int(state.mask.sum())
        tokens = generated * (1 + live.ppo_epochs)  # generated once, trained ppo_epochs times
        metrics.update(sm.system_metrics(self.clock.take_durations(), state.size, tokens, wall))
        metrics.update(self.memory.step_metrics())
        metrics.update(sm.cost_metrics(generated, live.ppo_epochs, int(state.batch.prompt_mask.sum()), wall,
                                       self.cfg.cost))
        return metrics

    def _log_step(self, state: StepState, metrics: dict[str, float]) -> list[SampleRecord]:
        """Log metrics, histograms and samples; returns the samples (the diagnostics read the same ones)."""
        t = self.telemetry
        t.log(state.step, metrics)
        for name, values in histogram_values(state).items():
            t.log_histogram(state.step, name, values, bins=self.cfg.telemetry.histogram_bins)
        samples = []
        if self.cfg.telemetry.log_samples or self.cfg.diagnostics.enabled:
            samples = build_samples(state, self.token_text)
        if self.cfg.telemetry.log_samples:
            t.log_samples(state.step, samples)
        return samples

    def _guard(self, state: StepState) -> None:
        """Built-in check: report skipped (non-finite) optimizer steps and dropped non-finite rewards."""
        skipped = int(state.update_stats.get("skipped", 0))
        if skipped:
            self.telemetry.event(state.step, "nonfinite_update_skipped",
                                 {"skipped": skipped, "skipped_total": self.updater.skipped_total})
            log.warning("step %d: %d optimizer step(s) skipped (non-finite loss or gradient)", state.step, skipped)
        bad = np.flatnonzero(~np.isfinite(state.rewards))
        if bad.size:
            self.telemetry.event(state.step, "nonfinite_reward",
                                 {"sample_ids": bad.tolist(), "count": int(bad.size),
                                  "nonfinite_total": self.nonfinite_total})

    def _call_observer(self, fn: StepObserver, step: int, metrics: dict[str, float]) -> None:
        try:
            fn(step, metrics)
        except Exception as exc:  # fail soft: a broken observer must not stop training
            log.warning("step observer %r failed at step %d: %s", fn, step, exc)
            self.telemetry.event(step, "observer_error", {"observer": repr(fn), "error": repr(exc)})

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

    # ------------------------------------------------------------------ phase records

    def _phase_started(self, phase: str, step: int) -> None:
        self.memory.phase_started()
        if self.telemetry is not None:
            self.telemetry.phase(step, phase, "started", progress=0.0)

    def _phase_ended(self, phase: str, step: int, duration: float, ok: bool) -> None:
        self.memory.phase_ended(phase)
        if self.telemetry is not None:
            self.telemetry.phase(step, phase, "finished" if ok else "failed", duration_s=duration,
                                 progress=1.0 if ok else None)
        for fn in self.phase_listeners:
            try:
                fn(phase, step, duration, ok)
            except Exception as exc:  # fail soft: the ops stack must not stop training
                log.warning("phase listener %r failed: %s", fn, exc)

    def _phase_overrun(self, phase: str, step: int, elapsed: float, limit: float) -> None:
        log.warning("phase %s at step %d has run %.2f s, over its limit of %g s", phase, step, elapsed, limit)
        if self.telemetry is not None:
            self.telemetry.event(step, "phase_timeout", {"phase": phase, "elapsed_s": elapsed, "limit_s": limit,
                                                         "action": self.cfg.timeouts.on_timeout})
