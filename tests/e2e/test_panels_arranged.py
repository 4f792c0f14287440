"""Panels a user arranges (issue 29, item 3 and defect 2): a panel's width and height, its place
among the others (buttons and drag), the sections' order, any metric as the x axis, a manual or an
outlier-robust y range, metric-vs-metric scatter, a histogram of any logged distribution — all
saved in the project's layout — and a panel whose legend, title and run names are never cut."""

from __future__ import annotations

import math
import random

import pytest

from conftest import wait_for

PROJECT = "arranged"
NAMES = ("baseline", "lr-high-warmup-cosine-long-name", "seed-sweep", "seed-sweep")
SPIKE_STEP = 17


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, list[str]]:
    """Four finished 30-step runs of one project, two of them with the same name; each logs the
    dashboard's metrics, a cumulative token count, a curve with one huge outlier and a reward
    histogram. Returns (uri, run ids)."""
    import rlcockpit
    import storekit

    uri = f"sqlite:///{tmp_path_factory.mktemp('arranged') / 'runs.db'}"
    ids = []
    for seed, name in enumerate(NAMES, start=1):
        rng = random.Random(seed)
        run = rlcockpit.init(project=PROJECT, name=name, store=uri, config={"seed": seed})
        tokens = 0
        for step in range(1, 31):
            tokens += 1000 + 50 * seed
            metrics = {**storekit.step_metrics(step, rng), "data/tokens_seen": float(tokens),
                       "data/samples_seen": float(8 * step),
                       "eval/accuracy/math": 0.3 + 0.01 * step * seed, "eval/accuracy/chat": 0.5,
                       "optim/spiky": 1e6 if step == SPIKE_STEP else 1.0 + 0.01 * math.sin(step)}
            run.log(step, metrics)
            run.log_histogram(step, "reward/hist", [rng.gauss(0.3 + step * 0.01, 0.2) for _ in range(32)], bins=16)
            run.commit(step)
        run.close()
        ids.append(run.run_id)
    return uri, ids


def open_dashboard(page, server, run_id, query=""):
    page.goto(f"{server.url}/#/run/{run_id}/dashboard{query}")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the reward chart")
    page.locator("#metric-search").wait_for()


def saved_panels(uri):
    from rlcockpit.store import open_store

    layout = open_store(uri).layouts().get(PROJECT)
    return layout.layout.get("panels", []) if layout else []


def put_layout(server, layout):
    import httpx

    r = httpx.put(f"{server.url}/api/projects/{PROJECT}/layout", json=layout)
    assert r.status_code == 200, r.text


def panel_chart(page, panel_id, expr):
    return page.evaluate(f"""() => {{ const c = window.rlcockpit.dashboard.explorer.charts.get("p:{panel_id}");
        return {expr}; }}""")


def drawn(page, panel_id):
    wait_for(lambda: page.locator(f"#user-panels [data-panel='{panel_id}'] .chart").get_attribute("data-points") not in (None, "0"),
             what=f"panel {panel_id} drawn")


# ---------------------------------------------------------------- defect 2

