"""The sample explorer: filters kept in the URL, pagination, and the sample view with its reward
components and response tokens coloured by per-token KL (hover: logprob vs reference logprob)."""

from __future__ import annotations

import re


def test_token_kl_view_colours_tokens_and_hover_shows_logprobs(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/samples/30/1")
    view = page.locator("#sample-view")
    view.wait_for()
    assert view.get_attribute("data-step") == "30" and view.get_attribute("data-sample-id") == "1"
    assert "What is 2 + 2? (step 30, #1)" in view.inner_text()
    numbers = page.locator("#sample-numbers").inner_text()
    for label in ("final reward", "component: correctness", "component: format", "advantage", "value"):
        assert label in numbers
    tokens = page.locator("#token-kl .tok")
    assert tokens.count() == 6
    assert [tokens.nth(i).inner_text() for i in range(6)] == ["The", " answer", " is", " 4", ".", "<eos>"]
    colours = [tokens.nth(i).evaluate("el => getComputedStyle(el).backgroundColor") for i in range(6)]
    # red for KL > 0, blue for KL < 0; the token with the largest |KL| is at full strength
    assert all(re.match(r"rgba\((220, 38, 38|37, 99, 235), 0?\.\d+\)", c) for c in colours if c != "rgba(0, 0, 0, 0)"), colours
    assert sum(c != "rgba(0, 0, 0, 0)" for c in colours) >= 5
    kls = [float(tokens.nth(i).get_attribute("data-kl")) for i in range(6)]
    strongest = max(range(6), key=lambda i: abs(kls[i]))
    assert colours[strongest].endswith("0.85)")
    tokens.nth(3).hover()
    tip = page.locator("#token-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert '" 4"' in text and "logprob (policy)" in text and "logprob (reference)" in text
    assert tokens.nth(3).get_attribute("data-logprob") in text


def test_filters_narrow_the_list_and_pages_move(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/samples")
    rows = page.locator("#sample-list tbody tr")
    rows.first.wait_for()
    assert rows.count() == 20
    assert "1–20 of 120" in page.locator("#sample-pager").inner_text()
    page.click("#sample-pager button:has-text('Next')")
    page.wait_for_function("() => location.hash.includes('offset=20')")
    page.locator("#sample-pager:has-text('21–40 of 120')").wait_for()
    page.fill("#f-step_min", "10")
    page.fill("#f-step_max", "12")
    page.select_option("#f-category", "safety")
    page.fill("#f-reward_min", "0.65")
    page.click("#sample-filters button[type=submit]")
    page.locator("#sample-pager:has-text('1–3 of 3')").wait_for()
    cells = page.locator("#sample-list tbody tr td:nth-child(3)")
    assert {cells.nth(i).inner_text() for i in range(cells.count())} == {"safety"}
    page.select_option("#f-order", "reward_asc")
    page.click("#sample-filters button[type=submit]")
    page.wait_for_function("() => location.hash.includes('order=reward_asc')")
    page.locator("#sample-list tbody tr:first-child td:nth-child(4):has-text('0.700')").wait_for()
    rewards = [float(x) for x in page.locator("#sample-list tbody tr td:nth-child(4)").all_inner_texts()]
    assert rewards == sorted(rewards) and set(rewards) == {0.7}  # the three safety samples, lowest first
    page.fill("#f-reward_min", "")
    page.select_option("#f-category", "")
    page.click("#sample-filters button[type=submit]")
    page.locator("#sample-pager:has-text('1–12 of 12')").wait_for()  # steps 10-12, 4 samples each
    rewards = [float(x) for x in page.locator("#sample-list tbody tr td:nth-child(4)").all_inner_texts()]
    assert rewards == sorted(rewards) and rewards[0] == 0.5 and rewards[-1] == 0.8
    page.fill("#f-flags", "truncated")
    page.click("#sample-filters button[type=submit]")
    page.locator("#sample-pager:has-text('of 3')").wait_for()
    assert {rows.nth(i).get_attribute("data-sample-id") for i in range(rows.count())} == {"3"}
    rows.first.click()
    page.locator("#sample-view").wait_for()
    assert "flags=truncated" in page.evaluate("location.hash")
    page.fill("#f-text", "no such words anywhere")
    page.click("#sample-filters button[type=submit]")
    page.locator("#samples-empty").wait_for()


def test_keyboard_shortcuts_switch_pages_and_focus_the_filter(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.locator("#chart-reward").wait_for()
    page.keyboard.press("s")
    page.wait_for_function(f"() => location.hash === '#/run/{run_id}/samples'")
    page.locator("#f-text").wait_for()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "f-text"
    page.keyboard.type("a")  # typing in a field is text, not a shortcut
    assert page.evaluate("location.hash") == f"#/run/{run_id}/samples"
    page.locator("#f-text").press("Enter")
    page.wait_for_function("() => location.hash.includes('text=a')")
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("l")
    page.wait_for_function("() => location.hash === '#/library'")
    page.locator("#library-q").wait_for()
    page.evaluate("document.activeElement.blur()")  # the search box takes the focus on arrival
    page.keyboard.press("a")
    page.wait_for_function(f"() => location.hash === '#/run/{run_id}/alerts'")
