"""Defects of a user review, each checked in the browser: one colour per run on every chart and
table (and two runs of the same name told apart), honest empty states on finished runs, ticket
errors that stay visible and no approve buttons for those who cannot approve, the sample view's
largest |KL| and the list's token-array marker, and a real sign-in page when signed out."""

from __future__ import annotations

import re

import httpx
import pytest

from conftest import PageProbe, allow_console_error, wait_for
from rlcockpit.records import LiveParamsRecord, SampleRecord
from server_testkit import serve_store

pytestmark = pytest.mark.timeout(180)

SERIES_COLOURS = """(sel) => {
  const c = echarts.getInstanceByDom(document.querySelector(sel));
  return Object.fromEntries(c.getOption().series.filter((s) => !(s.lineStyle && s.lineStyle.opacity < 1))
    .map((s) => [s.name, s.itemStyle.color]));
}"""


def _run(uri, run_id, name, metrics, steps=12, close=True):
    import rlcockpit

    run = rlcockpit.init(project="rev", name=name, store=uri, run_id=run_id)
    for step in range(1, steps + 1):
        run.log(step, {m: 0.1 * step + i for i, m in enumerate(metrics)})
        run.commit(step)
    if close:
        run.close()
    return run


@pytest.fixture
def three_runs(tmp_path):
    """Three finished runs started in this order: `same` logs reward and KL, `other` KL only (so
    it shifts the per-chart order of the KL chart), a second `same` reward and KL."""
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    _run(uri, "20260101-090000-aaaa11", "same", ["reward/mean", "kl/mean"])
    _run(uri, "20260101-090001-bbbb22", "other", ["kl/mean"])
    _run(uri, "20260101-090002-cccc33", "same", ["reward/mean", "kl/mean"])
    return uri


def test_a_run_has_one_colour_on_every_chart_and_table(three_runs, serve, page):
    server = serve(three_runs)
    runs = "20260101-090000-aaaa11,20260101-090001-bbbb22,20260101-090002-cccc33"
    page.goto(f"{server.url}/#/compare?runs={runs}&names=reward/mean,kl/mean")
    page.locator(".chart[data-metric='kl/mean']").wait_for()
    page.wait_for_function("() => document.querySelectorAll('.chart[data-metric]').length === 2")
    reward = page.evaluate(SERIES_COLOURS, ".chart[data-metric='reward/mean']")
    kl = page.evaluate(SERIES_COLOURS, ".chart[data-metric='kl/mean']")
    # two runs named "same": the legend tells them apart by a short id (the id's last part)
    first, second = "same · aaaa11", "same · cccc33"
    assert set(reward) == {first, second}, reward
    assert set(kl) == {first, second, "other"}, kl
    assert reward[first] == kl[first] and reward[second] == kl[second]
    assert len({kl[first], kl[second], kl["other"]}) == 3

    page.goto(f"{server.url}/#/runs")
    page.locator("#runs-list tbody tr").first.wait_for()
    for run_id, label in (("20260101-090000-aaaa11", first), ("20260101-090002-cccc33", second), ("20260101-090001-bbbb22", "other")):
        swatch = page.locator(f"#runs-list tr[data-run='{run_id}'] .run-swatch")
        colour = swatch.evaluate("(el) => el.dataset.color")
        assert colour == kl[label], (run_id, colour, kl)

    # a panel of the dashboard over two runs: the same colours again, and in the header
    page.goto(f"{server.url}/#/run/20260101-090000-aaaa11/dashboard?panel=kl/mean~20260101-090001-bbbb22,20260101-090002-cccc33")
    page.locator(".user-panel .chart[data-points]:not([data-points='0'])").wait_for()
    panel = page.evaluate(SERIES_COLOURS, ".user-panel .chart")
    assert panel == kl, (panel, kl)
    assert page.locator("#run-swatch").evaluate("(el) => el.dataset.color") == kl[first]


@pytest.fixture
def finished_run(tmp_path):
    """A finished run that logged reward and KL only, and no samples."""
    uri = f"sqlite:///{tmp_path / 'fin.db'}"
    _run(uri, "fin-run", "finished-run", ["reward/mean", "kl/mean"])
    return uri


