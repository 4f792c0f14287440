"""The shipped Grafana dashboard (deploy/grafana/rlcockpit-dashboard.json) uses only metrics we
export: a live run is served by `rlcockpit serve`'s /metrics, a real Prometheus (Debian's, on
loopback) scrapes it, and every PromQL expression of every panel answers with finite data."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.parse

import pytest

import rlcockpit
from ops_testkit import DEPLOY, get_json, promql, start_prometheus, wait_for
from rlcockpit.integrations.prometheus import StoreExporter
from server_testkit import ServerThread

DASHBOARD = DEPLOY / "grafana" / "rlcockpit-dashboard.json"
RUN = "graf-1"


def step_metrics(step: int) -> dict[str, float]:
    return {"reward/mean": 0.1 * step, "reward/std": 0.2, "kl/mean": 0.01 * step, "kl/target": 0.05,
            "grad/norm/layer/embedding": 1.0, "grad/norm/layer/block_0": 0.5, "grad/norm/actor": 1.2,
            "reward/uncertainty/mean": 0.1, "reward/raw/mean": 0.3, "reward/gated_frac": 0.05,
            "policy/entropy": 2.0, "policy/clip_frac": 0.1, "response/length_mean": 20.0,
            "perf/tokens_per_s": 500.0, "cost/tokens_generated": 640.0, "cost/usd_per_step": 0.001,
            "time/rollout_s": 0.3, "time/update_s": 0.6}


def write_steps(uri: str, steps: range, pause: float) -> None:
    with rlcockpit.init(project="e2e", name="grafana", store=uri, run_id=RUN, resume=steps.start > 1,
                        flush_interval_s=0.05) as run:
        for step in steps:
            for phase, seconds in (("ROLLOUT", 0.3), ("SCORE", 0.1), ("UPDATE", 0.6)):
                run.phase(step, phase, "started")
                run.phase(step, phase, "finished", duration_s=seconds * (1 + step % 3))
            run.log(step, step_metrics(step))
            run.log_histogram(step, "advantage/hist", [-1.2, -0.3, 0.0, 0.1, 0.4, 2.2], bins=6)
            if step % 4 == 0:
                run.finding(step=step, detector="kl_tiers", severity="yellow", message="KL 1.6x target")
            run.commit(step)
            time.sleep(pause)


def expressions() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    out = []
    for p in board["panels"]:
        for t in p["targets"]:
            expr = t["expr"].replace("$run", RUN).replace("$__rate_interval", "1m")
            out.append((f'{p["title"]} / {t["refId"]}', expr))
    return out


@pytest.mark.slow  # starts Debian's Prometheus (make test installs it)
def test_every_panel_expression_answers_with_data(tmp_path) -> None:
    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    uri = f"sqlite:///{tmp_path / 'g.db'}"
    write_steps(uri, range(1, 4), 0)
    app = create_app(ServerSettings(store=uri), metrics=StoreExporter(refresh_s=0))
    with ServerThread(app) as base:
        prom = start_prometheus(tmp_path, [base.removeprefix("http://")], scrape_ms=500)
        wait_for(lambda: promql(prom, 'up{job="rlcockpit"} == 1'), what="the first scrape")
        writer = threading.Thread(target=write_steps, args=(uri, range(4, 16), 0.4))
        writer.start()
        try:
            writer.join()
            exprs = expressions()
            assert len(exprs) >= 18
            for title, expr in exprs:
                result = wait_for(lambda e=expr: _finite(promql(prom, e)), timeout=20, what=title)
                assert result, title
            runs = get_json(f"{prom.url}/api/v1/label/run/values?"
                            + urllib.parse.urlencode({"match[]": "rlcockpit_run_info"}))["data"]
            assert runs == [RUN]  # the dashboard's $run variable
            # the exporter reads the steps written since its last read: the newest value is there
            wait_for(lambda: [r for r in promql(prom, f'rlcockpit_reward_mean{{run="{RUN}"}}')
                              if float(r["value"][1]) == pytest.approx(1.5)], what="step 15's reward")
            heat = promql(prom, f'rlcockpit_advantage_distribution_bucket{{run="{RUN}",le="+Inf"}}')
            assert float(heat[0]["value"][1]) == 6
        finally:
            writer.join()
            prom.stop()


def _finite(result: list[dict]) -> list[dict]:
    return [r for r in result if math.isfinite(float(r["value"][1]))]


def test_the_dashboard_json_is_what_the_builder_writes() -> None:
    import runpy

    built = runpy.run_path(str(DEPLOY / "grafana" / "build_dashboard.py"))["DASHBOARD"]
    assert json.loads(DASHBOARD.read_text()) == json.loads(json.dumps(built))


@pytest.mark.parametrize("kind", ["heatmap", "timeseries", "table"])
def test_the_seed_panels_are_there(kind) -> None:
    titles = {p["title"]: p["type"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    for needed in ("Advantage distribution", "Per-layer gradient norm", "Reward uncertainty vs quality",
                   "KL tiers", "Phase time"):
        assert needed in titles
    assert kind in titles.values()
