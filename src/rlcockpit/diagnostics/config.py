"""Diagnostics configuration: which detectors run, their thresholds, alert hygiene and the policy.

YAML::

    diagnostics:
      resolve_after: 3
      disabled: [memory]
      detectors:
        kl_tiers: {yellow_ratio: 1.5, red_ratio: 2.5}
      policy:
        actions: {red: [alert, snapshot, checkpoint]}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.config import Config, check, from_dict, option

DEFAULT_ACTIONS: dict[str, tuple[str, ...]] = {
    # 001 Q12: yellow = watch, orange = save the batch, red = pause and call a person,
    # black = stop and roll back to the last checkpoint taken before the incident started
    "yellow": ("alert",),
    "orange": ("alert", "save_batch"),
    "red": ("alert", "pause", "snapshot", "checkpoint"),
    "black": ("alert", "snapshot", "stop", "rollback"),
}
ACTIONS = ("alert", "save_batch", "snapshot", "checkpoint", "pause", "stop", "rollback")


@dataclass(frozen=True)
class WebhookConfig(Config):
    url: str = option("", help='Generic webhook: findings are POSTed as JSON here; "" = off.')
    min_severity: str = option("orange", help="Lowest severity sent to the webhook.",
                               choices=("yellow", "orange", "red", "black"))
    timeout_s: float = option(5.0, help="Per-attempt timeout.", range=(0.1, 120))
    retries: int = option(3, help="Attempts after the first failure (exponential back-off).",
                          range=(0, 10))


@dataclass(frozen=True)
class PolicyConfig(Config):
    actions: Mapping[str, tuple[str, ...]] = option(
        default_factory=lambda: dict(DEFAULT_ACTIONS),
        help="Severity tier → actions (alert, save_batch, snapshot, checkpoint, pause, stop, "
             "rollback), run by the trainer at the next phase boundary.")
    console: bool = option(True, help="Print findings on the console.")
    webhook: WebhookConfig = option(default_factory=WebhookConfig, help="Webhook notifications.")

    def __post_init__(self) -> None:
        super().__post_init__()
        for tier, acts in self.actions.items():
            check(tier in DEFAULT_ACTIONS, f"diagnostics.policy.actions.{tier}", tier,
                  f"severity tiers are {', '.join(DEFAULT_ACTIONS)}")
            for act in acts:
                check(act in ACTIONS, f"diagnostics.policy.actions.{tier}", act,
                      f"actions are {', '.join(ACTIONS)}")

    def actions_for(self, severity: str) -> tuple[str, ...]:
        merged = {**DEFAULT_ACTIONS, **self.actions}
        return tuple(merged.get(severity, ()))


@dataclass(frozen=True)
class DiagnosticsConfig(Config):
    """Detectors run in DIAGNOSE, their thresholds, alert hygiene and the severity policy."""

    enabled: bool = option(True, help="Run the detectors in the trainer's DIAGNOSE phase.")
    resolve_after: int = option(3, help="A condition absent this many steps in a row is resolved.",
                                range=(1, 1000))
    worsen_factor: float = option(
        100.0, help="An open condition whose size (evidence `magnitude`: a loss, a gradient norm) "
        "grew this many times since it was last reported is reported again as 'worsened' "
        "(0 = never).", range=(0.0, 1e12))
    resolve_after_severe: int = option(
        50, help="An orange, red or black condition is resolved only after this many absent steps in a "
        "row: "
        "a failure that comes back within them (intermittent loss spikes) is one open finding, "
        "not a new alert each time.", range=(1, 100000))
    incident_window: int = option(10, help="Findings raised within this many steps of an open "
                                  "incident join it.", range=(0, 10000))
    disabled: tuple[str, ...] = option((), help="Detector names not to run.")
    detectors: Mapping[str, Mapping[str, Any]] = option(
        default_factory=dict, help="Per-detector threshold overrides: <detector>.<field>: value.")
    policy: PolicyConfig = option(default_factory=PolicyConfig, help="Severity → actions.")
    baseline: str = option("", help="A healthy run of the same recipe to compare with step by "
                           "step (the `baseline` detector), as STORE_URI#RUN_ID; \"\" = none.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.baseline:
            from rlcockpit.diagnostics.baseline import parse_ref

            parse_ref(self.baseline)  # fail fast on a malformed reference
        self.detector_configs()  # fail fast: unknown detectors and bad thresholds

    def detector_configs(self) -> dict[str, Any]:
        """Each enabled detector's validated Config (defaults + overrides)."""
        from rlcockpit.diagnostics import registry

        for name in (*self.disabled, *self.detectors):
            registry.get(name)  # unknown names raise with a suggestion
        out = {}
        for name, cls in registry.available().items():
            if name not in self.disabled:
                out[name] = from_dict(cls.Config, self.detectors.get(name, {}),
                                      prefix=f"diagnostics.detectors.{name}.")
        return out
