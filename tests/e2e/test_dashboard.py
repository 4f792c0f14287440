"""The dashboard: live growth from a real training run, no duplicated steps, a click on a reward
point opens that step's samples, linked zoom and the annotation extension API."""

from __future__ import annotations

import threading

import httpx
import pytest

from conftest import wait_for


def points(page, chart: str) -> int:
    return int(page.locator(f"#chart-{chart}").get_attribute("data-points") or 0)


@pytest.fixture
def training(tmp_path):
    """A tiny real PPO run (random 2-layer GPT-2, tiny world prompts) training in a thread."""
    from rlcockpit.trainer.trainer import Trainer
    from trainer_testkit import make_config, make_model_dir

    model = make_model_dir(tmp_path / "model")
    cfg = make_config(tmp_path, "train.steps=400", "telemetry.token_arrays_recent_steps=2", model=model)
    trainer = Trainer(cfg)
    thread = threading.Thread(target=trainer.run, name="e2e-trainer", daemon=True)
    thread.start()
    yield cfg.telemetry.store, trainer
    trainer.live.stop(reason="test over", requested_by="e2e")
    thread.join(timeout=60)


def test_reward_chart_grows_live_without_refetching(training, serve, page):
    uri, _trainer = training
    server = serve(uri)
    wait_for(lambda: httpx.get(f"{server.url}/api/runs").json()["items"], what="the run to appear")
    series_requests: list[str] = []
    # the dashboard's one series request (the header's step-rate request asks for reward/mean only)
    page.on("request", lambda r: "/series" in r.url and "policy%2Fentropy" in r.url and series_requests.append(r.url))
    page.goto(f"{server.url}/#/")
    page.wait_for_selector("#chart-reward")
    wait_for(lambda: points(page, "reward") >= 1, timeout=60, what="the first step on the reward chart")
    first = points(page, "reward")
    wait_for(lambda: points(page, "reward") >= first + 3, timeout=60, what="three more live steps")
    grown = points(page, "reward")
    # every step once: the chart's points are exactly the steps 1..last (none missed, none twice)
    assert int(page.locator("#chart-reward").get_attribute("data-last-step")) == grown
    assert len(series_requests) == 1, series_requests  # live steps were appended, not refetched
    for chart in ("kl", "entropy", "loss", "length", "clip", "truncation", "grad"):
        assert points(page, chart) >= first + 3, chart
    assert page.locator("#conn-state").inner_text() == "live"
    assert page.locator("#run-status").inner_text() == "running"


def test_a_step_already_shown_is_never_added_twice(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: points(page, "reward") == 30, what="30 steps")
    send = """([step, value]) => window.rlcockpit.state.live.receive("step",
        {data: JSON.stringify({step, wall_time: Date.now() / 1000, metrics: {"reward/mean": value}}), lastEventId: ""})"""
    page.evaluate(send, [30, 9.0])  # the last step again (e.g. a replay after reconnecting)
    page.evaluate(send, [12, 9.0])
    page.wait_for_timeout(200)
    assert points(page, "reward") == 30
    page.evaluate(send, [31, 0.9])
    wait_for(lambda: points(page, "reward") == 31, what="step 31 appended")
    values = page.evaluate("() => window.rlcockpit.dashboard.charts.reward.data.get('reward/mean').values")
    assert 9.0 not in values and values[-1] == 0.9


def reward_point_on_dashboard(fixture_store, serve, page, step: int) -> tuple[float, float]:
    """Open the fixture run's dashboard; the page coordinates of the reward chart's point at ``step``."""
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: points(page, "reward") == 30, what="the reward chart")
    pos = page.evaluate(f"() => window.rlcockpit.dashboard.charts.reward.pixelOf({step})")
    box = page.locator("#chart-reward").bounding_box()
    return box["x"] + pos["x"], box["y"] + pos["y"]


def test_clicking_a_reward_point_opens_that_steps_samples(fixture_store, serve, page):
    x, y = reward_point_on_dashboard(fixture_store, serve, page, 17)
    page.mouse.click(x, y)
    page.wait_for_function("() => location.hash.includes('/samples')")
    assert "step_min=17" in page.evaluate("location.hash") and "step_max=17" in page.evaluate("location.hash")
    rows = page.locator("#sample-list tbody tr")
    rows.first.wait_for()
    assert rows.count() == 4
    assert {rows.nth(i).get_attribute("data-step") for i in range(rows.count())} == {"17"}
    assert page.locator("#f-step_min").input_value() == "17"


