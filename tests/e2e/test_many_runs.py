"""Many runs as one view and a runs table to steer from (issue 29, items 1 and 2): five seeds of
two recipes (optim.lr 1e-5 vs 3e-5; recipe B is better), overlaid from the dashboard's run
selector in one colour per run on every chart, grouped by optim.lr into two lines with bands,
the runs table's summary column (from GET /api/summaries) sorting recipe B first, and the sweep
view drawing one point per run."""

from __future__ import annotations

import json

import pytest

from conftest import wait_for

STEPS = 30
SHORT = 24  # recipeA-seed4 stops early: the last steps of its group are the mean of 4 runs


def reward(recipe: str, seed: int, step: int) -> float:
    return (0.3 + 0.02 * step if recipe == "B" else 0.2 + 0.01 * step) + 0.004 * seed


def eval_reward(recipe: str, seed: int, step: int) -> float:
    # recipe A peaks at step 15, recipe B at step 25
    peak, top = (25, 0.8) if recipe == "B" else (15, 0.5)
    return top - 0.001 * (step - peak) ** 2 + 0.003 * seed


@pytest.fixture(scope="module")
def seeds_store(tmp_path_factory) -> tuple[str, list[str]]:
    import rlcockpit

    uri = f"sqlite:///{tmp_path_factory.mktemp('many') / 'runs.db'}"
    ids = []
    for recipe, lr in (("A", 1e-5), ("B", 3e-5)):
        for seed in range(5):
            config = {"algo": "ppo", "optim": {"lr": lr}, "seed": seed, "tags": [f"recipe-{recipe}"]}
            run = rlcockpit.init(project="sweep", name=f"recipe{recipe}-seed{seed}", store=uri, config=config)
            last = SHORT if (recipe, seed) == ("A", 4) else STEPS
            for step in range(1, last + 1):
                metrics = {"reward/mean": reward(recipe, seed, step), "kl/mean": 0.01 * step * (1 if recipe == "A" else 0.5),
                           "policy/entropy": 2.0 - 0.01 * step - 0.001 * seed, "policy/loss": 0.1 - 0.001 * step,
                           "value/loss": 0.5 - 0.01 * step, "response/length_mean": 12.0 + step % 3}
                if step % 5 == 0:
                    metrics["eval/reward/mean"] = eval_reward(recipe, seed, step)
                if recipe == "B":  # a metric recipe A never logs
                    metrics["policy/clip_frac"] = 0.1 + 0.001 * step
                run.log(step, metrics)
                run.commit(step)
            run.close()
            ids.append(run.run_id)
    return uri, ids


def series_of(page, chart_id: str) -> list[dict]:
    """The drawn series of a dashboard chart: name, type, colour, number of points, notes."""
    return page.evaluate("""(id) => {
      const c = window.rlcockpit.dashboard && window.rlcockpit.dashboard.charts[id];
      if (!c) return [];
      return c.chart.getOption().series.map((s) => ({ name: s.name, type: s.type, color: s.itemStyle && s.itemStyle.color,
        faint: !!(s.lineStyle && s.lineStyle.opacity < 1), points: (s.data || []).length,
        last: s.data && s.data.length ? s.data[s.data.length - 1] : null }));
    }""", chart_id)


def href(page) -> str:
    """The address as the page has it (history.replaceState is not always seen by page.url)."""
    return page.evaluate("() => location.href")


def solid_lines(page, chart_id: str) -> list[dict]:
    return [s for s in series_of(page, chart_id) if s["type"] == "line" and not s["faint"]]


