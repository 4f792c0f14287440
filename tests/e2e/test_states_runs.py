"""Designed states (empty store, a run without steps, an unknown run or page: message + retry,
never a blank panel) and the runs list with the comparison of two runs."""

from __future__ import annotations

import rlcockpit
import storekit
from conftest import allow_console_error, wait_for
from rlcockpit.store import open_store


def test_empty_store_shows_how_to_start_a_run(tmp_path, serve, page):
    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(uri).writer().close()
    server = serve(uri)
    page.goto(f"{server.url}/")
    page.wait_for_function("() => location.hash === '#/runs'")
    empty = page.locator("#runs-empty")
    empty.wait_for()
    assert "No runs yet" in empty.inner_text() and "rlcockpit demo" in empty.inner_text()
    assert "rlcockpit.init" in empty.inner_text()


def test_a_run_without_steps_says_so_in_every_panel(tmp_path, serve, page):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    run = rlcockpit.init(project="e2e", name="just-started", store=uri)
    try:
        server = serve(uri)
        page.goto(f"{server.url}/#/run/{run.run_id}/dashboard")
        page.locator("#latest-samples:has-text('No samples yet')").wait_for()
        overlays = page.locator(".chart-box .chart-empty")
        wait_for(lambda: overlays.count() == 11 and all(
            overlays.nth(i).inner_text() == "No data yet — waiting for the first step" for i in range(11)),
            what="every chart to say it has no data yet")
        assert page.locator("#run-status").inner_text() == "running"
        page.click(".tab[data-view=alerts]")
        page.locator("#alerts-empty").wait_for()
        page.click(".tab[data-view=samples]")
        page.locator("#samples-empty").wait_for()
    finally:
        run.close()


def test_unknown_run_and_unknown_page_show_an_error_with_retry(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    allow_console_error(page, r"404 \(Not Found\)")
    page.goto(f"{server.url}/#/run/no-such-run/dashboard")
    err = page.locator(".state-error")
    err.wait_for()
    assert "no-such-run" in err.inner_text() and "not_found" in err.inner_text()
    with page.expect_response(lambda r: "/api/runs/no-such-run" in r.url):
        err.locator("button:has-text('Retry')").click()
    page.locator(".state-error button:has-text('Retry')").wait_for()
    page.goto(f"{server.url}/#/run/{run_id}/nonsense")
    page.locator(".state-error:has-text('There is no page called “nonsense”')").wait_for()
    page.click(".tab[data-view=dashboard]")
    page.wait_for_function("() => location.hash.endsWith('/dashboard')")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard")


def test_runs_list_compares_two_runs(tmp_path, serve, page):
    db = tmp_path / "two.db"
    _, first = storekit.build(db, steps=12, incident_at=None, seed=1)
    uri, second = storekit.build(db, steps=20, incident_at=None, seed=2)
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    rows = page.locator("#runs-list tbody tr")
    rows.first.wait_for()
    assert rows.count() == 2
    assert page.locator("#compare-btn").is_disabled()
    for run_id in (first, second):
        page.check(f"#runs-list tr[data-run='{run_id}'] input[type=checkbox]")
    page.click("#compare-btn")
    page.wait_for_function("() => location.hash.startsWith('#/compare')")
    charts = page.locator("#compare-charts .chart")
    charts.first.wait_for()
    assert charts.count() == 4
    reward = page.locator("#compare-charts .chart[data-metric='reward/mean']")
    counts = reward.evaluate("el => echarts.getInstanceByDom(el).getOption().series.map((s) => [s.name, s.data.length])")
    # legends by run name; both runs are named "fixture-run", so a short id (the id's last part)
    # tells them apart
    short = {r: r.split("-")[-1] for r in (first, second)}
    assert len(set(short.values())) == 2
    assert sorted(counts) == sorted([[f"fixture-run · {short[first]}", 12], [f"fixture-run · {short[second]}", 20]])
    page.goto(f"{server.url}/#/run/{first}/samples")
    page.locator("#sample-list").wait_for()
    page.locator("#run-picker").select_option(second)  # the picker keeps the current page
    page.wait_for_function(f"() => location.hash === '#/run/{second}/samples'")
    wait_for(lambda: page.locator("#run-step").inner_text() == "Step 20", what="the second run's header")


class TokenAccess:
    """A server with users: every read needs the token (header, or ?access_token= on the stream)."""

    def require(self, request, role):
        from rlcockpit.control.errors import AuthError

        header = request.headers.get("authorization", "")
        if header != "Bearer s3cret" and request.query_params.get("access_token") != "s3cret":
            raise AuthError("this needs a bearer token", details={"role": role})


def test_a_server_with_users_asks_for_a_token_and_then_streams(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri, access=TokenAccess())
    allow_console_error(page, r"401 \(Unauthorized\)")
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.locator("#token-input").wait_for()
    assert "rlcockpit users signin NAME" in page.locator("#signin-page").inner_text()  # a sign-in page, not an error
    page.fill("#token-input", "s3cret")
    page.click(".token-form button[type=submit]")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard")
    page.locator("#conn-state[data-state='open']").wait_for()  # the stream authenticated by its URL
    assert page.evaluate("localStorage.getItem('rlcockpit.token')") == "s3cret"
