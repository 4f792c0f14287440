"""State and small helpers of the ``levels`` detector (detectors/levels.py): the hysteresis of one
check and the text pieces its messages share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlcockpit.diagnostics.base import StepView

if TYPE_CHECKING:
    from rlcockpit.diagnostics.detectors.levels import LevelsConfig


class Level:
    """One check's state, with hysteresis: it turns on after ``confirm`` steps in a row where its level
    holds and off after ``confirm`` steps in a row where it does not, so one odd step neither starts
    nor ends a finding (sparse rewards flip between zero and some variance from step to step)."""

    def __init__(self, confirm: int) -> None:
        self.confirm = confirm
        self.on = False
        self.run = 0  # steps in a row the level held, up to now
        self.held = 0  # steps the level held since the check turned on (or in the current run)
        self.onset: int | None = None
        self._misses = 0

    def update(self, holds: bool, step: int) -> bool:
        self.run = self.run + 1 if holds else 0
        self._misses = 0 if holds else self._misses + 1
        if not self.on and self.run == 1:
            self.onset, self.held = int(step), 0
        self.held += int(holds)
        if not self.on and self.run >= self.confirm:
            self.on = True
        elif self.on and self._misses >= self.confirm:
            self.on, self.held, self.onset = False, 0, None
        return self.on


def signal_text(std: float | None, groups: float | None) -> str:
    if std is not None:
        return f"std {std:.2g}"
    return f"{1 - groups:.0%} of the groups differ"


def spread(view: StepView) -> float | None:
    """The reward's spread in the batch: ``reward/std``, else max - min when both are logged (verl
    logs ``critic/score/max`` and ``min`` but no std): 0 either way means no variance."""
    std = view.finite("reward/std")
    if std is not None:
        return std
    hi, lo = view.finite("reward/max"), view.finite("reward/min")
    return hi - lo if hi is not None and lo is not None and hi >= lo else None


def positive(value: float | None) -> float | None:
    return float(value) if value is not None and value > 0 else None


def no_variance(std: float | None, groups: float | None, cfg: LevelsConfig) -> bool:
    return bool((std is not None and std <= cfg.std_eps)
                or (groups is not None and groups >= cfg.zero_std_groups))


def top_share(responses: Sequence[str]) -> tuple[float, str]:
    """Share of the most common (whitespace-stripped) response, and that response."""
    if not responses:
        return 0.0, ""
    text, count = Counter(r.strip() for r in responses).most_common(1)[0]
    return count / len(responses), text


def share_zh(frac: float | None) -> str:
    return f" {frac:.0%} 的" if frac is not None else ""


def since(level: Level) -> str:
    return f" since step {level.onset} ({level.held} steps)" if level.onset is not None else ""


def since_zh(level: Level) -> str:
    return f"自第 {level.onset} 步起（{level.held} 步）" if level.onset is not None else ""
