"""The runs table (issue 16): names, groups, tags, status, config columns chosen by the user,
sorting and filtering (kept in the URL), the config diff of the selected runs, tags and groups
saved per project; and the comparison of any metric with legends by run name."""

from __future__ import annotations

import random

import pytest

from conftest import wait_for


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> tuple[str, list[str]]:
    import rlcockpit
    import storekit

    uri = f"sqlite:///{tmp_path_factory.mktemp('runs') / 'runs.db'}"
    ids = []
    for seed, (name, lr, group) in enumerate((("baseline", 1e-5, "sweep-a"), ("lr-high", 1e-4, "sweep-a"),
                                               ("grpo", 1e-5, "sweep-b")), start=1):
        rng = random.Random(seed)
        config = {"algo": "grpo" if name == "grpo" else "ppo", "optim": {"lr": lr}, "group": group,
                  "tags": ["nightly"] if seed != 2 else []}
        run = rlcockpit.init(project="e2e", name=name, store=uri, config=config)
        for step in range(1, 11):
            run.log(step, {**storekit.step_metrics(step, rng), "eval/accuracy/math": 0.1 * seed + 0.01 * step})
            run.commit(step)
        run.close()
        ids.append(run.run_id)
    return uri, ids


def names_in_order(page):
    return page.eval_on_selector_all("#runs-list tbody tr[data-run] td:nth-child(2) a", "(as) => as.map((a) => a.textContent)")


def test_runs_table_columns_sort_filter_and_config_diff(three_runs, serve, page):
    uri, ids = three_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    page.locator("#runs-list tbody tr").first.wait_for()
    assert page.locator("#runs-list tr[data-run] .run-group").all_inner_texts() != []
    # a config column, sorted by it
    page.click("#runs-columns summary")
    page.check("#runs-columns input[value='optim.lr']")
    assert page.locator("#runs-list td.config-cell[data-key='optim.lr']").count() == 3
    page.click("#runs-list th[data-sort='config:optim.lr']")
    lrs = page.locator("#runs-list td.config-cell").all_inner_texts()
    assert lrs == sorted(lrs, key=float, reverse=True) and "cols=optim.lr" in page.url
    page.click("#runs-list th[data-sort='name']")
    assert names_in_order(page) == ["baseline", "grpo", "lr-high"]
    # filtering by group, tag or config value
    page.fill("#runs-filter", "sweep-a")
    assert sorted(names_in_order(page)) == ["baseline", "lr-high"]
    page.fill("#runs-filter", "nightly algo=grpo")
    assert names_in_order(page) == ["grpo"] and "filter=nightly" in page.url
    page.fill("#runs-filter", "")
    # the config diff of two selected runs lists only what differs
    for run_id in ids[:2]:
        page.check(f"#runs-list tr[data-run='{run_id}'] input[type=checkbox]")
    page.click("#diff-btn")
    keys = page.eval_on_selector_all("#config-diff-table tbody tr", "(trs) => trs.map((tr) => tr.dataset.key)")
    assert keys == ["optim.lr", "tags"]
    assert page.locator("#config-diff-table thead th").all_inner_texts()[1:] == ["baseline", "lr-high"]


def test_tags_and_groups_are_saved_per_project(three_runs, serve, page):
    uri, ids = three_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    row = page.locator(f"#runs-list tr[data-run='{ids[1]}']")
    row.wait_for()
    row.locator(".run-edit").click()
    page.fill(".run-edit-row .run-tags-input", "promising, lr")
    page.fill(".run-edit-row .run-group-input", "sweep-c")
    page.click(".run-edit-row .run-save")
    wait_for(lambda: row.locator(".run-group").inner_text() == "sweep-c", what="the saved group")
    from rlcockpit.store import open_store

    assert open_store(uri).layouts().get("e2e").layout["runs"][ids[1]] == {"tags": ["promising", "lr"], "group": "sweep-c"}
    page.reload()
    row.locator(".pill.tag").first.wait_for()
    assert row.locator(".pill.tag").all_inner_texts() == ["promising", "lr"]


def test_compare_any_metric_with_legends_by_run_name(three_runs, serve, page):
    uri, ids = three_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/compare?runs={ids[0]},{ids[1]}")
    page.locator("#compare-charts .chart").first.wait_for()
    page.fill("#compare-extra", "eval/accuracy/*")
    page.click("#compare-metrics button[type=submit]")
    chart = page.locator("#compare-charts .chart[data-metric='eval/accuracy/math']")
    chart.wait_for()
    legends = chart.evaluate("el => echarts.getInstanceByDom(el).getOption().series.map((s) => s.name)")
    assert sorted(legends) == ["baseline", "lr-high"]


def test_compare_has_step_wall_clock_and_relative_time_axes(three_runs, serve, page):
    uri, ids = three_runs
    server = serve(uri)
    page.goto(f"{server.url}/#/compare?runs={ids[0]},{ids[1]}")
    chart = page.locator("#compare-charts .chart[data-metric='reward/mean']")
    chart.wait_for()
    option = "(el) => { const o = echarts.getInstanceByDom(el).getOption(); return [o.xAxis[0].type, o.xAxis[0].name, o.series.map((s) => s.data[0][0])]; }"
    assert "active" in page.locator("#x-step").get_attribute("class")
    assert chart.evaluate(option) == ["value", "step", [1, 1]]
    page.click("#x-wall")
    kind, _, firsts = chart.evaluate(option)
    assert kind == "time" and firsts[1] > firsts[0] > 1e12  # ms since the epoch; the second run started later
    assert "x=wall" in page.url and chart.get_attribute("data-x-mode") == "wall"
    page.click("#x-rel")
    # time since each run's own first step: both runs start at 0
    assert chart.evaluate(option) == ["value", "time since start", [0, 0]]
    assert page.locator("#compare-charts .chart[data-x-mode='rel']").count() == page.locator("#compare-charts .chart").count()
    page.reload()
    chart.wait_for()
    assert chart.evaluate(option)[1] == "time since start" and "active" in page.locator("#x-rel").get_attribute("class")