TOOLTIP = """(id) => [...document.querySelectorAll(`#chart-${id} div`)]
    .filter((d) => d.style.position === "absolute" && d.style.display !== "none" && d.style.visibility !== "hidden"
        && d.style.opacity !== "0" && d.innerText)
    .map((d) => d.innerText).join("|")"""


def test_zoom_and_tooltip_are_linked_and_annotations_mark_steps(fixture_store, serve, page):
    x, y = reward_point_on_dashboard(fixture_store, serve, page, 17)
    page.mouse.move(x, y)
    # one tooltip: the hovered chart's; the other step charts show only the synced crosshair
    wait_for(lambda: page.evaluate(TOOLTIP, "reward").startswith("step 17"), what="the reward chart's tooltip")
    assert page.evaluate(TOOLTIP, "kl") == "" and page.evaluate(TOOLTIP, "grad") == ""
    pointer = "(id) => window.rlcockpit.dashboard.charts[id].chart.getModel().getComponent('axisPointer')"
    assert page.evaluate(pointer, "kl") is not None
    kl = page.evaluate("() => window.rlcockpit.dashboard.charts.kl.pixelOf(17)")
    box = page.locator("#chart-kl").bounding_box()
    page.mouse.move(box["x"] + kl["x"], box["y"] + kl["y"])
    wait_for(lambda: page.evaluate(TOOLTIP, "kl").startswith("step 17"), what="the KL chart's own tooltip")
    assert "moving avg (10)" in page.evaluate(TOOLTIP, "kl")
    wait_for(lambda: page.evaluate(TOOLTIP, "reward") == "", what="the reward chart's tooltip to hide")
    page.mouse.move(5, 5)
    page.evaluate("""() => window.rlcockpit.dashboard.charts.reward.chart.dispatchAction(
        {type: "dataZoom", start: 50, end: 100})""")
    zoom = "(id) => window.rlcockpit.dashboard.charts[id].chart.getOption().dataZoom[0].start"
    wait_for(lambda: page.evaluate(zoom, "kl") == 50, what="the KL chart to follow the zoom")
    assert page.evaluate(zoom, "grad") == 50
    page.evaluate(f"""() => window.rlcockpit.charts.annotate("{fixture_store[1]}",
        [{{step: 12, label: "ticket #7 applied"}}], "tickets")""")
    marks = """(id) => window.rlcockpit.dashboard.charts[id].chart.getOption().series[0].markLine.data
        .filter((m) => m.xAxis !== undefined).map((m) => [m.xAxis, m.name])"""
    wait_for(lambda: page.evaluate(marks, "reward") == [[12, "ticket #7 applied"]], what="the annotation")
    assert page.evaluate(marks, "entropy") == [[12, "ticket #7 applied"]]
    # the KL chart carries the target and the 1.5x warning line (kl/target = 0.5 in the fixture)
    hlines = page.evaluate("""() => window.rlcockpit.dashboard.charts.kl.chart.getOption().series[0].markLine.data
        .filter((m) => m.yAxis !== undefined).map((m) => m.yAxis)""")
    assert hlines == [0.5, 0.75]


def test_wall_clock_axis_toggle_is_remembered(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: points(page, "reward") == 30, what="the reward chart")
    page.click("#x-wall")
    x_type = "() => window.rlcockpit.dashboard.charts.reward.chart.getOption().xAxis[0].type"
    assert page.evaluate(x_type) == "time"
    page.reload()
    wait_for(lambda: points(page, "reward") == 30, what="the reward chart after reload")
    assert page.evaluate(x_type) == "time"
    assert "active" in page.locator("#x-wall").get_attribute("class")


