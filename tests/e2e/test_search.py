"""Search by any name (issue 29 item 4, docs/ui.md "Search"): the dashboard's metric search matches
the key a trainer logged (an imported verl run: ``actor/pg_loss`` finds ``policy/loss``) as well as
the catalog name, takes a /regex/, and the runs page finds which runs logged a matching metric."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[str, str]:
    """The e2e fixture run (logged through the SDK) and verl's metrics imported as run ``imp``."""
    import storekit

    uri, native = storekit.build(Path(tmp_path_factory.mktemp("search")) / "runs.db")
    result = subprocess.run([sys.executable, "-m", "rlcockpit", "import", "--store", uri, "--run-id", "imp",
                             "--name", "verl-import", "--format", "jsonl-logger",
                             str(FIXTURES / "verl_metrics.jsonl")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return uri, native


def visible_metrics(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('#metric-sections .chart-box[data-metric]')]
        .filter((b) => !b.hidden && !b.closest('details').hidden).map((b) => b.dataset.metric)""")


def search(page, query: str) -> None:
    page.fill("#metric-search", query)
    page.wait_for_function("(q) => new URLSearchParams(location.hash.split('?')[1] || '').get('q') === q", arg=query)


def test_the_dashboard_finds_an_imported_metric_by_the_key_the_trainer_logged(two_runs, serve, page):
    uri, _ = two_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/run/imp/dashboard?q=actor/pg_loss")
    page.wait_for_function("() => document.querySelector('#metric-sections .chart-box[data-metric=\"policy/loss\"]')")
    assert visible_metrics(page) == ["policy/loss"]
    box = page.locator('#metric-sections .chart-box[data-metric="policy/loss"]')
    assert box.get_attribute("data-logged-as") == "actor/pg_loss"
    assert "actor/pg_loss" in box.get_attribute("title")
    assert page.locator("#metric-count").text_content().startswith("1 of ")
    search(page, "policy/loss")  # the catalog name still finds it
    assert "policy/loss" in visible_metrics(page)
    search(page, "critic score")  # words of the logged key critic/score/mean
    page.wait_for_function("() => document.querySelector('#metric-sections .chart-box[data-metric=\"reward/mean\"]')")
    assert "reward/mean" in visible_metrics(page)


def test_the_dashboard_search_takes_a_regex(two_runs, serve, page):
    uri, run_id = two_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.wait_for_function("() => document.querySelectorAll('#metric-sections details').length > 0")
    names = page.evaluate("() => window.rlcockpit.dashboard.explorer.o.names")
    kl = sorted(n for n in names if n.startswith("kl/"))
    assert kl and len(kl) < len(names)
    search(page, r"/^kl\//")
    page.wait_for_function("(n) => document.querySelectorAll('#metric-sections .chart-box[data-metric^=\"kl/\"]').length === n",
                           arg=len(kl))
    assert sorted(visible_metrics(page)) == kl
    assert page.locator("#metric-count").text_content().startswith(f"{len(kl)} of ")
    search(page, r"/mean$/")
    assert visible_metrics(page) and all(n.endswith("mean") for n in visible_metrics(page))
    search(page, "/[/")  # not a regex: says so, shows nothing
    assert "not a regular expression" in page.locator("#metric-count").text_content()
    assert visible_metrics(page) == []


def test_the_runs_page_lists_the_runs_that_logged_a_matching_metric(two_runs, serve, page):
    uri, run_id = two_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    page.fill("#runs-metric-search", "actor/entropy")  # only the verl import logged that key
    page.wait_for_selector("#runs-metric-count")
    rows = page.locator("#runs-metric-results .search-run")
    assert rows.count() == 1 and rows.first.get_attribute("data-run") == "imp"
    assert "policy/entropy ← actor/entropy" in rows.first.text_content()
    assert page.locator("#runs-metric-count").text_content() == "1 of 2 runs logged a matching metric"

    page.fill("#runs-metric-search", r"/^kl\//")  # both runs have a kl/ metric
    page.wait_for_function("() => document.querySelectorAll('#runs-metric-results .search-run').length === 2")
    assert {rows.nth(i).get_attribute("data-run") for i in range(2)} == {"imp", run_id}

    page.click('#runs-metric-results .search-run[data-run="imp"] a')  # the dashboard, searched the same way
    page.wait_for_function("() => document.querySelector('#metric-sections .chart-box[data-metric^=\"kl/\"]')")
    assert all(n.startswith("kl/") for n in visible_metrics(page))
    assert page.locator("#metric-search").input_value() == r"/^kl\//"
