"""Child process of tests/test_trainer_failures.py: trains the tiny world with the given overrides
and a step hook that, at the start of step AT, either kills this process (``kill AT``) or makes
the disk "full" for this process: RLIMIT_FSIZE caps every file it writes, so a write that would
grow a file past the cap fails with EFBIG, as on a full disk (no root, the real write paths);
``storefull AT``: only the store's disk is full (SQLite's ``PRAGMA max_page_count`` on the
writer's connection: 'database or disk is full'), the checkpoints' disk is not.
``full AT``: capped at the store's current size (at least 1.5 MB, so checkpoints still fit), for
good; ``ckptfull AT``: capped at 500 kB
(a checkpoint's trainer_state.pt is ~1 MB) until that step's CHECKPOINT phase ends. Prints the
run id first; a RlcockpitError ends it as the CLI does (one line, exit 2)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path


def main() -> None:
    mode, at, overrides = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    cfg = load_config(TrainConfig, None, overrides)
    trainer = Trainer(cfg)
    store = Path(cfg.telemetry.store.removeprefix("sqlite:///"))

    def hook(t, step: int) -> None:
        if step == 1:
            print(t.telemetry.run_id, flush=True)
        if step != at:
            return
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        t.telemetry.flush(timeout=10)
        if mode == "storefull":  # only the store's disk is full (checkpoints on another disk)
            writer = t.telemetry._thread._store
            conn = getattr(writer, "_inner", writer)._conn
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLITE_FULL from here on
            print(f"store full at step {step}: {pages} pages", flush=True)
            return
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        sizes = [p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists()]
        # full: no store file may grow, while a checkpoint's files (~1 MB each) still fit
        limit = max(max(sizes), 1_500_000) if mode == "full" else 500_000
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        print(f"full at step {step}: files limited to {limit} bytes", flush=True)

    def free(phase: str, step: int, duration: float, ok: bool) -> None:
        if mode == "ckptfull" and phase == "CHECKPOINT" and step == at:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    from rlcockpit.errors import RlcockpitError

    trainer.add_step_hook(hook)
    trainer.add_phase_listener(free)
    try:
        result = trainer.run()
    except RlcockpitError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"status": result.status, "step": result.step}), flush=True)


if __name__ == "__main__":
    main()
