"""Sessions, not bearer links (issue: sign-in, revocation, guessing): one-time sign-in codes
exchanged for expiring sessions, expiring and rotatable API tokens, revocation that closes open
live streams, Bearer required, failed token checks limited per client address, and the small
schema items (reject body, stream cursor, reason limit). Real uvicorn on loopback, real HTTP,
a real SQLite store (control_testkit's world: one user per role)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from control_testkit import RUN, World, build_world
from rlcockpit.control import tokens as token_lib
from rlcockpit.control.audit import verify
from rlcockpit.records import AuditEntry, UserRecord
from rlcockpit.server.app import create_app
from rlcockpit.server.auth import control_for
from rlcockpit.server.settings import ServerSettings
from server_testkit import ServerThread


@pytest.fixture
def world(tmp_path) -> World:
    return build_world(tmp_path)


@contextlib.contextmanager
def serve(world: World, **settings) -> Iterator[str]:
    """The app as `rlcockpit serve` builds it, uvicorn on loopback; yields its URL."""
    config = ServerSettings(store=world.uri, **{"sse_poll_s": 0.1, **settings})
    access, plane = control_for(config, world.store)
    with ServerThread(create_app(config, world.store, access=access, control=plane), graceful_s=1) as url:
        yield url


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def session_row(world: World, column: str, value: float, key_id: str) -> None:
    with sqlite3.connect(world.store.path) as conn:
        conn.execute(f"UPDATE sessions SET {column} = ? WHERE key_id = ?", (value, key_id))


# --------------------------------------------------------------------------- one-time sign-in codes


def test_a_signin_code_works_once_and_becomes_an_expiring_session(world):
    code, code_expires = world.plane.users.issue_signin("olga", by="test")
    assert code.startswith("rlo_") and 590 < code_expires - time.time() <= 600
    with serve(world, session_ttl_s=3600) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.get("/api/me", headers=bearer(code)).json()["error"]["details"]["reason"] == "signin_code"
        first = http.post("/api/session", json={"code": code})
        assert first.status_code == 201, first.text
        session = first.json()
        assert session["token"].startswith("rls_") and (session["name"], session["role"]) == ("olga", "operator")
        assert 3590 < session["expires_at"] - time.time() <= 3600
        assert http.get("/api/me", headers=bearer(session["token"])).json()["name"] == "olga"
        again = http.post("/api/session", json={"code": code})  # the link in the history: dead
        assert again.status_code == 401 and again.json()["error"]["details"]["reason"] == "used"
        assert "used already" in again.json()["error"]["message"]
        ticket = http.post(f"/api/runs/{RUN}/tickets", headers=bearer(session["token"]),
                           json={"param": "kl.coef", "value": 0.1, "reason": "through a session"})
        assert ticket.status_code == 201 and ticket.json()["ticket"]["requested_by"] == "olga"
    actions = [e.action for e in world.plane.store.read_audit()]
    assert "signin_issued" in actions and "session_started" in actions
    assert verify(world.plane.store).ok


def test_an_unused_code_and_a_session_both_expire(world):
    code, _ = world.plane.users.issue_signin("vera", by="test")
    late, _ = world.plane.users.issue_signin("vera", by="test")
    with serve(world) as url, httpx.Client(base_url=url, timeout=10) as http:
        session_row(world, "expires_at", time.time() - 1, late.split("_")[1])
        refused = http.post("/api/session", json={"code": late})
        assert refused.status_code == 401 and refused.json()["error"]["details"]["reason"] == "expired"
        token = http.post("/api/session", json={"code": code}).json()["token"]
        assert http.get("/api/runs", headers=bearer(token)).status_code == 200
        session_row(world, "expires_at", time.time() - 1, token.split("_")[1])
        gone = http.get("/api/runs", headers=bearer(token))
        assert gone.status_code == 401 and gone.json()["error"]["details"]["reason"] == "expired"


def test_signing_out_ends_the_session_and_an_api_token_can_start_one(world):
    with serve(world) as url, httpx.Client(base_url=url, timeout=10) as http:
        started = http.post("/api/session", headers=world.headers("alex"))  # the API token, no body
        assert started.status_code == 201
        token = started.json()["token"]
        assert http.post("/api/session", headers=bearer(token)).status_code == 403  # no session from a session
        assert http.delete("/api/session", headers=bearer(token)).json() == {"ended": True}
        assert http.get("/api/me", headers=bearer(token)).json()["error"]["details"]["reason"] == "revoked"
        assert http.get("/api/me", headers=world.headers("alex")).status_code == 200  # the API token lives


# --------------------------------------------------------------------------- API tokens: expiry, rotation


def test_api_tokens_expire_and_rotating_one_ends_the_old_token_and_sessions(world):
    users = world.plane.users
    user, token = users.add("ci-bot", "viewer", by="test", ttl_s=3600)
    assert 3590 < token_lib.expires_at(user.token_hash) - time.time() <= 3600
    old = token_lib.new_token(expires_at=time.time() - 1)  # an API token past its expiry
    world.plane.store.add_user(UserRecord(name="stale", role="viewer", key_id=old.key_id, salt=old.salt,
                                          token_hash=old.token_hash, created_at=1.0, created_by="test"),
                               AuditEntry(actor="test", action="user_added", details={"name": "stale"}))
    with serve(world) as url, httpx.Client(base_url=url, timeout=10) as http:
        expired = http.get("/api/me", headers=bearer(old.token))
        assert expired.status_code == 401 and expired.json()["error"]["details"]["reason"] == "expired"
        session = http.post("/api/session", headers=bearer(token)).json()["token"]
        assert http.get("/api/me", headers=bearer(session)).json()["name"] == "ci-bot"
        _, fresh = users.rotate("ci-bot", by="test", ttl_s=7200)
        assert http.get("/api/me", headers=bearer(token)).status_code == 401
        assert http.get("/api/me", headers=bearer(session)).json()["error"]["details"]["reason"] == "revoked"
        assert http.get("/api/me", headers=bearer(fresh)).json()["name"] == "ci-bot"
    assert verify(world.plane.store).ok  # the rotation is audited with the row's new state


def test_users_cli_issues_links_rotates_and_shows_expiry(world, capsys):
    from rlcockpit.cli import main

    assert main(["users", "add", "carol", "--role", "viewer", "--expires-in", "2d", "--store", world.uri]) == 0
    out = capsys.readouterr().out
    token = next(line for line in out.splitlines() if line.startswith("rlc_"))
    assert "expires" in out
    assert main(["users", "signin", "carol", "--url", "http://127.0.0.1:9/", "--store", world.uri]) == 0
    link = next(line for line in capsys.readouterr().out.splitlines() if "#/signin?code=" in line)
    assert link.startswith("http://127.0.0.1:9/#/signin?code=rlo_")
    assert world.plane.users.redeem(link.split("code=")[1])[1].name == "carol"
    assert main(["users", "rotate", "carol", "--store", world.uri]) == 0
    rotated = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("rlc_"))
    assert rotated != token and world.plane.users.authenticate(rotated).name == "carol"
    assert main(["users", "list", "--store", world.uri]) == 0
    listed = capsys.readouterr().out
    assert "token expires" in listed and "carol" in listed


# --------------------------------------------------------------------------- revocation ends live streams


def test_revoking_a_user_ends_their_open_stream_within_seconds(world):
    token = world.plane.users.redeem(world.plane.users.issue_signin("vera", by="test")[0])[0]
    with serve(world, keepalive_s=0.2, stream_auth_check_s=1.0) as url, httpx.Client(timeout=30) as http, \
            http.stream("GET", f"{url}/api/runs/{RUN}/stream", params={"access_token": token}) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        assert next(lines).startswith("retry:")
        time.sleep(0.5)
        revoked_at = time.monotonic()
        world.plane.users.revoke("vera", by="test")
        rest = list(lines)  # ends when the server closes the stream
        took = time.monotonic() - revoked_at
    assert took < 3.0, took
    assert "event: error" in rest and any('"code":"unauthorized"' in line for line in rest), rest[-4:]


# --------------------------------------------------------------------------- Bearer, guessing


def test_a_bare_token_without_bearer_is_refused(world):
    with serve(world) as url:
        resp = httpx.get(f"{url}/api/me", headers={"Authorization": world.tokens["vera"]})
        assert resp.status_code == 401
        err = resp.json()["error"]
        assert err["code"] == "unauthorized" and err["details"]["reason"] == "scheme"
        assert "Authorization: Bearer <token>" in err["message"]
        assert httpx.get(f"{url}/api/me", headers=world.headers("vera")).status_code == 200


def test_failed_token_checks_are_limited_per_address_and_valid_clients_go_on(world):
    with serve(world, auth_fail_burst=5, auth_fail_refill_s=30) as url, \
            httpx.Client(base_url=url, timeout=10) as http:
        assert http.get("/api/me", headers=world.headers("vera")).status_code == 200  # verified once
        key = world.tokens["root"].split("_")[1]
        statuses = [http.get("/api/me", headers=bearer(f"rlc_{key}_guess{i:04d}")).status_code for i in range(12)]
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}, statuses
        throttled = http.get("/api/me", headers=bearer(f"rlc_{key}_guess9999"))
        assert 25 <= int(throttled.headers["retry-after"]) <= 30
        assert throttled.json()["error"]["code"] == "too_many_attempts"
        started = time.perf_counter()
        for _ in range(20):  # a client whose token this server verified before is not held back
            assert http.get("/api/me", headers=world.headers("vera")).status_code == 200
        assert (time.perf_counter() - started) / 20 < 0.2
        assert http.get("/api/me", headers=world.headers("otto")).status_code == 429  # not verified yet
        assert http.post("/api/session", json={"code": "rlo_0123456789ab_x"}).status_code == 429
        assert http.get("/api/me").status_code == 401  # no token: refused as usual, guesses nothing


def test_the_throttle_refills_over_time():
    from rlcockpit.control.refusals import AuthThrottle

    now = [0.0]
    throttle = AuthThrottle(burst=2, refill_s=10.0, clock=lambda: now[0])
    assert throttle.failed("a") == 0 and throttle.failed("a") == pytest.approx(10.0)
    assert throttle.retry_after("a") == pytest.approx(10.0) and throttle.retry_after("b") == 0
    now[0] = 10.0
    assert throttle.retry_after("a") == 0  # one failure allowed again
    assert throttle.failed("a") == pytest.approx(10.0)


# --------------------------------------------------------------------------- schema and limits


def test_reject_needs_a_comment_body_approve_takes_none_and_the_cursor_is_constrained(world):
    olga = world.plane.users.authenticate(world.tokens["olga"])
    tid = world.plane.tickets.request(olga, RUN, "kl.coef", 0.1, "x").ticket_id
    with serve(world) as url, httpx.Client(base_url=url, headers=world.headers("alex"), timeout=10) as http:
        paths = http.get("/openapi.json").json()["paths"]
        reject = paths["/api/tickets/{ticket_id}/reject"]["post"]["requestBody"]
        assert reject["required"] is True
        assert reject["content"]["application/json"]["schema"]["required"] == ["comment"]
        approve = paths["/api/tickets/{ticket_id}/approve"]["post"]["requestBody"]
        assert approve["required"] is False
        assert {"type": "null"} in approve["content"]["application/json"]["schema"]["anyOf"]
        (cursor,) = [p for p in paths["/api/runs/{run}/stream"]["get"]["parameters"] if p["name"] == "cursor"]
        patterns = [o.get("pattern") for o in cursor["schema"].get("anyOf", [cursor["schema"]])]
        assert any(p and p.startswith("^ *(null|undefined|v1") for p in patterns), cursor
        resp = http.post(f"/api/tickets/{tid}/reject", content="null", headers={"Content-Type": "application/json"})
        assert resp.status_code == 422 and resp.json()["error"]["details"]["field"] == "comment"
        bad = http.get(f"/api/runs/{RUN}/stream", params={"cursor": "v1.x.1.2.3"})
        assert bad.status_code == 422 and bad.json()["error"]["details"]["parameter"] == "cursor"


def test_a_reason_over_the_limit_is_refused_naming_it_and_one_at_the_limit_is_kept_whole(world):
    with serve(world) as url, httpx.Client(base_url=url, headers=world.headers("olga"), timeout=10) as http:
        too_long = http.post(f"/api/runs/{RUN}/tickets", json={"param": "kl.coef", "value": 0.1, "reason": "r" * 2001})
        assert too_long.status_code == 422
        err = too_long.json()["error"]
        assert err["details"]["limit"] == 2000 and "2000" in err["message"] and "2001" in err["message"]
        whole = http.post(f"/api/runs/{RUN}/tickets", json={"param": "kl.coef", "value": 0.1, "reason": "r" * 2000})
        assert whole.status_code == 201 and whole.json()["ticket"]["reason"] == "r" * 2000


def test_concurrent_redemptions_of_one_code_give_one_session(world):
    code, _ = world.plane.users.issue_signin("anna", by="test")
    results: list[int] = []
    with serve(world) as url:
        def redeem() -> None:
            results.append(httpx.post(f"{url}/api/session", json={"code": code}, timeout=10).status_code)

        threads = [threading.Thread(target=redeem) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == [201] + [401] * 5
