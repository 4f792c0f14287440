"""The read API of docs/server.md: every route's status and shape, 404 / 422 in the canonical
error shape, wildcards and downsampling, non-finite numbers as null, the access hook."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from fastapi.testclient import TestClient

from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from server_testkit import LOCAL
from storekit import OTHER, PER_STEP, RUN, STEPS, build_store


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("api"))


@pytest.fixture
def client(store_uri):
    with TestClient(create_app(ServerSettings(store=store_uri)), base_url=LOCAL) as c:
        yield c


def ok(client, url: str) -> dict:
    r = client.get(url)
    assert r.status_code == 200, (url, r.text)
    return r.json()


def error(client, url: str, status: int, code: str) -> dict:
    r = client.get(url)
    assert r.status_code == status, (url, r.text)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


# --------------------------------------------------------------------------- runs and metrics


def test_health_and_runs(client, store_uri):
    assert ok(client, "/api/health") == {"status": "ok", "version": "0.1.0", "store": store_uri}
    items = ok(client, "/api/runs")["items"]
    assert [r["run_id"] for r in items] == [OTHER, RUN]  # newest first
    assert set(items[1]) == {"run_id", "project", "name", "status", "started_at", "ended_at",
                             "last_step", "heartbeat_at"}
    assert items[1]["status"] == "finished" and items[1]["last_step"] == STEPS - 1
    with_config = ok(client, "/api/runs?config=true")["items"]
    assert with_config[1]["config"] == {"lr": 1e-5} and set(with_config[1]) == set(items[1]) | {"config"}


def test_run_summary(client):
    body = ok(client, f"/api/runs/{RUN}")
    assert body["run"]["config"] == {"lr": 1e-5}
    assert (body["steps"], body["first_step"], body["last_step"]) == (STEPS, 0, STEPS - 1)
    assert "reward/mean" in body["metric_names"] and body["histogram_names"] == ["reward/hist"]
    assert body["samples"] == STEPS * PER_STEP
    assert body["findings_by_severity"] == {"yellow": 1, "red": 1}
    assert body["dropped_total"] == 0


def test_run_summary_gives_catalog_units_for_axis_titles(client):
    units = ok(client, f"/api/runs/{RUN}")["metric_units"]
    assert units and all(isinstance(u, str) and u for u in units.values())
    assert set(units) <= set(ok(client, f"/api/runs/{RUN}")["metric_names"])


def test_project_layout_round_trips_and_refuses_bad_documents(client):
    assert ok(client, "/api/projects/p9/layout") == {"project": "p9", "layout": None, "updated_at": None,
                                                     "updated_by": None}
    panels = {"panels": [{"title": "KL", "metrics": ["kl/mean", "kl/coef"], "runs": [RUN, OTHER]}]}
    saved = client.put("/api/projects/p9/layout", json=panels)
    assert saved.status_code == 200 and saved.json()["layout"] == panels
    assert ok(client, "/api/projects/p9/layout")["layout"] == panels
    assert ok(client, "/api/projects/other/layout")["layout"] is None
    for bad in ({"panels": "x"}, {"panels": [1]}, {"panels": [{"metrics": "kl/mean"}]},
                {"panels": [{"metrics": ["x" * 70000]}]}, {"panels": [{"metrics": [1]}]},
                {"panels": [{"log": "yes"}]}, {"runs": {"r": {"tags": "a"}}}):
        r = client.put("/api/projects/p9/layout", json=bad)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter", (bad, r.text)
    assert ok(client, "/api/projects/p9/layout")["layout"] == panels


def test_series_wildcards_and_nan_as_null(client):
    body = ok(client, f"/api/runs/{RUN}/series?names=reward/category/*,kl/mean,missing/x"
                      "&max_points=1000")
    assert list(body["series"]) == ["reward/category/chat/mean", "reward/category/math/mean",
                                    "kl/mean", "missing/x"]
    kl = body["series"]["kl/mean"]
    assert kl["steps"] == list(range(STEPS)) and kl["downsampled"] is False
    assert kl["values"][5] is None and kl["values"][6] == pytest.approx(0.06)
    assert len(kl["wall_times"]) == STEPS
    assert body["series"]["missing/x"] == {"steps": [], "values": [], "wall_times": [],
                                           "downsampled": False}


def test_series_downsampled_keeps_the_spike(client):
    s = ok(client, f"/api/runs/{RUN}/series?names=reward/mean&max_points=10")["series"]
    curve = s["reward/mean"]
    assert curve["downsampled"] is True and len(curve["steps"]) <= 10
    assert 17 in curve["steps"]  # the one-step spike survives
    assert ok(client, f"/api/runs/{RUN}/series?names=reward/mean&step_min=20&step_max=22"
                      )["series"]["reward/mean"]["steps"] == [20, 21, 22]


def test_latest_and_histograms_and_categories(client):
    body = ok(client, f"/api/runs/{RUN}/latest?names=reward/mean,kl/*")
    assert body["step"] == STEPS - 1
    assert body["values"]["reward/mean"] == {"step": STEPS - 1, "value": pytest.approx(2.9)}
    assert set(body["values"]) == {"reward/mean", "kl/mean"}
    assert "policy/entropy" in ok(client, f"/api/runs/{RUN}/latest")["values"]
    h = ok(client, f"/api/runs/{RUN}/histograms?name=reward/hist&max_points=5")
    assert h["name"] == "reward/hist" and len(h["items"]) == 5
    assert h["items"][0]["step"] == 0 and h["items"][-1]["step"] == STEPS - 1
    first = h["items"][0]
    assert len(first["edges"]) == len(first["counts"]) + 1 and sum(first["counts"]) == 3
    assert ok(client, f"/api/runs/{RUN}/categories") == {"items": ["chat", "math"]}


def test_compare(client):
    body = ok(client, f"/api/compare?runs={RUN},{OTHER}&names=reward/mean&max_points=500")
    assert set(body["runs"]) == {RUN, OTHER}
    assert body["runs"][OTHER]["series"]["reward/mean"]["steps"] == list(range(10))
    assert len(body["runs"][RUN]["series"]["reward/mean"]["steps"]) == STEPS


# --------------------------------------------------------------------------- samples


def test_sample_page_filters_and_token_arrays(client):
    body = ok(client, f"/api/runs/{RUN}/samples?category=math&reward_min=0&limit=5")
    assert body["total"] == STEPS and (body["offset"], body["limit"]) == (0, 5)
    first = body["items"][0]
    assert (first["step"], first["sample_id"]) == (STEPS - 1, 2)  # default order step_desc
    assert first["has_token_arrays"] is True and "logprobs" not in first
    with_arrays = ok(client, f"/api/runs/{RUN}/samples?limit=1&token_arrays=true")["items"][0]
    assert len(with_arrays["token_kl"]) == with_arrays["length"]
    flagged = ok(client, f"/api/runs/{RUN}/samples?flags=truncated&order=step_asc&limit=100")
    assert flagged["total"] == STEPS and all(s["sample_id"] == 3 for s in flagged["items"])
    text = ok(client, f"/api/runs/{RUN}/samples?text=answer%20is%2012")
    assert {(s["step"], s["sample_id"]) for s in text["items"]} == {(12, 1), (12, 3)}


def test_infinite_reward_is_null_in_json(client):
    r = client.get(f"/api/runs/{RUN}/samples/4/3")
    assert r.status_code == 200
    assert "Infinity" not in r.text and "NaN" not in r.text
    body = r.json()
    assert body["reward"] is None and body["tokens"] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert body["ref_logprobs"] == [-0.25] * 6


def test_sample_histogram(client):
    h = ok(client, f"/api/runs/{RUN}/sample_histogram?field=reward&bins=3")
    assert len(h["edges"]) == 4 and h["total"] == STEPS * PER_STEP
    assert h["finite"] == STEPS * PER_STEP - 1  # the +inf reward is not binned


# --------------------------------------------------------------------------- diagnostics


def test_findings_incidents_snapshots(client):
    found = ok(client, f"/api/runs/{RUN}/findings")["items"]
    assert [f["severity"] for f in found] == ["yellow", "red"]
    assert {f["incident"] for f in found} == {"inc-1"} and found[0]["finding_id"]
    assert [f["step"] for f in ok(client, f"/api/runs/{RUN}/findings?severities=red,black"
                                          )["items"]] == [16]
    (inc,) = ok(client, f"/api/runs/{RUN}/incidents")["items"]
    assert inc["incident"] == "inc-1" and inc["severity"] == "red"
    assert (inc["first_step"], inc["last_step"]) == (12, 16)
    assert inc["detectors"] == ["kl_trend", "gradients"]  # the first-moving signal leads
    assert inc["summary"] == "kl/mean moved 6 steps before grad/norm/actor"
    assert inc["summary_zh"] and inc["resolved"] is False and len(inc["findings"]) == 2
    (snap,) = inc["snapshots"]
    assert snap["step"] == 16 and snap["kind"] == "diagnostic"
    listed = ok(client, f"/api/runs/{RUN}/snapshots")["items"]
    assert listed == [{**snap, "incident": "inc-1", "wall_time": listed[0]["wall_time"]}]
    full = ok(client, f"/api/runs/{RUN}/snapshots/{snap['snapshot_id']}")
    assert full["payload"]["grad_norm_hist"]["counts"] == [3] and full["incident"] == "inc-1"


def test_phases_with_current_progress(client):
    body = ok(client, f"/api/runs/{RUN}/phases?limit=3")
    assert [(p["phase"], p["status"]) for p in body["items"]] == [
        ("ROLLOUT", "finished"), ("UPDATE", "started"), ("UPDATE", "running")]
    cur = body["current"]
    assert (cur["phase"], cur["step"], cur["status"], cur["progress"]) == (
        "UPDATE", STEPS - 1, "running", 0.5)
    assert cur["started_at"] == body["items"][1]["wall_time"]
    assert ok(client, f"/api/runs/{OTHER}/phases") == {"items": [], "current": None}


def test_events_and_checkpoints(client):
    assert [e["kind"] for e in ok(client, f"/api/runs/{RUN}/events")["items"]] == [
        "checkpoint", "config_change"]
    only = ok(client, f"/api/runs/{RUN}/events?kinds=config_change")["items"]
    assert only == [{"step": 11, "kind": "config_change", "payload": {"kl.coef": 0.05},
                     "wall_time": only[0]["wall_time"]}]
    assert len(ok(client, f"/api/runs/{RUN}/events?limit=1")["items"]) == 1
    (ckpt,) = ok(client, f"/api/runs/{RUN}/checkpoints")["items"]
    assert (ckpt["step"], ckpt["path"]) == (10, "ckpt-10")


def test_library_search_in_both_languages_and_entry(client):
    en = ok(client, "/api/library/search?q=KL%20divergence%20explodes&k=3")["items"]
    assert 1 <= len(en) <= 3 and en[0]["lang"] == "en"
    assert en[0]["score"] >= en[-1]["score"] and en[0]["title_en"] and en[0]["title_zh"]
    zh = ok(client, "/api/library/search?q=KL%20突增怎么办&k=3")["items"]
    assert zh[0]["lang"] == "zh" and zh[0]["title"]["zh"] == zh[0]["title_zh"]
    entry = ok(client, f"/api/library/{en[0]['id']}")
    assert entry["id"] == en[0]["id"] and entry["fixes"]["en"] and entry["fixes"]["zh"]
    assert "score" not in entry
    error(client, "/api/library/no_such_pattern", 404, "not_found")


# --------------------------------------------------------------------------- errors

RUN_ROUTES = ("", "/series?names=reward/mean", "/latest", "/histograms?name=reward/hist",
              "/samples", "/samples/0/0", "/sample_histogram", "/categories", "/findings",
              "/incidents", "/snapshots", "/snapshots/1", "/phases", "/events", "/checkpoints",
              "/stream")


@pytest.mark.parametrize("suffix", RUN_ROUTES)
def test_unknown_run_is_404_everywhere(client, suffix):
    details = error(client, f"/api/runs/nope{suffix}", 404, "not_found")["details"]
    assert details["run_id"] == "nope"


def test_unknown_sample_snapshot_route(client):
    assert error(client, f"/api/runs/{RUN}/samples/3/99", 404, "not_found")["details"] == {
        "run_id": RUN, "step": 3, "sample_id": 99}
    error(client, f"/api/runs/{RUN}/snapshots/999", 404, "not_found")
    assert "/api" in error(client, "/api/nothing/here", 404, "not_found")["message"]
    error(client, f"/api/compare?runs={RUN},nope&names=reward/mean", 404, "not_found")


@pytest.mark.parametrize(("url", "parameter"), [
    (f"/api/runs/{RUN}/samples?reward_min=2&reward_max=1", "reward_min"),
    (f"/api/runs/{RUN}/samples?step_min=9&step_max=3", "step_min"),
    (f"/api/runs/{RUN}/samples?order=newest", "order"),
    (f"/api/runs/{RUN}/samples?limit=-1", "limit"),
    (f"/api/runs/{RUN}/samples?offset=-3", "offset"),
    (f"/api/runs/{RUN}/samples?reward_min=abc", "reward_min"),
    (f"/api/runs/{RUN}/series?names=reward/mean&max_points=50000", "max_points"),
    (f"/api/runs/{RUN}/series?names=reward/mean&max_points=2", "max_points"),
    (f"/api/runs/{RUN}/series", "names"),
    (f"/api/runs/{RUN}/histograms", "name"),
    (f"/api/runs/{RUN}/sample_histogram?field=prompt", "field"),
    (f"/api/runs/{RUN}/findings?severities=purple", "severities"),
    (f"/api/runs/{RUN}/events?limit=-5", "limit"),
    (f"/api/runs/{RUN}/stream?cursor=garbage", "cursor"),
    ("/api/compare?names=reward/mean", "runs"),
    ("/api/library/search", "q"),
])
def test_bad_parameters_are_422_naming_the_parameter(client, url, parameter):
    err = error(client, url, 422, "invalid_parameter")
    assert err["details"]["parameter"] == parameter
    assert parameter in err["message"]


def test_unexpected_error_is_500_without_traceback(store_uri):
    app = create_app(ServerSettings(store=store_uri))

    def boom() -> None:
        raise RuntimeError("secret internals")

    app.add_api_route("/api/boom", boom)
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as c:
        r = c.get("/api/boom")
    assert r.status_code == 500
    body = r.json()["error"]
    assert body["code"] == "internal_error" and "secret" not in r.text
    assert "Traceback" not in r.text


class DenyAll:
    """An access policy that refuses every viewer (the control plane's hook)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def require(self, request, role: str) -> None:
        from rlcockpit.errors import RlcockpitError

        self.asked.append(role)
        err = RlcockpitError("a viewer token is required", details={"role": role})
        err.code, err.http_status = "unauthorized", 401
        raise err


def test_access_hook_guards_every_read_route(store_uri):
    access = DenyAll()
    with TestClient(create_app(ServerSettings(store=store_uri), access=access), base_url=LOCAL) as c:
        for url in ("/api/runs", f"/api/runs/{RUN}/series?names=reward/mean",
                    f"/api/runs/{RUN}/stream", "/api/library/search?q=kl"):
            assert c.get(url).status_code == 401, url
    assert access.asked == ["viewer"] * 4


# --------------------------------------------------------------------------- openapi, UI, layering


def test_openapi_lists_every_route_with_a_summary(client):
    spec = ok(client, "/openapi.json")
    documented = {(path, m) for path, ops in spec["paths"].items() for m in ops}
    for route in client.app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/api/"):
            for method in route.methods - {"HEAD"}:
                assert (path, method.lower()) in documented, path
                assert spec["paths"][path][method.lower()]["summary"], path
    run = "/api/runs/{run}"
    contract = {"/api/health", "/api/runs", run, "/api/compare", "/api/library/search",
                "/api/library/{pattern_id}", "/api/runs/{run}/samples/{step}/{sample_id}",
                "/api/runs/{run}/snapshots/{snapshot_id}"} | {
        f"{run}/{leaf}" for leaf in ("series", "latest", "histograms", "sample_histogram",
                                     "samples", "categories", "findings", "incidents",
                                     "snapshots", "phases", "events", "checkpoints", "stream")}
    assert contract <= {path for path, _ in documented}  # every route of api.md


def test_static_ui_served_at_root(tmp_path, store_uri):
    (tmp_path / "index.html").write_text("<h1>cockpit</h1>")
    (tmp_path / "app.js").write_text("export const x = 1;")
    app = create_app(ServerSettings(store=store_uri, static_dir=str(tmp_path)))
    with TestClient(app, base_url=LOCAL) as c:
        assert c.get("/").text == "<h1>cockpit</h1>"
        assert c.get("/static/app.js").text == "export const x = 1;"
        assert c.get("/static/missing.js").status_code == 404


def test_missing_store_fails_fast(tmp_path):
    from rlcockpit.errors import StoreError

    with pytest.raises(StoreError, match="no store at"):
        create_app(ServerSettings(store=f"sqlite:///{tmp_path / 'absent.db'}"))


def test_server_never_imports_torch_or_the_trainer(store_uri):
    code = textwrap.dedent(f"""
        import sys
        from fastapi.testclient import TestClient
        from rlcockpit.server.app import create_app
        from rlcockpit.server.settings import ServerSettings
        with TestClient(create_app(ServerSettings(store={store_uri!r})), base_url="http://127.0.0.1") as c:
            assert c.get("/api/runs/{RUN}/incidents").status_code == 200
        print([m for m in sys.modules if m == "torch" or m.startswith("rlcockpit.trainer")])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def test_sample_totals_follow_new_writes(tmp_path):
    """The run's sample count is remembered between calls, and a new write invalidates it."""
    from rlcockpit.records import Batch, RunInfo, SampleRecord
    from rlcockpit.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'count.db'}")
    writer = store.writer()
    writer.create_run(RunInfo(run_id="c", project="p", name="c"))

    def write(step: int, n: int) -> None:
        writer.write_batch("c", Batch(samples=[SampleRecord(step=step, sample_id=i, prompt="q",
                                                            response="a", reward=0.0)
                                               for i in range(n)]))

    write(0, 3)
    with TestClient(create_app(ServerSettings(store=store.uri), store), base_url=LOCAL) as c:
        assert ok(c, "/api/runs/c")["samples"] == 3
        assert ok(c, "/api/runs/c/samples?limit=1")["total"] == 3
        write(1, 4)
        assert ok(c, "/api/runs/c/samples?limit=1")["total"] == 7
        assert ok(c, "/api/runs/c")["samples"] == 7
        write(0, 2)  # a rewritten step replaces its samples with the same ids
        assert ok(c, "/api/runs/c/samples?limit=1")["total"] == 7
        write(2, 1)
        assert ok(c, "/api/runs/c/samples?limit=1")["total"] == 8
        assert ok(c, "/api/runs/c/samples?step_min=1&limit=1")["total"] == 5
    writer.close()


def test_docs_cover_every_setting_and_read_route():
    """docs/server.md documents every ServerSettings field and every read route (Datasette's
    habit: an undocumented setting or view fails the build)."""
    import dataclasses
    from pathlib import Path

    from rlcockpit.server.app import READ_ROUTERS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "server.md").read_text()
    for f in dataclasses.fields(ServerSettings):
        assert f"| `{f.name}` |" in doc, f.name
    for router in READ_ROUTERS:
        for route in router.routes:
            assert route.path in doc, route.path


def test_serve_command_prints_its_url_and_serves(store_uri, tmp_path):
    import os
    import time

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "rlcockpit", "serve", "--store", store_uri,
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        url = line.split("http://", 1)[1].split()[0]
        assert url.startswith("127.0.0.1:") and not url.startswith("127.0.0.1:0/")
        deadline = time.monotonic() + 20
        while True:
            try:
                body = httpx.get(f"http://{url}api/runs", timeout=2).json()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert [r["run_id"] for r in body["items"]] == [OTHER, RUN]
    finally:
        proc.terminate()
        proc.wait(10)
    refused = subprocess.run([sys.executable, "-m", "rlcockpit", "serve", "--store", store_uri,
                              "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "0.0.0.0" in refused.stderr
