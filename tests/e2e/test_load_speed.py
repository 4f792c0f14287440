"""How the UI loads (issue 29, docs/ui.md "Loading"): the structure that makes the first chart
fast, not a timing (the machine is shared and noisy; benchmarks/ui.py part 4 times it).

- every ES module is named by a ``<link rel="modulepreload">`` of index.html, so a cold load finds
  all scripts in the HTML (2 waves: the document, then everything) instead of import by import;
- JS, CSS and JSON responses of some size are gzip-encoded when the browser accepts it; the live
  stream is not (an encoder would hold its events back), and its first event arrives while it
  stays open;
- the vendored chart library's URL carries its version and is cached for a year; modules are
  revalidated by ETag (a 304 without a body).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from conftest import ROOT

STATIC = ROOT / "src/rlcockpit/server/static"


def cold_requests(page, url: str) -> dict[str, dict]:
    """Load ``url`` in ``page`` (a fresh context: nothing cached) and return each request by id:
    url, resource type, who started it (the DevTools protocol's initiator), response headers."""
    items: dict[str, dict] = {}
    cdp = page.context.new_cdp_session(page)

    def sent(e):
        items[e["requestId"]] = {"url": e["request"]["url"], "type": e.get("type"),
                                 "initiator": e["initiator"]["type"], "headers": {}}

    def received(e):
        if e["requestId"] in items:
            items[e["requestId"]]["headers"] = {k.lower(): v for k, v in e["response"]["headers"].items()}

    cdp.on("Network.requestWillBeSent", sent)
    cdp.on("Network.responseReceived", received)
    cdp.send("Network.enable")
    page.goto(url)
    page.wait_for_function("() => Number(document.getElementById('chart-reward')?.dataset.points) > 0")
    page.wait_for_function("() => document.querySelectorAll('#metric-sections details').length > 0")
    page.wait_for_timeout(300)  # the live stream opens after the first charts
    return items


def test_every_module_is_preloaded_so_scripts_load_in_one_wave(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    html = httpx.get(f"{server.url}/").text
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)"', html))
    requests = cold_requests(page, f"{server.url}/#/run/{run_id}/dashboard")
    scripts = [r for r in requests.values() if r["type"] == "Script"]
    found_by_import = [r["url"] for r in scripts if r["initiator"] != "parser"]
    assert not found_by_import, f"modules found only by an import (a later wave): {found_by_import}"
    fetched = {re.sub(r"^https?://[^/]+|\?.*$", "", r["url"]) for r in scripts}
    modules = fetched - {"/static/js/boot.js", "/static/js/app.js", "/static/vendor/echarts.min.js"}
    assert modules and modules <= preloaded
    # the list is read from the files, so a module on disk that app.js imports is in it
    on_disk = {f"/static/{p.relative_to(STATIC).as_posix()}" for p in (STATIC / "js").rglob("*.js")}
    assert preloaded <= on_disk and "/static/js/views/dashboard.js" in preloaded


def test_js_and_json_are_gzipped_the_stream_is_not(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    requests = cold_requests(page, f"{server.url}/#/run/{run_id}/dashboard")

    def encoding(pattern: str) -> list[str]:
        return [r["headers"].get("content-encoding", "") for r in requests.values() if re.search(pattern, r["url"])]

    assert encoding(r"/static/vendor/echarts\.min\.js\?v=") == ["gzip"]
    assert set(encoding(r"/static/js/(charts|views/dashboard)\.js$")) == {"gzip"}
    assert set(encoding(r"/api/runs/[^/]+/series\?names=reward%2Fmean%2Ckl")) == {"gzip"}
    assert encoding(r"/api/runs/[^/]+/stream") and set(encoding(r"/api/runs/[^/]+/stream")) == {""}


def test_the_stream_is_neither_compressed_nor_buffered(fixture_store, serve):
    uri, run_id = fixture_store
    server = serve(uri)
    headers = {"Accept-Encoding": "gzip"}
    with httpx.stream("GET", f"{server.url}/api/runs/{run_id}/stream?after_step=0", headers=headers,
                      timeout=20) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in resp.headers
        first = next(line for line in resp.iter_lines() if line.startswith("data:"))
        assert first.startswith("data: {") and not resp.is_closed  # while the stream is open


def test_cache_headers_version_the_chart_library_and_revalidate_modules(fixture_store, serve):
    uri, _ = fixture_store
    server = serve(uri)
    with httpx.Client(base_url=server.url, headers={"Accept-Encoding": "gzip"}) as c:
        html = c.get("/")
        assert html.headers["cache-control"] == "no-cache"
        vendor = re.search(r'src="(/static/vendor/echarts\.min\.js\?v=\w+)"', html.text)[1]
        lib = c.get(vendor)
        assert lib.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert lib.headers["content-encoding"] == "gzip" and lib.headers["vary"] == "Accept-Encoding"
        assert len(lib.content) == (STATIC / "vendor/echarts.min.js").stat().st_size  # httpx decodes
        module = c.get("/static/js/charts.js")
        assert module.headers["cache-control"] == "no-cache" and module.headers["etag"]
        again = c.get("/static/js/charts.js", headers={"If-None-Match": module.headers["etag"]})
        assert again.status_code == 304 and not again.content
        plain = c.get("/static/js/charts.js", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        assert plain.content == Path(STATIC / "js/charts.js").read_bytes()
