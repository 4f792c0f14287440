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
