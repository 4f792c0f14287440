"""The cockpit for TRL trainers (docs/integrations.md): one call, and a GRPO / RLOO run is live in
rlcockpit — every metric (through the alias table), every completion with each reward function's
score and its advantage, the detectors, and audited tickets and commands at the step boundary.

    from rlcockpit.integrations.trl import watch
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    watch(trainer, store="sqlite:///runs.db")
    trainer.train()

``RlcockpitCallback`` can also be passed in ``callbacks=[...]`` without the trainer: metrics, the
detectors and the learning rate then work, completions and the other knobs need ``watch``.

The step boundary is the end of an optimizer step — after its metrics are logged when the step
logs (``on_log``, so the detectors' actions act on the step that raised them), else ``on_step_end``.
There the run takes its approved tickets (:mod:`.trl_knobs`: learning rate, beta, temperature, max
completion length, epsilon) and commands: pause blocks until resumed, stop sets
``should_training_stop``, checkpoint sets ``should_save``. The severity policy's actions become
tickets approved by the policy (red: checkpoint + pause, black: stop), and a run stopped on a red
or black finding gets a ``post_mortem`` event naming the checkpoint to resume from.

The detectors run in the training thread at each logged step, so a step's actions act on that very
step. ``background_diagnostics=True`` runs them in a background thread while the trainer generates
the next batch: a logged step's findings are written, and their actions taken, at the first boundary
after they are ready (at most ``MAX_BEHIND`` logged steps wait; then the training thread waits for
the oldest). On the tiny CPU model it did not make the training thread's share smaller (the GIL and
the two cores are shared; benchmarks/README.md).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from transformers import TrainerCallback

from rlcockpit.integrations.aliases import rename_keys, to_catalog
from rlcockpit.integrations.importers._base import LENGTH_MEAN, SEQUENCE_KL, TOKEN_KL
from rlcockpit.integrations.trl_knobs import apply_change, knobs_of
from rlcockpit.integrations.trl_samples import samples_of, token_names

log = logging.getLogger("rlcockpit.integrations.trl")
SOURCES = {"GRPOTrainer": "trl-grpo", "RLOOTrainer": "trl-grpo", "PPOTrainer": "trl-ppo"}
FAILING = ("red", "black")
SNAPSHOT_SAMPLES = 50
MAX_BEHIND = 2  # logged steps whose background diagnosis may still be running at a boundary


def algorithm_of(trainer: Any) -> tuple[str, str]:
    """(trainer class TRL ships, alias source) of a trainer or of one derived from it."""
    for cls in type(trainer).__mro__:
        if cls.__name__ in SOURCES:
            return cls.__name__, SOURCES[cls.__name__]
    return type(trainer).__name__, "trl-grpo"


def watch(trainer: Any, **options: Any) -> RlcockpitCallback:
    """Attach the cockpit to ``trainer`` (before ``trainer.train()``); options as for
    :class:`RlcockpitCallback`."""
    callback = RlcockpitCallback(trainer=trainer, **options)
    trainer.add_callback(callback)
    return callback


class RlcockpitCallback(TrainerCallback):
    """``store``: URI of the store; ``project`` / ``name`` / ``run_id``: the run's labels (``resume``:
    continue run ``run_id``, e.g. with ``trainer.train(resume_from_checkpoint=...)``); ``control``: take tickets (a ``ControlConfig``, True, or False); ``diagnostics``: a
    ``DiagnosticsConfig``, None for the defaults, or False; ``background_diagnostics``: run the
    detectors beside the training thread, their actions one or two logged steps later (default: in
    it, actions on the step that raised them);
    ``token_arrays``: the telemetry's ``TokenArrayPolicy``; ``force``: with ``resume``, take over the
    run's lease even from a live holder (docs/telemetry.md, "One writer per run")."""

    def __init__(self, *, trainer: Any = None, store: str = "sqlite:///rlcockpit.db", project: str = "trl",
                 name: str | None = None, run_id: str | None = None, resume: bool = False, control: Any = True,
                 diagnostics: Any = None, background_diagnostics: bool = False,
                 token_arrays: Any = None, force: bool = False) -> None:
        self.trainer, self.store, self.project, self.name, self.run_id = trainer, store, project, name, run_id
        self.resume, self.force = resume, force
        self.control_cfg, self.diagnostics_cfg, self.token_arrays = control, diagnostics, token_arrays
        self.run: Any = None
        self.link: Any = None  # the control link (tickets and commands) when control is on
        self.engine = self.policy = None
        self.source = "trl-grpo"
        self._samples: dict[int, list[Any]] = {}  # completions captured, by step, not logged yet
        self._next_sample_id: dict[int, int] = {}
        self._findings: list[Any] = []
        self._checkpoints: list[tuple[int, str]] = []
        self._stopped_by: str | None = None
        self._knob_target = trainer  # what ticket changes are applied to
        self.background = background_diagnostics
        self._worker: ThreadPoolExecutor | None = None
        self._diagnosing: deque[tuple[int, list[Any], Future]] = deque()  # (step, samples, findings), oldest first
        self._ended = False
        self._sync_every = 0.0  # TRL sync_ref_model: the reference is mixed with the actor every N steps

    # ------------------------------------------------------------------ start

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.run is not None:
            return
        from rlcockpit.control import ControlConfig
        from rlcockpit.integrations.loop_control import attach
        from rlcockpit.store import open_store
        from rlcockpit.telemetry import LeaseOptions, init

        trainer = self.trainer
        algo, self.source = algorithm_of(trainer) if trainer is not None else ("Trainer", "trl-grpo")
        opened = open_store(self.store)
        self.run = init(project=self.project, name=self.name or f"{algo}-{args.run_name or 'trl'}", store=opened,
                        run_id=self.run_id, resume=self.resume, config=_config_of(args, algo),
                        token_arrays=self.token_arrays, lease=LeaseOptions(kind="trl"), force=self.force)
        if self.control_cfg:
            cfg = self.control_cfg if isinstance(self.control_cfg, ControlConfig) else ControlConfig()
            if trainer is None:  # callbacks=[...]: what the Trainer hands its callbacks is enough for the lr
                self._knob_target = SimpleNamespace(args=args, optimizer=kwargs.get("optimizer"),
                                                    lr_scheduler=kwargs.get("lr_scheduler"))
            self.link = attach(self.run, opened, knobs_of(self._knob_target), cfg)  # publishes the knobs: tickets can name them
        if self.diagnostics_cfg is not False:
            from rlcockpit.diagnostics import DiagnosticsConfig, Engine
            from rlcockpit.diagnostics.policy import Policy

            cfg = self.diagnostics_cfg or DiagnosticsConfig()
            self.engine, self.policy = Engine.from_config(cfg), Policy(cfg.policy)
            if self.background:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="rlcockpit-diagnose")
        if trainer is not None and hasattr(trainer, "_generate_and_score_completions"):
            self._capture_completions(trainer)
        if getattr(args, "sync_ref_model", False):
            self._sync_every = float(getattr(args, "ref_model_sync_steps", 0) or 0)
        to_catalog("rlcockpit/set-up", self.source)  # loads the alias tables and the catalog now, not in step 1
        self.run.event(state.global_step, "trl_attached", {"trainer": algo, "source": self.source})

    def _capture_completions(self, trainer: Any) -> None:
        generate = trainer._generate_and_score_completions
        callback = self
        names = token_names(trainer)  # token ids -> strings, each id converted once for the run

        def generate_and_log(inputs, *a, **kw):
            output = generate(inputs, *a, **kw)
            try:
                step = trainer.state.global_step + 1  # the optimizer step these completions train
                first = callback._next_sample_id.get(step, 0)
                found = samples_of(trainer, inputs, output, step, first, names)
                callback._next_sample_id[step] = first + len(found)
                callback._samples.setdefault(step, []).extend(found)
            except Exception as exc:  # fail soft: training goes on without these samples
                log.warning("rlcockpit: could not read the completions of step %s: %s", trainer.state.global_step, exc)
            return output

        trainer._generate_and_score_completions = generate_and_log

    # ------------------------------------------------------------------ each step

    def on_step_end(self, args, state, control, **kwargs):
        if self.run is None or control.should_log:
            return  # the boundary comes in on_log, after this step's metrics and findings
        self._collect(wait=False)
        self._boundary(state.global_step, args, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not logs or "train_runtime" in logs:
            return
        step = state.global_step
        # the writer thread is woken once, after the boundary (a pause hands the step over first)
        with self.run.deferred():
            metrics = self._metrics(logs)
            self.run.log(step, metrics)
            samples = []
            for st in [st for st in sorted(self._samples) if st <= step]:
                samples = self._samples.pop(st)
                self.run.log_samples(st, samples)
            self.run.commit(step)
            if any(k.startswith("eval_") for k in logs):
                return
            self._collect(wait=False)  # the findings ready by now: their actions act at this boundary
            self._diagnose(step, metrics, [s for s in samples if s.step == step])
            self._boundary(step, args, control)

    def on_save(self, args, state, control, **kwargs):
        if self.run is not None:
            path = f"{args.output_dir}/checkpoint-{state.global_step}"
            self._checkpoints.append((state.global_step, path))
            self.run.checkpoint(state.global_step, path, "trl")

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is None:
            return
        self._ended = True  # the last findings are written; no ticket is opened for a run that ended
        self._collect(wait=True)
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        stopped = self.run.stop_requested or self._stopped_by is not None
        if stopped and any(f.severity in FAILING for f in self._findings):
            self._post_mortem(state.global_step)
        self.run.close("stopped" if stopped else "finished")

    # ------------------------------------------------------------------ internals

    def _metrics(self, logs: Mapping[str, Any]) -> dict[str, float]:
        values = {k: float(v) for k, v in logs.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
        out = {name: values[key] for key, name in rename_keys(values, self.source).items()}
        if TOKEN_KL in out and LENGTH_MEAN in out and SEQUENCE_KL not in out:
            out[SEQUENCE_KL] = out[TOKEN_KL] * out[LENGTH_MEAN]  # the KL detectors read the per-sequence KL
        trainer = self.trainer
        if trainer is not None and getattr(trainer, "beta", None) is not None:
            out.setdefault("kl/coef", float(trainer.beta))  # beta 0 and no KL: "no reference" to the KL detectors
        if self._sync_every:
            out.setdefault("kl/ref_sync_every", self._sync_every)  # an intended reference update (kl_zero)
        if trainer is not None and getattr(trainer, "epsilon_low", None) is not None:
            out.setdefault("policy/clip_eps", float(trainer.epsilon_low))
        return out

    def _diagnose(self, step: int, metrics: dict[str, float], samples: list[Any]) -> None:
        if self.engine is None:
            return
        if self._worker is not None:
            while len(self._diagnosing) >= MAX_BEHIND:  # the detectors fell behind: wait for the oldest
                self._collect_one()
            future = self._worker.submit(self.engine.observe, step, metrics, samples, time.time())
            self._diagnosing.append((step, samples, future))
            return
        try:
            findings = self.engine.observe(step, metrics, samples, time.time())
        except Exception as exc:  # fail soft: the detectors miss a step, training goes on
            log.warning("rlcockpit: the detectors failed on step %d: %s", step, exc)
            return
        self._record(step, findings, samples)

    def _collect(self, wait: bool) -> None:
        """The findings of the steps diagnosed in the background, in step order: those done (``wait``:
        all of them, blocking)."""
        while self._diagnosing and (wait or self._diagnosing[0][2].done()):
            self._collect_one()

    def _collect_one(self) -> None:
        """The oldest background diagnosis's findings (blocks until it is done)."""
        step, samples, future = self._diagnosing.popleft()
        try:
            findings = future.result()
        except Exception as exc:  # fail soft: the detectors miss a step, training goes on
            log.warning("rlcockpit: the detectors failed on step %d: %s", step, exc)
            return
        self._record(step, findings, samples)

    def _record(self, step: int, findings: list[Any], samples: list[Any]) -> None:
        """Write a step's findings and carry out the severity policy's actions."""
        for f in findings:
            self._findings.append(f)
            self.run.finding(step=f.step, detector=f.detector, severity=f.severity, message=f.message,
                             evidence=f.evidence, patterns=f.patterns, status=f.status, incident=f.incident)
        for action in self.policy.plan(findings):
            self._act(action, step, samples)

    def _act(self, action: Any, step: int, samples: list[Any]) -> None:
        """The policy's action: evidence now; pause / stop / checkpoint as policy-approved tickets,
        carried out at this boundary (right after) like an operator's."""
        if action.name in ("snapshot", "save_batch"):
            self.run.snapshot(step, action.name, {"samples": [_brief(s) for s in samples[-SNAPSHOT_SAMPLES:]],
                                                  "finding": action.finding.message}, incident=action.incident)
            return
        if action.name in ("stop", "rollback"):
            self._stopped_by = action.detector
        if action.name not in ("checkpoint", "pause", "stop", "rollback") or self.link is None or self._ended:
            return
        try:
            self.link.channel.automatic(action.detector, action.name, {
                "severity": action.severity, "incident": action.incident, "finding_step": action.step},
                reason=f"{action.severity} finding of {action.detector}: {action.finding.message}")
        except Exception as exc:  # fail soft: a stop still stops without its ticket
            log.warning("rlcockpit: no ticket for the %s action of %s: %s", action.name, action.detector, exc)

    def _boundary(self, step: int, args: Any, control: Any) -> None:
        if self.link is not None:
            for change in self.run.pending_changes(step):
                try:
                    self._carry_out(change, step, args, control)
                except Exception as exc:  # the ticket fails, training goes on
                    change.failed(f"{type(exc).__name__}: {exc}")
        if self.run.stop_requested or self._stopped_by:
            control.should_training_stop = True

    def _carry_out(self, change: Any, step: int, args: Any, control: Any) -> None:
        if change.kind == "param":
            apply_change(self._knob_target, change.name, change.value)
            change.applied()
        elif change.name == "checkpoint":
            control.should_save = True
            change.applied(checkpoint=f"{args.output_dir}/checkpoint-{step}")
        else:
            resume = self._resume_point(step)
            change.failed("rollback is not supported inside a TRL run: stop it and resume from "
                          + (resume or "an earlier checkpoint") + " (resume_from_checkpoint)")
            control.should_training_stop = True

    def _resume_point(self, step: int) -> str | None:
        """The newest checkpoint saved before the first red / black finding's incident began."""
        bad = [f for f in self._findings if f.severity in FAILING]
        onset = min((int((f.evidence or {}).get("onset_step", f.step)) for f in bad), default=step)
        before = [path for s, path in self._checkpoints if s < onset]
        return before[-1] if before else None

    def _post_mortem(self, step: int) -> None:
        bad = [f for f in self._findings if f.severity in FAILING]
        resume = self._resume_point(step)
        payload = {"stopped_step": step, "findings": [{"step": f.step, "detector": f.detector, "severity": f.severity,
                                                       "message": f.message, "incident": f.incident} for f in bad],
                   "resume_from": resume,
                   "advice": f"resume with trainer.train(resume_from_checkpoint={resume!r}) after the fix the "
                             "failure library gives for these detectors" if resume else
                             "no checkpoint precedes the incident: restart, with the fix the failure library gives"}
        self.run.event(step, "post_mortem", payload)
        log.warning("rlcockpit post-mortem at step %d: %s", step, payload["advice"])


def _brief(sample: Any) -> dict[str, Any]:
    return {"step": sample.step, "sample_id": sample.sample_id, "reward": sample.reward,
            "response": sample.response[:500], "advantage": sample.advantage}


def _config_of(args: Any, algo: str) -> dict[str, Any]:
    import trl

    try:
        values = args.to_dict()
    except Exception:  # a custom args object: its public attributes
        values = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    safe = {k: v for k, v in values.items() if isinstance(v, (str, int, float, bool, type(None)))
            and not (isinstance(v, float) and not math.isfinite(v))}
    beta = getattr(args, "beta", None)
    reference = {"reference_model": beta is None or float(beta) != 0.0,  # GRPO / RLOO with beta 0 load none
                 "sync_ref_model": bool(getattr(args, "sync_ref_model", False)),
                 "ref_model_sync_steps": getattr(args, "ref_model_sync_steps", None),
                 "ref_model_mixup_alpha": getattr(args, "ref_model_mixup_alpha", None)}
    return {"trl": {"trainer": algo, "version": trl.__version__, "args": safe, "reference": reference}}
