"""Defects of a user review, part two, each checked in the browser: the header keeps the worst open
incident in view at 1440 and 1024 px (the rate goes first), a sign-in link pasted into an open tab
switches the user, the chart axes (wall-clock labels, a rounded top label, units in 中文, no
colliding last ticks, no sideways scroll at 390 px), incidents with ranked library links and
findings with a dashboard link and a sparkline, the library's answer to "奖励一直不涨", no seed
section numbers on screen, and the cost view's per-step time, a finished run's ETA and phase rows."""

from __future__ import annotations

import pytest

from conftest import PageProbe, wait_for
from server_testkit import serve_store

pytestmark = pytest.mark.timeout(180)


def _context(browser, width, token=None, locale="en-US", probes=None):
    context = browser.new_context(viewport={"width": width, "height": 900}, locale=locale)
    if token:
        context.add_init_script(f"localStorage.getItem('rlcockpit.token') || localStorage.setItem('rlcockpit.token', '{token}')")
    page = context.new_page()
    page.set_default_timeout(20000)
    if probes is not None:
        probes.append(PageProbe(page))
    return context, page


@pytest.fixture
def header_cockpit(tmp_path):
    """A running run (left open) in a phase, with three incidents: a red one at step 4 (open), an
    orange one that resolved, and a yellow one whose findings are the newest (steps 10-20); a
    server with users, and an operator's token."""
    import rlcockpit
    from rlcockpit.control import ControlPlane
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'hdr.db'}"
    run = rlcockpit.init(project="hdr", name="header-run-with-a-long-name", store=uri, run_id="hdr-run")
    for step in range(1, 21):
        run.log(step, {"reward/mean": 0.1 * step, "kl/mean": 0.01 * step})
        if step == 4:
            run.finding(step=4, detector="kl_tiers", severity="red", message="KL above 3x target",
                        evidence={"signal": "KL", "onset_step": 3}, incident="inc-a")
        if step in (6, 8):
            run.finding(step=step, detector="gradients", severity="orange", message="grad spike",
                        status="raised" if step == 6 else "resolved", incident="inc-c")
        if step >= 10:
            run.finding(step=step, detector="entropy_trend", severity="yellow", message="entropy falling", incident="inc-b")
        run.phase(step, "rollout", "running", progress=0.4)
        run.commit(step)
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    _, token = plane.users.add("olga-the-operator", "operator")
    server = serve_store(uri, store, plane=plane)
    yield server, plane, token
    server.stop()
    run.close()


HEADER_BOXES = """() => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
    return { left: r.left, right: r.right, width: r.width, shown: r.width > 0 && getComputedStyle(el).display !== 'none',
             clipped: el.scrollWidth > el.clientWidth + 1 }; };
  const chip = document.querySelector('#hdr-alerts .chip[data-incident]');
  return { header: box(document.getElementById('run-header')), chip: box(chip),
           incident: chip && chip.dataset.incident, severity: chip && chip.dataset.severity,
           incidents: [...document.querySelectorAll('#hdr-alerts .chip[data-incident]')].map((c) => c.dataset.incident),
           visible: [...document.querySelectorAll('#hdr-alerts .chip[data-incident]')].filter((c) => c.offsetWidth > 0).length,
           more: [...document.querySelectorAll('#hdr-alerts-more')].filter((c) => c.offsetWidth > 0).map((c) => c.textContent)[0] || '+0',
           conn: box(document.getElementById('conn-state')), phase: box(document.getElementById('run-phase')),
           rate: box(document.getElementById('step-rate')) };
}"""


