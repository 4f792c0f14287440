"""The newcomer's demo end to end (`rlcockpit demo`, cli/_support/demo_users.py and demo_guide.py):
the printed sign-in links carry working tokens of the right roles, the incident guide is printed once
with the fix that undoes the scripted lr_spike, following it (a ticket requested by demo-operator,
approved by demo-approver) gets the change applied and its effect measured within the run, the
cockpit keeps serving after training, and a second demo on the same store replaces its demo users
instead of adding more."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from rlcockpit.cli._support.demo_users import DemoUsers, describe, ensure_demo_users
from rlcockpit.control import Users
from rlcockpit.store import open_store
from server_testkit import free_port

SMALL = ["rollout.batch_size=8", "ppo.minibatch_size=8", "ppo.epochs=1", "eval.every=0",
         "checkpoint.at_end=false", "model.threads=1"]
LINK = re.compile(r"^\s+(demo-\S+) \((\w+)\): (http://\S+/#/signin\?code=(rlo_\S+))$")


class Demo:
    """`rlcockpit demo` in a subprocess; its output is read line by line while it runs."""

    def __init__(self, tmp_path, port: int, *args: str) -> None:
        cmd = [sys.executable, "-m", "rlcockpit", "demo", "--port", str(port), *args, *SMALL]
        # Ctrl-C as from a terminal: a suite started in the background (`make test &`) inherits SIGINT
        # ignored, and so would the demo
        self.proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                                     text=True, env={**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1",
                                                     "PYTHONFAULTHANDLER": "1"})
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def out(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.out:
            if self.proc.poll() is not None:
                self.reader.join(5)
                if text in self.out:
                    return
                raise AssertionError(f"the demo ended ({self.proc.returncode}) without printing {text!r}:\n{self.out}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} after {timeout}s:\n{self.out}")
            time.sleep(0.2)

    def links(self) -> dict[str, tuple[str, str, str]]:
        """role -> (user name, link, one-time code) as printed."""
        found = [m.groups() for m in map(LINK.match, self.lines) if m]
        return {role: (name, link, code) for name, role, link, code in found}

    def signed_in(self, port: int) -> dict[str, tuple[str, str, str]]:
        """role -> (user name, link, session token): each printed link's code exchanged once, as
        the page does (POST /api/session)."""
        out = {}
        for role, (name, link, code) in self.links().items():
            resp = httpx.post(f"http://127.0.0.1:{port}/api/session", json={"code": code}, timeout=60)
            assert resp.status_code == 201, resp.text
            out[role] = (name, link, resp.json()["token"])
        return out

    def interrupt(self) -> int:
        """Ctrl-C: the cockpit that kept serving after training stops and the demo exits."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:  # show where it hangs: faulthandler dumps every thread on SIGABRT
            self.proc.send_signal(signal.SIGABRT)
            self.proc.wait(30)
            self.reader.join(5)
            raise AssertionError(f"the demo did not exit 60 s after Ctrl-C:\n{self.out[-8000:]}") from None
        self.reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def follow_the_guide(port: int, out: str, links: dict) -> int:
    """What the guide says: request actor_lr = <old value> as the operator, approve as the approver."""
    run_id = re.search(r"#/run/([^/]+)/tickets", out).group(1)
    base = f"http://127.0.0.1:{port}/api"
    req = httpx.post(f"{base}/runs/{run_id}/tickets", timeout=60,
                     headers={"Authorization": f"Bearer {links['operator'][2]}"},
                     json={"param": "actor_lr", "value": 5e-05, "reason": "the guide: undo the lr spike"})
    assert req.status_code == 201, req.text
    ticket = req.json()["ticket"]["ticket_id"]
    ok = httpx.post(f"{base}/tickets/{ticket}/approve", json={"comment": "ok"}, timeout=60,
                    headers={"Authorization": f"Bearer {links['approver'][2]}"})
    assert ok.status_code == 200, ok.text
    return ticket


