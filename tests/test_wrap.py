"""`rlcockpit wrap -- COMMAND`: the command's output is teed to the terminal and a log file that is
followed live into the store; its exit code passes through; Ctrl-C reaches the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlcockpit.store import open_store

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "console" / "openrlhf_ppo.log"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
pytestmark = pytest.mark.timeout(180)

TRAINER = textwrap.dedent("""
    import signal, sys, time
    lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
    def stop(*_):
        print("got SIGINT, saving", flush=True)
        sys.exit(5)
    signal.signal(signal.SIGINT, stop)
    print("a warning on stderr", file=sys.stderr, flush=True)
    for line in lines:                      # OpenRLHF's console, as its logger prints it
        print(line, flush=True)
        time.sleep(float(sys.argv[2]))
    if sys.argv[3] == "wait":
        time.sleep(120)
    sys.exit(int(sys.argv[4]))
""")


def _wrap(tmp_path: Path, pause: float, then: str, code: int, fixture: Path = FIXTURE
          ) -> tuple[subprocess.Popen, Path, str]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    uri, log = f"sqlite:///{tmp_path / 'w.db'}", tmp_path / "logs" / "ppo.log"
    cmd = [sys.executable, "-m", "rlcockpit", "wrap", "--store", uri, "--log", str(log), "--poll-interval", "0.05",
           "--", sys.executable, str(script), str(fixture), str(pause), then, str(code)]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), log, uri


def _only_run(uri: str):
    runs = open_store(uri).reader().list_runs()
    return runs[0] if runs else None


def test_the_output_is_teed_followed_and_the_exit_code_passed_through(tmp_path):
    proc, log, uri = _wrap(tmp_path, 0.0, "exit", 3)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "✨ Global step 1:" in out and "a warning on stderr" in err  # the terminal got both
    text = log.read_text(encoding="utf-8")
    assert "a warning on stderr" in text and text.count("✨ Global step") == out.count("✨ Global step") >= 3
    run = _only_run(uri)
    reader = open_store(uri).reader()
    steps = reader.read_series(run.run_id, ["reward/mean"])["reward/mean"].steps
    assert len(steps) == out.count("✨ Global step") and len(set(steps)) == len(steps)
    assert run.status == "failed" and reader.summary(run.run_id).samples >= 1  # the Sample line


def test_ctrl_c_reaches_the_command_while_its_steps_are_live(tmp_path):
    proc, log, uri = _wrap(tmp_path, 0.2, "wait", 0)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # live: steps in the store while the command still runs
        run = _only_run(uri)
        if run and open_store(uri).reader().summary(run.run_id).steps >= 2:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no step arrived live")
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err  # the command's own exit code after its SIGINT handler
    assert "got SIGINT, saving" in out and "got SIGINT, saving" in log.read_text(encoding="utf-8")
    assert _only_run(uri).status == "stopped"


def test_no_command_is_a_setup_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "wrap", "--store", f"sqlite:///{tmp_path / 'w.db'}"],
                          env=ENV, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no command to run" in proc.stderr


def test_a_verl_console_is_followed_live_with_its_names_and_nan(tmp_path):
    """verl's console logger (`step:N - key:value - ...` behind Ray's prefix), wrapped."""
    fixture = FIXTURE.parent / "verl_console.log"
    proc, _, uri = _wrap(tmp_path, 0.0, "exit", 0, fixture)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = _only_run(uri)
    reader = open_store(uri).reader()
    series = reader.read_series(run.run_id, ["policy/entropy", "grad/norm/actor"])
    assert series["policy/entropy"].steps == (1, 2, 3, 4, 5, 6)
    grad = dict(zip(series["grad/norm/actor"].steps, series["grad/norm/actor"].values, strict=True))
    assert grad[5] != grad[5]  # the NaN gradient norm verl printed as "nan"
    assert run.status == "finished"  # policy/entropy: actor/entropy through the verl alias table
