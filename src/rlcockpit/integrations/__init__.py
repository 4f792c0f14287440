"""Bridges between rlcockpit and other tools (DESIGN.md §2): the alias table that maps TRL, verl
and OpenRLHF metric keys to catalog names (:mod:`.aliases`), importers for their log files and for
TensorBoard (:mod:`.importers`), a user's own key map for custom trainers (:mod:`.keymap`), and
the exporter of stored runs (:mod:`.export`), and the ops stack (docs/ops.md): Prometheus
exposition (:mod:`.prometheus`), findings to Alertmanager (:mod:`.alertmanager`), JSON log lines
and the Loki push (:mod:`.logs`), OpenTelemetry traces (:mod:`.tracing`).

Importing this package loads nothing: the names below resolve on first use, and pyarrow,
tensorboard and the store load only when an import or export runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {name: "rlcockpit.integrations.aliases"
         for name in ("ALIASES", "SOURCES", "detect_source", "import_name", "to_catalog")}
_LAZY["build_key_map"] = "rlcockpit.integrations.keymap"

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlcockpit.integrations' has no attribute {name!r}")
