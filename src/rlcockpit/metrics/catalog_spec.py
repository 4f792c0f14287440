"""The catalog's vocabulary: what a metric entry is, its healthy trends and its groups.

:mod:`rlcockpit.metrics.catalog` is the import point; the entries themselves live in
:mod:`.catalog_rl` and :mod:`.catalog_ops`, one list per metric family. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

TRENDS = ("up", "down", "flat", "band", "none")

TREND_MEANING = {
    "up": "higher is healthier; a sustained fall is the warning",
    "down": "lower is healthier; a rise or spike is the warning",
    "flat": "healthy when steady; jumps or drifts are the warning",
    "band": "healthy inside a range; both too low and too high are warnings",
    "none": "a setting or context value; no healthy direction (charted so changes are visible)",
}

GROUPS = (
    "reward", "kl", "policy", "value", "advantage", "response", "rollout", "gradients",
    "optimiser", "system", "evaluation", "distributed", "histograms",
)


@dataclass(frozen=True)
class MetricSpec:
    """One catalog entry. ``trend`` is the healthy direction (see :data:`TREND_MEANING`)."""

    name: str
    unit: str
    help: str
    trend: str
    group: str

    def __post_init__(self) -> None:
        if self.trend not in TRENDS:
            raise ValueError(f"{self.name}: trend {self.trend!r} is not one of {TRENDS}")
        if self.group not in GROUPS:
            raise ValueError(f"{self.name}: group {self.group!r} is not one of {GROUPS}")
        if self.name != self.name.lower() or self.name.startswith("/") or "//" in self.name:
            raise ValueError(f"metric name {self.name!r} must be lowercase and slash-separated")

    @property
    def is_template(self) -> bool:
        return "<" in self.name



def specs(group: str, rows: list[tuple[str, str, str, str]]) -> list[MetricSpec]:
    """One family's entries from ``(name, unit, trend, help)`` rows."""
    return [MetricSpec(name, unit, help_text, trend, group) for name, unit, trend, help_text in rows]
