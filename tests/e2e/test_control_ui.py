"""The control plane in the browser: two people in two browser contexts — an operator requests
kl.coef 0.05 -> 0.2 on the tickets page, an approver signs in with their token and approves it —
the training applies it at a boundary, the annotation appears on the KL chart, the dashboard shows
the live parameters with their history, and the audit page verifies the chain."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import PageProbe, wait_for
from server_testkit import serve_store

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cockpit(tmp_path):
    """A real tiny PPO run training in a thread with the control channel, users, and the server."""
    import torch

    from rlcockpit.control import ControlPlane
    from rlcockpit.store import open_store
    from rlcockpit.trainer.trainer import Trainer
    from trainer_testkit import make_config, make_model_dir

    torch.set_num_threads(1)
    cfg = make_config(tmp_path, "train.steps=400", "eval.every=1000", "eval.max_prompts=8", "kl.coef=0.05",
                      "control.effect_steps=2", "diagnostics.enabled=false", model=make_model_dir(tmp_path / "m"))
    store = open_store(cfg.telemetry.store)
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("otto", "operator"),
                                                        ("alex", "approver"))}
    trainer = Trainer(cfg, control_store=store.control())
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    wait_for(lambda: trainer.telemetry is not None and plane.runs.list_runs()
             and plane.store.read_live_params(trainer.telemetry.run_id), timeout=120, what="the run to start")
    server = serve_store(cfg.telemetry.store, store, plane=plane)
    yield server, plane, tokens, trainer.telemetry.run_id
    trainer.live.stop(reason="test over")
    thread.join(timeout=60)
    server.stop()


def person(browser, token: str, probes: list):
    """A browser context of one person, their token already stored (signed in earlier)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    context.add_init_script(f"localStorage.setItem('rlcockpit.token', '{token}')")
    page = context.new_page()
    page.set_default_timeout(20000)
    probes.append(PageProbe(page))
    return context, page


def test_two_people_request_and_approve_in_the_ui(browser, cockpit):
    server, plane, tokens, run_id = cockpit
    probes: list = []
    ctx_a, olga = person(browser, tokens["olga"], probes)
    ctx_b, second = person(browser, tokens["otto"], probes)
    try:
        tickets = f"{server.url}/#/run/{run_id}/tickets"
        olga.goto(tickets)
        olga.locator("#ctl-me[data-user=olga]").wait_for()
        olga.select_option("#ctl-param", "kl_coef")
        olga.fill("#ctl-value", "0.2")
        olga.fill("#ctl-reason", "KL is too loose")
        olga.click("#ctl-submit")
        olga.locator("#ctl-request-msg:has-text('#1')").wait_for()
        assert olga.locator("tr[data-ticket='1'] .ctl-change").inner_text() == "kl_coef: 0.05 → 0.2"

        second.goto(tickets)  # signed in as otto (an operator), switches to the approver's token
        second.locator("#ctl-me[data-user=otto]").wait_for()
        second.fill("#ctl-token", tokens["alex"])
        second.click("#ctl-token-save")
        second.locator("#ctl-me[data-user=alex]").wait_for()
        row = second.locator("tr[data-ticket='1']")
        row.locator(".ctl-comment").fill("ok, watch entropy")
        row.locator(".ctl-approve").click()

        ticket = wait_for(lambda: (t := plane.store.get_ticket(1)).applied_step is not None and t,
                          timeout=120, what="the trainer to apply the ticket")
        assert ticket.decided_by == "alex" and ticket.comment == "ok, watch entropy"
        second.locator(f"tr[data-ticket='1'] .ctl-applied:has-text('{ticket.applied_step}')").wait_for()

        olga.goto(f"{server.url}/#/run/{run_id}/dashboard")
        olga.locator("#chart-kl").wait_for()
        marks = """() => (window.rlcockpit.dashboard?.charts?.kl?.chart.getOption().series[0]?.markLine?.data || [])
            .filter((m) => m.xAxis !== undefined).map((m) => [m.xAxis, m.name])"""
        wait_for(lambda: olga.evaluate(marks) == [[ticket.applied_step, "#1 kl_coef→0.2"]], timeout=30,
                 what="the annotation on the KL chart")
        olga.locator("#liveparams-panel [data-param=kl_coef]:has-text('kl_coef = 0.2')").wait_for()
        olga.locator("#liveparams-panel summary").click()
        assert "kl_coef: 0.05 → 0.2" in olga.locator("#liveparams-panel .ctl-live-history").inner_text()
        _screenshot(olga, "dashboard")

        olga.goto(f"{server.url}/#/audit")
        olga.locator("#ctl-audit tr[data-seq]").first.wait_for()
        olga.click("#ctl-verify")
        olga.locator("#ctl-verify-result[data-ok=true]").wait_for()
        actions = olga.locator("#ctl-audit tbody tr td:nth-child(4)").all_inner_texts()
        assert {"ticket_requested", "ticket_approved", "ticket_applied"} <= set(actions)
    finally:
        for ctx, page, name in ((ctx_a, olga, "operator"), (ctx_b, second, "approver")):
            _screenshot(page, name)
            ctx.close()
    errors = [e for p in probes for e in p.unexpected()]
    assert not errors, errors


def test_bad_input_shows_the_servers_message(browser, cockpit):
    server, plane, tokens, run_id = cockpit
    probes: list = []
    ctx, page = person(browser, tokens["olga"], probes)
    probes[0].allowed.append("status of 422")  # the refused request itself
    try:
        page.goto(f"{server.url}/#/run/{run_id}/tickets")
        page.select_option("#ctl-param", "kl_coef")
        page.fill("#ctl-value", "50")
        page.fill("#ctl-reason", "way too high")
        page.click("#ctl-submit")
        page.locator("#ctl-request-msg:has-text('out of range')").wait_for()
        assert plane.store.list_tickets() == []
        time.sleep(0.2)
    finally:
        ctx.close()
    assert not [e for p in probes for e in p.unexpected()]


def _screenshot(page, name: str) -> None:
    from conftest import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"control_ui_{name}.png"), full_page=True)


def test_a_refused_page_stops_asking_until_the_token_changes(browser, cockpit):
    """An idle dashboard whose token was revoked must not fill the audit log with refusals."""
    server, plane, tokens, run_id = cockpit
    probes: list = []
    ctx, page = person(browser, tokens["olga"], probes)
    probes[0].allowed.append("status of 401")
    try:
        page.goto(f"{server.url}/#/run/{run_id}/dashboard")
        page.locator("#liveparams-panel [data-param=kl_coef]").wait_for()
        plane.users.revoke("olga", by="test")

        def refusals():
            # the panel polls the tickets, the live parameters and the run's change events
            return [e for e in plane.store.read_audit() if e.action == "access_denied"
                    and ("/tickets" in e.details["path"] or "/events" in e.details["path"]
                         or e.details["path"].endswith("/live"))]

        wait_for(refusals, timeout=20, what="the first refusal")
        first = len(refusals())
        time.sleep(5)  # the panel polls every 2 s
        assert len(refusals()) == first
    finally:
        ctx.close()
