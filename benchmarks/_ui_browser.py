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


# --- cold loads (issue 29): navigation -> first chart in a fresh browser context ---------------

COLD_TARGET_MS = 1000.0
WATCH_FIRST_CHART = """() => {
  window.__firstChart = null;
  const seen = () => {
    const el = document.getElementById("chart-reward");
    if (el && Number(el.dataset.points) > 0 && window.__firstChart === null) window.__firstChart = performance.now();
  };
  new MutationObserver(seen).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-points"], childList: true});
}"""


class _Requests:
    """What the DevTools protocol says about a page's requests: who started each one (the HTML
    parser, or a script: an ES module's import), its Content-Encoding and its bytes on the wire."""

    def __init__(self, cdp: Any) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        cdp.on("Network.requestWillBeSent", self._sent)
        cdp.on("Network.responseReceived", self._received)
        cdp.on("Network.loadingFinished", self._finished)
        cdp.send("Network.enable")

    def _sent(self, e: dict[str, Any]) -> None:
        stack = (e.get("initiator") or {}).get("stack") or {}
        frames = stack.get("callFrames") or [{}]
        self.items[e["requestId"]] = {"url": e["request"]["url"], "type": e.get("type"),
                                      "initiator": (e.get("initiator") or {}).get("type"),
                                      "by": (e.get("initiator") or {}).get("url") or frames[0].get("url")}

    def _received(self, e: dict[str, Any]) -> None:
        headers = {k.lower(): v for k, v in e["response"].get("headers", {}).items()}
        self.items.get(e["requestId"], {}).update(status=e["response"].get("status"),
                                                  encoding=headers.get("content-encoding", ""))

    def _finished(self, e: dict[str, Any]) -> None:
        self.items.get(e["requestId"], {}).update(bytes=int(e.get("encodedDataLength", 0)))

    def waves(self) -> int:
        """Longest chain of requests a request had to wait for (the document is wave 1, what its
        HTML names is wave 2, a module imported by a wave-2 module wave 3...)."""
        by_url = {r["url"].split("#")[0]: r for r in self.items.values()}
        depth: dict[str, int] = {}

        def wave(r: dict[str, Any], seen: int = 0) -> int:
            if r["type"] == "Document" or seen > 50:
                return 1
            if r["url"] not in depth:
                parent = by_url.get((r.get("by") or "").split("#")[0])
                depth[r["url"]] = 2 if parent is None or parent is r else 1 + wave(parent, seen + 1)
            return depth[r["url"]]

        return max((wave(r) for r in self.items.values() if r["type"] in ("Document", "Script")), default=0)


def cold_load(browser: Any, url: str) -> dict[str, Any]:
    """One load of ``url`` in a fresh context (no cache, no cookies, nothing stored): ms from the
    navigation start to the reward chart's first points; bytes and requests up to 1 s later."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        requests = _Requests(context.new_cdp_session(page))
        page.add_init_script(f"({WATCH_FIRST_CHART})()")
        page.goto(url)
        page.wait_for_function("() => window.__firstChart !== null", timeout=60000)
        first = page.evaluate("() => window.__firstChart")
        page.wait_for_timeout(1000)
        done = [r for r in requests.items.values() if "bytes" in r]
        scripts = [r for r in done if r["type"] == "Script"]
        json_ = [r for r in done if "/api/" in r["url"] and r["type"] in ("Fetch", "XHR")]
        return {"first_chart_ms": first, "bytes": sum(r["bytes"] for r in done), "requests": len(done),
                "script_waves": requests.waves(), "scripts": len(scripts),
                "scripts_by_import": sum(r["initiator"] == "script" for r in scripts),
                "gzip_scripts": sum(r.get("encoding") == "gzip" for r in scripts),
                "gzip_json": sum(r.get("encoding") == "gzip" for r in json_), "json": len(json_)}
    finally:
        context.close()


def time_cold_loads(targets: dict[str, str], run_id: str, loads: int = 5) -> dict[str, Any]:
    """``loads`` cold loads of the run's dashboard on each server of ``targets`` (label -> base
    URL; e.g. this tree's and a baseline commit's, over the same store), taken in turn so both
    see the same machine load; one load each first, not counted (the servers' own caches and the
    OS's page cache warm, as for a user who is not the first to open the run)."""
    from playwright.sync_api import sync_playwright

    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in targets}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        for i in range(loads + 1):
            for label, base in targets.items():
                try:
                    one = cold_load(browser, f"{base}/#/run/{run_id}/dashboard")
                except Exception as err:  # noqa: BLE001 (a load that never drew is counted, not fatal)
                    one = {"failed": f"{type(err).__name__}: {str(err)[:200]}"}
                if i:
                    runs[label].append(one)
        browser.close()
    return {label: _cold_summary(r) for label, r in runs.items()}


def _cold_summary(all_runs: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for r in all_runs if "failed" not in r]
    failed = [r["failed"] for r in all_runs if "failed" in r]
    if not runs:
        return {"loads": 0, "failed": failed}
    firsts = [r["first_chart_ms"] for r in runs]
    last = runs[-1]
    return {"loads": len(runs), "first_chart_ms": round(statistics.median(firsts), 1),
            "first_chart_min_ms": round(min(firsts), 1), "first_chart_max_ms": round(max(firsts), 1),
            "first_chart_all_ms": [round(x, 1) for x in firsts], "target_ms": COLD_TARGET_MS,
            "meets_target": statistics.median(firsts) <= COLD_TARGET_MS,
            "bytes": round(statistics.median(r["bytes"] for r in runs)), "failed": failed,
            **{k: last[k] for k in ("requests", "script_waves", "scripts", "scripts_by_import",
                                    "gzip_scripts", "json", "gzip_json")}}


def cold_first_chart(targets: dict[str, str], run_id: str, loads: int) -> dict[str, Any]:
    """Cold loads for benchmarks/ui.py: print one line per server and return the JSON entry."""
    reason = "skipped (--cold-loads 0)" if loads <= 0 else unavailable()
    if reason:
        print(f"cold load -> first chart: {reason}")
        return {"status": reason}
    out: dict[str, Any] = {"status": "ok", **time_cold_loads(targets, run_id, loads)}
    for label in targets:
        o = out[label]
        if not o["loads"]:
            print(f"cold load -> first chart [{label}]: every load failed: {o['failed'][:1]}")
            continue
        print(f"cold load -> first chart [{label}] (Chromium, fresh context, {o['loads']} loads): median "
              f"{o['first_chart_ms']:.0f} ms ({o['first_chart_min_ms']:.0f}-{o['first_chart_max_ms']:.0f}; "
              f"target <= {COLD_TARGET_MS:.0f} ms), {o['bytes'] / 1e6:.2f} MB in {o['requests']} requests, "
              f"{o['script_waves']} waves of scripts ({o['scripts_by_import']} of {o['scripts']} found by an "
              f"import), gzip: {o['gzip_scripts']}/{o['scripts']} scripts, {o['gzip_json']}/{o['json']} API calls")
    return out


if __name__ == "__main__":  # part 2 alone: python benchmarks/_ui_browser.py [trials]
    import json
    import sys

    print(json.dumps(live_step_to_chart(int(sys.argv[1]) if len(sys.argv) > 1 else 15)))