def test_a_panel_of_four_runs_shows_every_legend_entry_whole_and_tells_same_named_runs_apart(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": []})
    open_dashboard(page, server, ids[0])
    page.click("#add-panel")
    # each "also show runs" checkbox sits right next to its label; the two seed-sweep runs differ
    boxes = page.locator("#panel-form input[name=panel-run]")
    assert boxes.count() == 3
    labels = []
    for i in range(3):
        box = boxes.nth(i).bounding_box()
        assert box["width"] <= 20, "the checkbox is stretched into a wide box"
        label = boxes.nth(i).locator("xpath=..")
        swatch = label.locator(".run-swatch").bounding_box()
        assert 0 <= swatch["x"] - (box["x"] + box["width"]) <= 12, "the checkbox is far from its label"
        labels.append(label.inner_text().strip())
    assert len(set(labels)) == 3 and sum(x.startswith("seed-sweep") for x in labels) == 2, labels
    page.fill("#panel-title", "math accuracy of the baseline against the learning-rate and seed sweeps")
    page.fill("#panel-metrics", "eval/accuracy/math")
    page.select_option("#panel-width", "1")  # a quarter of the row, as every panel was before
    for i in range(3):
        boxes.nth(i).check()
    page.click("#panel-save")
    pid = wait_for(lambda: page.get_attribute("#user-panels .user-panel", "data-panel"), what="the new panel")
    drawn(page, pid)
    page.wait_for_timeout(300)
    legend = panel_chart(page, pid, "c.chart.getOption().legend[0]")
    assert legend["type"] != "scroll", "the legend pages"
    assert len(legend["data"]) == 4 and len(set(legend["data"])) == 4, legend["data"]
    assert sum(" · " in x for x in legend["data"]) == 2, legend["data"]  # "seed-sweep · <short id>"
    assert NAMES[1] in legend["data"]  # the long name whole
    # every legend entry and the title lie inside the canvas, above the plot (nothing cut or paged)
    geo = panel_chart(page, pid, """(() => {
        const ch = c.chart; const m = ch.getModel();
        const box = (kind) => { const g = ch.getViewOfComponentModel(m.getComponent(kind, 0)).group;
            const r = g.getBoundingRect(); return [r.x + g.x, r.x + g.x + r.width, r.y + g.y + r.height]; };
        const tl = box("title"); const lg = box("legend");
        return {w: ch.getWidth(), title: tl.slice(0, 2), titleBottom: tl[2], legend: lg.slice(0, 2), legendBottom: lg[2],
                gridTop: m.getComponent("grid", 0).coordinateSystem.getRect().y};
    })()""")
    assert geo["title"][0] >= -6 and geo["title"][1] <= geo["w"], geo  # (-5: the title's own padding)
    assert geo["legend"][0] >= 0 and geo["legend"][1] <= geo["w"], geo
    assert geo["titleBottom"] <= geo["legendBottom"] <= geo["gridTop"], geo


# ---------------------------------------------------------------- size and order

def panel_order(page):
    return page.eval_on_selector_all("#user-panels .user-panel", "(bs) => bs.map((b) => b.dataset.panel)")


def test_panels_take_a_width_and_height_and_move_by_buttons_and_drag_and_the_arrangement_is_saved(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": [{"id": pid, "title": pid, "metrics": ["eval/accuracy/math"], "runs": []} for pid in ("a", "b", "c")]})
    open_dashboard(page, server, ids[0])
    for pid in "abc":
        drawn(page, pid)
    assert panel_order(page) == ["a", "b", "c"]
    # width: a full row, then a quarter; height: large
    page.locator("[data-panel='a']").first.hover()
    page.click("[data-panel='a'] .panel-edit")
    page.select_option("#panel-width", "4")
    page.select_option("#panel-height", "520")
    page.click("#panel-save")
    wait_for(lambda: page.get_attribute("section.user-panel[data-panel='a']", "data-width") == "4", what="the full-width panel")
    row = page.locator("#user-panels").bounding_box()
    a = page.locator("section.user-panel[data-panel='a']").bounding_box()
    b = page.locator("section.user-panel[data-panel='b']").bounding_box()
    assert a["width"] > 0.95 * row["width"] and a["height"] > 500
    assert b["width"] < 0.55 * row["width"] and b["y"] > a["y"] + a["height"] - 1  # b (half, the default) on the next row
    assert panel_chart(page, "a", "c.chart.getWidth()") > 0.9 * row["width"]
    saved = {p["id"]: p for p in saved_panels(uri)}
    assert (saved["a"]["width"], saved["a"]["height"], saved["b"]["width"]) == (4, 520, 2)
    # move: ▶ on a, then ◀ on c
    page.locator("section.user-panel[data-panel='a']").hover()
    page.click("section.user-panel[data-panel='a'] .panel-right")
    wait_for(lambda: panel_order(page) == ["b", "a", "c"], what="a moved later")
    page.locator("section.user-panel[data-panel='c']").hover()
    page.click("section.user-panel[data-panel='c'] .panel-left")
    wait_for(lambda: panel_order(page) == ["b", "c", "a"], what="c moved earlier")
    wait_for(lambda: [p["id"] for p in saved_panels(uri)] == ["b", "c", "a"], what="the moves saved")
    for pid in "abc":  # every box re-rendered by the moves is drawn again before the drag starts
        drawn(page, pid)
    # drag: a's handle onto b puts a first
    page.locator("section.user-panel[data-panel='b']").scroll_into_view_if_needed()
    page.locator("section.user-panel[data-panel='a']").hover()
    page.drag_and_drop("section.user-panel[data-panel='a'] .panel-handle", "section.user-panel[data-panel='b']")
    wait_for(lambda: panel_order(page) == ["a", "b", "c"], what="a dragged onto b")
    wait_for(lambda: [p["id"] for p in saved_panels(uri)] == ["a", "b", "c"], what="the order saved")
    # the arrangement is the project's: another run's dashboard shows it
    open_dashboard(page, server, ids[1])
    wait_for(lambda: panel_order(page) == ["a", "b", "c"], what="the order on another run")
    assert page.get_attribute("section.user-panel[data-panel='a']", "data-width") == "4"


def test_a_panel_is_resized_by_dragging_its_corner_and_the_size_is_saved(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": [{"id": pid, "title": pid, "metrics": ["eval/accuracy/math"], "runs": []} for pid in ("a", "b")]})
    open_dashboard(page, server, ids[0])
    for pid in "ab":
        drawn(page, pid)
    box = page.locator("section.user-panel[data-panel='a']")
    box.scroll_into_view_if_needed()
    before = box.bounding_box()
    row = page.locator("#user-panels").bounding_box()
    grip = page.locator("section.user-panel[data-panel='a'] .panel-grip")
    box.hover()
    g = grip.bounding_box()
    x0, y0 = g["x"] + g["width"] / 2, g["y"] + g["height"] / 2
    # two columns wider (half a row -> the whole row) and ~280 px higher (small -> large)
    page.mouse.move(x0, y0)
    page.mouse.down()
    for k in range(1, 6):
        page.mouse.move(x0 + k * row["width"] / 10, y0 + k * 56)
    assert box.get_attribute("data-resize-to") == "4x520"  # the snapped size is shown while dragging
    page.mouse.up()
    wait_for(lambda: page.get_attribute("section.user-panel[data-panel='a']", "data-width") == "4", what="the wider panel")
    wait_for(lambda: {p["id"]: p for p in saved_panels(uri)}["a"].get("width") == 4, what="the size saved")
    saved = {p["id"]: p for p in saved_panels(uri)}
    assert (saved["a"]["width"], saved["a"]["height"], saved["b"]["width"]) == (4, 520, 2)
    drawn(page, "a")
    after = page.locator("section.user-panel[data-panel='a']").bounding_box()
    assert after["width"] > 0.95 * row["width"] > 1.8 * before["width"] and after["height"] > before["height"] + 200
    # a small drag back: one column narrower, the height kept
    box = page.locator("section.user-panel[data-panel='a']")
    box.hover()
    g = page.locator("section.user-panel[data-panel='a'] .panel-grip").bounding_box()
    x0, y0 = g["x"] + g["width"] / 2, g["y"] + g["height"] / 2
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 - row["width"] / 4, y0 + 10, steps=4)
    page.mouse.up()
    wait_for(lambda: {p["id"]: p for p in saved_panels(uri)}["a"]["width"] == 3, what="three columns saved")
    assert {p["id"]: p for p in saved_panels(uri)}["a"]["height"] == 520


def test_sections_move_up_and_down_and_keep_their_order_for_the_project(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": []})
    open_dashboard(page, server, ids[0])
    sections = lambda: page.eval_on_selector_all("#metric-sections details", "(ds) => ds.map((d) => d.dataset.section)")  # noqa: E731
    before = sections()
    assert before.index("optim") > 0
    summary = page.locator("#metric-sections details[data-section='optim'] summary")
    for _ in range(before.index("optim")):
        summary.hover()
        page.click("#metric-sections details[data-section='optim'] .section-up")
    wait_for(lambda: sections()[0] == "optim", what="optim first")
    assert page.locator("#metric-sections details[data-section='optim']").get_attribute("open") is None  # moving is no toggle
    page.locator("#metric-sections details[data-section='data'] summary").hover()
    page.click("#metric-sections details[data-section='data'] .section-down")
    from rlcockpit.store import open_store

    wait_for(lambda: (open_store(uri).layouts().get(PROJECT).layout.get("sections") or [""])[0] == "optim", what="the order saved")
    expected = sections()
    open_dashboard(page, server, ids[2])
    wait_for(lambda: sections() == expected, what="the saved section order on another run")


# ---------------------------------------------------------------- axes and ranges

def test_any_logged_metric_or_a_time_mode_is_a_panels_x_axis(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": []})
    open_dashboard(page, server, ids[0], "?smooth=0")
    page.click("#add-panel")
    options = page.eval_on_selector_all("#panel-x optgroup:first-of-type option", "(os) => os.map((o) => o.value)")
    assert "data/tokens_seen" in options and "data/samples_seen" in options  # counters first
    page.fill("#panel-metrics", "reward/mean")
    page.select_option("#panel-x", "data/tokens_seen")
    page.check(f"#panel-form input[name=panel-run][value='{ids[1]}']")
    page.click("#panel-save")
    pid = wait_for(lambda: page.get_attribute("#user-panels .user-panel", "data-panel"), what="the panel")
    drawn(page, pid)
    assert panel_chart(page, pid, "c.chart.getOption().xAxis[0].name") == "data/tokens_seen"
    xs = panel_chart(page, pid, "c.chart.getOption().series.map((s) => s.data.map((p) => p[0]))")
    assert xs[0][:3] == [1050.0, 2100.0, 3150.0] and xs[1][:2] == [1100.0, 2200.0]  # each run's own token count
    assert saved_panels(uri)[0]["x"] == "data/tokens_seen"
    # the dashboard's x toggle leaves it alone; its zoom is its own
    page.click("#x-rel")
    assert panel_chart(page, pid, "c.chart.getOption().xAxis[0].name") == "data/tokens_seen"
    assert panel_chart(page, pid, "c.chart.group") != page.evaluate("() => window.rlcockpit.dashboard.charts.reward.chart.group")
    # a fixed time axis: wall clock whatever the dashboard shows
    page.locator(f"section.user-panel[data-panel='{pid}']").hover()
    page.click(f"section.user-panel[data-panel='{pid}'] .panel-edit")
    page.select_option("#panel-x", "wall")
    page.click("#panel-save")
    wait_for(lambda: panel_chart(page, pid, "c && c.chart.getOption().xAxis[0].type") == "time", what="the wall-clock axis")
    page.click("#x-step")
    assert panel_chart(page, pid, "c.chart.getOption().xAxis[0].type") == "time"


def y_extent(page, pid):
    return panel_chart(page, pid, "c.chart.getModel().getComponent('yAxis', 0).axis.scale.getExtent()")


def test_a_manual_y_range_and_an_outlier_robust_one(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": [
        {"id": "raw", "title": "spiky", "metrics": ["optim/spiky"], "runs": []},
        {"id": "robust", "title": "spiky, clipped", "metrics": ["optim/spiky"], "runs": [], "y_robust": True},
        {"id": "manual", "title": "spiky, 0.9..1.1", "metrics": ["optim/spiky"], "runs": [], "y_min": 0.9, "y_max": 1.1}]})
    open_dashboard(page, server, ids[0], "?smooth=0")
    for pid in ("raw", "robust", "manual"):
        drawn(page, pid)
    assert y_extent(page, "raw")[1] >= 1e6  # the spike sets the scale: the curve is a flat line
    lo, hi = y_extent(page, "robust")
    assert 0.9 < lo < 0.99 and 1.01 < hi < 1.1, (lo, hi)  # every ordinary point in view, the spike clipped
    assert y_extent(page, "manual") == [0.9, 1.1]
    # set in the form: min / max inputs
    page.locator("section.user-panel[data-panel='raw']").hover()
    page.click("section.user-panel[data-panel='raw'] .panel-edit")
    page.fill("#panel-ymin", "0")
    page.fill("#panel-ymax", "2")
    page.click("#panel-save")
    wait_for(lambda: y_extent(page, "raw") == [0, 2], what="the manual range")
    saved = {p["id"]: p for p in saved_panels(uri)}
    assert (saved["raw"]["y_min"], saved["raw"]["y_max"], saved["robust"]["y_robust"]) == (0, 2, True)


# ---------------------------------------------------------------- scatter and histograms

def test_a_scatter_of_kl_against_reward_one_point_per_step_coloured_by_step(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": []})
    open_dashboard(page, server, ids[0])
    page.click("#add-panel")
    page.select_option("#panel-kind", "scatter")
    page.fill("#panel-metrics", "kl/mean")
    page.select_option("#panel-x", "reward/mean")
    page.click("#panel-save")
    pid = wait_for(lambda: page.get_attribute("#user-panels .user-panel", "data-panel"), what="the scatter panel")
    drawn(page, pid)
    opt = panel_chart(page, pid, """(() => { const o = c.chart.getOption();
        return {type: o.series[0].type, n: o.series[0].data.length, x: o.xAxis[0].name, y: o.yAxis[0].name,
                vm: o.visualMap[0] && [o.visualMap[0].dimension, o.visualMap[0].min, o.visualMap[0].max], steps: o.series[0].data.map((p) => p[2])}; })()""")
    assert (opt["type"], opt["n"], opt["x"], opt["y"]) == ("scatter", 30, "reward/mean", "kl/mean")
    assert opt["vm"] == [2, 1, 30] and opt["steps"] == list(range(1, 31))
    saved = saved_panels(uri)[0]
    assert (saved["kind"], saved["metrics"], saved["x"]) == ("scatter", ["kl/mean"], "reward/mean")
    # clicking a point opens that step's samples
    pt = panel_chart(page, pid, "c.chart.convertToPixel({seriesIndex: 0}, c.chart.getOption().series[0].data[9].slice(0, 2))")
    page.locator(f"#user-panels [data-panel='{pid}'] .chart").click(position={"x": pt[0], "y": pt[1]})
    wait_for(lambda: "/samples" in page.url and "step_min=10" in page.url, what="the samples of step 10")


def test_a_histogram_panel_over_time_and_at_one_step_with_other_runs(runs, serve, page):
    uri, ids = runs
    server = serve(uri)
    put_layout(server, {"panels": []})
    open_dashboard(page, server, ids[0])
    page.click("#add-panel")
    page.select_option("#panel-kind", "hist")
    assert page.locator("#panel-x").is_hidden()
    assert "reward/hist" in page.eval_on_selector_all("#hist-names option", "(os) => os.map((o) => o.value)")
    page.fill("#panel-metrics", "reward/hist")
    page.click("#panel-save")
    pid = wait_for(lambda: page.get_attribute("#user-panels .user-panel", "data-panel"), what="the histogram panel")
    wait_for(lambda: page.get_attribute(f"#user-panels [data-panel='{pid}'] .chart", "data-points") == "30", what="30 steps")
    assert panel_chart(page, pid, "c.chart.getOption().series[0].type") == "heatmap"
    # at one step, with another run overlaid; the slider picks the step
    page.locator(f"section.user-panel[data-panel='{pid}']").hover()
    page.click(f"section.user-panel[data-panel='{pid}'] .panel-edit")
    page.select_option("#panel-view", "step")
    page.check(f"#panel-form input[name=panel-run][value='{ids[2]}']")
    page.click("#panel-save")
    plot = f"#user-panels [data-panel='{pid}'] .chart"
    wait_for(lambda: page.get_attribute(plot, "data-step") == "30", what="the last step shown")
    series = panel_chart(page, pid, "c.chart.getOption().series.map((s) => [s.name, s.data.length, s.data.reduce((a, p) => a + p[1], 0)])")
    assert len(series) == 2 and all(n == 16 and abs(total - 1) < 1e-9 for _, n, total in series)
    assert series[0][0].startswith("baseline")
    page.locator(f"section.user-panel[data-panel='{pid}'] .hist-step").fill("4")
    wait_for(lambda: page.get_attribute(plot, "data-step") == "5", what="step 5 picked")
    saved = saved_panels(uri)[0]
    assert (saved["kind"], saved["view"], saved["metrics"], saved["runs"]) == ("hist", "step", ["reward/hist"], [ids[2]])


def test_the_panel_form_speaks_chinese(runs, serve, zh_page):
    uri, ids = runs
    server = serve(uri)
    open_dashboard(zh_page, server, ids[0])
    zh_page.click("#add-panel")
    text = zh_page.locator("#panel-form").inner_text()
    for word in ("图表", "横轴", "宽度", "高度", "裁掉离群值"):
        assert word in text


HELPERS = """async ([values]) => {
  const L = await import("/static/js/views/panel_layout.js");
  const ps = ["a", "b", "c", "d"].map((id) => ({id}));
  const ids = (list) => list.map((p) => p.id).join("");
  return {
    robust: L.yLimits(L.normalizePanel({y_robust: true}), values),
    manual: L.yLimits(L.normalizePanel({y_min: -1, y_robust: true}), values),
    none: L.yLimits(L.normalizePanel({}), values),
    moves: [ids(L.movePanel(ps, "a", 1)), ids(L.movePanel(ps, "a", -1)), ids(L.dropPanel(ps, "d", "b")), ids(L.dropPanel(ps, "a", "c"))],
    sections: L.orderSections(["eval", "kl", "optim", "sys"], ["sys", "gone", "kl"]),
    compact: [L.compact(12500), L.compact(3e6), L.compact(950), L.compact(0.125)],
  };
}"""


def naive_robust(values: list[float]) -> tuple[float, float]:
    s = sorted(values)
    p1, p99 = s[math.ceil(0.01 * (len(s) - 1))], s[math.floor(0.99 * (len(s) - 1))]
    inside = [v for v in s if p1 - (p99 - p1) / 2 <= v <= p99 + (p99 - p1) / 2]
    pad = (inside[-1] - inside[0]) * 0.05
    return inside[0] - pad, inside[-1] + pad


def test_the_layout_helpers_against_naive_references(runs, serve, page):
    uri, _ = runs
    server = serve(uri)
    page.goto(f"{server.url}/")
    rng = random.Random(7)
    values = [rng.gauss(0, 1) for _ in range(200)] + [1e9, -5e8]
    got = page.evaluate(HELPERS, [values])
    assert [got["robust"]["min"], got["robust"]["max"]] == pytest.approx(naive_robust(values))
    assert got["manual"]["min"] == -1 and got["manual"]["max"] == pytest.approx(naive_robust(values)[1])
    assert got["none"] == {"min": None, "max": None}
    assert got["moves"] == ["bacd", "abcd", "adbc", "bcad"]
    assert got["sections"] == ["sys", "kl", "eval", "optim"]
    assert got["compact"] == ["12.5k", "3M", "950", "0.125"]
