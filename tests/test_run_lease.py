"""A run has one writer: the run's lease between real processes on a real SQLite file.

Two processes racing to continue one run: exactly one wins, the other's error names the winner. A
holder killed with SIGKILL stops renewing its lease: after ``stale_after_s`` the next writer takes
the run over, recorded as a ``lease_taken_over`` event. A forced takeover fences the old holder:
what it logs afterwards is not written and its close leaves the run's status alone. The store side
(atomic acquire, renew, finish, release on both backends) is in tests/test_store_contract.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rlcockpit
from rlcockpit.errors import RunLeasedError
from rlcockpit.store import open_store
from rlcockpit.telemetry import LeaseOptions

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
FAST_LEASE = dict(lease=LeaseOptions(renew_every_s=0.1, stale_after_s=1.5), heartbeat_interval_s=0.1)


def child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_line(proc: subprocess.Popen, want: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if want in line:
            return line
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"no {want!r} from the child: {proc.communicate()}")


def finished_run(uri: str, run_id: str) -> None:
    with rlcockpit.init(project="p", store=uri, run_id=run_id) as run:
        run.log(0, {"reward/mean": 0.0})


RACER = """
    import os, sys, time
    import rlcockpit
    from rlcockpit.errors import RunLeasedError
    uri, start_at, done = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    time.sleep(max(0.0, start_at - time.time()))
    try:
        run = rlcockpit.init(store=uri, run_id="raced", resume=True)
    except RunLeasedError as exc:
        print("refused", exc.message, flush=True)
        sys.exit(3)
    print("won", os.getpid(), flush=True)
    run.log(1, {"reward/mean": 1.0})
    while not os.path.exists(done):
        time.sleep(0.02)
    run.close()
"""


def test_two_processes_racing_to_continue_a_run_one_wins_and_the_other_names_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    finished_run(uri, "raced")
    done = tmp_path / "done"
    start_at = time.time() + 2.5  # both are started and imported by then: they race for the lease
    procs = [child(RACER, uri, start_at, done) for _ in range(2)]
    loser = None
    deadline = time.monotonic() + 60
    while loser is None and time.monotonic() < deadline:
        loser = next((p for p in procs if p.poll() is not None), None)
        time.sleep(0.02)
    assert loser is not None, "neither racer finished"
    done.touch()
    winner = next(p for p in procs if p is not loser)
    (lost_out, lost_err), (won_out, won_err) = loser.communicate(timeout=30), winner.communicate(timeout=30)
    assert (loser.returncode, winner.returncode) == (3, 0), (lost_err, won_err)
    assert won_out.startswith(f"won {winner.pid}")
    assert f"run raced is being written by sdk pid {winner.pid} on host " in lost_out
    assert "lease renewed" in lost_out and "--force" in lost_out
    reader = open_store(uri).reader()
    run = reader.get_run("raced")
    assert (run.status, reader.get_lease("raced")) == ("finished", None)  # released at its close
    assert [e.kind for e in reader.read_events("raced")] == ["run_resumed"]  # one writer resumed it


HOLDER = """
    import sys, time
    import rlcockpit
    from rlcockpit.telemetry import LeaseOptions
    run = rlcockpit.init(store=sys.argv[1], run_id="killed", project="p", heartbeat_interval_s=0.1,
                         lease=LeaseOptions(kind="trainer", renew_every_s=0.1, stale_after_s=1.5))
    run.log(0, {"reward/mean": 0.0})
    run.flush()
    print("ready", flush=True)
    step = 1
    while True:
        run.log(step, {"reward/mean": float(step)})
        step += 1
        time.sleep(0.02)
"""


def test_a_holder_killed_with_sigkill_is_taken_over_once_its_lease_is_stale(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    holder = child(HOLDER, uri)
    wait_line(holder, "ready")
    time.sleep(2.0)  # longer than stale_after_s: only its renewals keep the lease live
    with pytest.raises(RunLeasedError, match=f"trainer pid {holder.pid} on host"):
        rlcockpit.init(store=uri, run_id="killed", resume=True, **FAST_LEASE)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=30)
    killed_at = time.monotonic()
    with pytest.raises(RunLeasedError):  # dead, but not stale yet
        rlcockpit.init(store=uri, run_id="killed", resume=True, **FAST_LEASE)
    run = None
    while run is None and time.monotonic() - killed_at < 10:
        try:
            run = rlcockpit.init(store=uri, run_id="killed", resume=True, **FAST_LEASE)
        except RunLeasedError:
            time.sleep(0.1)
    assert run is not None, "the stale lease was never taken over"
    assert time.monotonic() - killed_at < 5
    run.log(10_000, {"reward/mean": -1.0})
    run.close()
    reader = open_store(uri).reader()
    (event,) = reader.read_events("killed", kinds=["lease_taken_over"])
    assert event.payload["reason"] == "stale"
    assert (event.payload["previous"]["kind"], event.payload["previous"]["pid"]) == ("trainer", holder.pid)
    assert event.payload["holder"]["pid"] == os.getpid()
    assert reader.get_run("killed").status == "finished"
    assert 10_000 in reader.read_series("killed", ["reward/mean"])["reward/mean"].steps


OLD_HOLDER = """
    import os, sys, time
    import rlcockpit
    uri, taken = sys.argv[1], sys.argv[2]
    run = rlcockpit.init(store=uri, run_id="forced", project="p")
    for step in range(3):
        run.log(step, {"reward/mean": float(step)})
    run.flush()
    print("ready", flush=True)
    while not os.path.exists(taken):
        time.sleep(0.02)
    for step in range(100, 105):  # after the takeover: never written
        run.log(step, {"reward/mean": -1.0})
        run.phase(step, "ROLLOUT", "finished", duration_s=0.1)
        run.commit(step)
    run.flush()
    print("after", run.dropped_total, run.dropped.get("metrics"), run.lease.lost, flush=True)
    run.close()
    print("closed", flush=True)
