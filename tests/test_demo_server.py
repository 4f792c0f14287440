"""`rlcockpit demo` serves the cockpit while it trains: a subprocess runs the demo (12 steps, the
scripted incident halfway) and the test reads the API from it during training."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from rlcockpit.store import open_store
from server_testkit import free_port

SMALL = ["rollout.batch_size=8", "ppo.minibatch_size=8", "ppo.epochs=1", "eval.every=0",
         "checkpoint.at_end=false", "model.threads=1"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_serves_the_cockpit_while_it_trains(tmp_path):
    port = free_port()
    uri = f"sqlite:///{tmp_path / 'demo.db'}"
    cmd = [sys.executable, "-m", "rlcockpit", "demo", "--steps", "12", "--port", str(port),
           "--store", uri, "--exit-when-done", "--no-users", *SMALL]  # reads without a token
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    seen: list[dict] = []
    try:
        while proc.poll() is None:  # read the API while the demo trains
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=5).json()["items"]
            except httpx.HTTPError:
                runs = []
            seen += [r for r in runs if r["status"] == "running"]
            time.sleep(0.2)  # steps are written about once a second: poll often enough to see one
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert f"http://127.0.0.1:{port}/" in out and "Scripted incident: lr_spike from step 6" in out
    assert seen, "the API never showed the run while it was training"
    assert {r["project"] for r in seen} == {"demo"}
    assert max((r["last_step"] or 0) for r in seen) >= 1  # steps arrived while it trained
    reader = open_store(uri, create=False).reader()
    (run,) = reader.list_runs()
    assert f"http://127.0.0.1:{port}/#/run/{run.run_id}/alerts" in out
    assert run.status == "finished" and run.last_step == 12
    events = [(e.step, e.kind) for e in reader.read_events(run.run_id)]
    assert (6, "fault") in events
    assert reader.read_findings(run.run_id), "the incident was not detected"
    reader.close()


def test_demo_refuses_a_busy_port(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "rlcockpit", "demo", "--steps", "2", "--port",
                              str(port), "--store", f"sqlite:///{tmp_path / 'd.db'}"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert f"port {port} on 127.0.0.1 is not free" in out.stderr and "--port N" in out.stderr


def test_demo_server_thread_serves_the_read_and_control_api(tmp_path):
    """The demo's in-process server: the same app as `rlcockpit serve` (control included), and
    it stops cleanly."""
    from rlcockpit.cli.demo import DemoServer

    server = DemoServer(f"sqlite:///{tmp_path / 'd.db'}", free_port())
    server.start()
    try:
        deadline = time.monotonic() + 10
        while not server._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpx.get(f"{server.url}api/runs", timeout=5).json() == {"items": []}
        assert httpx.get(f"{server.url}api/me", timeout=5).status_code == 200
    finally:
        server.stop()
    assert not server._thread.is_alive()
