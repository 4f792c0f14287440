"""The PPO / GRPO trainer as an explicit phase machine (DESIGN.md §3).

    INIT → ROLLOUT → SCORE → ADVANTAGE → UPDATE → (EVAL) → DIAGNOSE → HOTFIX → (CHECKPOINT) → ROLLOUT …

:meth:`Trainer.run` reads top to bottom; each phase is one method, which times the phase and calls
the module named after it: INIT ``setup.py``, ROLLOUT ``rollout.py``, SCORE ``score.py``, ADVANTAGE
``advantage.py``, UPDATE ``update.py``, EVAL ``evaluation.py``, DIAGNOSE ``diagnosis.py``. Two parts
``Trainer`` inherits: HOTFIX, the boundary between two steps, with the live inbox and the pause it
applies (:meth:`Trainer.hotfix`, ``hotfix.py``), and taking checkpoints, rolling back and finishing
the run (``checkpointing.py``, on the files of ``checkpoint.py``). The diagnostics' actions and the
control link act on the trainer through its port (``port.py``). Every phase is timed
(``time/<phase>_s``), recorded as a phase record (started / finished / failed) and watched for
overruns. Live parameters change only in HOTFIX. Everything a step measures is logged once per
step, then the step is committed as one unit.

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
from rlcockpit.trainer.checkpointing import Checkpointing, TrainResult
from rlcockpit.trainer.config import TrainConfig
from rlcockpit.trainer.control_link import ControlLink
from rlcockpit.trainer.controllers import Controllers
from rlcockpit.trainer.diagnosis import Diagnosis
from rlcockpit.trainer.distributed import FollowerRun, Group, merge_states, param_hash
from rlcockpit.trainer.evaluation import Evaluator
from rlcockpit.trainer.hotfix import HotfixBoundary
from rlcockpit.trainer.live import LiveControl, LiveParams, PendingChange
from rlcockpit.trainer.memory import MemoryMeter
from rlcockpit.trainer.phases import PhaseClock
from rlcockpit.trainer.rollout import SamplingSchedule, sample_responses
from rlcockpit.trainer.samples import TokenText, build_samples, histogram_values
from rlcockpit.trainer.score import score_batch
from rlcockpit.trainer.setup import Models, Prompts, build_components, open_run
from rlcockpit.trainer.step import StepState
from rlcockpit.trainer.update import Updater

__all__ = ["PhaseListener", "StepHook", "StepObserver", "TrainResult", "Trainer"]

log = logging.getLogger("rlcockpit.trainer")
StepObserver = Callable[[int, dict[str, float]], Any]
StepHook = Callable[["Trainer", int], Any]
PhaseListener = Callable[[str, int, float, bool], Any]  # (phase, step, duration_s, ok)


class Trainer(HotfixBoundary, Checkpointing):
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

    # ------------------------------------------------------------------ the port (trainer/port.py)

    def validation_rewards(self, step: int) -> list[float] | None:
        """Total reward per validation prompt (fixed sampling seed), timed as an EVAL phase; the
        control plane measures a ticket's effect on these."""
        if not self.prompts.eval_items:
            return None
        with self.clock.phase("EVAL", step):
            totals, _ = self.evaluator.score(self.models.actor, step, self.live.params.max_new_tokens)
        return [float(x) for x in totals]

    # ------------------------------------------------------------------ helpers

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

    def n_samples(self, step: int) -> int:
        """Samples per prompt at ``step``: rollout.n_samples, or the rollout.schedule's stage."""
        return self.schedule.n_samples(step)

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