def test_dashboard_selector_overlays_runs_in_one_colour_per_run(seeds_store, serve, page):
    uri, ids = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{ids[0]}/dashboard")
    page.locator("#chart-reward[data-points='30']").wait_for()
    page.click("#overlay-picker summary")
    page.locator(f"#overlay-list label[data-run='{ids[1]}'] input").check()
    page.locator(f"#overlay-list label[data-run='{ids[7]}'] input").check()
    wait_for(lambda: len(solid_lines(page, "reward")) == 3, what="three runs on the reward chart")
    assert f"runs={ids[1]}%2C{ids[7]}" in href(page) or f"runs={ids[1]},{ids[7]}" in href(page)
    colours = page.evaluate("(ids) => ids.map((id) => [window.rlcockpit.colors.runLabel(id), window.rlcockpit.colors.runColor(id)])",
                            [ids[0], ids[1], ids[7]])
    expected = dict(colours)
    assert len(set(expected.values())) == 3
    for chart in ("reward", "kl", "entropy", "length"):
        lines = {s["name"]: s["color"] for s in solid_lines(page, chart)}
        assert lines == expected, (chart, lines)
    loss = {s["name"]: s["color"] for s in solid_lines(page, "loss")}
    assert len(loss) == 6 and all(loss[f"{name} · {part}"] == col for name, col in expected.items()
                                  for part in ("actor loss", "critic loss")), loss
    legend = page.eval_on_selector_all("#overlay-legend .overlay-item", "(xs) => xs.map((x) => [x.textContent, x.dataset.color])")
    assert [tuple(x) for x in legend] == [tuple(x) for x in colours]
    # a metric only the selected run logged: its chart shows that run, not "Not logged by this run"
    clip = {s["name"]: s["color"] for s in solid_lines(page, "clip")}
    assert list(clip) == [f"{colours[2][0]} · policy clip"] and clip[f"{colours[2][0]} · policy clip"] == colours[2][1]
    assert page.locator("#chart-clip ~ .chart-empty").is_hidden()
    assert page.locator("#chart-grad ~ .chart-empty").is_visible()
    # the view is in the URL: a reload shows the same overlay
    page.reload()
    wait_for(lambda: len(solid_lines(page, "reward")) == 3, what="the overlay after a reload")
    # clearing the selection leaves the open run alone, in its own spec's lines again
    page.click("#overlay-picker summary")
    page.click("#overlay-none")
    wait_for(lambda: "runs=" not in href(page) and {s["name"] for s in series_of(page, "reward")} == {"raw", "EMA"},
             what="the run alone")


def section_lines(page, metric: str) -> list[dict]:
    """The solid lines and bands of an All-metrics section chart."""
    return page.evaluate("""(m) => {
      const c = window.rlcockpit.dashboard && window.rlcockpit.dashboard.explorer && window.rlcockpit.dashboard.explorer.charts.get("m:" + m);
      if (!c || !c.chart.getOption()) return [];
      return c.chart.getOption().series.filter((s) => s.type === "custom" || !(s.lineStyle && s.lineStyle.opacity < 1))
        .map((s) => ({ name: s.name, type: s.type, color: s.itemStyle && s.itemStyle.color, points: (s.data || []).length }));
    }""", metric)