@pytest.mark.parametrize("width", [1440, 1024])
def test_header_shows_the_worst_open_incident_first_and_keeps_it_in_view(browser, header_cockpit, width):
    server, _, token = header_cockpit
    probes: list = []
    context, page = _context(browser, width, token, probes=probes)
    try:
        page.goto(f"{server.url}/#/run/hdr-run/dashboard")
        page.locator("#hdr-user[data-user='olga-the-operator']").wait_for()
        page.locator("#hdr-alerts .chip").first.wait_for()
        page.wait_for_timeout(400)  # the header refits once the user slot beside it is drawn
        b = page.evaluate(HEADER_BOXES)
        # the red incident of step 4, not the newest (yellow) findings; the resolved one not at all
        assert (b["incident"], b["severity"]) == ("inc-a", "red"), b
        assert "inc-c" not in b["incidents"], b
        chip, header = b["chip"], b["header"]
        assert chip["shown"] and chip["width"] > 80 and not chip["clipped"], b  # a readable chip, not a dot
        assert chip["right"] <= header["right"] + 1, b
        assert b["conn"]["shown"] and b["conn"]["right"] <= header["right"] + 1, b
        assert b["visible"] + int(b["more"].lstrip("+")) == 2, b  # two open incidents: as chips or in the "+N"
        if not b["phase"]["shown"]:
            assert not b["rate"]["shown"], b  # the rate goes before the phase
    finally:
        context.close()
    errors = [e for p in probes for e in p.unexpected()]
    assert not errors, errors


@pytest.fixture
def ticket_cockpit(tmp_path):
    """A running run with a live parameter, an operator and an approver, and a ticket the operator
    requested (so the approver, not the operator, sees Approve on it)."""
    import httpx

    import rlcockpit
    from rlcockpit.control import ControlPlane
    from rlcockpit.records import LiveParamsRecord
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'tix.db'}"
    run = rlcockpit.init(project="tix", name="tix", store=uri, run_id="tix-run")
    for step in range(1, 6):
        run.log(step, {"reward/mean": 0.1 * step})
        run.commit(step)
    store = open_store(uri)
    specs = {"kl_coef": {"type": "float", "lo": 0.0, "hi": 10.0, "help": "kl", "metric": "kl/coef"}}
    store.control().publish_live_params(LiveParamsRecord("tix-run", 0, {"kl_coef": 0.05}, specs, "start"))
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("alex", "approver"))}
    server = serve_store(uri, store, plane=plane)
    res = httpx.post(f"{server.url}/api/runs/tix-run/tickets", json={"param": "kl_coef", "value": 0.1, "reason": "olga asks"},
                     headers={"Authorization": f"Bearer {tokens['olga']}"}, timeout=10)
    assert res.status_code < 300, res.text
    yield server, plane, tokens, res.json()["ticket"]["ticket_id"]
    server.stop()
    run.close()


def test_a_signin_link_pasted_into_an_open_tab_switches_the_user_without_a_reload(browser, ticket_cockpit):
    server, plane, tokens, ticket = ticket_cockpit
    probes: list = []
    context, page = _context(browser, 1400, tokens["olga"], probes=probes)
    streams: list[str] = []
    page.on("request", lambda r: "/stream" in r.url and streams.append(r.url))
    try:
        page.goto(f"{server.url}/#/run/tix-run/tickets")
        page.locator("#hdr-user[data-user='olga']").wait_for()
        page.locator(f"tr[data-ticket='{ticket}']").wait_for()
        assert page.locator(f"tr[data-ticket='{ticket}'] .ctl-approve").count() == 0  # nobody approves their own
        page.evaluate("window.__sameDocument = true")
        code, _ = plane.users.issue_signin("alex", by="test", ttl_s=300)
        page.evaluate(f"location.hash = '#/signin?code={code}'")  # pasted into the address bar
        page.locator("#hdr-user[data-user='alex']").wait_for()
        assert page.evaluate("window.__sameDocument") is True  # no reload
        assert "code" not in page.url and "signin" not in page.url
        assert page.url.endswith("#/run/tix-run/tickets"), page.url  # back on the page that was open
        assert page.evaluate("localStorage.getItem('rlcockpit.token')").startswith("rls_")
        page.locator(f"tr[data-ticket='{ticket}'] .ctl-approve").wait_for()  # the page drawn again, as alex
        assert "(approver)" in page.locator("#hdr-user-name").inner_text()
        # the open live stream goes on as alex: reopened with the new session token
        new_token = page.evaluate("localStorage.getItem('rlcockpit.token')")
        assert streams and f"access_token={tokens['olga']}" in streams[0], streams
        for _ in range(100):  # events reach the list while Playwright waits
            if any(f"access_token={new_token}" in u for u in streams):
                break
            page.wait_for_timeout(100)
        assert any(f"access_token={new_token}" in u for u in streams), streams
    finally:
        context.close()
    errors = [e for p in probes for e in p.unexpected()]
    assert not errors, errors


