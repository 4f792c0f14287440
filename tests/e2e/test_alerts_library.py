"""Alerts open their diagnostic snapshot (a finding + snapshot written through the SDK), link the
failure-library entry, and the library answers Chinese and English queries."""

from __future__ import annotations

from conftest import wait_for


def test_an_alert_opens_its_snapshot(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    chip = page.locator("#hdr-alerts a.chip.sev-red")
    chip.wait_for()
    assert "kl_tiers @25" in chip.inner_text()
    chip.click()
    card = page.locator(".incident")
    card.wait_for()
    assert card.get_attribute("data-severity") == "red"
    assert card.locator(".sev-red").first.inner_text() == "critical"
    assert "KL stayed above 1.5x target" in card.locator(".incident-summary").inner_text()
    lib = card.locator("a.chip.lib")
    wait_for(lambda: lib.inner_text() != "kl_explosion", what="the library entry title")
    assert "KL" in lib.inner_text() and lib.get_attribute("href").endswith("/library/kl_explosion")
    card.locator("a.snapshot-link").click()
    page.locator("#snapshot h2").wait_for()
    assert "step 25" in page.locator("#snapshot h2").inner_text()
    for chart in ("#snap-grad-hist", "#snap-layer-var", "#snap-head-cov", "#snap-metrics .small-chart >> nth=0"):
        assert int(page.locator(chart).get_attribute("data-points")) > 0, chart
    layers = page.evaluate("() => echarts.getInstanceByDom(document.getElementById('snap-layer-var')).getOption().yAxis[0].data")
    assert layers == ["embedding", "block_0", "block_1", "head"]
    rows = page.locator("#snap-batch-samples tbody tr")
    assert rows.count() == 4
    rows.nth(2).click()
    view = page.locator("#sample-view")
    view.wait_for()
    assert view.get_attribute("data-step") == "25" and view.get_attribute("data-sample-id") == "2"


def test_library_search_answers_chinese_and_english(fixture_store, serve, page):
    uri, _ = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/library")
    page.fill("#library-q", "KL 持续上升")
    page.click("#library-search button[type=submit]")
    hits = page.locator("#library-hits .hit-title")
    hits.first.wait_for()
    zh_ids = [a.split("/")[-1] for a in hits.evaluate_all("els => els.map((e) => e.getAttribute('href'))")]
    assert any(i.startswith("kl_") for i in zh_ids[:3]), zh_ids
    page.fill("#library-q", "entropy collapse, outputs all the same")
    page.click("#library-search button[type=submit]")
    page.wait_for_function("() => location.hash.includes('entropy')")
    hits.first.wait_for()
    en_ids = [a.split("/")[-1] for a in hits.evaluate_all("els => els.map((e) => e.getAttribute('href'))")]
    assert any("entropy" in i for i in en_ids[:3]), en_ids
    first_title = hits.first.inner_text()
    hits.first.click()
    entry = page.locator("#library-entry")
    entry.wait_for()
    assert entry.locator("h2").inner_text() == first_title
    assert entry.locator("section").count() >= 3  # symptoms, causes, diagnosis, fixes ...
    page.click("#lang-toggle")
    page.locator("#library-entry").wait_for()
    zh_title = page.locator("#library-entry h2").inner_text()
    assert zh_title != first_title and any("\u4e00" <= ch <= "\u9fff" for ch in zh_title)
