"""``ControlConfig``: how a trainer takes part in the control plane (the ``control.*`` keys)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option


@dataclass(frozen=True)
class ControlConfig(Config):
    """Tickets and commands from the store's control plane (docs/control.md)."""

    enabled: bool = option(True, help="Take approved tickets and commands for this run from the store at each "
                           "phase boundary and publish the live parameters (used by `rlcockpit train`).")
    effect_steps: int = option(10, help="Steps after applying a change at which its effect is measured (the "
                               "validation set again, KS test against the evaluation right before).",
                               range=(1, 1_000_000))
    effect_eval: bool = option(True, help="Evaluate the fixed validation prompts right before applying a "
                               "parameter change and again effect_steps later; false = only the metric windows.")
    poll_interval_s: float = option(0.5, help="While paused, how often the store is asked for resume / stop / "
                                    "other approved tickets.", range=(0.05, 60.0))