@pytest.fixture
def cost_store(tmp_path):
    """A finished run of 10 steps (of 20 planned), 10 s a step: rollout 3 s, score 1 s, update 6 s."""
    import rlcockpit

    uri = f"sqlite:///{tmp_path / 'cost.db'}"
    config = {"train": {"steps": 20}, "rollout": {"batch_size": 4, "n_samples": 8},
              "cost": {"price_per_hour": 2.5, "accelerators": 8, "accelerator": "H100", "sampling_schedule": "seed004"}}
    with rlcockpit.init(project="cost", name="costly", store=uri, run_id="costly", config=config) as run:
        run.event(0, "model_size", {"actor_params": 7_000_000_000})
        for step in range(1, 11):
            run.log(step, {"cost/tokens_generated": 16_384.0, "cost/tokens_trained": 32_768.0,
                           "time/rollout_s": 3.0, "time/score_s": 1.0, "time/update_s": 6.0, "time/reference_logprob_s": 0.5})
    return uri


COST_ROW = "(key) => [...document.querySelectorAll(`#cost-totals tr[data-key='${key}'] td`)].map((td) => td.innerText)"
PHASE_GAPS = """() => [...document.querySelectorAll('#cost-phases .cost-phase')].map((row) => {
  const name = row.querySelector('.cost-phase-name'), bar = row.querySelector('.cost-bar');
  return [name.innerText, bar.getBoundingClientRect().left - name.getBoundingClientRect().right,
          name.scrollWidth <= name.clientWidth + 1];
})"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_cost_view_shows_time_per_step_a_total_no_eta_when_over_and_apart_phase_names(cost_store, serve, page, zh_page, lang):
    server = serve(cost_store)
    p = page if lang == "en" else zh_page
    p.goto(f"{server.url}/#/run/costly/cost")
    p.locator("#cost-totals").wait_for()
    label, per_step, _ = p.evaluate(COST_ROW, "cost.step_time")
    assert per_step == "10.5 s", per_step  # (3 + 1 + 6 + 0.5) s a step, not the run's total
    total_label, total, _ = p.evaluate(COST_ROW, "cost.total_time")
    assert total == "1.8 min", total  # 105 s
    eta_label, _, eta = p.evaluate(COST_ROW, "cost.eta")
    assert "0.00" not in eta and eta.strip()
    if lang == "en":
        assert (label, total_label) == ("Time per step (mean)", "Total time")
        assert "finished" in eta, eta
    else:
        assert (label, total_label) == ("每步耗时（平均）", "总耗时")
        assert "已完成" in eta, eta
    gaps = p.evaluate(PHASE_GAPS)
    assert len(gaps) == 4, gaps
    for name, gap, whole in gaps:
        assert gap >= 6 and whole, (name, gap)  # the name stands apart from its bar, never cut
    p.locator("#cost-schedule").wait_for()
    assert "seed" not in p.locator("#view").inner_text().lower()  # no section numbers of the source documents


@pytest.fixture
def incident_store(tmp_path):
    """A finished run of 60 steps (reward, KL and entropy logged) with one incident of three findings that name 14
    library entries between them; the red finding's message cites a seed section."""
    import rlcockpit

    uri = f"sqlite:///{tmp_path / 'inc.db'}"
    run = rlcockpit.init(project="inc", name="inc", store=uri, run_id="inc-run")
    findings = {
        10: ("kl_tiers", "red", "KL 0.9 stayed above 3x its target (001 Q12)", {"signal": "KL", "onset_step": 9},
             ["kl_explosion", "lr_too_high", "kl_token_spike", "ref_model_mismatch", "grad_explosion", "too_many_ppo_epochs"]),
        11: ("gradients", "orange", "actor grad norm spike", {"signal": "grad norm"},
             ["grad_explosion", "lr_too_high", "memory_growth", "critic_divergence"]),
        12: ("entropy", "yellow", "entropy falling", {"signal": "entropy"},
             ["entropy_collapse", "kl_explosion", "reward_hacking", "template_takeover", "length_hacking", "truncation_rise",
              "critic_divergence", "training_stall"]),
    }
    for step in range(1, 61):
        run.log(step, {"reward/mean": 0.02 * step, "kl/mean": 0.01 * step + (0.5 if step >= 10 else 0),
                       "policy/entropy": 2.0 - 0.03 * step})
        if step in findings:
            detector, severity, message, evidence, patterns = findings[step]
            run.finding(step=step, detector=detector, severity=severity, message=message, evidence=evidence,
                        patterns=tuple(patterns), incident="inc-1")
        run.commit(step)
    run.close()
    return uri


