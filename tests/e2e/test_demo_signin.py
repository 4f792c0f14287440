"""The demo's browser story (cli/demo.py, js/signin.js): the one-time sign-in link printed by
`rlcockpit demo` signs the browser in with a session, the link in the history no longer works,
the address bar holds no code, the header
shows who is signed in (switch user, sign out), and an incident's "Request a change" opens the
ticket form prefilled with the change that undoes the live change before the incident."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import allow_console_error, wait_for
from rlcockpit.cli._support.demo_users import ensure_demo_users, signin_link
from rlcockpit.cli.demo import DemoServer
from rlcockpit.records import LiveParamsRecord
from rlcockpit.store import open_store
from server_testkit import free_port

pytestmark = pytest.mark.timeout(180)

SPECS = {name: {"type": "float", "lo": 0.0, "hi": hi, "help": name, "metric": metric}
         for name, hi, metric in (("actor_lr", 1.0, "optim/lr/actor"), ("kl_coef", 10.0, "kl/coef"),
                                  ("clip_eps", 1.0, "policy/clip_eps"))}


@pytest.fixture
def demo(tmp_path):
    """A finished run whose actor_lr was raised x100 at step 20 (its incident starts at step 25),
    the demo users, and the demo's own server thread."""
    import storekit

    uri, run_id = storekit.build(tmp_path / "demo.db")
    control = open_store(uri).control()
    values = {"actor_lr": 5e-5, "kl_coef": 0.05, "clip_eps": 0.2}
    control.publish_live_params(LiveParamsRecord(run_id, 0, values, SPECS, "start"))
    control.publish_live_params(LiveParamsRecord(run_id, 20, {**values, "actor_lr": 5e-3}, SPECS, "live"))
    people = ensure_demo_users(control)
    server = DemoServer(uri, free_port())
    server.start()
    wait_for(lambda: server._server.started, timeout=20, what="the demo server")
    tokens = {u.role: u for u in people.created}
    yield server, run_id, tokens
    server.stop()


def test_the_signin_link_signs_in_once_and_the_history_holds_nothing_usable(demo, page, browser):
    import httpx

    server, run_id, users = demo
    operator, approver = users["operator"], users["approver"]
    link = signin_link(server.url, operator.code)
    page.goto(link)
    page.locator("#hdr-user[data-user='demo-operator']").wait_for()
    assert "code" not in page.url and "signin" not in page.url
    session = page.evaluate("localStorage.getItem('rlcockpit.token')")
    assert session.startswith("rls_") and operator.code not in session  # a session, not the link's code
    assert page.locator("#hdr-user-name").inner_text() == "demo-operator (operator)"
    page.locator("#chart-reward").wait_for()  # signed in: the dashboard of the newest run loads
    page.go_back()  # the link's entry was replaced: Back shows no code either
    assert "code" not in page.url and "signin" not in page.url
    page.locator("#conn-state[data-state='open']").wait_for()  # the session opens the live stream too (a finished run: its status shows)
    me = httpx.get(f"{server.url.rstrip('/')}/api/me", headers={"Authorization": f"Bearer {session}"}, timeout=10)
    assert me.json().get("name") == "demo-operator", me.text

    # the browser's history database still holds the link it visited: opening it again (another
    # window, someone with the history) signs nobody in, and says so
    other = browser.new_context()
    try:
        again = other.new_page()
        again.goto(link)
        again.locator("#hdr-link-error").wait_for()
        assert again.evaluate("localStorage.getItem('rlcockpit.token')") is None
        assert "code" not in again.url
    finally:
        other.close()

    page.click("#hdr-switch")  # another person in the same browser: their link's code
    page.fill("#hdr-token", approver.code)
    page.click("#hdr-token-save")
    page.locator("#hdr-user[data-user='demo-approver']").wait_for()
    assert "(approver)" in page.locator("#hdr-user-name").inner_text()

    allow_console_error(page, r"401 \(Unauthorized\)")  # signed out, every read is refused
    page.click("#hdr-signout")
    page.locator("#hdr-signin").wait_for()
    assert page.evaluate("localStorage.getItem('rlcockpit.token')") is None
    page.locator("#token-input").wait_for()  # the page asks for a token


def test_the_signin_link_keeps_working_in_chinese(demo, zh_page):
    server, _, users = demo
    zh_page.goto(signin_link(server.url, users["approver"].code))
    zh_page.locator("#hdr-user[data-user='demo-approver']").wait_for()
    assert zh_page.locator("#hdr-user-name").inner_text() == "demo-approver (审批人)"
    assert zh_page.locator("#hdr-signout").inner_text() == "退出登录"


def test_request_a_change_prefills_the_ticket_form_from_the_incident(demo, page):
    server, run_id, users = demo
    page.goto(signin_link(server.url, users["operator"].code))
    page.locator("#chart-reward").wait_for()  # the link's redirect to the newest run is done
    page.goto(f"{server.url}#/run/{run_id}/alerts")
    button = page.locator("article.incident .request-change")
    button.wait_for()
    button.click()
    page.locator("#ctl-prefill[data-param='actor_lr']").wait_for()
    assert f"#/run/{run_id}/tickets?" in page.url
    assert page.input_value("#ctl-param") == "actor_lr"
    assert page.input_value("#ctl-value") == "0.00005"  # the value before the change at step 20
    reason = page.input_value("#ctl-reason")
    assert reason.startswith("Incident at steps 25–25: ") and "KL stayed above 1.5x target" in reason
    note = page.locator("#ctl-prefill").inner_text()
    assert "actor_lr was changed at step 20 (0.00005 → 0.005)" in note


def test_an_old_change_is_not_proposed_as_the_cause(demo, page):
    """A change long before the incident (outside the 20-step window) is not undone by the
    prefill; the form only preselects the parameter of the incident's library pattern."""
    import storekit

    server, _, users = demo
    uri = server.settings.store
    _, run_id = storekit.build(Path(uri.removeprefix("sqlite:///")), seed=1)  # a second run, same store
    control = open_store(uri).control()
    values = {"actor_lr": 5e-5, "kl_coef": 0.05, "clip_eps": 0.2}
    control.publish_live_params(LiveParamsRecord(run_id, 0, values, SPECS, "start"))
    control.publish_live_params(LiveParamsRecord(run_id, 2, {**values, "actor_lr": 1e-4}, SPECS, "ticket:9"))
    page.goto(signin_link(server.url, users["operator"].code))
    page.locator("#chart-reward").wait_for()  # the link's redirect to the newest run is done
    page.goto(f"{server.url}#/run/{run_id}/alerts")
    page.locator("article.incident .request-change").click()
    page.locator("#ctl-prefill[data-param='actor_lr']").wait_for()
    assert page.input_value("#ctl-param") == "actor_lr"  # kl_explosion -> actor_lr
    assert page.input_value("#ctl-value") == ""
    assert "is a parameter to look at first" in page.locator("#ctl-prefill").inner_text()
