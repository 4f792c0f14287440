"""rlcockpit as a verl tracking backend (docs/integrations.md, "verl"): one word in the launch
command, and a verl PPO / GRPO run is live in rlcockpit.

    python -m verl.trainer.main_ppo ... trainer.logger='["console","rlcockpit"]'

How it gets there: rlcockpit declares an entry point in the group ``verl.plugins``; ``import verl``
loads every entry point of that group (``verl/__init__.py``, unless ``VERL_USE_EXTERNAL_PLUGINS=none``),
which imports :mod:`rlcockpit.integrations.verl_plugin`, which calls :func:`install`: ``"rlcockpit"``
joins ``Tracking.supported_backend`` and ``Tracking.__init__`` is wrapped so that a tracker whose
backends name it gets a :class:`VerlLogger` in its ``logger`` dict. verl's ``Tracking.log`` then
hands it every step (``log(data=metrics, step=global_steps)``), as it does its own backends.

What the logger does with a step: the metrics under catalog names (the ``verl`` alias table,
``kl/mean`` derived from the per-token KL), the samples of verl's generation dumps that became
whole (:mod:`.verl_dumps`), the detectors, the severity policy's actions, and the control boundary:
a pause from the cockpit blocks in ``log()`` until resumed; a stop closes the run ``stopped`` and
raises :class:`RunStopped` (a ``SystemExit``) out of ``log()``, so verl's ``finally`` blocks run
and the driver ends. verl's live hyper-parameters live in its Ray workers: no ticket can change
one, and a ``checkpoint`` or ``rollback`` command fails with the reason.

The end: ``Tracking.finish(exit_code)`` (wrapped too: verl finishes only its own backends) reads
the last dumps, diagnoses the last steps and closes the run ``finished`` (exit code 0) or
``failed``; an ``atexit`` handler does the same when nothing finished the tracker, ``failed``
when the program ends on an uncaught exception. Telemetry never raises into training: a failed
step is logged as a warning and counted; only :class:`RunStopped` leaves ``log()``.

Settings (environment, read when the tracker is created): ``RLCOCKPIT_STORE`` (store URI; default
``sqlite:///rlcockpit.db`` in the working directory of the process that creates the tracker — the
driver, or verl's TaskRunner actor — printed as an absolute path), ``RLCOCKPIT_RUN_ID`` (the run
id; default: the id kept in ``<trainer.default_local_dir>/rlcockpit_run_id`` when verl resumes
from a checkpoint there, else a new one), ``RLCOCKPIT_VERL_REWARD_EXTRAS`` (``module:function``,
a hook ``row -> {sub-score: value}`` applied to each dump row, :mod:`.verl_dumps`),
``RLCOCKPIT_DIAGNOSTICS`` (``off``, or a YAML file of ``DiagnosticsConfig``: thresholds and the
severity policy — by default a red finding pauses the driver, a black one stops it).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("rlcockpit.integrations.verl")
BACKEND = "rlcockpit"
STORE_ENV, RUN_ID_ENV, EXTRAS_ENV = "RLCOCKPIT_STORE", "RLCOCKPIT_RUN_ID", "RLCOCKPIT_VERL_REWARD_EXTRAS"
DIAGNOSTICS_ENV = "RLCOCKPIT_DIAGNOSTICS"  # "off", or a YAML file of DiagnosticsConfig (thresholds, policy)
DEFAULT_STORE_FILE = "rlcockpit.db"
RUN_ID_FILE = "rlcockpit_run_id"  # in trainer.default_local_dir, beside verl's checkpoints
LATEST = "latest_checkpointed_iteration.txt"  # verl's marker of a checkpoint to resume from
FAILING = ("red", "black")
SOURCE = "verl"


class RunStopped(SystemExit):
    """Raised out of ``Tracking.log`` when the cockpit stopped the run (the run is closed first)."""


# ---------------------------------------------------------------------- the plugin


def install(tracking_cls: Any = None) -> bool:
    """Register the ``rlcockpit`` backend in verl's ``Tracking`` (idempotent); False when verl's
    tracking module cannot be imported (logged)."""
    if tracking_cls is None:
        try:
            from verl.utils.tracking import Tracking as tracking_cls
        except Exception as exc:  # a verl without that module: the plugin stays off, verl runs on
            log.warning("rlcockpit: verl's tracking module is not importable (%s); the rlcockpit backend is off", exc)
            return False
    if getattr(tracking_cls, "_rlcockpit_installed", False):
        return True
    if BACKEND not in tracking_cls.supported_backend:
        tracking_cls.supported_backend.append(BACKEND)
    original_init, original_finish = tracking_cls.__init__, tracking_cls.finish

    @functools.wraps(original_init)
    def __init__(self, project_name, experiment_name, default_backend="console", config=None, **kwargs):
        original_init(self, project_name, experiment_name, default_backend, config, **kwargs)
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        if BACKEND in backends:
            self.logger[BACKEND] = VerlLogger(project_name, experiment_name, config)

    @functools.wraps(original_finish)
    def finish(self, *args, **kwargs):
        try:
            original_finish(self, *args, **kwargs)
        finally:
            ours = getattr(self, "logger", {}).get(BACKEND)
            if ours is not None:
                ours.finish(*args, **kwargs)

    tracking_cls.__init__, tracking_cls.finish = __init__, finish
    tracking_cls._rlcockpit_installed = True
    return True


# ---------------------------------------------------------------------- the logger


class VerlLogger:
    """The backend object in ``Tracking.logger["rlcockpit"]``. ``config``: the resolved verl config
    (``OmegaConf.to_container``) as verl passes it; the keyword arguments override the environment."""

    def __init__(self, project_name: str, experiment_name: str, config: Mapping[str, Any] | None = None, *,
                 store: str | None = None, run_id: str | None = None, control: bool = True,
                 diagnostics: Any = None, reward_extra_infos: Any = None, force: bool = False) -> None:
        from rlcockpit.control import ControlConfig
        from rlcockpit.integrations.aliases import to_catalog
        from rlcockpit.integrations.loop_control import attach
        from rlcockpit.integrations.verl_dumps import DumpReader
        from rlcockpit.store import open_store
        from rlcockpit.telemetry import init

        self.config = dict(config or {})
        trainer = dict(self.config.get("trainer") or {})
        self.store_uri = store or os.environ.get(STORE_ENV) or f"sqlite:///{Path(DEFAULT_STORE_FILE).resolve()}"
        opened = open_store(self.store_uri)
        run_id, resume = _run_identity(opened, run_id or os.environ.get(RUN_ID_ENV), trainer)
        self.reference, self.kl_coef = _reference_of(self.config)
        self.total_steps = _total_steps(self.config)
        self.run = init(project=str(project_name), name=str(experiment_name), store=opened, run_id=run_id,
                        resume=resume, config=self._run_config(project_name, experiment_name), force=force)
        _keep_run_id(trainer, self.run.run_id)
        self.link = attach(self.run, opened, {}, ControlConfig()) if control else None  # commands only
        self.engine = self.policy = None
        diagnostics = diagnostics if diagnostics is not None else _diagnostics_from_env()
        if diagnostics is not False:
            from rlcockpit.diagnostics import DiagnosticsConfig, Engine
            from rlcockpit.diagnostics.policy import Policy

            cfg = diagnostics or DiagnosticsConfig()
            self.engine, self.policy = Engine.from_config(cfg), Policy(cfg.policy)
        hook = reward_extra_infos or _hook_from_env()
        self.dumps = DumpReader(trainer.get("rollout_data_dir"), trainer.get("validation_data_dir"), hook)
        self._pending: dict[int, tuple[dict[str, float], list[Any]]] = {}  # steps the detectors have not seen
        self._findings: list[Any] = []
        self._last_step: int | None = None
        self._stopped_by: str | None = None
        self._failed = False
        self.skipped = 0  # values that were not numbers
        to_catalog("rlcockpit/set-up", SOURCE)  # loads the alias tables now, not in the first step
        self.run.event(self.run.info.last_step or 0, "verl_attached",
                       {"store": self.store_uri, "reference": self.reference,
                        "rollout_data_dir": trainer.get("rollout_data_dir"),
                        "validation_data_dir": trainer.get("validation_data_dir")})
        _chain_excepthook(self)
        atexit.register(self._at_exit)
        print(f"rlcockpit: verl run {self.run.run_id} -> {self.store_uri}", flush=True)

    # ------------------------------------------------------------------ verl calls these

    def log(self, data: Mapping[str, Any], step: int) -> None:
        """One ``Tracking.log`` call. Never raises, except :class:`RunStopped`."""
        try:
            step = int(step)
            with self.run.deferred():
                self._step(data, step)
        except Exception as exc:  # fail soft: the step is missing in the cockpit, training goes on
            log.warning("rlcockpit verl: step %s was not logged: %s", step, exc)
            return
        self._boundary(step)

    def finish(self, exit_code: int = 0, *args: Any, **kwargs: Any) -> None:
        """The end of the run: last dumps, last diagnoses, the status (idempotent)."""
        if self.run.closed:
            return
        try:
            self._take_dumps(final=True)
            self._diagnose(up_to=None)
        except Exception as exc:  # fail soft: the run is still closed below
            log.warning("rlcockpit verl: the last steps were not complete: %s", exc)
        status = "finished" if exit_code == 0 and not self._failed and sys.exc_info()[1] is None else "failed"
        if self._stopped_by is not None or (self.link is not None and self.run.stop_requested):
            status = "stopped"
        elif status == "finished" and self._cut_short():
            status = "failed"
            self.run.event(self._last_step or 0, "run_cut_short", {
                "last_step": self._last_step, "total_training_steps": self.total_steps,
                "reason": "verl's tracker was finished before the last training step (an exception in the "
                          "driver, or the run was cut short)"})
        atexit.unregister(self._at_exit)
        self.run.close(status)

    # ------------------------------------------------------------------ one step

    def _step(self, data: Mapping[str, Any], step: int) -> None:
        metrics = self._metrics(data)
        self.run.log(step, metrics)
        held = self._pending.setdefault(step, ({}, []))
        held[0].update(metrics)
        self._take_dumps(final=False)
        self.run.commit(step)
        self._last_step = step if self._last_step is None else max(self._last_step, step)
        self._diagnose(up_to=step + 1)

    def _metrics(self, data: Mapping[str, Any]) -> dict[str, float]:
        from rlcockpit.integrations.aliases import rename_keys
        from rlcockpit.integrations.importers._base import LENGTH_MEAN, SEQUENCE_KL, TOKEN_KL

        values: dict[str, float] = {}
        for key, raw in data.items():
            value = _number(raw)
            if value is None:
                self.skipped += 1
            else:
                values[str(key)] = value
        out = {name: values[key] for key, name in rename_keys(values, SOURCE).items()}
        if TOKEN_KL in out and LENGTH_MEAN in out and SEQUENCE_KL not in out:
            out[SEQUENCE_KL] = out[TOKEN_KL] * out[LENGTH_MEAN]  # the KL detectors read the per-sequence KL
        if not self.reference:
            out.setdefault("kl/coef", 0.0)  # declares "no reference model" to the KL detectors
        return out

    def _take_dumps(self, final: bool) -> None:
        for step, samples in sorted(self.dumps.read(final=final).items()):
            self.run.log_samples(step, samples)
            training = [s for s in samples if not s.flags]
            if training and step in self._pending:
                self._pending[step][1].extend(training)

    def _diagnose(self, up_to: int | None) -> None:
        """Feed the detectors every held step before ``up_to`` (None: all, the end) that is
        complete: with dumps, a step waits for its samples, at most until two steps later."""
        for step in sorted(self._pending):
            if up_to is not None and (step >= up_to or (self.dumps.enabled and not self._pending[step][1]
                                                         and step >= up_to - 2)):
                break
            metrics, samples = self._pending.pop(step)
            if self.engine is None or not metrics:
                continue
            try:
                findings = self.engine.observe(step, metrics, samples, time.time())
            except Exception as exc:  # fail soft: the detectors miss a step, training goes on
                log.warning("rlcockpit verl: the detectors failed on step %d: %s", step, exc)
                continue
            self._record(step, findings)

    def _record(self, step: int, findings: list[Any]) -> None:
        for f in findings:
            self._findings.append(f)
            self.run.finding(step=f.step, detector=f.detector, severity=f.severity, message=f.message,
                             evidence=f.evidence, patterns=f.patterns, status=f.status, incident=f.incident)
        for action in self.policy.plan(findings) if self.policy is not None else ():
            if action.name in ("stop", "rollback"):
                self._stopped_by = action.detector
            if action.name not in ("checkpoint", "pause", "stop", "rollback") or self.link is None:
                continue
            try:
                self.link.channel.automatic(action.detector, action.name, {
                    "severity": action.severity, "incident": action.incident, "finding_step": action.step},
                    reason=f"{action.severity} finding of {action.detector}: {action.finding.message}")
            except Exception as exc:  # fail soft: a stop still stops without its ticket
                log.warning("rlcockpit verl: no ticket for the %s action of %s: %s", action.name, action.detector, exc)

    def _boundary(self, step: int) -> None:
        """Tickets and commands after ``step``: a pause blocks here, a stop raises RunStopped."""
        if self.link is not None:
            try:
                for change in self.run.pending_changes(step):
                    change.failed(_CANNOT.get(change.name, f"verl's live parameters ({change.name}) live in its Ray "
                                                           "workers: the logger cannot change them"))
            except Exception as exc:  # fail soft: the tickets stay queued for a later boundary
                log.warning("rlcockpit verl: the control boundary after step %d failed: %s", step, exc)
        if self._stopped_by is not None or (self.link is not None and self.run.stop_requested):
            who = self._stopped_by or "the cockpit"
            self.finish(0)
            raise RunStopped(f"rlcockpit: run {self.run.run_id} stopped after step {step} by {who}")

    # ------------------------------------------------------------------ the end

    def _cut_short(self) -> bool:
        return self.total_steps is not None and self._last_step is not None and self._last_step < self.total_steps

    def _at_exit(self) -> None:
        try:
            self.finish(1 if self._failed else 0)
        except Exception as exc:  # at exit: report, never raise
            log.warning("rlcockpit verl: closing run %s at exit failed: %s", self.run.run_id, exc)

    def _run_config(self, project: str, experiment: str) -> dict[str, Any]:
        try:
            import verl

            version = getattr(verl, "__version__", "")
        except Exception:  # the logger used without verl (its own tests): no version to record
            version = ""
        return {"verl": {"version": version, "project": str(project), "experiment": str(experiment),
                         "reference": self.reference, "kl_coef": self.kl_coef,
                         "total_training_steps": self.total_steps, "config": _json_safe(self.config)}}


_CANNOT = {
    "checkpoint": "verl saves checkpoints every trainer.save_freq steps in its workers; the logger cannot save one",
    "rollback": "verl cannot roll back in-process: stop the run and resume it from an earlier checkpoint "
                "(trainer.resume_mode=resume_path, trainer.resume_from_path=...)",
}


# ---------------------------------------------------------------------- helpers


def _number(raw: Any) -> float | None:
    """A metric value as a float: Python and numpy numbers, 0-d tensors and arrays; else None."""
    if isinstance(raw, (bool, str, bytes)) or raw is None:
        return None
    if hasattr(raw, "item") and getattr(raw, "ndim", 0) == 0:
        raw = raw.item()
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _reference_of(config: Mapping[str, Any]) -> tuple[bool, float]:
    """(whether verl loads a reference model, the KL coefficient): a reference exists when the KL
    is in the reward (``algorithm.use_kl_in_reward``) or a loss (``actor.use_kl_loss``). Without a
    config (the logger used on its own) a reference is assumed: the KL detectors then skip as usual."""
    if not config:
        return True, math.nan
    algorithm = dict(config.get("algorithm") or {})
    actor = dict(dict(config.get("actor_rollout_ref") or {}).get("actor") or {})
    if algorithm.get("use_kl_in_reward"):
        return True, float(dict(algorithm.get("kl_ctrl") or {}).get("kl_coef", math.nan))
    if actor.get("use_kl_loss"):
        return True, float(actor.get("kl_loss_coef", math.nan))
    return False, 0.0


def _total_steps(config: Mapping[str, Any]) -> int | None:
    actor = dict(dict(config.get("actor_rollout_ref") or {}).get("actor") or {})
    for value in (dict(actor.get("optim") or {}).get("total_training_steps"),
                  dict(config.get("trainer") or {}).get("total_training_steps")):
        if isinstance(value, int) and value > 0:
            return value
    return None


def _run_identity(opened: Any, run_id: str | None, trainer: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(run id, resume): the given id (resumed when the store has it); the id kept beside the
    checkpoints when verl will resume from one there; else a new run."""
    from rlcockpit.errors import NotFoundError

    if not run_id and trainer.get("resume_mode", "auto") != "disable":
        where = Path(str(trainer.get("default_local_dir") or "checkpoints"))
        kept = where / RUN_ID_FILE
        if (where / LATEST).exists() and kept.exists():
            run_id = kept.read_text(encoding="utf-8").strip() or None
    if not run_id:
        return None, False
    reader = opened.reader()
    try:
        reader.get_run(run_id)
        return run_id, True
    except NotFoundError:
        return run_id, False
    finally:
        reader.close()


