"""A training run whose disks fill up loses nothing silently (real subprocesses, the tiny world,
real files; the full disk is RLIMIT_FSIZE in the child, see tests/trainer_failure_child.py):

- the store's disk full mid-run, the spool too small: the run ends, ``--resume latest`` refills
  from the newest checkpoint before the first missing step and the run ends with no missing step;
- a checkpoint that cannot be written: a ``checkpoint_failed`` event, no ``step_*.tmp`` left,
  training goes on (``checkpoint.on_error=continue``) or the run fails with a ``run_failed`` event
  and a one-line error (``stop``);
- a kill right after a checkpoint: the resumed run still has that step's late timing metrics;
- a store that refuses writes: ``--resume`` refuses at setup, in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.cli import main
from trainer_testkit import FAST, events, make_model_dir, reader

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("trainer_failure_child.py")


def overrides(tmp_path: Path, model: Path, *extra: str) -> list[str]:
    base = [o for o in FAST if not o.startswith("checkpoint.every")]
    return [f"telemetry.store=sqlite:///{tmp_path / 'runs.db'}", f"checkpoint.dir={tmp_path / 'ckpt'}",
            f"model.path={model}", "diagnostics.enabled=false", *base, *extra]


def child(mode: str, at: int, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), mode, str(at), json.dumps(args)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def trained_steps(uri: str) -> tuple[str, str, tuple[int, ...]]:
    r = reader(uri)
    try:
        (run,) = r.list_runs()
        return run.run_id, run.status, r.read_series(run.run_id, ["reward/mean"])["reward/mean"].steps
    finally:
        r.close()


def test_a_full_disk_mid_run_then_resume_ends_with_no_missing_step(tmp_path):
    """The store's disk fills at step 5 (the checkpoints' disk does not): the run trains on, the
    steps that fit neither the store nor the 10 kB spool are named as lost; the resume goes back
    to the checkpoint before the first missing step (kept from pruning for it) and ends with every
    step in the store."""
    mode = "storefull"
    model = make_model_dir(tmp_path / "model")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    args = overrides(tmp_path, model, "train.steps=10", "checkpoint.every=2", "checkpoint.keep=1",
                     "telemetry.spool_max_mb=0.01")  # a 10 kB spool: the steps cannot all wait
    done = child(mode, 5, args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LOST" in done.stderr and "steps" in done.stderr  # said, with the steps
    run_id, status, before = trained_steps(uri)
    # the steps after the disk filled are lost (a few may still fit in the file's free pages;
    # the final status may fit, or not)
    assert before[:4] == (1, 2, 3, 4) and len(before) < 10 and before == tuple(range(1, len(before) + 1))
    # space is back; the child could not release its lease on the full disk and is dead: take over
    code = main(["train", "--quiet", "--force", "--resume", "latest", f"checkpoint.dir={tmp_path / 'ckpt'}"])
    assert code == 0
    _, status, after = trained_steps(uri)
    assert (status, after) == ("finished", tuple(range(1, 11)))
    (refill,) = events(uri, run_id, "resume_refill")  # latest is step 10's: the refill goes back
    first = len(before) + 1
    assert refill.payload["refilled"] and refill.payload["first_missing_step"] == first
    anchor = (first - 1) // 2 * 2  # the newest checkpoint before it, kept from pruning for it
    assert refill.payload["resumed_from"].endswith(f"step_{anchor:07d}")
    r = reader(uri)
    assert r.latest(run_id)["telemetry/missing_steps"][1] == 0
    print(f"logged 10 steps; stored {len(before)} before the resume ({before}), {len(after)} after")


@pytest.mark.parametrize("policy", ["continue", "stop"])
def test_a_checkpoint_that_cannot_be_written_is_reported_and_cleaned_up(tmp_path, policy):
    model = make_model_dir(tmp_path / "model")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    args = overrides(tmp_path, model, "train.steps=4", "checkpoint.every=2", f"checkpoint.on_error={policy}")
    done = child("ckptfull", 2, args)
    run_id, status, steps = trained_steps(uri)
    (failed,) = events(uri, run_id, "checkpoint_failed")
    assert failed.step == 2 and failed.payload["reason"] == "periodic" and failed.payload["error"]
    assert not list((tmp_path / "ckpt").rglob("*.tmp"))  # the partial directory is gone
    assert "Traceback" not in done.stderr
    if policy == "continue":
        assert done.returncode == 0 and status == "finished" and steps == (1, 2, 3, 4)
        assert (tmp_path / "ckpt" / run_id / "step_0000004").is_dir()
        assert "CHECKPOINT FAILED at step 2" in done.stderr
    else:
        assert done.returncode == 2 and status == "failed" and steps == (1, 2)
        (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert "could not be written" in line and "checkpoint.on_error=continue" in line
        (run_failed,) = events(uri, run_id, "run_failed")
        assert run_failed.payload["exception"] == "CheckpointError"


def test_a_kill_after_a_checkpoint_keeps_the_steps_late_timing_metrics(tmp_path):
    model = make_model_dir(tmp_path / "model")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    args = overrides(tmp_path, model, "train.steps=4", "checkpoint.every=2")
    done = child("kill", 3, args)  # SIGKILL at the start of step 3, right after step 2's checkpoint
    assert done.returncode == -9, done.stderr[-2000:]
    # the killed child still holds the run's lease (not stale yet): take it over
    assert main(["train", "--quiet", "--force", "--resume", "latest", f"checkpoint.dir={tmp_path / 'ckpt'}"]) == 0
    run_id, status, steps = trained_steps(uri)
    assert status == "finished" and steps == (1, 2, 3, 4)
    r = reader(uri)
    late = ("time/diagnose_s", "time/hotfix_s", "time/checkpoint_s")
    found = r.read_series(run_id, list(late), step_min=2, step_max=2)
    assert {n: s.steps for n, s in found.items()} == {n: (2,) for n in late}


def test_resume_refuses_a_store_that_refuses_writes(tmp_path, capsys):
    import sqlite3

    model = make_model_dir(tmp_path / "model")
    args = overrides(tmp_path, model, "train.steps=2", "checkpoint.every=2")
    assert main(["train", "--quiet", *args]) == 0
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = [p for p, t in conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = 'metrics'")
             if t == "leaf"]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:  # the metrics pages damaged, the rest of the file intact
        for page in pages:
            f.seek((page - 1) * size)
            f.write(b"\xa5" * size)
    code = main(["train", "--quiet", "--resume", "latest", f"checkpoint.dir={tmp_path / 'ckpt'}",
                 "train.steps=4"])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "cannot resume run" in line and "refuses writes" in line and "backup" in line
