"""The project layout's arranged panels (issue 29, item 3): kind, x axis, y range, width, height
and the sections' order round-trip through PUT/GET /api/projects/{project}/layout, and documents
that break them are refused with the canonical 422 (server/routes/layouts.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from server_testkit import LOCAL
from storekit import OTHER, RUN, build_store

ARRANGED = {
    "panels": [
        {"id": "p1", "title": "reward by tokens", "metrics": ["reward/mean"], "runs": [OTHER], "log": False,
         "kind": "line", "x": "data/tokens_seen", "y_min": None, "y_max": None, "y_robust": True,
         "width": 4, "height": 360, "view": "time"},
        {"id": "p2", "title": "", "metrics": ["reward/mean"], "runs": [], "kind": "scatter", "x": "kl/mean",
         "y_min": -1, "y_max": 2.5, "width": 2, "height": 240},
        {"id": "p3", "metrics": ["reward/hist"], "runs": [RUN], "kind": "hist", "view": "step", "width": 1, "height": 520},
    ],
    "sections": ["kl", "eval", "reward"],
    "runs": {RUN: {"tags": ["a"], "group": "g"}},
}


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(ServerSettings(store=build_store(tmp_path))), base_url=LOCAL) as c:
        yield c


def test_an_arranged_layout_round_trips(client):
    saved = client.put("/api/projects/p9/layout", json=ARRANGED)
    assert saved.status_code == 200, saved.text
    assert client.get("/api/projects/p9/layout").json()["layout"] == ARRANGED


@pytest.mark.parametrize("bad", [
    {"kind": "pie"}, {"kind": True}, {"width": 5}, {"width": 2.5}, {"width": True}, {"height": 50}, {"height": 5000},
    {"height": "tall"}, {"view": "sideways"}, {"x": 3}, {"y_min": "0"}, {"y_max": True}, {"y_robust": "yes"},
    {"y_min": 2, "y_max": 1}, {"y_min": 1, "y_max": 1},
])
def test_a_panel_with_a_broken_arrangement_is_refused(client, bad):
    panel = {"id": "p", "metrics": ["reward/mean"], **bad}
    r = client.put("/api/projects/p9/layout", json={"panels": [panel]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter", (bad, r.text)


@pytest.mark.parametrize("sections", ["kl", [1], [["kl"]]])
def test_sections_must_be_a_list_of_names(client, sections):
    r = client.put("/api/projects/p9/layout", json={"panels": [], "sections": sections})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter", r.text
