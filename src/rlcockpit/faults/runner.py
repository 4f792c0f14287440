"""One tiny-world training run with (or without) a fault, diagnostics on, recorded in a store.

Shared by ``rlcockpit faults run`` and ``benchmarks/detection.py``. The run uses the trainer's
defaults (the values ``examples/ppo_tiny.yaml`` spells out) or a YAML config, a short budget
(``onset + DEFAULT_AFTER`` steps), no periodic evaluation or checkpoints, one torch thread, and a
diagnostics policy that only alerts: a fault run must not pause itself waiting for a person.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcockpit.config import apply_overrides, from_dict, read_yaml
from rlcockpit.faults.base import Fault
from rlcockpit.trainer.config import TrainConfig

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


def run_fault(fault: Fault | None, cfg: TrainConfig) -> FaultRunResult:
    """Train ``cfg`` with ``fault`` injected (None = a healthy run); returns where it was recorded."""
    from rlcockpit.trainer.trainer import Trainer

    trainer = fault.trainer(cfg) if fault is not None else Trainer(cfg)
    result = trainer.run()
    return FaultRunResult(run_id=result.run_id, status=result.status, fault=fault.name if fault else "",
                          onset=fault.onset if fault else None, steps=result.step, store=cfg.telemetry.store)


def _has_diagnostics() -> bool:
    return any(f.name == "diagnostics" for f in dataclasses.fields(TrainConfig))


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