def me(port: int, token: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/api/me", headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_links_guide_and_a_second_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'demo.db'}"
    port = free_port()
    first = Demo(tmp_path, port, "--steps", "40", "--onset", "4", "--store", uri)
    try:
        first.wait_for("Open the approver link in a private window")
        codes = first.links()
        links = first.signed_in(port)
        assert {r: n for r, (n, _, _) in links.items()} == {"operator": "demo-operator", "approver": "demo-approver"}
        for role, (name, link, token) in links.items():  # (the server now knows both tokens: fast later)
            assert link == f"http://127.0.0.1:{port}/#/signin?code={codes[role][2]}"
            assert token.startswith("rls_")
            assert me(port, token).json() == {"name": name, "role": role, "users_exist": True}
        for _, _, code in codes.values():  # each link works once
            assert httpx.post(f"http://127.0.0.1:{port}/api/session", json={"code": code}, timeout=60).status_code == 401
        first.wait_for("Fix to try:", timeout=600)
        ticket = follow_the_guide(port, first.out, links)
        first.wait_for("Training is over")  # the cockpit keeps serving after training
        assert "Open the approver link in a private window" in first.out
        assert first.out.count("=== Incident detected") == 1
        guide = first.out[first.out.index("=== Incident detected"):]
        run_id = open_store(uri, create=False).reader().list_runs()[0].run_id
        assert f"Alerts: http://127.0.0.1:{port}/#/run/{run_id}/alerts" in guide
        assert "First-moving signal: " in guide
        assert "Cause: actor_lr went from 5e-05 to 0.005" in guide  # lr_spike: x100
        assert ("request actor_lr = 5e-05 as demo-operator, approve it as demo-approver; the effect is "
                "measured 10 steps after it is applied") in guide
        done = httpx.get(f"http://127.0.0.1:{port}/api/tickets/{ticket}", timeout=30,
                         headers={"Authorization": f"Bearer {links['approver'][2]}"}).json()["ticket"]
        assert done["status"] == "evaluated" and done["previous"] == 0.005 and done["value"] == 5e-05
        # measured within the run, control.effect_steps = 10 (the demo's setting) after it was applied
        assert done["effect"]["effect_steps"] == 10 and done["effect"]["windows"]["kl/mean"]["n_after"] == 10
        assert first.interrupt() == 0
    finally:
        first.kill()

    port2 = free_port()
    second = Demo(tmp_path, port2, "--steps", "2", "--no-incident", "--store", uri)
    try:
        second.wait_for("Training is over")
        assert "Demo users existed already (demo-operator, demo-approver)" in second.out
        fresh = second.signed_in(port2)
        assert {r: n for r, (n, _, _) in fresh.items()} == {"operator": "demo-operator-2",
                                                          "approver": "demo-approver-2"}
        for role, (_, _, token) in fresh.items():
            assert me(port2, token).json()["role"] == role
        for _, _, old in links.values():  # the first run's links no longer sign anyone in
            assert me(port2, old).status_code == 401
        assert "Incident detected" not in second.out
        assert second.interrupt() == 0
    finally:
        second.kill()
    active = [u.name for u in Users(open_store(uri).control()).list() if u.revoked_at is None]
    assert sorted(active) == ["demo-approver-2", "demo-operator-2"]  # never more than the two


def test_a_store_with_other_users_gets_no_demo_users(tmp_path):
    control = open_store(f"sqlite:///{tmp_path / 's.db'}").control()
    Users(control).add("alice", "admin")
    Users(control).add("demo-bob", "operator")  # named demo-* but not created by the demo: not touched
    result = ensure_demo_users(control)
    assert result == DemoUsers(others=("alice", "demo-bob"))
    assert [(u.name, u.revoked_at) for u in Users(control).list()] == [("alice", None), ("demo-bob", None)]
    (line,) = describe(result, "http://127.0.0.1:8765/", "sqlite:///s.db")
    assert "the demo creates none" in line
    assert "rlcockpit users add NAME --role operator --store sqlite:///s.db" in line


def test_no_users_keeps_the_demo_cockpit_open_for_reading(tmp_path):
    """--no-users: no links, reads need no token (and nobody may change anything)."""
    port = free_port()
    uri = f"sqlite:///{tmp_path / 'open.db'}"
    demo = Demo(tmp_path, port, "--steps", "1", "--no-incident", "--no-users", "--store", uri)
    try:
        demo.wait_for("Training is over")
        assert not demo.links() and "Sign in" not in demo.out
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=30).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/api/me", timeout=30).json()["users_exist"] is False
        assert demo.interrupt() == 0
    finally:
        demo.kill()


def test_the_guide_without_a_changed_parameter_points_at_the_library():
    """An incident no live change explains (e.g. a reward fault): no ticket to propose, the guide
    names the library entries; without a server it points at `rlcockpit doctor`."""
    from rlcockpit.cli._support.demo_guide import GuideContext, changed_params, guide_lines
    from rlcockpit.records import FindingRecord

    first = FindingRecord(step=7, detector="reward_shape", severity="orange", message="reward shifted left",
                          evidence={"signal": "reward/mean", "onset_step": 5}, patterns=("reward_left_shift",),
                          incident="inc-1")
    assert changed_params({"actor_lr": 5e-5}, {"actor_lr": 5e-5}) == {}
    lines = guide_lines([first], first, {}, GuideContext(url=None, store="sqlite:///x.db", effect_steps=10), "run-1")
    assert lines[0] == "=== Incident detected at step 7 (orange) ==="
    assert "First-moving signal: reward/mean (reward_shape), from step 5" in lines
    assert "Explain it: rlcockpit doctor --store sqlite:///x.db --run run-1" in lines
    assert lines[-1] == "Fix to try: see failure library: reward_left_shift (Alerts links the entries)."
    assert not any("request" in line for line in lines)


def test_the_guide_names_the_rollback_step_when_a_checkpoint_precedes_the_incident():
    from rlcockpit.cli._support.demo_guide import GuideContext, guide_lines
    from rlcockpit.records import FindingRecord

    first = FindingRecord(step=100, detector="update_ratio", severity="orange", message="ratio jumped",
                          evidence={"signal": "update ratio", "onset_step": 100}, incident="inc-1")
    ctx = GuideContext(url="http://127.0.0.1:8765/", store="sqlite:///x.db", effect_steps=10)
    changed = {"actor_lr": (5e-5, 5e-3)}
    lines = guide_lines([first], first, changed, ctx, "run-1", rollback=50)
    assert any("request a rollback to step 50" in line and "rlcockpit rollback --run run-1 --step 50" in line
               for line in lines)
    assert not any("rollback" in line for line in guide_lines([first], first, changed, ctx, "run-1"))
