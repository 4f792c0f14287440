"""End to end: a real tiny training (the `rlcockpit train` CLI in a subprocess), tickets over HTTP,
the change applied at a boundary with a checkpoint and its effect measured, the audit chain
verified and tampering caught; a SIGKILL between approval and application, then ``--resume``:
the ticket is applied exactly once; a crash between marking and applying is replayed, not redone.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from control_testkit import client
from rlcockpit.control import ControlPlane
from rlcockpit.store import open_store
from trainer_testkit import FAST, events, make_config, series

pytestmark = pytest.mark.timeout(300)
TRAIN = [*FAST, "eval.every=100", "eval.max_prompts=16", "control.effect_steps=2", "kl.coef=0.05",
         "model.threads=1", "diagnostics.enabled=false"]


class Cockpit:
    """The store, the control plane, two users and the HTTP app over them."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.uri = f"sqlite:///{tmp_path / 'runs.db'}"
        self.store = open_store(self.uri)
        self.plane = ControlPlane.over(self.store.control(), self.store.reader())
        self.tokens = {n: self.plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("alex", "approver"))}
        self.http = client(self)

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def train(self, *overrides: str, resume: str | None = None) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "rlcockpit", "train", "--quiet", "--store", self.uri,
               f"checkpoint.dir={self.tmp / 'ckpt'}", *TRAIN, *overrides]
        if resume:  # after a SIGKILL: the dead trainer's lease is live until stale, --force takes it
            cmd += ["--resume", resume, "--force"]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run_id(self, proc: subprocess.Popen, timeout: float = 120.0) -> str:
        """The run once it has published its live parameters (the trainer is in its loop)."""
        def published():
            runs = self.plane.runs.list_runs()
            return runs and self.plane.store.read_live_params(runs[0].run_id, limit=1) and runs[0].run_id
        return wait(published, proc, timeout, "the run to publish its live parameters")

    def request_and_approve(self, run_id: str, value: float = 0.2) -> int:
        resp = self.http.post(f"/api/runs/{run_id}/tickets", headers=self.headers("olga"),
                              json={"param": "kl.coef", "value": value, "reason": "KL too loose"})
        assert resp.status_code == 201, resp.text
        tid = resp.json()["ticket"]["ticket_id"]
        ok = self.http.post(f"/api/tickets/{tid}/approve", headers=self.headers("alex"), json={"comment": "go"})
        assert ok.status_code == 200, ok.text
        return tid

    def ticket(self, tid: int) -> dict:
        return self.http.get(f"/api/tickets/{tid}", headers=self.headers("alex")).json()["ticket"]

    def audit_cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rlcockpit", "audit", *args, "--store", self.uri],
                              capture_output=True, text=True, timeout=120)


