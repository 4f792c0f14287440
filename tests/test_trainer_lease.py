"""Two ``rlcockpit train --resume latest`` of one run: the second is refused while the first trains.

The first resumed trainer is frozen (SIGSTOP) once it holds the run's lease, so the second starts
while the first is certainly alive; the second exits 2 with one line naming the first. The first
then finishes: no phase row is written twice, and the run has one ``end`` checkpoint per training.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import make_config, make_model_dir, reader

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def wait_for_lease(cfg, run_id: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the first trainer ended before it was seen training: {proc.communicate()}")
        r = reader(cfg)
        try:
            lease = r.get_lease(run_id)
        finally:
            r.close()
        if lease is not None and lease.holder.pid == proc.pid:
            return
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the first trainer never took the run's lease")


def test_a_second_train_resume_of_a_live_run_fails_fast_naming_the_first(tmp_path):
    model = make_model_dir(tmp_path / "model", "gpt2")
    cfg = make_config(tmp_path, "train.steps=2", model=model)
    first_run = Trainer(cfg).run()  # its end checkpoint is "latest"
    resume = [sys.executable, "-m", "rlcockpit", "train", "--quiet", "--resume", "latest",
              f"checkpoint.dir={cfg.checkpoint.dir}", "train.steps=8"]
    first = subprocess.Popen(resume, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lease(cfg, first_run.run_id, first)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = subprocess.run(resume, env=ENV, capture_output=True, text=True, timeout=180)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert second.returncode == 2, second.stderr
    (line,) = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert f"run {first_run.run_id} is being written by trainer pid {first.pid} on host " in line
    assert "--force" in line
    r = reader(cfg)
    try:
        phases = r.read_phases(first_run.run_id)
        ends = [c for c in r.read_checkpoints(first_run.run_id) if c.reason == "end"]
        run = r.get_run(first_run.run_id)
        resumed = r.read_events(first_run.run_id, kinds=["run_resumed"])
    finally:
        r.close()
    doubled = [key for key, n in collections.Counter((p.step, p.phase, p.status) for p in phases).items() if n > 1]
    assert phases and not doubled, doubled
    assert [c.step for c in ends] == [2, 8]
    assert (run.status, run.last_step, len(resumed)) == ("finished", 8, 1)
