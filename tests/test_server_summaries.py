"""GET /api/summaries (issue 29, item 2): last, min, max and the value at the best eval step of any
metric over many runs, against a naive computation from every stored point, over a real SQLite
store written through the SDK (a long run whose curves the server reads downsampled, a NaN, a run
without the eval metric); its errors and its schema in the OpenAPI."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.summaries import SCAN_POINTS, best_point
from rlcockpit.store import open_store
from rlcockpit.store.base import Series
from server_testkit import LOCAL

LONG = 5000  # steps: far more than SCAN_POINTS, so min / max come from the rollups


def reward(run: int, step: int) -> float:
    # a spike of one step in the long run: a downsampled read must still see it
    spike = 30.0 if (run, step) == (2, 3217) else 0.0
    return math.sin(step / 50 + run) * 0.5 + 0.001 * step * run + spike


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import rlcockpit

    uri = f"sqlite:///{tmp_path_factory.mktemp('summaries') / 'runs.db'}"
    ids = []
    for i, steps in enumerate((40, 40, LONG)):
        with rlcockpit.init(project="s", name=f"run{i}", store=uri, config={"optim": {"lr": 10.0 ** -(i + 4)}}) as run:
            for step in range(steps):
                metrics = {"reward/mean": reward(i, step), "kl/mean": math.nan if step == steps - 1 else 0.01 * step}
                if step % 10 == 0 and i != 1:  # run1 never logs the eval metric
                    metrics["eval/reward/mean"] = -((step - 20 * (i + 1)) ** 2) / 100.0
                run.log(step, metrics)
            ids.append(run.run_id)
    return uri, ids


@pytest.fixture
def client(store):
    with TestClient(create_app(ServerSettings(store=store[0])), base_url=LOCAL) as c:
        yield c


def naive(uri: str, run: str, name: str, best: str = "eval/reward/mean") -> dict:
    """The summaries computed from every stored point."""
    reader = open_store(uri).reader()
    try:
        full = reader.read_series(run, [name, best], max_points=None)
    finally:
        reader.close()
    s = full.get(name)
    values = [v for v in (s.values if s else ()) if math.isfinite(v)]
    b = full.get(best)
    best_step = None
    if b is not None:
        finite = [(v, -st) for st, v in zip(b.steps, b.values, strict=True) if math.isfinite(v)]
        best_step = -max(finite)[1] if finite else None
    at = dict(zip(s.steps, s.values, strict=True)).get(best_step) if s and best_step is not None else None
    last = s.values[-1] if s and s.values else None
    return {"last": last if last is not None and math.isfinite(last) else None, "last_step": s.steps[-1] if s else None,
            "min": min(values) if values else None, "max": max(values) if values else None, "at_best": at,
            "best_step": best_step}


def test_summaries_match_a_naive_computation_over_every_point(client, store):
    uri, ids = store
    r = client.get("/api/summaries?names=reward/mean,kl/mean&stats=last,min,max,at_best&best=eval/reward/mean")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["names"] == ["reward/mean", "kl/mean"] and body["stats"] == ["last", "min", "max", "at_best"]
    assert body["best"] == "eval/reward/mean" and body["best_mode"] == "max"
    assert set(body["runs"]) == set(ids)  # every run when none are named
    for run in ids:
        got = body["runs"][run]
        for name in ("reward/mean", "kl/mean"):
            want = naive(uri, run, name)
            assert got["best_step"] == want.pop("best_step")
            assert got["metrics"][name] == pytest.approx(want), (run, name)
    long = body["runs"][ids[2]]
    assert long["metrics"]["reward/mean"]["max"] == pytest.approx(reward(2, 3217))  # the one-step spike
    assert long["best_step"] == 60 and long["best_value"] == 0.0
    # a run without the eval metric: no best step, at_best null; a NaN last value is null, its step kept
    assert body["runs"][ids[1]]["best_step"] is None and body["runs"][ids[1]]["metrics"]["reward/mean"]["at_best"] is None
    assert body["runs"][ids[0]]["metrics"]["kl/mean"]["last"] is None
    assert body["runs"][ids[0]]["metrics"]["kl/mean"]["last_step"] == 39


def test_summaries_of_chosen_runs_stats_and_best_mode(client, store):
    _, ids = store
    body = client.get(f"/api/summaries?names=reward/*&stats=last&runs={ids[0]},{ids[2]}").json()
    assert list(body["runs"]) == [ids[0], ids[2]]
    assert body["runs"][ids[0]]["metrics"] == {"reward/mean": {"last": pytest.approx(reward(0, 39)), "last_step": 39}}
    assert body["runs"][ids[0]]["best_step"] is None  # at_best not asked for
    low = client.get(f"/api/summaries?names=reward/mean&stats=at_best&best=eval/reward/mean&best_mode=min&runs={ids[0]}").json()
    assert low["runs"][ids[0]]["best_step"] == 0  # (0 - 20)^2 is the farthest from the peak
    assert low["runs"][ids[0]]["metrics"]["reward/mean"] == {"at_best": pytest.approx(reward(0, 0))}


@pytest.mark.parametrize(("query", "status", "param"), [
    ("names=reward/mean&stats=median", 422, "stats"),
    ("names=reward/mean&best_mode=best", 422, "best_mode"),
    ("names=reward/mean&runs=no-such-run", 404, None),
])
def test_summaries_errors_are_canonical(client, query, status, param):
    r = client.get(f"/api/summaries?{query}")
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"code", "message", "details"}
    if param:
        assert param in r.text


def test_summaries_schema_is_in_the_openapi(client):
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/summaries"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SummariesPublic"}
    assert {"names", "stats", "best", "best_mode", "runs"} <= {p["name"] for p in op["parameters"]}
    schemas = spec["components"]["schemas"]
    assert set(schemas["MetricSummary"]["properties"]) == {"last", "last_step", "min", "max", "at_best"}
    assert "best_step" in schemas["RunMetricSummaries"]["properties"]


def test_best_point_is_the_first_extreme_and_skips_non_finite():
    s = Series("e", (1, 2, 3, 4), (0.5, math.nan, 0.9, 0.9))
    assert best_point(s, "max") == (3, 0.9) and best_point(s, "min") == (1, 0.5)
    assert best_point(Series("e", (1,), (math.inf,)), "max") == (None, None) and best_point(None, "max") == (None, None)
    assert SCAN_POINTS >= 16  # the downsampler's rollup path (store/downsample.py)