def test_a_dropped_stream_resumes_at_its_cursor_without_gaps_or_repeats(tmp_path, serve, page):
    import random

    import rlcockpit
    import storekit

    uri = f"sqlite:///{tmp_path / 'live.db'}"
    rng = random.Random(3)
    run = rlcockpit.init(project="e2e", name="reconnect", store=uri, flush_interval_s=0.1)
    try:
        for step in range(1, 6):
            storekit.log_step(run, step, rng, samples=1)
        run.flush()
        server = serve(uri)
        streams: list[str] = []
        page.on("request", lambda r: "/stream" in r.url and streams.append(r.url))
        page.goto(f"{server.url}/#/run/{run.run_id}/dashboard")
        wait_for(lambda: points(page, "reward") == 5, what="5 steps")
        storekit.log_step(run, 6, rng, samples=1)
        wait_for(lambda: points(page, "reward") == 6, what="step 6 live")
        page.evaluate("() => window.rlcockpit.state.live.source.close()")  # the connection drops
        for step in (7, 8):  # written while the page is disconnected
            storekit.log_step(run, step, rng, samples=1)
        run.flush()
        page.evaluate("() => window.rlcockpit.state.live.reopenLater()")
        wait_for(lambda: points(page, "reward") == 8, what="the missed steps after reconnecting")
        page.wait_for_timeout(500)
        steps = page.evaluate("() => window.rlcockpit.dashboard.charts.reward.data.get('reward/mean').steps")
        assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
        assert "after_step=5" in streams[0] and "cursor=" in streams[-1], streams
    finally:
        run.close()


def test_heatmaps_download_csv_and_png(fixture_store, serve, page):
    """The reward / length histogram heatmaps have the line charts' CSV and PNG downloads."""
    from pathlib import Path

    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: points(page, "reward-hist") == 30, what="the reward heatmap")
    page.locator("#chart-reward-hist").hover()
    with page.expect_download() as got:
        page.click("#chart-reward-hist >> xpath=.. >> .ct-csv")
    assert got.value.suggested_filename == f"{run_id}-reward-hist.csv"
    rows = [r.split(",") for r in Path(got.value.path()).read_text(encoding="utf-8").splitlines()]
    assert rows[0][0] == "step" and len(rows[0]) == 25 and ".." in rows[0][1]  # 24 bins, each its range
    assert [int(r[0]) for r in rows[1:]] == list(range(1, 31))
    for r in rows[1:]:  # each step's column: the shares of its samples, summing to 1
        assert abs(sum(float(v) for v in r[1:]) - 1) < 1e-6
    page.locator("#chart-length-hist").hover()
    with page.expect_download() as got:
        page.click("#chart-length-hist >> xpath=.. >> .ct-png")
    assert got.value.suggested_filename == f"{run_id}-length-hist.png"
    assert Path(got.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_snapshot_heatmaps_download_csv_and_png(fixture_store, serve, page):
    """The snapshot's matrix heatmaps (per-layer gradient variance, head-gradient covariance) too."""
    from pathlib import Path

    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/snapshot/1")
    page.locator("#snap-head-cov").wait_for()
    page.locator("#snap-head-cov").hover()
    with page.expect_download() as got:
        page.click("#snap-head-cov >> xpath=.. >> .ct-csv")
    assert got.value.suggested_filename == f"{run_id}-snapshot1-head-cov.csv"
    rows = [r.split(",") for r in Path(got.value.path()).read_text(encoding="utf-8").splitlines()]
    labels = rows[0][1:]
    assert rows[0][0] == "" and len(labels) >= 2 and [r[0] for r in rows[1:]] == labels  # a square matrix
    assert all(len(r) == len(labels) + 1 for r in rows[1:]) and float(rows[1][1]) >= 0  # a variance on the diagonal
    page.locator("#snap-layer-var").hover()
    with page.expect_download() as got:
        page.click("#snap-layer-var >> xpath=.. >> .ct-png")
    assert got.value.suggested_filename == f"{run_id}-snapshot1-layer-var.png"
    assert Path(got.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_distribution_heatmaps_label_their_bins_with_round_values(fixture_store, serve, page):
    """Bin centres (17.81, 15.31, 12.81...) are no axis labels: a few round values, each on the bin
    that holds it."""
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.locator("#chart-reward").wait_for()
    out = page.evaluate("""async () => {
      const d = await import("/static/js/charts_dist.js");
      return { length: d.binTickLabels(5.31, 0.52, 24), reward: d.binTickLabels(-0.12, 0.05, 24),
               flat: d.binTickLabels(3, 0, 24) };
    }""")
    assert [v for v in out["length"] if v] == ["7.5", "10", "12.5", "15", "17.5"]  # 5.31 .. 17.79
    assert out["length"][int((10 - 5.31) / 0.52)] == "10"
    assert [v for v in out["reward"] if v] == ["0", "0.25", "0.5", "0.75", "1"]  # -0.12 .. 1.08
    assert set(out["flat"]) == {""}  # one value: no bins to label
