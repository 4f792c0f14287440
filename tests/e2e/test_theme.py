"""Dark mode (issue 16): the page follows the browser's prefers-color-scheme, the header's toggle
overrides it (remembered), and the charts take their colours from the theme."""

from __future__ import annotations

from conftest import wait_for

BG = "() => getComputedStyle(document.body).backgroundColor"
TITLE = "() => window.rlcockpit.dashboard.charts.reward.chart.getOption().title[0].textStyle.color"


def test_dark_mode_follows_the_browser_and_the_toggle_is_remembered(fixture_store, serve, browser):
    uri, run_id = fixture_store
    server = serve(uri)
    context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark")
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    assert page.evaluate(BG) == "rgb(11, 17, 32)"
    assert page.evaluate(TITLE) == "#e5e7eb"  # the chart titles are light on the dark panels
    page.click("#theme-toggle")
    wait_for(lambda: page.evaluate("() => document.documentElement.dataset.theme") == "light", what="the light theme")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the redrawn dashboard")
    assert page.evaluate(BG) == "rgb(246, 248, 251)" and page.evaluate(TITLE) == "#0f172a"
    page.reload()
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard after reload")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"  # the choice beats the browser
    page.click("#theme-toggle")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    context.close()
    assert not errors, errors