def test_an_incident_ranks_its_library_entries_and_findings_link_the_dashboard(incident_store, serve, page):
    server = serve(incident_store)
    page.goto(f"{server.url}/#/run/inc-run/alerts")
    card = page.locator("article.incident[data-incident='inc-1']")
    card.wait_for()
    links = card.locator(".lib-links a.chip.lib")
    # the entry named first by the red finding and again by another comes first; five shown, the rest behind "more"
    assert links.count() == 5
    ids = links.evaluate_all("(as) => as.map((a) => a.dataset.pattern)")
    assert ids[:3] == ["kl_explosion", "grad_explosion", "lr_too_high"], ids
    more = card.locator(".lib-more")
    assert more.inner_text() == "+9 more"
    more.click()
    assert links.count() == 14 and card.locator(".lib-more").count() == 0
    wait_for(lambda: links.first.inner_text() != "kl_explosion", what="the entry's title")

    card.locator("details > summary").first.click()
    red = card.locator("li.finding[data-step='10']")
    assert "001 Q12" not in red.locator(".finding-msg").inner_text()  # no seed section on screen
    assert red.locator(".finding-msg").inner_text() == "KL 0.9 stayed above 3x its target"
    spark = red.locator(".finding-spark[data-metric='kl/mean'] svg polyline")
    spark.wait_for()
    assert int(red.locator(".finding-spark").get_attribute("data-points")) >= 20  # steps 1-30, around step 10
    evidence = red.locator(".finding-evidence table.evidence")
    assert not evidence.is_visible()  # the key/value dump is folded away, a click away
    red.locator(".evidence-toggle").click()
    assert evidence.is_visible() and "onset_step" in evidence.inner_text()
    entropy = card.locator("li.finding[data-step='12'] .finding-spark[data-metric='policy/entropy']")
    entropy.locator("svg").wait_for()
    link = red.locator("a.finding-dashboard")
    assert link.inner_text() == "Dashboard at step 10"
    assert "zoom=0~30" in link.get_attribute("href").replace("%7E", "~")
    link.click()
    page.locator("#chart-kl[data-points='60']").wait_for()
    zoom = "() => { const z = echarts.getInstanceByDom(document.getElementById('chart-reward')).getOption().dataZoom[0]; return [z.startValue, z.endValue]; }"
    zoomed = lambda: (lambda v: v[0] <= 1 and 29 <= v[1] <= 32)(page.evaluate(zoom))  # noqa: E731 (ECharts snaps to a point)
    wait_for(zoomed, what="the dashboard zoomed on steps 0-30 of 60")


SEED_REF = r"\b00[0-4] ?(§|Q[0-9])|[Ss]eed 00[0-4]"


def test_library_answers_reward_not_rising_with_a_stall_and_shows_no_seed_sections(fixture_store, serve, page, zh_page):
    import re

    uri, _ = fixture_store
    server = serve(uri)
    zh_page.goto(f"{server.url}/#/library?q=奖励一直不涨")
    hits = zh_page.locator("#library-hits li.hit a.hit-title")
    hits.first.wait_for()
    ids = [href.rsplit("/", 1)[-1] for href in hits.evaluate_all("(as) => as.map((a) => a.getAttribute('href'))")]
    assert ids[0] == "training_stall" and "reward_spike" not in ids[:2], ids  # not "Reward suddenly surges" first
    assert not re.search(SEED_REF, zh_page.locator("#view").inner_text())
    for p, entry in ((page, "kl_explosion"), (zh_page, "critic_divergence"), (page, "embedding_grad_dominance")):
        p.goto(f"{server.url}/#/library/{entry}")
        p.locator("#library-entry h4").first.wait_for()
        text = p.locator("#view").inner_text()
        assert not re.search(SEED_REF, text), re.search(SEED_REF, text)  # "(000 §5)", "as in 000 §4.3": not on screen
        assert "()" not in text and "（）" not in text
        assert p.locator("#library-seed").count() == 0


