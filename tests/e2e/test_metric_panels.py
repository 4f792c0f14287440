"""Every logged metric is chartable (issue 16): the metric search, automatic sections by prefix,
user panels (any metrics, any runs) saved per project in the store; and the charts' features —
per-chart EMA with the raw curve faint behind, log scale, axis titles with catalog units, integer
step ticks, the relative-time axis, annotations that never overlap, CSV / PNG download and the
view in the URL."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from conftest import wait_for

EXTRA = ("eval/accuracy/math", "eval/accuracy/chat", "update/ratio/actor", "sys/rss_gb", "optim/lr/actor")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[str, str, str]:
    """Two finished 30-step runs of project "e2e" ("baseline", "lr-high") with the dashboard's
    metrics plus eval / update / sys / optim ones; returns (uri, first run, second run)."""
    import rlcockpit
    import storekit

    uri = f"sqlite:///{tmp_path_factory.mktemp('panels') / 'runs.db'}"
    ids = []
    for seed, name in ((1, "baseline"), (2, "lr-high")):
        rng = random.Random(seed)
        run = rlcockpit.init(project="e2e", name=name, store=uri, config={"algo": "ppo", "lr": 1e-5 * seed})
        for step in range(1, 31):
            metrics = {**storekit.step_metrics(step, rng), "eval/accuracy/math": 0.3 + 0.01 * step * seed,
                       "eval/accuracy/chat": 0.5, "update/ratio/actor": 1e-3 * math.exp(-step / 10),
                       "sys/rss_gb": 2.0 + 0.01 * step, "optim/lr/actor": 1e-5 * seed}
            run.log(step, metrics)
            run.commit(step)
        run.close()
        ids.append(run.run_id)
    return uri, ids[0], ids[1]


def open_dashboard(page, server, run_id, query=""):
    page.goto(f"{server.url}/#/run/{run_id}/dashboard{query}")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the reward chart")
    page.locator("#metric-search").wait_for()


def chart(page, expr):
    return page.evaluate(f"() => {{ const d = window.rlcockpit.dashboard; return {expr}; }}")


def test_every_metric_is_searchable_and_charted_in_sections_by_prefix(two_runs, serve, page):
    uri, run_a, _ = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a)
    sections = page.eval_on_selector_all("#metric-sections details", "(ds) => ds.map((d) => d.dataset.section)")
    assert {"eval", "update", "sys", "optim", "kl", "reward", "policy"} <= set(sections)
    assert "of" in page.locator("#metric-count").inner_text()
    page.fill("#metric-search", "accuracy")
    box = page.locator("#metric-sections [data-metric='eval/accuracy/math'] .chart")
    wait_for(lambda: box.get_attribute("data-points") == "30", what="the eval/accuracy/math chart")
    visible = page.eval_on_selector_all("#metric-sections details:not([hidden])", "(ds) => ds.map((d) => d.dataset.section)")
    assert visible == ["eval"]
    # a glob works too, and the search is part of the URL
    page.fill("#metric-search", "update/*")
    wait_for(lambda: page.locator("#metric-sections [data-metric='update/ratio/actor'] .chart").get_attribute("data-points") == "30",
             what="the update ratio chart")
    assert "q=update" in page.url


def test_user_panels_with_other_runs_are_saved_per_project_and_legends_use_run_names(two_runs, serve, page):
    uri, run_a, run_b = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a)
    page.click("#add-panel")
    page.fill("#panel-title", "accuracy vs lr")
    page.fill("#panel-metrics", "eval/accuracy/math")
    page.check(f"#panel-form input[name=panel-run][value='{run_b}']")
    page.click("#panel-save")
    plot = page.locator("#user-panels .user-panel .chart")
    wait_for(lambda: plot.get_attribute("data-points") == "30", what="the new panel")
    legend = page.evaluate("() => [...window.rlcockpit.dashboard.explorer.charts.values()].find((c) => c.el.dataset.panel)"
                           ".chart.getOption().legend[0].data")
    assert legend == ["baseline", "lr-high"]
    # saved in the store for the project: a reload (and another run of the project) shows it
    from rlcockpit.store import open_store

    saved = open_store(uri).layouts().get("e2e").layout["panels"]
    assert [(p["title"], p["metrics"], p["runs"]) for p in saved] == [("accuracy vs lr", ["eval/accuracy/math"], [run_b])]
    open_dashboard(page, server, run_b)
    wait_for(lambda: page.locator("#user-panels .user-panel .chart").get_attribute("data-points") == "30",
             what="the panel on the other run's dashboard")
    page.locator("#user-panels .user-panel").hover()
    page.click("#user-panels .panel-remove")
    wait_for(lambda: open_store(uri).layouts().get("e2e").layout["panels"] == [], what="the removal saved")


def test_per_chart_smoothing_log_scale_units_and_integer_steps(two_runs, serve, page):
    uri, run_a, _ = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a, "?smooth=0")
    # the grad chart: no smoothing -> one line per metric; EMA 0.9 -> the raw curve faint behind
    assert chart(page, "d.charts.grad.chart.getOption().series.length") == 2
    page.locator("#chart-grad").hover()
    page.select_option("#chart-grad >> xpath=.. >> select.ct-smooth", "0.9")
    series = chart(page, "d.charts.grad.chart.getOption().series.map((s) => [s.name, s.lineStyle.opacity])")
    assert len(series) == 4 and [o for _, o in series].count(1) == 2 and min(o for _, o in series) < 0.5
    ema = chart(page, "d.charts.grad.chart.getOption().series[0].data.map((p) => p[1])")
    raw = chart(page, "d.charts.grad.chart.getOption().series[1].data.map((p) => p[1])")
    assert series[0][1] == 1 and series[1][1] < 0.5  # EMA in full colour, the raw curve faint behind
    assert ema != raw
    assert ema[0] == pytest.approx(raw[0])  # debiased: the EMA starts at the first value, not at 0
    assert page.evaluate("() => window.rlcockpit.dashboard.charts.reward.opts.smoothing") == 0  # others keep theirs
    page.click("#chart-grad >> xpath=.. >> .ct-log")
    assert chart(page, "d.charts.grad.chart.getOption().yAxis[0].type") == "log"
    assert "cs=grad%3A0.9" in page.url and "log=grad" in page.url
    # axis titles: the unit from the metric catalog, the step axis with integer ticks only
    assert chart(page, "d.charts.length.chart.getOption().yAxis[0].name") == "tokens"
    assert chart(page, "d.charts.reward.chart.getOption().xAxis[0].name") == "step"
    page.evaluate("""() => window.rlcockpit.dashboard.charts.reward.chart.dispatchAction({type: "dataZoom", startValue: 12, endValue: 14})""")
    page.wait_for_timeout(300)
    labels = page.evaluate("""() => { const c = window.rlcockpit.dashboard.charts.reward;
        const ax = c.chart.getModel().getComponent('xAxis', 0).axis;
        return ax.getTicksCoords().map((tk) => ax.scale.getLabel({value: tk.tickValue})); }""")
    assert labels and all("." not in label for label in labels)


def test_relative_time_axis_and_annotations_never_overlap(two_runs, serve, page):
    uri, run_a, _ = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a)
    page.evaluate(f"""() => window.rlcockpit.charts.annotate("{run_a}",
        [31, 32, 33, 34, 35, 36, 37, 38].map((s, i) => ({{step: s - 20, label: "#" + (i + 1)}})), "tickets")""")
    markers = "(id) => [...document.querySelectorAll(`#chart-${id} ~ .ann-layer .ann-marker`)].map((m) => m.getBoundingClientRect())"
    wait_for(lambda: page.evaluate(markers, "reward"), what="the annotation markers")
    rects = page.evaluate(markers, "reward")
    for a, b in zip(rects, rects[1:], strict=False):
        assert a["right"] <= b["left"], "two markers overlap"
    counts = page.eval_on_selector_all("#chart-reward ~ .ann-layer .ann-marker", "(ms) => ms.map((m) => Number(m.dataset.count))")
    assert sum(counts) == 8 and len(counts) < 8  # nearby marks collapsed
    page.locator("#chart-reward ~ .ann-layer .ann-marker.many").first.hover()
    assert "#1" in page.locator("#chart-reward ~ .ann-layer .ann-marker.many .ann-pop").first.inner_text()
    # relative time and wall clock: markers stay inside the plot
    page.click("#x-rel")
    assert chart(page, "d.charts.reward.chart.getOption().xAxis[0].name") == "time since start"
    assert chart(page, "d.charts.reward.chart.getOption().series[0].data[0][0]") == 0
    page.click("#x-wall")
    box = page.locator("#chart-reward").bounding_box()
    for r in page.evaluate(markers, "reward"):
        assert box["x"] <= r["left"] and r["right"] <= box["x"] + box["width"]


def test_csv_and_png_downloads(two_runs, serve, page):
    uri, run_a, _ = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a)
    page.locator("#chart-loss").hover()
    with page.expect_download() as got:
        page.click("#chart-loss >> xpath=.. >> .ct-csv")
    text = Path(got.value.path()).read_text(encoding="utf-8").splitlines()
    assert text[0].startswith("step,wall_time,") and "actor loss" in text[0] and len(text) == 31
    with page.expect_download() as got:
        page.click("#chart-loss >> xpath=.. >> .ct-png")
    assert Path(got.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert got.value.suggested_filename.endswith("loss.png")


def test_the_view_is_in_the_url_and_restored(two_runs, serve, page):
    uri, run_a, _ = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a, "?x=step&smooth=0.3&zoom=5~20&log=kl&q=sys")
    assert "active" in page.locator("#x-step").get_attribute("class")
    assert chart(page, "d.charts.entropy.opts.smoothing") == 0.3
    assert chart(page, "d.charts.kl.chart.getOption().yAxis[0].type") == "log"
    assert page.input_value("#metric-search") == "sys"
    wait_for(lambda: chart(page, "d.charts.entropy.chart.getOption().dataZoom[0].startValue") is not None, what="zoom")
    zoom = chart(page, "[d.charts.entropy.chart.getOption().dataZoom[0].startValue, d.charts.entropy.chart.getOption().dataZoom[0].endValue]")
    assert zoom == [5, 20]
    page.click("#reset-zoom")
    assert "zoom=" not in page.url and "x=step" in page.url and "q=sys" in page.url


def test_panels_and_their_runs_travel_in_the_link(two_runs, serve, page):
    uri, run_a, run_b = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a, f"?panel=eval/accuracy/math~{run_b}")
    plot = page.locator("#user-panels .user-panel.from-link .chart")
    wait_for(lambda: plot.get_attribute("data-points") == "30", what="the panel from the link")
    legend = page.evaluate("() => [...window.rlcockpit.dashboard.explorer.charts.values()].find((c) => c.el.dataset.panel)"
                           ".chart.getOption().legend[0].data")
    assert legend == ["baseline", "lr-high"]
    page.locator("#user-panels .user-panel.from-link").hover()
    page.click("#user-panels .panel-save")
    from rlcockpit.store import open_store

    wait_for(lambda: (open_store(uri).layouts().get("e2e") or None) and any(
        p["metrics"] == ["eval/accuracy/math"] and p["runs"] == [run_b]
        for p in open_store(uri).layouts().get("e2e").layout["panels"]), what="the panel saved")
    page.locator("#user-panels .user-panel:not(.from-link)").first.wait_for()
    assert page.locator("#user-panels .user-panel.from-link").count() == 0  # the same panel once
    page.click("#copy-link")
    assert "panel=eval%2Faccuracy%2Fmath%7E" in page.url and run_b in page.url


def test_an_opened_section_stays_open(two_runs, serve, page):
    uri, run_a, run_b = two_runs
    server = serve(uri)
    open_dashboard(page, server, run_a)
    page.click("#metric-sections details[data-section='sys'] summary")
    sys_chart = page.locator("#metric-sections [data-metric='sys/rss_gb'] .chart")
    wait_for(lambda: sys_chart.get_attribute("data-points") == "30", what="the sys section")
    open_dashboard(page, server, run_b)  # another run of the project
    wait_for(lambda: sys_chart.get_attribute("data-points") == "30", what="the sys section, still open")
    assert page.locator("#metric-sections details[data-section='eval']").get_attribute("open") is None
