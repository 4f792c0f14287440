"""Part 3 of benchmarks/ui.py: the dashboard in Chromium over the big fixture (issue 16 targets).

- ``first_chart_ms``: from the start of a full page load of the run's dashboard to the reward
  chart drawing its points (a MutationObserver on the chart's ``data-points``, read against
  ``performance.now()``, whose zero is the navigation start). Median of ``loads`` loads; target
  <= 1000 ms.
- ``panel_ms``: one panel of one metric over **all runs** of the store (what *+ Add panel* makes:
  ``/api/compare`` of every run, then the chart drawn, then one animation frame), for metrics
  picked evenly over the run's names; p50 / p95 / max; target: max <= 300 ms.
- ``section_ms``: opening the largest "All metrics" section (one ``/series`` request, every chart
  drawn), for information.

The server is the same ``rlcockpit serve`` process part 1 timed (its own process, loopback).
"""

from __future__ import annotations

import statistics
from typing import Any

from _ui_browser import CHROMIUM_ARGS, unavailable

FIRST_CHART_TARGET_MS = 1000.0
PANEL_TARGET_MS = 300.0

WATCH_FIRST = """() => {
  window.__firstChart = null;
  const seen = () => {
    const el = document.getElementById("chart-reward");
    if (el && Number(el.dataset.points) > 0 && window.__firstChart === null) window.__firstChart = performance.now();
  };
  new MutationObserver(seen).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-points"], childList: true});
}"""

PANEL = """async ([name, runs, i]) => {
  const ex = window.rlcockpit.dashboard.explorer;
  const t0 = performance.now();
  const box = ex.panelBox({id: `bench${i}`, title: name, metrics: [name], runs});
  document.getElementById("user-panels").append(box);
  await box.ready;
  await new Promise((r) => requestAnimationFrame(() => r()));
  const ms = performance.now() - t0;
  const err = box.querySelector(".state-error");
  return [ms, Number(box.querySelector(".chart").dataset.points), err ? err.textContent : null];
}"""

SECTION = """async () => {
  const dets = [...document.querySelectorAll("#metric-sections details")];
  const det = dets.sort((a, b) => b.names.length - a.names.length)[0];
  const t0 = performance.now();
  det.open = true;
  const charts = () => [...det.querySelectorAll(".chart")];
  while (!(charts().length === det.names.length && charts().every((c) => Number(c.dataset.points) > 0))) {
    if (performance.now() - t0 > 20000) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => requestAnimationFrame(() => r()));
  return [det.dataset.section, det.names.length, performance.now() - t0];
}"""


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def time_dashboard(base_url: str, run_id: str, loads: int = 5, panels: int = 15) -> dict[str, Any]:
    """Time the dashboard's first chart and one-metric panels over all runs (see module doc)."""
    why = unavailable()
    if why:
        return {"skipped": why}
    import shutil

    import httpx
    from playwright.sync_api import sync_playwright

    runs = [r["run_id"] for r in httpx.get(f"{base_url}/api/runs", timeout=60).json()["items"]]
    names = httpx.get(f"{base_url}/api/runs/{run_id}", timeout=60).json()["metric_names"]
    picked = [names[round(i * (len(names) - 1) / max(1, panels - 1))] for i in range(panels)]
    firsts, panel_ms, points, errors = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.add_init_script(f"({WATCH_FIRST})()")
        page.goto(f"{base_url}/?warm=1#/run/{run_id}/dashboard")  # warm-up: caches, connections
        page.wait_for_function("() => window.__firstChart !== null", timeout=60000)
        for i in range(loads):
            page.goto(f"{base_url}/?load={i}#/run/{run_id}/dashboard")
            page.wait_for_function("() => window.__firstChart !== null", timeout=60000)
            firsts.append(page.evaluate("() => window.__firstChart"))
        page.wait_for_function("() => window.rlcockpit.dashboard && window.rlcockpit.dashboard.explorer", timeout=60000)
        for i, name in enumerate(picked):
            ms, n, err = page.evaluate(PANEL, [name, runs, i])
            panel_ms.append(ms)
            points.append(n)
            if err or not n:
                errors.append(f"{name}: {err or 'no points'}")
        section, count, section_ms = page.evaluate(SECTION)
        browser.close()
    first = statistics.median(firsts)
    return {"first_chart_ms": round(first, 1), "first_chart_all_ms": [round(x, 1) for x in firsts],
            "first_chart_target_ms": FIRST_CHART_TARGET_MS, "first_chart_meets_target": first <= FIRST_CHART_TARGET_MS,
            "panel_runs": len(runs), "panels_timed": len(panel_ms),
            "panel_p50_ms": round(statistics.median(panel_ms), 1), "panel_p95_ms": round(_pct(panel_ms, 0.95), 1),
            "panel_max_ms": round(max(panel_ms), 1), "panel_target_ms": PANEL_TARGET_MS,
            "panel_meets_target": max(panel_ms) <= PANEL_TARGET_MS, "panel_min_points": min(points),
            "panel_errors": errors[:5],
            "section": section, "section_charts": count, "section_ms": round(section_ms, 1)}
