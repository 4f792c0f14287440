"""RBAC matrix: every /api endpoint x every role (and no token), once users exist.

A caller below an endpoint's role gets 401 (no token) or 403 (role too low), audited as
``access_denied``; a caller at or above it is never refused for its role (the answer may still be
a business 4xx such as 409). The endpoint list is checked against the app's OpenAPI paths, so a
new route without a row here fails the test.
"""

from __future__ import annotations

import pytest

from control_testkit import RUN, build_world, client
from rlcockpit.records import ROLES

CALLERS = {None: -1, "vera": ROLES.index("viewer"), "olga": ROLES.index("operator"),
           "alex": ROLES.index("approver"), "root": ROLES.index("admin")}
TICKET = "{ticket}"  # replaced by a fresh ticket requested by otto (an operator not in CALLERS)

ENDPOINTS = [
    ("GET", "/api/health", "viewer", None),
    ("GET", "/api/runs", "viewer", None),
    ("GET", f"/api/runs/{RUN}", "viewer", None),
    ("GET", f"/api/runs/{RUN}/series?names=kl/mean", "viewer", None),
    ("GET", f"/api/runs/{RUN}/latest", "viewer", None),
    ("GET", f"/api/runs/{RUN}/histograms?name=reward/hist", "viewer", None),
    ("GET", f"/api/runs/{RUN}/categories", "viewer", None),
    ("GET", f"/api/compare?runs={RUN}&names=kl/mean", "viewer", None),
    ("GET", f"/api/summaries?runs={RUN}&names=kl/mean", "viewer", None),
    ("GET", "/api/metric_names", "viewer", None),
    ("GET", f"/api/runs/{RUN}/samples", "viewer", None),
    ("GET", f"/api/runs/{RUN}/samples/1/0", "viewer", None),
    ("GET", f"/api/runs/{RUN}/sample_histogram", "viewer", None),
    ("GET", f"/api/runs/{RUN}/findings", "viewer", None),
    ("GET", f"/api/runs/{RUN}/incidents", "viewer", None),
    ("GET", f"/api/runs/{RUN}/snapshots", "viewer", None),
    ("GET", f"/api/runs/{RUN}/cost", "viewer", None),
    ("GET", f"/api/runs/{RUN}/snapshots/1", "viewer", None),
    ("GET", f"/api/runs/{RUN}/phases", "viewer", None),
    ("GET", f"/api/runs/{RUN}/events", "viewer", None),
    ("GET", f"/api/runs/{RUN}/checkpoints", "viewer", None),
    ("GET", "/api/library/search?q=kl", "viewer", None),
    ("GET", "/api/library/kl_explosion", "viewer", None),
    ("GET", f"/api/runs/{RUN}/stream", "viewer", None),
    ("GET", f"/api/runs/{RUN}/tickets", "viewer", None),
    ("POST", f"/api/runs/{RUN}/tickets", "operator", {"param": "kl.coef", "value": 0.1, "reason": "rbac"}),
    ("GET", f"/api/tickets/{TICKET}", "viewer", None),
    ("POST", f"/api/tickets/{TICKET}/approve", "approver", {"comment": "ok"}),
    ("POST", f"/api/tickets/{TICKET}/reject", "approver", {"comment": "no"}),
    ("POST", f"/api/tickets/{TICKET}/cancel", "operator", {"comment": "drop"}),
    ("POST", f"/api/runs/{RUN}/commands", "operator", {"command": "checkpoint", "reason": "rbac"}),
    ("GET", f"/api/runs/{RUN}/live", "viewer", None),
    ("GET", "/api/audit", "viewer", None),
    ("GET", "/api/me", "viewer", None),
    ("GET", "/api/projects/proj/layout", "viewer", None),
    ("PUT", "/api/projects/proj/layout", "viewer", {"panels": [{"title": "KL", "metrics": ["kl/mean"]}]}),
    ("GET", f"/api/runs/{RUN}/review", "viewer", None),
    ("POST", f"/api/runs/{RUN}/review/1/0", "operator", {"label": "good"}),
    ("GET", f"/api/runs/{RUN}/review/export", "viewer", None),
    ("POST", "/api/session", "viewer", None),  # an API token for a session
    ("DELETE", "/api/session", "viewer", None),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("rbac"))


@pytest.fixture(scope="module")
def http(world):
    with client(world) as c:
        yield c


def test_the_matrix_covers_every_api_route(http):
    routes = {(m.upper(), p) for p, ops in http.app.openapi()["paths"].items() for m in ops if p.startswith("/api")}
    covered = {(m, _template(p)) for m, p, _, _ in ENDPOINTS}
    assert routes == covered, f"not in the RBAC matrix: {routes - covered}; stale rows: {covered - routes}"


def _template(path: str) -> str:
    path = path.split("?")[0].replace(RUN, "{run}").replace(TICKET, "{ticket_id}")
    path = path.replace("/samples/1/0", "/samples/{step}/{sample_id}").replace("/review/1/0", "/review/{step}/{sample_id}").replace("/snapshots/1", "/snapshots/{snapshot_id}")
    path = path.replace("/projects/proj/", "/projects/{project}/")
    return path.replace("/library/kl_explosion", "/library/{pattern_id}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("user", list(CALLERS), ids=lambda u: u or "no-token")
@pytest.mark.parametrize(("method", "path", "needed", "body"), ENDPOINTS, ids=lambda x: x if isinstance(x, str) else "")
def test_role_matrix(world, http, user, method, path, needed, body):
    if TICKET in path:
        otto = world.plane.users.authenticate(world.tokens["otto"])
        path = path.replace(TICKET, str(world.plane.tickets.request(otto, RUN, "kl.coef", 0.1, "rbac").ticket_id))
    before = world.plane.store.audit_high_water()
    status, error = _call(http, method, path, body, world.headers(user))
    allowed = CALLERS[user] >= ROLES.index(needed)
    denied = status == 401 or (status == 403 and error.get("details", {}).get("reason") == "role")
    assert denied != allowed, f"{user} {method} {path}: {status} {error}"
    if denied:
        assert error["code"] == ("unauthorized" if user is None else "forbidden")
        entries = world.plane.store.read_audit(after_seq=before)
        assert [(e.action, e.outcome, e.actor) for e in entries] == [("access_denied", "refused", user or "anonymous")]


def _call(http, method, path, body, headers):
    if path.endswith("/stream"):  # an endless event stream: read the status, then hang up
        with http.stream(method, path, headers=headers) as resp:
            status = resp.status_code
            return status, (resp.read() and resp.json()["error"]) if status >= 400 else {}
    resp = http.request(method, path, json=body, headers=headers)
    return resp.status_code, resp.json().get("error", {}) if resp.status_code >= 400 else {}