def test_finished_runs_say_what_they_did_not_log(finished_run, serve, page, zh_page):
    server = serve(finished_run)
    page.goto(f"{server.url}/#/run/fin-run/dashboard")
    page.locator("#chart-reward[data-points='12']").wait_for()
    entropy = page.locator("#chart-entropy").locator("xpath=..").locator(".chart-empty")
    wait_for(lambda: entropy.inner_text() != "Loading…", what="the entropy chart's state")
    assert entropy.inner_text() == "Not logged by this run"
    assert "waiting" not in page.locator("#view").inner_text()
    conn = page.locator("#conn-state")
    page.wait_for_timeout(500)
    assert conn.inner_text() == "finished" and "conn-open" not in (conn.get_attribute("class") or "")

    page.goto(f"{server.url}/#/run/fin-run/samples")
    empty = page.locator("#samples-empty")
    empty.wait_for()
    assert "This run stored no samples" in empty.inner_text()
    assert "Widen" not in empty.inner_text()

    zh_page.goto(f"{server.url}/#/run/fin-run/dashboard")
    zh_page.locator("#chart-reward[data-points='12']").wait_for()
    ov = zh_page.locator("#chart-entropy").locator("xpath=..").locator(".chart-empty")
    wait_for(lambda: ov.inner_text() == "本次运行未记录该指标", what="the Chinese state")
    zh_page.goto(f"{server.url}/#/run/fin-run/samples")
    zh_page.locator("#samples-empty:has-text('本次运行没有保存样本')").wait_for()


@pytest.fixture
def sample_run(tmp_path):
    """A finished run with two samples: #0 with token arrays whose largest |KL| is negative (-0.9),
    #1 without arrays."""
    import rlcockpit

    uri = f"sqlite:///{tmp_path / 'samples.db'}"
    run = rlcockpit.init(project="rev", name="samples", store=uri, run_id="smp-run")
    run.log(1, {"reward/mean": 0.5})
    kl = (0.1, -0.9, 0.3)
    run.log_samples(1, [
        SampleRecord(step=1, sample_id=0, prompt="p0", response="a b c", reward=0.5, length=3,
                     tokens=("a", " b", " c"), logprobs=(-1.0, -2.0, -1.5),
                     ref_logprobs=tuple(lp - k for lp, k in zip((-1.0, -2.0, -1.5), kl, strict=True)),
                     token_kl=kl, kl_sum=sum(kl), kl_max=max(kl)),
        SampleRecord(step=1, sample_id=1, prompt="p1", response="x", reward=0.1, length=1, kl_sum=0.2, kl_max=0.2),
    ])
    run.commit(1)
    run.close()
    return uri


def test_sample_view_shows_the_largest_abs_kl_and_the_list_marks_token_arrays(sample_run, serve, page):
    server = serve(sample_run)
    api = httpx.get(f"{server.url}/api/runs/smp-run/samples", timeout=10).json()["items"]
    has = {s["sample_id"]: s["has_token_arrays"] for s in api}
    assert has == {0: True, 1: False}
    page.goto(f"{server.url}/#/run/smp-run/samples")
    page.locator("#sample-list tbody tr").first.wait_for()
    for sid, expected in has.items():
        cell = page.locator(f"#sample-list tr[data-sample-id='{sid}'] td.tok-marker")
        assert (cell.locator(".has-tokens").count() == 1) is expected, sid
    assert page.locator("#sample-list thead th.tok-marker").get_attribute("title")

    page.goto(f"{server.url}/#/run/smp-run/samples/1/0")
    cell = page.locator("#sample-numbers tr.kl-max td")
    cell.wait_for()
    # |KL| of token #1 (stored in half precision: 0.8999), not the signed maximum 0.3
    size, signed = re.match(r"([0-9.]+) \(([−-][0-9.]+), #1\)", cell.inner_text()).groups()
    assert abs(float(size) - 0.9) < 1e-3 and abs(float(signed.replace("−", "-")) + 0.9) < 1e-3
    assert "#1" in (cell.get_attribute("title") or "")
    assert "max |KL|" in page.locator("#sample-numbers tr.kl-max th").inner_text()


@pytest.fixture
def control_cockpit(tmp_path):
    """A running run (never closed here) with live parameters, users, and the server with its plane."""
    from rlcockpit.control import ControlPlane
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'ctl.db'}"
    run = _run(uri, "ctl-run", "ctl", ["reward/mean", "kl/mean"], steps=5, close=False)
    store = open_store(uri)
    specs = {"kl_coef": {"type": "float", "lo": 0.0, "hi": 10.0, "help": "kl", "metric": "kl/coef"}}
    store.control().publish_live_params(LiveParamsRecord("ctl-run", 0, {"kl_coef": 0.05}, specs, "start"))
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("vera", "viewer"), ("alex", "approver"))}
    server = serve_store(uri, store, plane=plane)
    yield server, tokens
    server.stop()
    run.close()


