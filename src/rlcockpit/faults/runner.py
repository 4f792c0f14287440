"""One tiny-world training run with (or without) a fault, diagnostics on, recorded in a store.

Shared by ``rlcockpit faults run`` and ``benchmarks/detection.py``. The run uses the trainer's
defaults (the values ``examples/ppo_tiny.yaml`` spells out) or a YAML config, a short budget
(``onset + DEFAULT_AFTER`` steps), no periodic evaluation or checkpoints, one torch thread, and a
diagnostics policy that only alerts: a fault run must not pause itself waiting for a person.

Two helpers serve the benchmark's twins: ``checkpoint_at`` makes a (healthy) run write a checkpoint
at the end of the given steps (an on-demand checkpoint through the live inbox, like an operator's),
and ``resume_from`` continues such a checkpoint in another store with the fault injected -- resume
is exact, so the resumed run's steps equal the twin's until the fault strikes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcockpit.config import apply_overrides, from_dict, read_yaml
from rlcockpit.faults.base import Fault
from rlcockpit.trainer.config import TrainConfig

log = logging.getLogger("rlcockpit.faults")
DEFAULT_AFTER = 20  # steps trained after the onset: the faults show within ~10-20 steps
ALERT_ONLY = {"yellow": ["alert"], "orange": ["alert"], "red": ["alert"], "black": ["alert"]}


@dataclass(frozen=True)
class FaultRunResult:
    run_id: str
    status: str
    fault: str  # "" for a healthy run
    onset: int | None
    steps: int
    store: str


def fault_config(*, seed: int, store: str, steps: int, name: str = "", config: str | Path | None = None,
                 overrides: Sequence[str] = ()) -> TrainConfig:
    """YAML (or defaults) < the fault-run settings < ``KEY=VALUE`` overrides; validated."""
    data: dict[str, Any] = read_yaml(config) if config else {}
    run = {"seed": seed, "project": "faults", "name": name, "train": {"steps": steps}, "eval": {"every": 0},
           "checkpoint": {"every": 0, "at_end": False}, "model": {"threads": 1}, "telemetry": {"store": store}}
    if _has_diagnostics():
        run["diagnostics"] = {"enabled": True, "policy": {"actions": ALERT_ONLY, "console": False}}
    data = _merge(data, run)
    return from_dict(TrainConfig, apply_overrides(data, overrides))


def run_fault(fault: Fault | None, cfg: TrainConfig, *, resume_from: str | Path | None = None,
              checkpoint_at: Iterable[int] = (), group: Any = None) -> FaultRunResult:
    """Train ``cfg`` with ``fault`` injected (None = a healthy run); returns where it was recorded.

    ``checkpoint_at``: steps at whose end a checkpoint is written (under ``cfg.checkpoint.dir``).
    ``resume_from``: a checkpoint (e.g. a twin's) to continue from; the run is recorded in
    ``cfg.telemetry.store`` under the checkpoint's run id and ``cfg.name``, steps after the checkpoint only.
    ``group``: this rank of a data-parallel run (``trainer.distributed.init_group``); None = one process.
    """
    from rlcockpit.trainer.trainer import Trainer

    if resume_from is not None:
        prepare_resume(cfg, Path(resume_from))
    kwargs: dict[str, Any] = {"resume_from": resume_from} if resume_from is not None else {}
    if group is not None:
        kwargs["group"] = group
    trainer = fault.trainer(cfg, **kwargs) if fault is not None else Trainer(cfg, **kwargs)
    steps = sorted({int(s) for s in checkpoint_at})
    if steps:
        trainer.add_step_hook(CheckpointAt(steps))
    try:
        status = trainer.run().status
    except RuntimeError as exc:  # a collective timed out (a rank lost): the run is recorded as failed
        if group is None or not getattr(group, "distributed", False):
            raise
        log.error("the data-parallel run failed: %s", exc)
        status = "failed"
    return FaultRunResult(run_id=trainer.telemetry.run_id, status=status, fault=fault.name if fault else "",
                          onset=fault.onset if fault else None, steps=trainer.step, store=cfg.telemetry.store)


class CheckpointAt:
    """A step hook: ask for a checkpoint at the end of each of ``steps`` (written at that step's HOTFIX)."""

    def __init__(self, steps: Sequence[int]) -> None:
        self.steps = frozenset(steps)

    def __call__(self, trainer: Any, step: int) -> None:
        if step in self.steps:
            trainer.live.checkpoint(reason="twin checkpoint for the detection benchmark", requested_by="benchmark")

    def __repr__(self) -> str:
        return f"CheckpointAt({sorted(self.steps)})"


def prepare_resume(cfg: TrainConfig, checkpoint: Path) -> None:
    """A resumed run continues its run id: create that run (empty) in ``cfg``'s store if it is not there."""
    import json

    from rlcockpit.config import to_dict
    from rlcockpit.errors import ConfigError, NotFoundError
    from rlcockpit.records import RunInfo
    from rlcockpit.store import open_store

    try:
        run_id = str(json.loads((checkpoint / "meta.json").read_text(encoding="utf-8"))["run_id"])
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"resume_from={str(checkpoint)!r} is not a checkpoint directory (no readable "
                          f"meta.json: {exc}); pass a step_N directory written by the trainer",
                          details={"key": "resume_from"}) from exc
    store = open_store(cfg.telemetry.store)
    reader = store.reader()
    try:
        reader.get_run(run_id)
        return
    except NotFoundError:
        pass
    finally:
        reader.close()
    writer = store.writer()
    try:
        writer.create_run(RunInfo(run_id=run_id, project=cfg.project, name=cfg.name or run_id, status="stopped",
                                  config=to_dict(cfg)))
    finally:
        writer.close()


def _has_diagnostics() -> bool:
    return any(f.name == "diagnostics" for f in dataclasses.fields(TrainConfig))


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
