"""The trainer's end of the control plane, in process (tiny runs, real store): live parameters
published with their history, pause / resume through tickets, rollback undoing a later change,
and the diagnostics policy's actions as detector-requested, policy-approved tickets."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from rlcockpit.control import ControlPlane
from rlcockpit.store import open_store
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import FAST, events, make_config, series

pytestmark = pytest.mark.timeout(240)
BASE = [*FAST, "kl.coef=0.05", "diagnostics.enabled=false", "control.effect_eval=false", "control.effect_steps=2"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def setup(tmp_path, *overrides):
    cfg = make_config(tmp_path, *BASE, *overrides)
    store = open_store(cfg.telemetry.store)
    plane = ControlPlane.over(store.control(), store.reader())
    people = {n: plane.users.authenticate(plane.users.add(n, r)[1])
              for n, r in (("olga", "operator"), ("alex", "approver"))}
    return cfg, store, plane, people


def test_live_parameters_are_published_at_start_and_on_every_change(tmp_path):
    cfg, store, plane, p = setup(tmp_path, "train.steps=4")
    trainer = Trainer(cfg, control_store=store.control())

    def hook(t, step):
        if step == 2:
            ticket = plane.tickets.request(p["olga"], t.telemetry.run_id, "clip_eps", 0.1, "seed 000 §2 example")
            plane.tickets.approve(p["alex"], ticket.ticket_id, "")

    trainer.add_step_hook(hook)
    result = trainer.run()
    history = plane.store.read_live_params(result.run_id)
    assert [h.source for h in history] == ["start", "ticket:1"]
    assert history[0].values["clip_eps"] == 0.2 and history[1].values["clip_eps"] == 0.1
    assert history[1].step == 2 and history[0].specs["max_new_tokens"]["hi"] <= 4096
    assert history[0].specs["clip_eps"] == {"type": "float", "lo": 0.01, "hi": 1.0, "metric": "policy/clip_eps",
                                            "help": history[0].specs["clip_eps"]["help"]}
    clip = dict(series(cfg, result.run_id, ["policy/clip_eps"])["policy/clip_eps"])
    assert clip[2] == 0.2 and clip[3] == 0.1
    ticket = plane.store.get_ticket(1)
    assert ticket.status == "evaluated" and ticket.effect["windows"]["kl/mean"]["n_before"] == 2


def test_pause_and_resume_through_tickets(tmp_path):
    cfg, store, plane, p = setup(tmp_path, "train.steps=4", "control.poll_interval_s=0.05")
    trainer = Trainer(cfg, control_store=store.control())
    holder: dict = {}

    def hook(t, step):
        if step == 2:
            holder["pause"] = plane.tickets.command(p["olga"], t.telemetry.run_id, "pause", "look at the samples")

    trainer.add_step_hook(hook)
    thread = threading.Thread(target=lambda: holder.setdefault("result", trainer.run()))
    thread.start()
    _wait(lambda: trainer.paused, "the trainer to pause")
    run_id = trainer.telemetry.run_id
    assert trainer.step == 2 and plane.store.get_ticket(holder["pause"].ticket_id).status == "applied"
    resume = plane.tickets.command(p["olga"], run_id, "resume", "samples look fine")
    assert resume.status == "requested"  # resume needs a second person
    thread.join(1.0)
    assert thread.is_alive() and trainer.paused
    plane.tickets.approve(p["alex"], resume.ticket_id, "ok")
    thread.join(120)
    assert holder["result"].status == "finished" and holder["result"].step == 4
    kinds = {e.kind: e.payload["requested_by"] for e in events(cfg, run_id, "paused") + events(cfg, run_id, "resumed")}
    assert kinds == {"paused": f"ticket:{holder['pause'].ticket_id}", "resumed": f"ticket:{resume.ticket_id}"}
    assert plane.store.get_ticket(resume.ticket_id).boundary_step == 2


def test_rollback_restores_a_checkpoint_and_undoes_later_changes(tmp_path):
    cfg, store, plane, p = setup(tmp_path, "train.steps=6", "checkpoint.every=2")
    trainer = Trainer(cfg, control_store=store.control())
    ids: dict = {}

    def hook(t, step):
        run_id = t.telemetry.run_id
        if step == 3 and "kl" not in ids:
            ids["kl"] = plane.tickets.request(p["olga"], run_id, "kl.coef", 0.5, "tighten").ticket_id
            plane.tickets.approve(p["alex"], ids["kl"], "")
        if step == 5 and "rb" not in ids:
            ids["rb"] = plane.tickets.command(p["olga"], run_id, "rollback", "KL blew up", {"step": 2}).ticket_id
            plane.tickets.approve(p["alex"], ids["rb"], "")

    trainer.add_step_hook(hook)
    result = trainer.run()
    assert result.status == "finished" and result.step == 6
    kl_ticket, rb = plane.store.get_ticket(ids["kl"]), plane.store.get_ticket(ids["rb"])
    assert kl_ticket.boundary_step == 3 and kl_ticket.rolled_back_by == rb.ticket_id
    assert rb.status == "applied" and rb.boundary_step == 5 and rb.checkpoint.endswith("step_0000002")
    # the steps after the rollback were trained again with the checkpoint's kl coefficient
    kl_coef = dict(series(cfg, result.run_id, ["kl/coef"])["kl/coef"])
    assert kl_coef == {1: 0.05, 2: 0.05, 3: 0.05, 4: 0.05, 5: 0.05, 6: 0.05}
    latest = plane.store.read_live_params(result.run_id)[-1]
    assert latest.values["kl_coef"] == 0.05 and "rollback" in latest.source
    actions = [e.action for e in plane.store.read_audit() if e.ticket_id == ids["kl"]]
    assert actions[-1] == "ticket_rolled_back"


def test_diagnostics_actions_become_policy_approved_tickets(tmp_path):
    from rlcockpit.diagnostics.policy import Action
    from rlcockpit.records import FindingRecord

    cfg, store, plane, _ = setup(tmp_path, "train.steps=3")
    trainer = Trainer(cfg, control_store=store.control())
    finding = FindingRecord(step=2, detector="kl_tiers", severity="red", message="KL 3x target", incident="inc-1")

    def hook(t, step):
        if step == 2:
            t.diagnosis.pending.append(Action("checkpoint", 2, finding))

    trainer.add_step_hook(hook)
    result = trainer.run()
    tickets = plane.store.list_tickets(run_id=result.run_id)
    assert [(t.requested_by, t.decided_by, t.target, t.status) for t in tickets] == [
        ("detector:kl_tiers", "policy", "checkpoint", "applied")]
    assert tickets[0].checkpoint.endswith("step_0000002") and tickets[0].value["incident"] == "inc-1"
    audit = [(e.actor, e.action) for e in plane.store.read_audit() if e.ticket_id == tickets[0].ticket_id]
    assert audit == [("detector:kl_tiers", "ticket_requested"), ("policy", "ticket_approved"),
                     (f"trainer:{result.run_id}", "ticket_applied")]
    action_events = events(cfg, result.run_id, "action")
    assert action_events[0].payload["result"]["ticket_id"] == tickets[0].ticket_id


def test_a_ticket_the_trainer_cannot_apply_fails_visibly(tmp_path):
    cfg, store, plane, p = setup(tmp_path, "train.steps=3")
    trainer = Trainer(cfg, control_store=store.control())

    def hook(t, step):
        if step == 2:  # within the published range, but beyond this model's context
            store.control().publish_live_params(_widened(plane, t.telemetry.run_id))
            ticket = plane.tickets.request(p["olga"], t.telemetry.run_id, "max_new_tokens", 4000, "longer")
            plane.tickets.approve(p["alex"], ticket.ticket_id, "")

    trainer.add_step_hook(hook)
    result = trainer.run()
    ticket = plane.store.list_tickets(run_id=result.run_id)[0]
    assert ticket.status == "failed" and "out of range" in ticket.error
    assert result.status == "finished" and trainer.live.params.max_new_tokens == 10


def _widened(plane, run_id):
    import dataclasses

    latest = plane.store.read_live_params(run_id)[-1]
    specs = {**latest.specs, "max_new_tokens": {**latest.specs["max_new_tokens"], "hi": 4096}}
    return dataclasses.replace(latest, specs=specs, version=None, source="test")


def _wait(predicate, what, timeout=120.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_tickets_at_one_boundary_leave_a_consistent_checkpoint(tmp_path):
    """The checkpoint before the second change holds the first change *and* its ticket id, so a
    resume from it neither loses the first nor applies it twice."""
    from rlcockpit.trainer.checkpoint import load_state

    cfg, store, plane, p = setup(tmp_path, "train.steps=3")
    trainer = Trainer(cfg, control_store=store.control())

    def hook(t, step):
        if step == 2:
            for param, value in (("kl_coef", 0.1), ("clip_eps", 0.15)):
                ticket = plane.tickets.request(p["olga"], t.telemetry.run_id, param, value, "two at once")
                plane.tickets.approve(p["alex"], ticket.ticket_id, "")

    trainer.add_step_hook(hook)
    result = trainer.run()
    first, second = plane.store.list_tickets(run_id=result.run_id)
    assert first.boundary_step == second.boundary_step == 2 and first.checkpoint == second.checkpoint
    state = load_state(Path(second.checkpoint))
    assert state["control"]["applied"] == [first.ticket_id]
    assert state["live"]["kl_coef"] == 0.1 and state["live"]["clip_eps"] == 0.2
    assert trainer.live.params.kl_coef == 0.1 and trainer.live.params.clip_eps == 0.15


def test_the_end_of_a_run_measures_what_waits_and_fails_what_it_never_reached(tmp_path):
    cfg, store, plane, p = setup(tmp_path, "train.steps=4", "control.effect_steps=10")
    trainer = Trainer(cfg, control_store=store.control())
    late: dict = {}

    def hook(t, step):
        if step == 2:
            ticket = plane.tickets.request(p["olga"], t.telemetry.run_id, "kl_coef", 0.1, "early")
            plane.tickets.approve(p["alex"], ticket.ticket_id, "")

    original_after = trainer.control.after_hotfix

    def after_hotfix(step):  # a ticket approved after the last boundary the run will have
        original_after(step)
        if step == 4:
            ticket = plane.tickets.request(p["olga"], trainer.telemetry.run_id, "kl_coef", 0.2, "too late")
            late["id"] = plane.tickets.approve(p["alex"], ticket.ticket_id, "").ticket_id

    trainer.add_step_hook(hook)
    trainer.control.after_hotfix = after_hotfix
    assert trainer.run().status == "finished"
    early = plane.store.get_ticket(1)
    assert early.status == "evaluated" and early.effect["effect_steps"] == 2 and early.effect["evaluated_step"] == 4
    assert early.effect["windows"]["kl/mean"]["n_after"] == 2
    missed = plane.store.get_ticket(late["id"])
    assert missed.status == "failed" and "finished at step 4" in missed.error


def test_a_locked_store_delays_a_ticket_but_never_stops_training(tmp_path, caplog):
    """Fail soft at run time: the store's write lock held by someone else at a boundary makes the
    ticket wait for a later boundary; the run goes on and the ticket is applied exactly once."""
    import logging
    import sqlite3

    cfg, store, plane, p = setup(tmp_path, "train.steps=5")
    impatient = open_store(cfg.telemetry.store + "?busy_timeout_s=0.2")  # the trainer's control store
    trainer = Trainer(cfg, control_store=impatient.control())
    held, release = threading.Event(), threading.Event()

    def hold_the_lock():
        conn = sqlite3.connect(store.path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(30)
        conn.execute("ROLLBACK")
        conn.close()

    def hook(t, step):
        if step == 2:
            ticket = plane.tickets.request(p["olga"], t.telemetry.run_id, "kl_coef", 0.1, "while locked")
            plane.tickets.approve(p["alex"], ticket.ticket_id, "")
            threading.Thread(target=hold_the_lock, daemon=True).start()
            held.wait(10)
        if step == 3:
            release.set()

    trainer.add_step_hook(hook)
    with caplog.at_level(logging.WARNING, logger="rlcockpit.trainer.control"):
        result = trainer.run()
    assert result.status == "finished" and result.step == 5
    assert any("tickets stay queued" in r.getMessage() for r in caplog.records)
    ticket = plane.store.list_tickets(run_id=result.run_id)[0]
    assert ticket.status in ("applied", "evaluated") and ticket.boundary_step == 3
    actions = [e.action for e in plane.store.read_audit() if e.ticket_id == ticket.ticket_id]
    assert actions.count("ticket_applied") == 1
    kl_coef = dict(series(cfg, result.run_id, ["kl/coef"])["kl/coef"])
    assert kl_coef[3] == 0.05 and kl_coef[4] == 0.1


def test_a_safety_action_runs_even_when_its_ticket_cannot_be_written(tmp_path):
    import sqlite3

    from rlcockpit.diagnostics.policy import Action
    from rlcockpit.records import FindingRecord

    cfg, store, plane, _ = setup(tmp_path, "train.steps=3")
    trainer = Trainer(cfg, control_store=open_store(cfg.telemetry.store + "?busy_timeout_s=0.2").control())
    finding = FindingRecord(step=2, detector="kl_tiers", severity="red", message="KL 3x target", incident="inc-1")
    lock = sqlite3.connect(store.path, isolation_level=None)

    def hook(t, step):
        if step == 2:
            t.diagnosis.pending.append(Action("checkpoint", 2, finding))
            lock.execute("BEGIN IMMEDIATE")  # held through boundary 2
        if step == 3:
            lock.execute("ROLLBACK")

    trainer.add_step_hook(hook)
    result = trainer.run()
    lock.close()
    assert result.status == "finished"
    [event] = events(cfg, result.run_id, "action")
    assert event.payload["result"]["checkpoint"].endswith("step_0000002") and "ticket_error" in event.payload["result"]
    assert plane.store.list_tickets(run_id=result.run_id) == []


def test_the_demo_story_a_rollback_undoes_an_lr_spike_and_it_does_not_strike_again(tmp_path):
    """lr_spike at step 4 (as in `make demo`), a rollback ticket to the checkpoint at step 2 approved
    at step 6: the replayed steps train with the old learning rate, the fault does not strike again,
    and steps 7-8 are exactly those of a twin run that never had the incident (exact restore)."""
    from rlcockpit import faults

    cfg, store, plane, p = setup(tmp_path, "train.steps=8", "checkpoint.every=2")
    fault = faults.get("lr_spike").with_onset(4)
    trainer = fault.apply(Trainer(fault.apply(cfg), control_store=store.control()))
    ids: dict = {}

    def hook(t, step):
        if step == 6 and "rb" not in ids:
            ids["rb"] = plane.tickets.command(p["olga"], t.telemetry.run_id, "rollback", "lr spike",
                                              {"step": 2}).ticket_id
            plane.tickets.approve(p["alex"], ids["rb"], "")

    trainer.add_step_hook(hook)
    result = trainer.run()
    assert result.status == "finished" and result.step == 8
    assert plane.store.get_ticket(ids["rb"]).status == "applied"
    history = plane.store.read_live_params(result.run_id)
    start, latest = history[0].values["actor_lr"], history[-1].values["actor_lr"]
    assert any(h.values["actor_lr"] == pytest.approx(100 * start) for h in history)  # it struck
    assert latest == pytest.approx(start) and "rollback" in history[-1].source
    assert [e.step for e in events(cfg, result.run_id, "fault")] == [4]  # once, not on the replay
    (tmp_path / "twin").mkdir()
    twin_cfg, twin_store, _, _ = setup(tmp_path / "twin", "train.steps=8", "checkpoint.every=2")
    twin = Trainer(twin_cfg, control_store=twin_store.control()).run()
    names = ["kl/mean", "policy/entropy", "reward/mean"]
    after = {n: dict(v) for n, v in series(cfg, result.run_id, names).items()}
    healthy = {n: dict(v) for n, v in series(twin_cfg, twin.run_id, names).items()}
    for name in names:
        assert after[name][8] == pytest.approx(healthy[name][8], rel=1e-5, abs=1e-7), name
