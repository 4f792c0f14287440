"""The instrumented PPO / GRPO trainer (DESIGN.md §3).

The loop is an explicit phase machine — INIT → ROLLOUT → SCORE → ADVANTAGE → UPDATE → (EVAL) →
DIAGNOSE → HOTFIX → ROLLOUT … — readable top to bottom in :meth:`Trainer.run`. Configuration lives
in :mod:`rlcockpit.trainer.config` (stdlib only, so the CLI validates a config before torch is
imported); run-time knobs live in :class:`rlcockpit.trainer.live.LiveParams`.

``import rlcockpit.trainer`` stays light: the torch-heavy names are loaded on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TrainConfig": "rlcockpit.trainer.config",
    "LiveParams": "rlcockpit.trainer.live",
    "LiveControl": "rlcockpit.trainer.live",
    "PendingChange": "rlcockpit.trainer.live",
    "Trainer": "rlcockpit.trainer.trainer",
    "TrainResult": "rlcockpit.trainer.trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcockpit.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