"""


def test_a_forced_takeover_fences_the_old_holder_and_its_close_leaves_the_status(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    taken = tmp_path / "taken"
    old = child(OLD_HOLDER, uri, taken)
    wait_line(old, "ready")
    with pytest.raises(RunLeasedError, match=f"sdk pid {old.pid}"):
        rlcockpit.init(store=uri, run_id="forced", resume=True)
    new = rlcockpit.init(store=uri, run_id="forced", resume=True, force=True)
    new.log(3, {"reward/mean": 3.0})
    assert new.flush()
    taken.touch()
    out, err = old.communicate(timeout=60)
    assert old.returncode == 0, err  # the old loop was never crashed
    assert "after 10 5 True" in out and "closed" in out
    assert f"run forced was taken over by sdk pid {os.getpid()}" in err
    assert err.count("was taken over") == 1  # said once, loudly
    reader = open_store(uri).reader()
    assert reader.read_series("forced", ["reward/mean"])["reward/mean"].steps == (0, 1, 2, 3)
    assert not reader.read_phases("forced")
    assert reader.get_run("forced").status == "running"  # the old holder's close changed nothing
    assert reader.get_lease("forced").holder.token == new.lease.token
    (event,) = reader.read_events("forced", kinds=["lease_taken_over"])
    assert (event.payload["reason"], event.payload["previous"]["pid"]) == ("forced", old.pid)
    new.close()
    assert (reader.get_run("forced").status, reader.get_lease("forced")) == ("finished", None)


def test_the_server_and_rlcockpit_runs_show_who_writes_a_run(tmp_path):
    from fastapi.testclient import TestClient

    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings
    from server_testkit import LOCAL

    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    run = rlcockpit.init(project="p", store=uri, run_id="shown", lease=LeaseOptions(kind="trainer"))
    run.log(0, {"reward/mean": 0.0})
    run.flush()
    with TestClient(create_app(ServerSettings(store=uri)), base_url=LOCAL) as client:
        lease = client.get("/api/runs/shown").json()["lease"]
        assert (lease["kind"], lease["pid"], lease["live"]) == ("trainer", os.getpid(), True)
        assert "token" not in lease and lease["age_s"] >= 0
        table = subprocess.run([sys.executable, "-m", "rlcockpit", "runs", "--store", uri], env={
            **ENV, "COLUMNS": "250"}, capture_output=True, text=True, check=True).stdout
        assert f"trainer {os.getpid()}@" in table
        run.close()
        assert client.get("/api/runs/shown").json()["lease"] is None


def test_on_chdb_a_forced_takeover_stops_the_old_writer_within_a_lease_check(tmp_path):
    pytest.importorskip("chdb", reason="the chdb backend needs: pip install 'rlcockpit[clickhouse]'")
    from rlcockpit.telemetry.lease import CHECK_EVERY_S

    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        old = rlcockpit.init(project="p", store=store, run_id="ch", lease=LeaseOptions(kind="trainer"))
        old.log(0, {"reward/mean": 0.0})
        assert old.flush()
        with pytest.raises(RunLeasedError, match=f"trainer pid {os.getpid()}"):
            rlcockpit.init(store=store, run_id="ch", resume=True)
        new = rlcockpit.init(store=store, run_id="ch", resume=True, force=True)
        time.sleep(CHECK_EVERY_S + 0.1)  # ClickHouse has no fence: the old writer checks before writes
        old.log(1, {"reward/mean": -1.0})
        assert old.flush() and old.lease.lost and old.dropped == {"metrics": 1}
        old.close()
        reader = store.reader()
        assert reader.get_run("ch").status == "running"
        new.log(2, {"reward/mean": 2.0})
        new.close()
        assert reader.read_series("ch", ["reward/mean"])["reward/mean"].steps == (0, 2)
        assert (reader.get_run("ch").status, reader.get_lease("ch")) == ("finished", None)
        (event,) = reader.read_events("ch", kinds=["lease_taken_over"])
        assert event.payload["reason"] == "forced" and event.payload["previous"]["kind"] == "trainer"
    finally:
        store.close()
