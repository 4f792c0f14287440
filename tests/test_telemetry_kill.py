"""SIGKILL a process in the middle of logging: the store must open cleanly, every step in it must
be whole (all its metrics and all its samples), and at most the last flush interval is lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import rlcockpit
from rlcockpit.store import SampleQuery, open_store

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("telemetry_kill_child.py")
N_METRICS, N_SAMPLES = 20, 8
FLUSH_INTERVAL_S = 0.2
# how late the writer thread may run behind on a loaded 2-core CI machine, on top of the interval
SLACK_S = 2.0


def start_child(uri: str) -> tuple[subprocess.Popen, list[tuple[int, float]]]:
    child = subprocess.Popen([sys.executable, str(CHILD), uri, str(FLUSH_INTERVAL_S)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    logged: list[tuple[int, float]] = []

    def read() -> None:
        for line in child.stdout:
            step, when = line.split()
            logged.append((int(step), float(when)))

    threading.Thread(target=read, daemon=True).start()
    return child, logged


def stored_steps(uri: str) -> int:
    try:
        return open_store(uri).reader().summary("victim").steps
    except rlcockpit.errors.RlcockpitError:
        return 0


def test_sigkill_mid_write_leaves_only_whole_steps(tmp_path):
    path = tmp_path / "killed.db"
    uri = f"sqlite:///{path}"
    child, logged = start_child(uri)
    deadline = time.monotonic() + 120

    def warmed_up() -> bool:  # logging long enough for the loss bound to mean something
        return bool(logged) and time.time() - logged[0][1] > SLACK_S + 1.5

    while not (warmed_up() and stored_steps(uri) >= 40) and time.monotonic() < deadline \
            and child.poll() is None:
        time.sleep(0.05)
    t_kill = time.time()  # it is writing all the time: the kill lands mid-stream
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    time.sleep(0.2)  # let the reader thread take the last lines

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()

    reader = open_store(uri).reader()
    summary = reader.summary("victim")
    assert summary.steps >= 40
    steps = tuple(range(summary.steps))  # no gaps: steps are written in order, whole
    names = [f"m/{k}" for k in range(N_METRICS)]
    series = reader.read_series("victim", names)
    for name in names:
        assert series[name].steps == steps, name
    page = reader.query_samples("victim", SampleQuery(limit=10_000))
    per_step: dict[int, int] = {}
    for s in page.items:
        per_step[s.step] = per_step.get(s.step, 0) + 1
    assert page.total == len(page.items) == N_SAMPLES * len(steps)
    assert set(per_step.values()) == {N_SAMPLES} and sorted(per_step) == list(steps)

    # everything logged more than one flush interval (plus slack) before the kill is there
    assert logged and logged[-1][0] >= summary.steps - 1
    old_enough = [step for step, when in logged if when <= t_kill - FLUSH_INTERVAL_S - SLACK_S]
    assert old_enough and max(old_enough) < summary.steps
    print(f"logged {logged[-1][0] + 1} steps, stored {summary.steps}")

    # the store is usable afterwards: the run can be resumed and closed (its lease stays live until
    # stale; this kill is one we know of, so force takes it over: docs/telemetry.md)
    with rlcockpit.init(store=uri, run_id="victim", resume=True, force=True) as run:
        run.log(summary.steps, {"m/0": 0.0})
    assert reader.get_run("victim").status == "finished"