def test_the_selected_runs_and_groups_are_on_the_all_metrics_charts_too(seeds_store, serve, page):
    uri, ids = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{ids[0]}/dashboard?runs={ids[1]},{ids[7]}")
    wait_for(lambda: len(solid_lines(page, "reward")) == 3, what="three runs on the reward chart")
    colours = dict(page.evaluate("(ids) => ids.map((id) => [window.rlcockpit.colors.runLabel(id), window.rlcockpit.colors.runColor(id)])",
                                 [ids[0], ids[1], ids[7]]))
    # a section opened after the selection: its charts show the same runs in the same colours
    page.click("#metric-sections details[data-section='eval'] summary")
    wait_for(lambda: {x["name"]: x["color"] for x in section_lines(page, "eval/reward/mean")} == colours,
             what="the selected runs on the eval chart")
    assert all(x["points"] == STEPS // 5 for x in section_lines(page, "eval/reward/mean"))
    # the selection changes while the section is open: the section chart follows
    page.click("#overlay-picker summary")
    page.locator(f"#overlay-list label[data-run='{ids[8]}'] input").check()
    wait_for(lambda: len(section_lines(page, "eval/reward/mean")) == 4, what="a fourth run on the eval chart")
    # grouped: one line per group with its band
    page.click("#overlay-all")
    page.click("#overlay-picker summary")
    page.select_option("#group-by", "config")
    page.fill("#group-key", "optim.lr")
    page.dispatch_event("#group-key", "change")
    wait_for(lambda: [(x["name"], x["type"]) for x in section_lines(page, "eval/reward/mean")]
             == [("optim.lr=0.00001", "line"), ("optim.lr=0.00003", "line"),
                 ("optim.lr=0.00001", "custom"), ("optim.lr=0.00003", "custom")], what="two groups with bands")
    # and back to the open run alone
    page.select_option("#group-by", "")
    page.click("#overlay-picker summary")
    page.click("#overlay-none")
    wait_for(lambda: [x["name"] for x in section_lines(page, "eval/reward/mean")] == ["eval/reward/mean"], what="the run alone")


def test_grouping_by_config_key_draws_two_lines_with_bands(seeds_store, serve, page):
    uri, ids = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{ids[0]}/dashboard")
    page.locator("#chart-reward[data-points='30']").wait_for()
    page.click("#overlay-picker summary")
    page.locator("#overlay-list label[data-run]").nth(9).wait_for()
    page.click("#overlay-all")
    page.click("#overlay-picker summary")
    page.select_option("#group-by", "config")
    page.fill("#group-key", "optim.lr")
    page.dispatch_event("#group-key", "change")
    wait_for(lambda: len(solid_lines(page, "reward")) == 2, what="two group lines")
    assert "group=config%3Aoptim.lr" in href(page) or "group=config:optim.lr" in href(page)
    for chart in ("reward", "kl", "entropy"):
        series = series_of(page, chart)
        lines = [s for s in series if s["type"] == "line" and not s["faint"]]
        bands = [s for s in series if s["type"] == "custom"]
        assert [s["name"] for s in lines] == ["optim.lr=0.00001", "optim.lr=0.00003"], (chart, lines)
        assert [s["name"] for s in bands] == [s["name"] for s in lines]
        assert [s["color"] for s in bands] == [s["color"] for s in lines]
        assert lines[0]["color"] != lines[1]["color"]
    lines = solid_lines(page, "reward")
    # steps not every run has: recipe A's last steps are the mean of 4 runs, and say so
    assert lines[0]["last"][2] == STEPS and lines[0]["last"][4] == "n=4"
    assert lines[1]["last"][4] == "n=5"
    legend = page.eval_on_selector_all("#overlay-legend .overlay-item", "(xs) => xs.map((x) => [x.dataset.group, x.dataset.n])")
    assert [tuple(x) for x in legend] == [("optim.lr=0.00001", "5"), ("optim.lr=0.00003", "5")]
    # min–max band, and a name pattern (strip -seed<N>) groups the same runs by recipe
    page.select_option("#group-band", "minmax")
    wait_for(lambda: "band=minmax" in href(page), what="the band in the URL")
    page.select_option("#group-by", "name")
    page.dispatch_event("#group-key", "change")
    wait_for(lambda: [s["name"] for s in solid_lines(page, "reward")] == ["recipeA", "recipeB"], what="groups by name pattern")
    raw = page.evaluate("""() => {
      const c = window.rlcockpit.dashboard.charts.reward;
      const band = c.chart.getOption().series.find((s) => s.type === "custom");
      return band.data[band.data.length - 1];
    }""")
    # unsmoothed min-max at the last step of recipe A (seeds 0..3): the chart's smoothing also
    # applies to the band, so compare against the EMA-free bounds only loosely
    assert raw[1] <= raw[2]


def test_group_aggregate_counts_the_runs_that_have_each_step(seeds_store, serve, page):
    uri, _ = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    page.locator("#runs-list tbody tr").first.wait_for()
    out = page.evaluate("""async () => {
      const g = await import("/static/js/views/groups.js");
      const a = { steps: [1, 2, 3], values: [1, 2, 3] };
      const b = { steps: [1, 2], values: [3, 4] };
      const c = { steps: [2, 3], values: [null, 5] };
      return { std: g.aggregate([a, b, c], "std"), minmax: g.aggregate([a, b, c], "minmax"),
               strip: g.nameKey("recipeA-seed3", "-seed\\\\d+"), capture: g.nameKey("recipeB-seed1", "^(.*)-seed\\\\d+$") };
    }""")
    assert out["std"]["steps"] == [1, 2, 3] and out["std"]["n"] == [2, 2, 2]
    assert out["std"]["mean"] == [2, 3, 4] and out["std"]["upper"] == [3, 4, 5]
    assert out["minmax"]["lower"] == [1, 2, 3] and out["minmax"]["upper"] == [3, 4, 5]
    assert out["strip"] == "recipeA" and out["capture"] == "recipeB"
    json.dumps(out)


def table_names(page) -> list[str]:
    return page.eval_on_selector_all("#runs-list tbody tr[data-run] td:nth-child(2) a", "(as) => as.map((a) => a.textContent)")


def test_runs_table_summary_columns_sort_the_better_recipe_first(seeds_store, serve, page):
    uri, ids = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    page.locator("#runs-list tbody tr").nth(9).wait_for()
    page.click("#summary-columns summary")
    page.fill("#summary-metric", "reward/mean")
    page.check("#summary-columns input[data-stat='max']")
    page.check("#summary-columns input[data-stat='at_best']")
    page.click("#summary-add")
    cell = "#runs-list td.sum-cell[data-col='last:reward/mean']"
    wait_for(lambda: page.locator(cell).count() == 10 and "—" not in page.locator(cell).all_inner_texts(), what="the summary column")
    page.click("#runs-list th[data-sort='sum:last:reward/mean']")
    names = table_names(page)
    assert [n[:7] for n in names[:5]] == ["recipeB"] * 5 and [n[:7] for n in names[5:]] == ["recipeA"] * 5
    assert names[0] == "recipeB-seed4"
    last = [float(x) for x in page.eval_on_selector_all(cell, "(tds) => tds.map((td) => td.dataset.value)")]
    assert last == sorted(last, reverse=True) and last[0] == pytest.approx(reward("B", 4, STEPS))
    # at best eval: recipe B's eval peaks at step 25, recipe A's at 15 (the step is the cell's title)
    at_best = page.locator(f"#runs-list tr[data-run='{ids[5]}'] td.sum-cell[data-col='at_best:reward/mean']")
    assert float(at_best.get_attribute("data-value")) == pytest.approx(reward("B", 0, 25))
    assert at_best.get_attribute("title").endswith(" 25")
    assert "sum=" in href(page) and "sort=sum%3Alast%3Areward%2Fmean" in href(page)
    # the columns and the sort come back with the link
    page.goto(href(page).replace("#/runs", "#/library"))
    page.goto(href(page).replace("#/library", "#/runs"))
    wait_for(lambda: page.locator(cell).count() == 10 and table_names(page)[0] == "recipeB-seed4", what="the table from its URL")


def test_sweep_view_plots_one_point_per_run(seeds_store, serve, page):
    uri, ids = seeds_store
    server = serve(uri)
    page.goto(f"{server.url}/#/runs?sum=last:reward/mean&sweep_x=optim.lr&sweep_color=config:optim.lr")
    page.locator("#sweep-chart[data-points='10']").wait_for()
    option = page.evaluate("""() => {
      const o = echarts.getInstanceByDom(document.getElementById('sweep-chart')).getOption();
      return { x: o.xAxis[0].type, series: o.series.map((s) => ({ name: s.name, color: s.itemStyle.color, n: s.data.length,
               xs: s.data.map((d) => d.value[0]), ys: s.data.map((d) => d.value[1]) })) };
    }""")
    assert option["x"] == "value"  # 1e-5 and 3e-5: a factor of 3, so a linear axis
    assert [(s["name"], s["n"]) for s in option["series"]] == [("optim.lr=0.00001", 5), ("optim.lr=0.00003", 5)]
    assert option["series"][0]["color"] != option["series"][1]["color"]
    assert set(option["series"][1]["xs"]) == {3e-5} and min(option["series"][1]["ys"]) > max(option["series"][0]["ys"])
    # coloured per run: ten series, each in the run's own colour; the table's filter applies
    page.select_option("#sweep-color", "run")
    page.locator("#sweep-chart[data-points='10']").wait_for()
    colours = page.evaluate("""(ids) => {
      const o = echarts.getInstanceByDom(document.getElementById('sweep-chart')).getOption();
      return o.series.map((s) => [s.data[0].run, s.itemStyle.color, window.rlcockpit.colors.runColor(s.data[0].run)]);
    }""", ids)
    assert len(colours) == 10 and all(c == want for _, c, want in colours)
    page.fill("#runs-filter", "recipeB")
    page.locator("#sweep-chart[data-points='5']").wait_for()
    assert "sweep_x=optim.lr" in href(page)


def test_many_runs_labels_in_chinese(seeds_store, serve, zh_page):
    uri, ids = seeds_store
    server = serve(uri)
    page = zh_page
    page.goto(f"{server.url}/#/run/{ids[0]}/dashboard?runs={ids[5]}&group=name:-seed%5Cd%2B")
    wait_for(lambda: [s["name"] for s in solid_lines(page, "reward")] == ["recipeA", "recipeB"], what="groups in 中文")
    bar = page.locator("#overlay-bar").inner_text()
    assert "图上的运行" in bar and "分组依据" in bar and "均值 ± 标准差" in bar and "Group by" not in bar
    page.goto(f"{server.url}/#/runs?sum=last:reward/mean&sweep_x=optim.lr")
    page.locator("#sweep-chart[data-points='10']").wait_for()
    assert "reward/mean（最新）" in page.locator("#runs-list thead").inner_text()
    sweep = page.locator("#sweep").inner_text()
    assert "超参扫描" in sweep and "着色依据" in sweep and "Colour by" not in sweep
