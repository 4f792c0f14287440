"""Control for any loop (issue 11 part 3): a hand-written loop takes approved tickets and commands
at its own step boundary through ``run.pending_changes(step)``.

The end-to-end test runs ``examples/plain_pytorch_loop.py`` in its own process against a real
SQLite store, with the cockpit served by uvicorn: one user pauses it, requests a learning-rate
change that another approves, resumes it; the change lands at the paused boundary, its effect is
measured, and a stop ends the run as ``stopped``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import rlcockpit
from rlcockpit.control import ControlConfig, ControlPlane, Principal
from rlcockpit.control.audit import verify
from rlcockpit.errors import ConfigError, StoreError
from rlcockpit.store import open_store
from server_testkit import ServerThread

REPO = Path(__file__).resolve().parents[1]
OLGA, ALEX = Principal("olga", "operator"), Principal("alex", "approver")
pytestmark = pytest.mark.timeout(180)


def _plane(uri: str) -> ControlPlane:
    store = open_store(uri)
    return ControlPlane.over(store.control(), store.reader())


def _run(tmp_path: Path, **kwargs):
    uri = f"sqlite:///{tmp_path / 'loop.db'}"
    run = rlcockpit.init(project="p", store=uri, live_params={"lr": (0.1, 1e-4, 1.0), "epochs": (2, 1, 8)},
                         control=ControlConfig(effect_steps=2, poll_interval_s=0.05), **kwargs)
    return uri, run


def _approved(plane: ControlPlane, run_id: str, param: str, value) -> int:
    ticket = plane.tickets.request(OLGA, run_id, param, value, "test")
    return plane.tickets.approve(ALEX, ticket.ticket_id, "ok").ticket_id


def test_a_ticket_is_applied_at_the_boundary_and_its_effect_measured(tmp_path):
    uri, run = _run(tmp_path)
    plane = _plane(uri)
    assert plane.store.read_live_params(run.run_id, limit=1)[0].specs["epochs"]["type"] == "int"
    lr, seen = 0.1, {}
    for step in range(8):
        run.log(step, {"reward/mean": step * 0.1, "kl/mean": 0.01})
        run.log_samples(step, [{"sample_id": i, "prompt": "p", "response": "r", "reward": float(i + step)}
                               for i in range(5)])
        run.commit(step)
        if step == 2:
            tid = _approved(plane, run.run_id, "lr", 0.02)
            bad = _approved(plane, run.run_id, "epochs", 4)
        for change in run.pending_changes(step):
            seen[change.ticket_id] = step
            if change.name == "lr":
                lr = change.value
                change.applied()
            else:
                change.failed("epochs are fixed in this loop")
    assert lr == 0.02 and seen == {tid: 2, bad: 2} and run.live_params == {"lr": 0.02, "epochs": 2}
    ticket = plane.store.get_ticket(tid)
    assert (ticket.status, ticket.boundary_step, ticket.applied_step, ticket.previous) == ("evaluated", 2, 3, 0.1)
    assert ticket.effect["n_before"] == 10 and ticket.effect["n_after"] == 10  # 2 steps x 5 samples
    assert ticket.effect["ks_pvalue"] is not None and ticket.effect["reward_source"] == "samples"
    assert ticket.effect["windows"]["reward/mean"]["n_after"] == 2
    failed = plane.store.get_ticket(bad)
    assert failed.status == "failed" and failed.error == "epochs are fixed in this loop"
    assert plane.store.read_live_params(run.run_id, limit=1)[0].values["lr"] == 0.02
    run.close()
    events = [e.kind for e in open_store(uri).reader().read_events(run.run_id)]
    assert "live_params_applied" in events


def test_a_change_the_loop_ignores_fails_and_unreached_tickets_fail_at_close(tmp_path):
    uri, run = _run(tmp_path)
    plane = _plane(uri)
    ignored = _approved(plane, run.run_id, "lr", 0.5)
    assert [c.ticket_id for c in run.pending_changes(0)] == [ignored]  # neither applied nor failed
    assert list(run.pending_changes(1)) == []
    assert "neither applied nor failed" in plane.store.get_ticket(ignored).error
    late = _approved(plane, run.run_id, "lr", 0.3)
    run.close()
    assert plane.store.get_ticket(late).status == "failed"
    assert plane.runs.get_run(run.run_id).status == "finished"


def test_pause_blocks_until_resume_and_stop_ends_the_run_stopped(tmp_path):
    uri, run = _run(tmp_path)
    plane = _plane(uri)
    plane.tickets.command(OLGA, run.run_id, "pause", "look")  # self-approved
    resume = plane.tickets.command(OLGA, run.run_id, "resume", "go on")
    started = time.monotonic()

    def approve_later():
        time.sleep(0.3)
        plane.tickets.approve(ALEX, resume.ticket_id)

    import threading

    threading.Thread(target=approve_later).start()
    assert list(run.pending_changes(0)) == []
    assert time.monotonic() - started >= 0.3 and not run.stop_requested
    stop = plane.tickets.command(OLGA, run.run_id, "stop", "done")
    plane.tickets.approve(ALEX, stop.ticket_id)
    list(run.pending_changes(1))
    assert run.stop_requested
    run.close()
    assert plane.runs.get_run(run.run_id).status == "stopped"
    assert plane.store.get_ticket(resume.ticket_id).boundary_step == 0


def test_the_boundary_asks_the_store_when_the_tickets_signal_changed_or_a_second_passed(tmp_path, monkeypatch):
    """A ticket approved through any store object (here another one in this process) applies at the
    next boundary; while no ticket changes, a boundary costs a stat of the signal file, not a query;
    a writer that does not signal (raw SQL here) is still seen within QUIET_POLL_S."""
    import sqlite3

    from rlcockpit.integrations import loop_control

    monkeypatch.setattr(loop_control, "QUIET_POLL_S", 3600.0)  # no second passes on a slow machine
    uri, run = _run(tmp_path)
    plane = _plane(uri)
    asked: list[int] = []
    approved = run._control.channel.approved
    monkeypatch.setattr(run._control.channel, "approved", lambda: asked.append(1) or approved())

    def boundary(step: int) -> list[int]:
        taken = []
        for change in run.pending_changes(step):
            taken.append(change.ticket_id)
            change.applied()
        return taken

    assert [boundary(s) for s in range(4)] == [[]] * 4 and len(asked) == 1
    tid = _approved(plane, run.run_id, "lr", 0.02)
    assert boundary(4) == [tid] and len(asked) == 2
    assert boundary(5) == [] and len(asked) == 3  # the ticket changed at boundary 4 (applied)
    assert boundary(6) == [] and len(asked) == 3
    quiet = plane.tickets.request(OLGA, run.run_id, "lr", 0.03, "test")
    assert boundary(7) == [] and len(asked) == 4
    with sqlite3.connect(tmp_path / "loop.db") as conn:  # approved behind the signal's back
        conn.execute("UPDATE tickets SET status = 'approved' WHERE ticket_id = ?", (quiet.ticket_id,))
    assert boundary(8) == [] and len(asked) == 4
    monkeypatch.setattr(loop_control, "QUIET_POLL_S", 0.0)  # the second has passed
    assert boundary(9) == [quiet.ticket_id] and run.live_params["lr"] == 0.03
    run.close()


def test_setup_fails_fast_and_run_time_fails_soft(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'plain.db'}"
    with rlcockpit.init(project="p", store=uri) as run, pytest.raises(ConfigError, match="live_params"):
        run.pending_changes(0)
    with pytest.raises(ConfigError, match="outside its range"):
        rlcockpit.init(project="p", store=uri, live_params={"lr": (2.0, 0.0, 1.0)})
    with pytest.raises(ConfigError, match="LiveParam"):
        rlcockpit.init(project="p", store=uri, live_params={"lr": "fast"})
    _, run = _run(tmp_path)

    def broken():
        raise StoreError("database is locked")

    monkeypatch.setattr(run._control.channel, "approved", broken)
    assert list(run.pending_changes(0)) == []  # logged, not raised
    run.close()


def test_the_plain_loop_example_is_steered_over_http(tmp_path):
    """Real process, real store, real uvicorn: olga pauses, asks for lr 0.01, alex approves, olga
    resumes (alex approves), the loop applies the change at the paused boundary; then stop."""
    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import control_for
    from rlcockpit.server.settings import ServerSettings

    uri = f"sqlite:///{tmp_path / 'steer.db'}"
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("alex", "approver"))}
    settings = ServerSettings(store=uri)
    access, control = control_for(settings, store)
    loop = subprocess.Popen([sys.executable, str(REPO / "examples" / "plain_pytorch_loop.py"), "--store", uri,
                             "--steps", "100000", "--batch", "4", "--effect-steps", "3", "--poll-interval", "0.05",
                             "--checkpoint-dir", str(tmp_path / "ck")],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        with ServerThread(create_app(settings, store, access=access, control=control)) as url, \
                httpx.Client(base_url=url, timeout=30) as http:
            def post(user, path, body):
                resp = http.post(path, json=body, headers={"Authorization": f"Bearer {tokens[user]}"})
                assert resp.status_code in (200, 201), resp.text
                return resp.json()["ticket"]

            run_id = _wait(lambda: _live_run(plane), loop, "the loop to publish its live parameters")
            post("olga", f"/api/runs/{run_id}/commands", {"command": "pause", "reason": "look"})
            paused = _wait(lambda: _event_step(store, run_id, "paused"), loop, "the pause")
            tid = post("olga", f"/api/runs/{run_id}/tickets", {"param": "lr", "value": 0.01, "reason": "slower"})
            post("alex", f"/api/tickets/{tid['ticket_id']}/approve", {"comment": "ok"})
            resume = post("olga", f"/api/runs/{run_id}/commands", {"command": "resume", "reason": "go"})
            post("alex", f"/api/tickets/{resume['ticket_id']}/approve", {"comment": "ok"})
            evaluated = _wait(lambda: _ticket_in(http, tokens, tid["ticket_id"], "evaluated"), loop,
                              "the effect measurement")
            checkpoint = post("olga", f"/api/runs/{run_id}/commands", {"command": "checkpoint", "reason": "keep"})
            _wait(lambda: _ticket_in(http, tokens, checkpoint["ticket_id"], "applied"), loop, "the checkpoint")
            stop = post("olga", f"/api/runs/{run_id}/commands", {"command": "stop", "reason": "enough"})
            post("alex", f"/api/tickets/{stop['ticket_id']}/approve", {"comment": "ok"})
            out, _ = loop.communicate(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
    assert loop.returncode == 0, out
    assert evaluated["boundary_step"] == paused and evaluated["applied_step"] == paused + 1
    assert evaluated["effect"]["ks_pvalue"] is not None
    lr = store.reader().read_series(run_id, ["optim/lr/actor"])["optim/lr/actor"]
    by_step = dict(zip(lr.steps, lr.values, strict=True))
    assert by_step[paused] == pytest.approx(0.1) and by_step[paused + 1] == pytest.approx(0.01)
    assert Path(plane.store.get_ticket(checkpoint["ticket_id"]).checkpoint).is_file()
    assert plane.runs.get_run(run_id).status == "stopped"
    assert verify(plane.store).ok  # every change above is in the hash-chained audit log


def _wait(predicate, proc, what, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value is not None and value is not False:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"the loop ended while waiting for {what}: {proc.stdout.read()}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _live_run(plane: ControlPlane) -> str | None:
    runs = plane.runs.list_runs()
    return runs[0].run_id if runs and plane.store.read_live_params(runs[0].run_id, limit=1) else None


def _event_step(store, run_id: str, kind: str) -> int | None:
    steps = [e.step for e in store.reader().read_events(run_id) if e.kind == kind]
    return steps[0] if steps else None


def _ticket_in(http, tokens, tid: int, status: str):
    ticket = http.get(f"/api/tickets/{tid}", headers={"Authorization": f"Bearer {tokens['alex']}"}).json()["ticket"]
    return ticket if ticket["status"] == status else None
