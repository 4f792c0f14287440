"""A change is context, not a cause, in the browser: a live-parameter change made without a ticket
(the fault injector here) is a mark on every step chart with its label, in its own colour, on a
read-only cockpit; the Alerts page shows it before the incident that followed ("changes before this
incident") and under the finding, in English and Chinese — while the incident is named by the KL
behaviour the detector saw."""

from __future__ import annotations

import random

import pytest

import rlcockpit
from conftest import wait_for
from rlcockpit.diagnostics import DiagnosticsConfig, Engine, registry

CHANGE_STEP = 12
CHANGE_COLOR = "#0d9488"
MARKS = """() => (window.rlcockpit.dashboard?.charts?.kl?.chart.getOption().series[0]?.markLine?.data || [])
    .filter((m) => m.xAxis !== undefined).map((m) => [m.xAxis, m.name, m.lineStyle.color])"""


@pytest.fixture(scope="module")
def changed_store(tmp_path_factory) -> tuple[str, str]:
    """A 30-step run: actor_lr 5e-05 → 0.005 by the fault injector after step 12, KL at 2.4× its
    target from step 14; the findings are the real engine's, fed the same change and metrics."""
    import storekit

    uri = f"sqlite:///{tmp_path_factory.mktemp('changes') / 'runs.db'}"
    rng = random.Random(0)
    engine = Engine.from_config(DiagnosticsConfig(disabled=tuple(n for n in registry.available() if n != "kl_tiers")))
    run = rlcockpit.init(project="e2e", name="changed-run", store=uri, config={"algo": "ppo"})
    for step in range(1, 31):
        metrics = {**storekit.step_metrics(step, rng), "kl/mean": 1.2 if step >= 14 else 0.3, "kl/target": 0.5}
        run.log(step, metrics)
        for f in engine.observe(step, metrics, wall_time=float(step)):
            run.finding(step=f.step, detector=f.detector, severity=f.severity, message=f.message,
                        evidence=f.evidence, patterns=f.patterns, status=f.status, incident=f.incident)
        if step == CHANGE_STEP:
            payload = {"requested_by": "fault-injector", "reason": "lr_spike", "step": step,
                       "before": {"actor_lr": 5e-05}, "after": {"actor_lr": 0.005}}
            run.event(step, "live_params_applied", payload)
            engine.note_live_params(step, payload)
        run.commit(step)
    run.close()
    return uri, run.run_id


def test_a_change_is_marked_on_the_charts_and_shown_before_the_incident(changed_store, serve, page):
    uri, run_id = changed_store
    server = serve(uri)  # no control plane: the change marks come from the run's events
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.locator("#chart-kl").wait_for()
    wait_for(lambda: page.evaluate(MARKS) == [[CHANGE_STEP, "actor_lr → 0.005", CHANGE_COLOR]], timeout=20,
             what="the change mark on the KL chart")

    page.goto(f"{server.url}/#/run/{run_id}/alerts")
    card = page.locator(".incident")
    card.wait_for()
    summary = card.locator(".incident-summary").inner_text()
    assert summary.startswith(" KL") or summary.strip().startswith("KL"), summary  # the behaviour first
    assert summary.endswith(f"(after actor_lr 5e-05 → 0.005 at step {CHANGE_STEP})"), summary
    context = card.locator(".incident-changes").inner_text()
    assert context == f"Changes before this incident: actor_lr 5e-05 → 0.005 at step {CHANGE_STEP}, by fault-injector"
    card.locator("details summary").click()
    raised = card.locator("li.finding").first
    assert raised.locator(".finding-changes .change").get_attribute("data-step") == str(CHANGE_STEP)
    assert "Changes before this finding" in raised.locator(".finding-changes").inner_text()
    assert "recent_changes" not in raised.locator("table.evidence").inner_text()  # a line, not a JSON row

    page.click("#lang-toggle")
    page.locator(".tab.active:has-text('告警')").wait_for()
    card = page.locator(".incident")
    card.locator(".incident-changes").wait_for()
    assert card.locator(".incident-changes").inner_text() == (
        f"此事件之前的参数变更: 第 {CHANGE_STEP} 步 actor_lr 5e-05 → 0.005，由 fault-injector 修改")
    assert card.locator(".incident-summary").inner_text().endswith(
        f"（在第 {CHANGE_STEP} 步 actor_lr 5e-05 → 0.005 之后）")
