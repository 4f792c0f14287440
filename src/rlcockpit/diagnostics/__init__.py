"""Diagnostics (DESIGN.md §6): detectors, the engine, incidents, severity policy, snapshots and the
failure library. Importing this package stays light (no torch); detectors use numpy at most."""

from rlcockpit.diagnostics.base import (
    NEWS,
    NO_REFERENCE,
    SKIPPED,
    TIERS,
    Condition,
    Detector,
    NoConfig,
    StepView,
    severity_rank,
)
from rlcockpit.diagnostics.config import DiagnosticsConfig, PolicyConfig, WebhookConfig
from rlcockpit.diagnostics.engine import Engine
from rlcockpit.diagnostics.incidents import Incident, group
from rlcockpit.diagnostics.registry import available, register
from rlcockpit.records import FindingRecord as Finding

__all__ = [
    "NEWS", "NO_REFERENCE", "SKIPPED", "TIERS", "Condition", "Detector", "DiagnosticsConfig", "Engine", "Finding",
    "Incident", "NoConfig", "PolicyConfig", "StepView", "WebhookConfig", "available", "group",
    "register", "severity_rank",
]
