"""Where ``train --resume`` continues: before the first step the store is missing.

A resumed run continues after its checkpoint's step. When the run's store lost steps before that
(a full disk and a full spool, docs/telemetry.md "When a write fails"), continuing there would
leave the gap for good; so the resume goes back to the newest checkpoint taken before the first
missing step, and trains and logs the steps after it again (the store replaces a step written
again; a resumed run continues exactly, docs/trainer.md). Steps waiting in the run's spool are
not missing: the telemetry replays them when the run opens.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlcockpit.errors import RlcockpitError
from rlcockpit.trainer.checkpoint import checkpoint_before, read_meta
from rlcockpit.trainer.config import TrainConfig

log = logging.getLogger("rlcockpit.trainer")


def refill_point(path: Path, cfg: TrainConfig) -> tuple[Path, dict[str, Any] | None]:
    """The checkpoint to resume from instead of ``path`` (itself when the store misses no step up
    to it), and what to record about the choice (None: nothing to say)."""
    from rlcockpit.telemetry import WriterOptions
    from rlcockpit.telemetry.delivery import as_ranges
    from rlcockpit.telemetry.recovery import missing_steps

    meta = read_meta(path) or {}
    run_id, step = str(meta.get("run_id", "")), int(meta.get("step", 0))
    options = WriterOptions(spool_dir=cfg.telemetry.spool_dir, spool_max_mb=cfg.telemetry.spool_max_mb)
    try:
        # reward/mean: every step logs it (a step of which only late records landed is missing)
        missing = missing_steps(cfg.telemetry.store, run_id, upto=step, options=options,
                                metric="reward/mean")
    except RlcockpitError:  # no such store or run: the resume itself says so, with its fix
        return path, None
    if not missing:
        return path, None
    first = missing[0]
    earlier = checkpoint_before(cfg.checkpoint.dir, run_id, first)
    note = {"first_missing_step": first, "missing_steps": len(missing), "checkpoint_step": step,
            "requested": str(path), "missing": [list(r) for r in as_ranges(missing)]}
    if earlier is None:
        log.warning("resume: %d step(s) of run %s from step %d are missing from the store %s, and no "
                    "checkpoint before step %d is left: they stay missing; resuming from %s",
                    len(missing), run_id, first, cfg.telemetry.store, first, path)
        return path, {**note, "resumed_from": str(path), "refilled": False}
    log.warning("resume: %d step(s) of run %s from step %d are missing from the store %s; resuming from "
                "%s (step %s) instead of %s to train and log them again", len(missing), run_id, first,
                cfg.telemetry.store, earlier, (read_meta(earlier) or {}).get("step"), path)
    return earlier, {**note, "resumed_from": str(earlier), "refilled": True}
