"""The trainer's port: what the diagnostics' actions and the control link may see and do.

Both act on the running trainer at a phase boundary (HOTFIX, or the pause loop) and through
nothing else: the live inbox (pause, resume, stop, parameter changes), a checkpoint now, an
in-process rollback, the validation rewards. :class:`rlcockpit.trainer.trainer.Trainer` implements
it; a test may pass any object with these members.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from rlcockpit.trainer.live import LiveControl


class TrainerPort(Protocol):
    live: LiveControl  # the inbox: pause / resume / stop / request; the current params and their bounds
    step: int  # the last committed step
    paused: bool
    stop_requested: bool  # set to stop at the end of this HOTFIX (a rollback with nothing to go back to)

    def apply_now(self, step: int) -> None:
        """Apply what the live inbox holds right away (in this boundary)."""

    def checkpoint(self, step: int, reason: str) -> str:
        """Write a full checkpoint now; returns its path."""

    def checkpoint_before(self, first_step: int) -> Path | None:
        """The newest healthy checkpoint of this run before ``first_step`` (the rollback target)."""

    def rollback_to(self, path: Path) -> int:
        """Load a checkpoint into the running trainer; returns the step it goes back to."""

    def validation_rewards(self, step: int) -> list[float] | None:
        """Total reward per validation prompt (fixed sampling seed); None without validation prompts."""