def _person(browser, token, probes):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    context.add_init_script(f"localStorage.setItem('rlcockpit.token', '{token}')")
    page = context.new_page()
    page.set_default_timeout(20000)
    probes.append(PageProbe(page))
    return context, page


def _request(server, token, value, reason):
    res = httpx.post(f"{server.url}/api/runs/ctl-run/tickets", json={"param": "kl_coef", "value": value, "reason": reason},
                     headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert res.status_code < 300, res.text
    return res.json()["ticket"]["ticket_id"]


def test_ticket_errors_stay_and_only_approvers_of_others_tickets_see_approve(browser, control_cockpit):
    server, tokens = control_cockpit
    mine = _request(server, tokens["olga"], 0.1, "olga asks")
    theirs = _request(server, tokens["alex"], 0.2, "alex asks")
    probes: list = []
    contexts = []
    try:
        for who in ("olga", "vera"):  # an operator and a viewer never see approve / reject
            ctx, p = _person(browser, tokens[who], probes)
            contexts.append(ctx)
            p.goto(f"{server.url}/#/run/ctl-run/tickets")
            p.locator(f"tr[data-ticket='{theirs}']").wait_for()
            assert p.locator(".ctl-approve, .ctl-reject").count() == 0, who
        ctx, alex = _person(browser, tokens["alex"], probes)
        contexts.append(ctx)
        alex.goto(f"{server.url}/#/run/ctl-run/tickets")
        alex.locator(f"tr[data-ticket='{mine}'] .ctl-approve").wait_for()
        # nobody approves their own ticket: no buttons on alex's own
        assert alex.locator(f"tr[data-ticket='{theirs}'] .ctl-approve, tr[data-ticket='{theirs}'] .ctl-reject").count() == 0
        # olga cancels her ticket meanwhile; alex's approve is refused (409) and the error stays
        res = httpx.post(f"{server.url}/api/tickets/{mine}/cancel", json={}, headers={"Authorization": f"Bearer {tokens['olga']}"},
                         timeout=10)
        assert res.status_code == 200, res.text
        probes[-1].allowed.append("status of 409")
        alex.locator(f"tr[data-ticket='{mine}'] .ctl-approve").click()
        msg = alex.locator("#ctl-queue-msg")
        msg.wait_for()
        alex.locator(f"tr[data-ticket='{mine}'][data-status='cancelled']").wait_for()
        alex.wait_for_timeout(4500)  # two refreshes of the queue later
        assert f"#{mine}" in msg.inner_text() and "cancelled" in msg.inner_text(), msg.inner_text()
        assert msg.is_visible()
    finally:
        for c in contexts:
            c.close()
    errors = [e for p in probes for e in p.unexpected()]
    assert not errors, errors


@pytest.fixture
def users_cockpit(tmp_path):
    from rlcockpit.control import ControlPlane
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'users.db'}"
    _run(uri, "u-run", "users-run", ["reward/mean"], steps=3)
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    plane.users.add("olga", "operator")
    server = serve_store(uri, store, plane=plane)
    yield server, plane
    server.stop()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_signed_out_shows_a_sign_in_page(users_cockpit, page, zh_page, lang):
    server, plane = users_cockpit
    p = page if lang == "en" else zh_page
    allow_console_error(p, r"401 \(Unauthorized\)")
    p.goto(f"{server.url}/#/run/u-run/dashboard")
    box = p.locator("#signin-page")
    box.wait_for()
    text = box.inner_text()
    assert "rlcockpit users signin NAME" in text
    assert "Something went wrong" not in p.locator("#view").inner_text()
    assert "出错了" not in p.locator("#view").inner_text()
    assert "--store URI" not in text and "unauthorized" not in text
    if lang == "en":
        assert "Sign in" in text and "sign-in link" in text
    else:
        assert "登录" in text and "登录链接" in text
    # paste the whole link (not only its code): signed in, the page opens
    code, _ = plane.users.issue_signin("olga", by="test", ttl_s=300)
    p.fill("#token-input", f"{server.url}/#/signin?code={code}")
    p.click("#signin-page button[type=submit]")
    p.locator("#chart-reward").wait_for()
    p.locator("#hdr-user[data-user='olga']").wait_for()
    assert p.evaluate("localStorage.getItem('rlcockpit.token')").startswith("rls_")
