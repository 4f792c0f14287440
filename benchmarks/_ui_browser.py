"""Part 2 of benchmarks/ui.py (the UI helper's): how long a new step takes from ``run.log`` in a
live run to its point on the dashboard's reward chart, measured in Chromium.

A run logs through the real SDK (``rlcockpit.init`` with its default writer options) into a fresh
SQLite store; ``rlcockpit serve``'s app (default settings: SSE poll every 0.25 s) runs under
uvicorn on loopback; Debian's chromium (Playwright) shows the run's dashboard. For each trial the
script notes the wall clock, logs and commits one step, and the page records the wall clock at
which the reward chart rendered that step (a MutationObserver on the chart's ``data-last-step``).
Trials are spaced by random pauses so they land at every phase of the writer's flush interval
and the stream's poll. The chain measured: SDK queue → writer thread flush (≤ 1 s) → SQLite →
SSE poll → EventSource → chart append (coalesced render, 40 ms). Target: ≤ 2 s.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import free_port

TARGET_S = 2.0
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
WATCH = """() => {
  window.__seen = {};
  const el = document.getElementById("chart-reward");
  new MutationObserver(() => { window.__seen[el.dataset.lastStep] = Date.now(); })
    .observe(el, {attributes: true, attributeFilter: ["data-last-step"]});
}"""


def _metrics(step: int, rng: random.Random) -> dict[str, float]:
    return {"reward/mean": 0.3 + 0.001 * step + rng.gauss(0, 0.02), "kl/mean": 0.01 * step,
            "policy/entropy": 2.0 - 0.001 * step, "policy/loss": rng.gauss(0, 0.05),
            "response/length_mean": 40 + rng.random(), "grad/norm/actor": 1 + rng.random()}


def unavailable() -> str | None:
    """Why the browser part cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "not installed: playwright (pip install -e '.[dev]')"
    if not shutil.which("chromium"):
        return "not installed: chromium (make test installs it, or apt-get install chromium)"
    return None


@contextlib.contextmanager
def serve(uri: str) -> Iterator[str]:
    """The cockpit app with default settings under uvicorn on a free loopback port."""
    import uvicorn

    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ServerSettings(store=uri, port=port)),
                                           host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def time_step_to_chart(trials: int = 15, seed: int = 0) -> dict[str, Any]:
    """Latency from ``run.log`` + ``run.commit`` to the step on the reward chart, ``trials`` times."""
    from playwright.sync_api import sync_playwright

    import rlcockpit

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'live.db'}"
        run = rlcockpit.init(project="bench", name="ui-live", store=uri)
        try:
            for step in range(1, 6):  # a few steps so the dashboard has a chart to extend
                run.log(step, _metrics(step, rng))
                run.commit(step)
            run.flush()
            with serve(uri) as base, sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{base}/#/run/{run.run_id}/dashboard")
                page.wait_for_function("() => document.getElementById('chart-reward')?.dataset.lastStep === '5'",
                                       timeout=30000)
                page.evaluate(WATCH)
                latencies = [_one_trial(page, run, step, rng) for step in range(6, 6 + trials)]
                browser.close()
        finally:
            run.close()
    return _summary(latencies)


def _one_trial(page: Any, run: Any, step: int, rng: random.Random) -> float:
    time.sleep(rng.uniform(0.2, 1.3))  # land anywhere in the flush interval and the poll period
    t0 = time.time()
    run.log(step, _metrics(step, rng))
    run.commit(step)
    page.wait_for_function(f"() => window.__seen['{step}'] !== undefined", timeout=30000)
    return page.evaluate(f"() => window.__seen['{step}']") / 1000 - t0


def _summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"trials": len(latencies), "median_s": round(statistics.median(latencies), 3),
            "p90_s": round(p90, 3), "max_s": round(max(latencies), 3), "min_s": round(min(latencies), 3),
            "target_s": TARGET_S, "meets_target": max(latencies) <= TARGET_S}


def live_step_to_chart(trials: int) -> dict[str, Any]:
    """Part 2 for benchmarks/ui.py: print one line and return the JSON headline entry."""
    reason = "skipped (--live-trials 0)" if trials <= 0 else unavailable()
    if reason:
        print(f"live step -> dashboard chart: {reason}")
        return {"status": reason}
    out = {"status": "ok", **time_step_to_chart(trials)}
    print(f"live step -> dashboard chart (Chromium, {out['trials']} steps): median {out['median_s']:.2f} s, "
          f"p90 {out['p90_s']:.2f} s, max {out['max_s']:.2f} s (target <= {TARGET_S:.0f} s)")
    return out


if __name__ == "__main__":  # part 2 alone: python benchmarks/_ui_browser.py [trials]
    import json
    import sys

    print(json.dumps(live_step_to_chart(int(sys.argv[1]) if len(sys.argv) > 1 else 15)))
