"""Feeding a detector step by step in tests (shared by the detector test files)."""

from __future__ import annotations

from collections.abc import Mapping

from rlcockpit.diagnostics import SKIPPED, DiagnosticsConfig, StepView, registry


def feed(det, steps):
    """Feed ``steps`` (each a metrics dict, or a (metrics, samples) pair; step = index);
    return [(step, [conditions] | SKIPPED)]."""
    out = []
    for step, item in enumerate(steps):
        metrics, samples = (item, ()) if isinstance(item, Mapping) else item
        result = det.update(StepView(step, metrics, tuple(samples)))
        if result is SKIPPED:
            out.append((step, SKIPPED))
        elif result is None:
            out.append((step, []))
        else:
            out.append((step, [result] if hasattr(result, "severity") else list(result)))
    return out


def first(det, steps, severity=None, key=None):
    """(step, condition) of the first condition matching severity / key, or (None, None)."""
    for step, conds in feed(det, steps):
        if conds is SKIPPED:
            continue
        for c in conds:
            if (severity is None or c.severity == severity) and (key is None or c.key == key):
                return step, c
    return None, None


def conditions(det, steps):
    """Every condition reported over the steps, in order."""
    return [c for _, conds in feed(det, steps) if conds is not SKIPPED for c in conds]


def only(*names: str, **kwargs) -> DiagnosticsConfig:
    """A config running just ``names`` (fresh engines stay independent of other detectors)."""
    return DiagnosticsConfig(disabled=tuple(n for n in registry.available() if n not in names),
                             **kwargs)
