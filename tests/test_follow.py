"""Follow mode (issue 11 part 2): `rlcockpit import --follow` tails another trainer's logs while
it writes them into a live run, survives a SIGKILL and a restart without duplicating a step, and
waits for a partly written last line / record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rlcockpit.integrations.follow import FollowOptions, start_follow
from rlcockpit.integrations.tail import LineTail, RecordTail
from rlcockpit.store import open_store
from rlcockpit.store.base import SampleQuery
from server_testkit import ServerThread

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
pytestmark = pytest.mark.timeout(180)


def test_a_partly_written_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 0, "a": 1}\n{"step": 1, "a"')
    tail = LineTail(path)
    assert tail.read() == [(1, '{"step": 0, "a": 1}')]
    assert tail.read() == []
    with path.open("a") as f:
        f.write(': 2}\n{"step": 2, "a": 3}')  # the last line is whole JSON, its newline not written yet
    assert [n for n, _ in tail.read()] == [2, 3]
    with path.open("a") as f:
        f.write('\n{"step": 3, "a": 4}\n')
    assert tail.read() == [(4, '{"step": 3, "a": 4}')]  # the late newline is not a record
    again = LineTail(path, tail.offset, tail.lines)  # a restart continues at the saved offset
    assert again.read() == []


def test_a_tensorboard_record_is_read_once_all_its_bytes_are_there(tmp_path):
    source = next((FIXTURES / "tensorboard" / "trl_grpo").iterdir()).read_bytes()
    path = tmp_path / "events.out.tfevents.1.host"
    whole = RecordTail(tmp_path / "whole")
    (tmp_path / "whole").write_bytes(source)
    count = len(whole.read())
    assert count > 3
    path.write_bytes(source[:len(source) - 5])  # the last record is cut
    tail = RecordTail(path)
    assert len(tail.read()) == count - 1
    path.write_bytes(source)
    assert len(tail.read()) == 1 and tail.offset == len(source)


def test_follows_tensorboard_trl_parquet_and_own_exports_in_process(tmp_path):
    logs = tmp_path / "tb"
    logs.mkdir()
    event_file = next((FIXTURES / "tensorboard" / "trl_grpo").iterdir())
    data = event_file.read_bytes()
    (logs / event_file.name).write_bytes(data[:len(data) // 2])
    completions = tmp_path / "completions"
    completions.mkdir()
    uri = f"sqlite:///{tmp_path / 'f.db'}"
    follower = start_follow([logs, completions], store=uri, options=FollowOptions(poll_interval_s=0.05))
    first = follower.poll()
    (logs / event_file.name).write_bytes(data)
    parquet = sorted((FIXTURES / "trl_completions").rglob("*.parquet"))[0]
    (completions / parquet.name).write_bytes(parquet.read_bytes())
    second = follower.poll()
    follower.close("finished")
    assert first > 0 and second > 0
    reader = open_store(uri).reader()
    summary = reader.summary(follower.run.run_id)
    assert summary.samples > 0 and "reward/mean" in summary.metric_names
    assert reader.get_run(follower.run.run_id).status == "finished"


def test_openrlhf_lines_followed_in_two_sessions_with_a_bad_line(tmp_path):
    lines = (FIXTURES / "openrlhf_metrics.jsonl").read_text().splitlines()
    log = tmp_path / "train.jsonl"
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][:20])  # the third line is half written
    uri = f"sqlite:///{tmp_path / 'o.db'}"
    first = start_follow([log], store=uri, options=FollowOptions(diagnostics=False))
    first.poll()
    first.close("stopped")
    with log.open("a") as f:
        f.write(lines[2][20:] + "\nnot json\n" + "\n".join(lines[3:]) + "\n")
    second = start_follow([log], store=uri, options=FollowOptions(diagnostics=False))
    assert second.run.run_id == first.run.run_id
    second.poll()
    second.close("finished")
    reader = open_store(uri).reader()
    steps = reader.read_series(first.run.run_id, ["reward/mean"])["reward/mean"].steps
    assert len(steps) == len(lines) and len(set(steps)) == len(steps)
    assert second.bad == 1 and reader.get_run(first.run.run_id).status == "finished"


def test_the_cli_follows_a_writer_through_a_kill_and_a_restart(tmp_path):
    """A verl-like writer appends in real time; the follower (the real CLI) is SIGKILLed midway and
    started again; the server reads all along. Every step lands once, with its samples, and the
    NaN step raises the nonfinite finding live."""
    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    steps, logs, rollouts = 40, tmp_path / "logs", tmp_path / "rollouts"
    logs.mkdir()
    rollouts.mkdir()
    uri = f"sqlite:///{tmp_path / 'follow.db'}"
    store = open_store(uri)
    writer = subprocess.Popen([sys.executable, str(HERE / "follow_writer.py"), str(logs), str(rollouts), str(steps),
                               "0.1", "25"], env=ENV)
    follow = [sys.executable, "-m", "rlcockpit", "import", "--follow", "--store", uri, str(logs), str(rollouts),
              "--poll-interval", "0.05", "--idle-exit", "2"]
    follower = subprocess.Popen(follow, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with ServerThread(create_app(ServerSettings(store=uri), store)) as url, httpx.Client(base_url=url) as http:
            run_id = _wait(lambda: _first_run(http), "the follower's run")
            seen = _wait(lambda: _steps(http, run_id) if len(_steps(http, run_id)) >= 8 else None, "8 steps")
            assert writer.poll() is None  # live: the writer is still writing
            follower.send_signal(signal.SIGKILL)
            follower.wait(10)
            # the killed follower's lease is live until stale: a plain restart is refused, naming it ...
            refused = subprocess.run(follow, env=ENV, capture_output=True, text=True, timeout=60)
            assert refused.returncode == 2 and f"written by follower pid {follower.pid}" in refused.stderr
            # ... and --force takes over a lease we know is dead
            follower = subprocess.Popen([*follow, "--force"], env=ENV, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
            assert writer.wait(60) == 0
            out, _ = follower.communicate(timeout=60)
            assert follower.returncode == 0, out
            assert f"following again into run {run_id}" in out
            series = _steps(http, run_id)
            findings = http.get(f"/api/runs/{run_id}/findings").json()["items"]
    finally:
        for proc in (writer, follower):
            if proc.poll() is None:
                proc.kill()
    assert len(seen) >= 8 and series == list(range(steps))  # every step, once, in order
    reader = store.reader()
    assert reader.summary(run_id).samples == 4 * steps
    page = reader.query_samples(run_id, SampleQuery(step_min=30, step_max=30, include_token_arrays=False))
    assert sorted((s.sample_id, s.group_id) for s in page.items) == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert any(f["detector"] == "nonfinite" and f["step"] == 25 for f in findings)
    assert reader.get_run(run_id).status == "finished"
    kinds = [e.kind for e in reader.read_events(run_id)]
    assert kinds.count("run_resumed") == 1
    state = json.loads(next((tmp_path / "follow.db.follow").glob("*.json")).read_text())
    assert state["run_id"] == run_id and state["bad"] == 0


def _wait(predicate, what, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _first_run(http):
    runs = http.get("/api/runs").json()
    items = runs["items"]
    return items[0]["run_id"] if items else None


def _steps(http, run_id):
    resp = http.get(f"/api/runs/{run_id}/series", params={"names": "reward/mean", "max_points": 10000})
    return resp.json()["series"].get("reward/mean", {}).get("steps", []) if resp.status_code == 200 else []


def test_the_latency_benchmark_runs_and_reports_json():
    proc = subprocess.run([sys.executable, str(HERE.parent / "benchmarks" / "follow.py"), "--quick", "--steps", "10"],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "follow" and result["stream"]["steps"] == 10
    assert result["stream"]["max_s"] is not None and result["store"]["max_s"] is not None