def _keep_run_id(trainer: Mapping[str, Any], run_id: str) -> None:
    where = trainer.get("default_local_dir")
    if not where:
        return
    try:
        Path(str(where)).mkdir(parents=True, exist_ok=True)
        (Path(str(where)) / RUN_ID_FILE).write_text(run_id + "\n", encoding="utf-8")
    except OSError as exc:  # a resumed verl run will then start a new rlcockpit run
        log.warning("rlcockpit verl: cannot keep the run id in %s: %s", where, exc)


def _hook_from_env() -> Any:
    spec = os.environ.get(EXTRAS_ENV, "").strip()
    if not spec:
        return None
    from rlcockpit.errors import ConfigError

    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{EXTRAS_ENV}={spec!r} names no function ({exc}); give module:function",
                          details={"key": EXTRAS_ENV}) from exc


def _diagnostics_from_env() -> Any:
    spec = os.environ.get(DIAGNOSTICS_ENV, "").strip()
    if not spec:
        return None
    if spec.lower() in ("off", "0", "false", "no"):
        return False
    from rlcockpit.config import load_config
    from rlcockpit.diagnostics import DiagnosticsConfig

    return load_config(DiagnosticsConfig, spec)


def _json_safe(value: Any) -> Any:
    """The config as JSON: non-finite floats become null, other odd values their text."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return json.loads(json.dumps(value, default=str))


def _chain_excepthook(logger: VerlLogger) -> None:
    """Remember an uncaught exception, so the at-exit close marks the run failed."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, RunStopped):
            logger._failed = True
        previous(exc_type, exc, tb)

    sys.excepthook = hook