class _Clock:
    """time.time() of the telemetry writer, moved by the test (a run that took an hour)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __getattr__(self, name):
        import time

        return getattr(time, name)

    def time(self) -> float:
        return self.now


@pytest.fixture
def axis_store(tmp_path, monkeypatch):
    """A finished run of 37 steps, 97 s apart (an hour of wall clock), its KL below the warning line
    (target 0.07: the line at 0.105 sets the axis end, 1.05 x 0.105 = 0.11025000000000001)."""
    import rlcockpit
    import rlcockpit.telemetry.run as run_module

    clock = _Clock(1767258000.0)
    monkeypatch.setattr(run_module, "time", clock)
    uri = f"sqlite:///{tmp_path / 'axis.db'}"
    run = rlcockpit.init(project="axis", name="axis", store=uri, run_id="axis-run")
    for step in range(1, 38):
        clock.now += 97.0
        run.log(step, {"reward/mean": 0.013 * step, "kl/mean": 0.002 * step, "kl/target": 0.07,
                       "policy/entropy": 2 - 0.01 * step,
                       "policy/loss": 0.1 - 0.04 * step / 37})  # ends at 0.060000000000000005
        run.commit(step)
    run.close()
    return uri


# the drawn (not hidden) axis labels of a chart: [text, left, right, top, bottom] in the chart's pixels
AXIS_LABELS = """([id, axis]) => {
  const c = echarts.getInstanceByDom(document.getElementById(id));
  const g = c.getModel().getComponent('grid').coordinateSystem.getRect();
  return c.getZr().storage.getDisplayList(true).filter((d) => d.style && typeof d.style.text === 'string' && d.style.text)
    .map((d) => { const r = d.getBoundingRect().clone(); r.applyTransform(d.getComputedTransform()); return [d.style.text, r.x, r.x + r.width, r.y, r.y + r.height]; })
    .filter(([, x0, x1, y0, y1]) => axis === 'x' ? y0 >= g.y + g.height - 1 && y0 < g.y + g.height + 16
      : x1 <= g.x + 1 && y0 >= g.y - 10 && y1 <= g.y + g.height + 10);
}"""


def _no_overlap(labels):
    spans = sorted((x0, x1, text) for text, x0, x1, *_ in labels)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans


@pytest.mark.parametrize("width", [1400, 390])
def test_chart_axes_are_readable_in_both_languages_and_the_page_fits_390_px(axis_store, browser, serve, width):
    import re

    server = serve(axis_store)
    probes: list = []
    for locale, x in (("en-US", "step"), ("zh-CN", "wall")):
        context, page = _context(browser, width, locale=locale, probes=probes)
        try:
            page.goto(f"{server.url}/#/run/axis-run/dashboard?x={x}")
            page.locator("#chart-kl[data-points='37']").wait_for()
            page.wait_for_timeout(300)
            for chart in ("chart-kl", "chart-reward"):
                xs = page.evaluate(AXIS_LABELS, [chart, "x"])
                ok, spans = _no_overlap(xs)
                assert len(xs) >= 2 and ok, (locale, x, chart, spans)  # wall-clock times, the last two steps
            for chart in ("chart-kl", "chart-loss"):  # never 0.11025000000000001 or 0.060000000000000005
                ys = [text for text, *_ in page.evaluate(AXIS_LABELS, [chart, "y"])]
                assert ys and all(re.fullmatch(r"-?\d+(\.\d{1,3})?", y) for y in ys), (chart, " ".join(ys))
            unit = page.evaluate("() => echarts.getInstanceByDom(document.getElementById('chart-kl')).getOption().yAxis[0].name")
            assert unit == ("nats" if locale == "en-US" else "奈特"), unit
            sideways = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            assert page.evaluate(sideways) <= 0, f"the dashboard scrolls sideways at {width} px"
            if width == 390:
                for route in ("alerts", "cost", "samples"):
                    page.goto(f"{server.url}/#/run/axis-run/{route}")
                    page.wait_for_timeout(600)
                    assert page.evaluate(sideways) <= 0, f"{route} scrolls sideways at 390 px"
        finally:
            context.close()
    errors = [e for p in probes for e in p.unexpected()]
    assert not errors, errors