def wait(predicate, proc, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) before {what}:\n{proc.stdout.read()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def freeze(proc, db_path) -> None:
    """SIGSTOP the trainer at a moment it holds no write lock on the store (else nobody could write)."""
    for _ in range(50):
        os.kill(proc.pid, signal.SIGSTOP)
        conn = sqlite3.connect(db_path, timeout=0.2, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            conn.close()
    raise AssertionError("the trainer always held the store's write lock")


@pytest.fixture
def cockpit(tmp_path):
    c = Cockpit(tmp_path)
    yield c
    c.http.close()


def test_ticket_applied_at_a_boundary_measured_and_audited(cockpit):
    proc = cockpit.train("train.steps=60")
    try:
        run_id = cockpit.run_id(proc)
        # a step logged first, so that the boundary the ticket lands on has steps before it (on a
        # fast machine a ticket approved at once lands on the boundary before step 1)
        wait(lambda: series(cockpit.uri, run_id, ["kl/coef"]).get("kl/coef"), proc, 120, "the first step")
        tid = cockpit.request_and_approve(run_id)
        wait(lambda: cockpit.ticket(tid)["status"] == "evaluated", proc, 120, "the ticket to be evaluated")
        stop = cockpit.http.post(f"/api/runs/{run_id}/commands", headers=cockpit.headers("olga"),
                                 json={"command": "stop", "reason": "seen enough"}).json()["ticket"]
        cockpit.http.post(f"/api/tickets/{stop['ticket_id']}/approve", headers=cockpit.headers("alex"), json={})
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    t = cockpit.ticket(tid)
    s = t["boundary_step"]
    assert t["applied_step"] == s + 1 and t["previous"] == 0.05
    ckpt = Path(t["checkpoint"])
    assert ckpt.name == f"step_{s:07d}" and (ckpt / "trainer_state.pt").is_file()
    kl_coef = dict(series(cockpit.uri, run_id, ["kl/coef"])["kl/coef"])
    assert {v for step, v in kl_coef.items() if step <= s} == {0.05}
    assert {v for step, v in kl_coef.items() if step > s} == {0.2}
    effect = t["effect"]
    assert 0.0 <= effect["ks_pvalue"] <= 1.0 and effect["n_before"] == effect["n_after"] == 16
    assert effect["evaluated_step"] == s + 2 and set(effect["windows"]) >= {"kl/mean", "policy/entropy"}
    assert effect["windows"]["kl/mean"]["n_after"] == 2
    assert cockpit.plane.store.get_ticket(stop["ticket_id"]).status == "applied"
    assert cockpit.plane.runs.get_run(run_id).status == "stopped"

    ok = cockpit.audit_cli("verify")
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout + ok.stderr
    entries = cockpit.plane.store.read_audit()
    approved = next(e for e in entries if e.action == "ticket_approved" and e.ticket_id == tid)
    with sqlite3.connect(cockpit.store.path) as conn:  # someone edits the decision afterwards
        conn.execute("UPDATE audit SET actor = 'mallory' WHERE seq = ?", (approved.seq,))
    bad = cockpit.audit_cli("verify")
    assert bad.returncode == 1 and f"BROKEN at entry {approved.seq}:" in bad.stdout and "changed" in bad.stdout


def test_removed_audit_entries_are_detected(cockpit):
    store = cockpit.plane.store
    with sqlite3.connect(cockpit.store.path) as conn:
        conn.execute("DELETE FROM audit WHERE seq = 1")
    out = cockpit.audit_cli("verify")
    assert out.returncode == 1 and "BROKEN at entry 2" in out.stdout and "removed" in out.stdout
    with sqlite3.connect(cockpit.store.path) as conn:
        conn.execute("DELETE FROM audit")
    assert store.audit_high_water() == 2
    out = cockpit.audit_cli("verify")
    assert out.returncode == 1 and "entries 1..2 were removed" in out.stdout
    exported = cockpit.audit_cli("export")
    assert exported.returncode == 0 and exported.stdout == ""


def test_sigkill_after_approval_then_resume_applies_exactly_once(cockpit):
    proc = cockpit.train("train.steps=200", "checkpoint.every=2")
    try:
        run_id = cockpit.run_id(proc)
        ckpt_dir = cockpit.tmp / "ckpt" / run_id
        wait(lambda: list(ckpt_dir.glob("step_???????/meta.json")), proc, 120, "a complete checkpoint")
        freeze(proc, cockpit.store.path)  # frozen: it cannot reach its next boundary
        tid = cockpit.request_and_approve(run_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert cockpit.plane.store.get_ticket(tid).status == "approved"  # approved, never applied
    resumed = cockpit.train("train.steps=12", resume=str(ckpt_dir))
    assert resumed.wait(timeout=200) == 0, resumed.stdout.read()
    t = cockpit.plane.store.get_ticket(tid)
    assert t.status in ("applied", "evaluated") and t.boundary_step is not None
    actions = [e.action for e in cockpit.plane.store.read_audit() if e.ticket_id == tid]
    assert actions.count("ticket_applied") == 1 and "ticket_replayed" not in actions
    applied = [e for e in events(cockpit.uri, run_id, "live_params_applied")
               if e.payload["requested_by"] == f"ticket:{tid}"]
    assert len(applied) == 1 and applied[0].step == t.boundary_step
    kl_coef = dict(series(cockpit.uri, run_id, ["kl/coef"])["kl/coef"])
    assert kl_coef[t.boundary_step] == 0.05 and kl_coef[t.boundary_step + 1] == 0.2


def test_crash_between_marking_and_applying_is_replayed_once(tmp_path):
    """The store says applied, the checkpoint does not contain it (a kill right after the mark):
    the resumed run re-applies it at its step, marks nothing twice."""
    import torch

    from rlcockpit.control import Channel
    from rlcockpit.trainer.checkpoint import checkpoint_dir
    from rlcockpit.trainer.trainer import Trainer

    torch.set_num_threads(1)
    cfg = make_config(tmp_path, *TRAIN, "train.steps=4", "checkpoint.every=2")
    store = open_store(cfg.telemetry.store)
    first = Trainer(cfg, control_store=store.control()).run()
    ckpt = checkpoint_dir(cfg.checkpoint.dir, first.run_id, 2)
    plane = ControlPlane.over(store.control(), store.reader())
    olga = plane.users.authenticate(plane.users.add("olga", "operator")[1])
    alex = plane.users.authenticate(plane.users.add("alex", "approver")[1])
    writer = store.writer()
    writer.set_run_status(first.run_id, "running")  # as a killed run looks
    writer.close()
    ticket = plane.tickets.request(olga, first.run_id, "kl_coef", 0.3, "crash test")
    ticket = plane.tickets.approve(alex, ticket.ticket_id, "")
    Channel(store.control(), first.run_id).mark_applied(ticket, boundary_step=2, checkpoint=str(ckpt))

    resumed = Trainer(make_config(tmp_path, *TRAIN, "train.steps=4", "checkpoint.every=2"), resume_from=ckpt,
                      control_store=store.control()).run()
    assert resumed.status == "finished"
    kl_coef = dict(series(cfg, first.run_id, ["kl/coef"])["kl/coef"])
    assert kl_coef[2] == 0.05 and kl_coef[3] == kl_coef[4] == 0.3
    actions = [e.action for e in plane.store.read_audit() if e.ticket_id == ticket.ticket_id]
    assert actions.count("ticket_applied") == 1 and actions.count("ticket_replayed") == 1
    assert plane.store.get_ticket(ticket.ticket_id).status == "evaluated"
