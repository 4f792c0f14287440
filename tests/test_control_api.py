"""The control API over HTTP: the happy path, and every bad input refused with a clear 4xx in the
canonical error shape, nothing changed, the attempt in the audit log (issue 6, "Bad input")."""

from __future__ import annotations

import math

import pytest

from control_testkit import FINISHED, RUN, SILENT, audit_tail, build_world, client
from rlcockpit.control.audit import verify


@pytest.fixture
def world(tmp_path):
    return build_world(tmp_path)


@pytest.fixture
def http(world):
    with client(world) as c:
        yield c


def request(http, world, user="olga", run=RUN, **body):
    payload = {"param": "kl.coef", "value": 0.2, "reason": "KL stuck low", **body}
    return http.post(f"/api/runs/{run}/tickets", json=payload, headers=world.headers(user))


def refused(world, resp, status, code, *, actor=None):
    """The canonical error, no ticket state changed, and the refusal audited."""
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and err["message"] and isinstance(err["details"], dict)
    last = audit_tail(world)[0]
    assert last.outcome == "refused" and last.details["code"] == code
    if actor:
        assert last.actor == actor
    return err


def test_request_approve_flow_and_reads(world, http):
    resp = request(http, world)
    assert resp.status_code == 201
    ticket = resp.json()["ticket"]
    assert (ticket["target"], ticket["value"], ticket["previous"], ticket["status"]) == ("kl_coef", 0.2, 0.05,
                                                                                       "requested")
    done = http.post(f"/api/tickets/{ticket['ticket_id']}/approve", json={"comment": "go"},
                     headers=world.headers("alex")).json()["ticket"]
    assert done["status"] == "approved" and done["decided_by"] == "alex"
    listed = http.get(f"/api/runs/{RUN}/tickets", headers=world.headers("vera")).json()["items"]
    assert [t["ticket_id"] for t in listed] == [ticket["ticket_id"]]
    live = http.get(f"/api/runs/{RUN}/live", headers=world.headers("vera")).json()
    assert live["current"]["values"]["kl_coef"] == 0.05 and live["current"]["specs"]["kl_coef"]["hi"] == 10.0
    me = http.get("/api/me", headers=world.headers("alex")).json()
    assert me == {"name": "alex", "role": "approver", "users_exist": True}
    audit = http.get("/api/audit?check=true", headers=world.headers("vera")).json()
    assert [e["action"] for e in audit["items"]][-2:] == ["ticket_requested", "ticket_approved"]
    assert audit["verify"]["ok"] is True


@pytest.mark.parametrize("alias", ["kl_coef", "kl.coef", "trainer.kl.coef", "kl/coef"])
def test_parameter_aliases_resolve_to_the_live_name(world, http, alias):
    assert request(http, world, param=alias).json()["ticket"]["target"] == "kl_coef"


def test_unknown_parameter_is_refused_with_a_suggestion(world, http):
    err = refused(world, request(http, world, param="kl.cof"), 422, "invalid_ticket", actor="olga")
    assert "kl_coef" in err["message"]
    assert world.plane.store.list_tickets() == []


@pytest.mark.parametrize("value", ["0.2", True, None, [0.2]])
def test_wrong_type_is_refused(world, http, value):
    err = refused(world, request(http, world, value=value), 422, "invalid_ticket")
    assert "wrong type" in err["message"]
    assert world.plane.store.list_tickets() == []


def test_integer_parameter_refuses_a_fraction(world, http):
    refused(world, request(http, world, param="ppo_epochs", value=2.5), 422, "invalid_ticket")


@pytest.mark.parametrize("value", [20.0, -0.1])
def test_out_of_range_is_refused_naming_the_range(world, http, value):
    err = refused(world, request(http, world, value=value), 422, "invalid_ticket")
    assert "out of range" in err["message"] and err["details"]["range"] == [0.0, 10.0]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_inf_are_refused(world, http, literal):
    body = '{"param": "kl.coef", "value": LITERAL, "reason": "x"}'.replace("LITERAL", literal)  # not JSON
    resp = http.post(f"/api/runs/{RUN}/tickets", content=body, headers={**world.headers("olga"),
                                                                         "content-type": "application/json"})
    err = refused(world, resp, 422, "invalid_ticket")
    assert "finite" in err["message"]


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_empty_reason_is_refused(world, http, reason):
    err = refused(world, request(http, world, reason=reason), 422, "invalid_ticket")
    assert "reason" in err["message"]


def test_approving_ones_own_ticket_is_refused(world, http):
    tid = request(http, world, user="alex").json()["ticket"]["ticket_id"]  # an approver may request too
    err = refused(world, http.post(f"/api/tickets/{tid}/approve", json={}, headers=world.headers("alex")),
                  403, "forbidden", actor="alex")
    assert err["details"]["reason"] == "own_ticket"
    assert world.plane.store.get_ticket(tid).status == "requested"


def test_approving_twice_is_refused(world, http):
    tid = request(http, world).json()["ticket"]["ticket_id"]
    assert http.post(f"/api/tickets/{tid}/approve", json={}, headers=world.headers("alex")).status_code == 200
    err = refused(world, http.post(f"/api/tickets/{tid}/approve", json={}, headers=world.headers("anna")),
                  409, "conflict", actor="anna")
    assert err["details"]["status"] == "approved"
    assert world.plane.store.get_ticket(tid).decided_by == "alex"


def test_reject_needs_a_comment(world, http):
    tid = request(http, world).json()["ticket"]["ticket_id"]
    refused(world, http.post(f"/api/tickets/{tid}/reject", json={"comment": ""}, headers=world.headers("alex")),
            422, "invalid_ticket")
    ok = http.post(f"/api/tickets/{tid}/reject", json={"comment": "too big a jump"}, headers=world.headers("alex"))
    assert ok.json()["ticket"]["status"] == "rejected"


def test_revoked_token_is_refused(world, http):
    assert http.get("/api/me", headers=world.headers("olga")).status_code == 200
    world.plane.users.revoke("olga", by="test")
    err = refused(world, request(http, world), 401, "unauthorized")
    assert err["details"]["reason"] == "revoked"
    assert world.plane.store.list_tickets() == []


@pytest.mark.parametrize("header", ["Bearer nonsense", "Bearer rlc_zzzzzzzzzzzz_abc", "Basic b2xnYTp4",
                                    "Bearer rlc_0123456789ab_wrongsecret"])
def test_malformed_or_unknown_token_is_refused(world, http, header):
    resp = http.post(f"/api/runs/{RUN}/tickets", json={"param": "kl.coef", "value": 0.2, "reason": "x"},
                     headers={"Authorization": header})
    err = refused(world, resp, 401, "unauthorized", actor="anonymous")
    assert err["details"]["reason"] in ("malformed", "unknown", "scheme")  # scheme: not Bearer
    assert world.plane.store.list_tickets() == []


def test_a_guessed_secret_for_a_real_key_is_refused(world, http):
    key = world.tokens["root"].split("_")[1]
    resp = http.get("/api/me", headers={"Authorization": f"Bearer rlc_{key}_{'A' * 43}"})
    refused(world, resp, 401, "unauthorized")


def test_ticket_for_a_finished_run_is_refused(world, http):
    err = refused(world, request(http, world, run=FINISHED), 409, "conflict")
    assert err["details"]["status"] == "finished"
    assert world.plane.store.list_tickets() == []


def test_ticket_for_an_unknown_run_is_refused(world, http):
    refused(world, request(http, world, run="nope"), 404, "not_found")


def test_ticket_for_a_run_without_live_parameters_is_refused(world, http):
    err = refused(world, request(http, world, run=SILENT), 409, "conflict")
    assert err["details"]["reason"] == "no_live_params"


def test_missing_body_fields_are_a_canonical_422(world, http):
    resp = http.post(f"/api/runs/{RUN}/tickets", json={"reason": "x"}, headers=world.headers("olga"))
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_ticket"


@pytest.mark.parametrize("status", ["bogus", "requested,bogus", "Requested"])
def test_an_unknown_ticket_status_is_the_generic_invalid_parameter(world, http, status):
    """A bad query parameter is 422 invalid_parameter naming it, as on every read route; invalid_ticket
    is for a ticket's content (issue 18 item 4)."""
    from rlcockpit.server.errors import ParameterError
    from rlcockpit.server.query import choices

    resp = http.get(f"/api/runs/{RUN}/tickets", params={"status": status}, headers=world.headers("vera"))
    assert resp.status_code == 422, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["details"]["parameter"]) == ("invalid_parameter", "status")
    with pytest.raises(ParameterError) as caught:  # the route's own check, behind the schema's pattern
        choices("status", status, ("requested", "approved"), "ticket status")
    assert caught.value.details["parameter"] == "status"


def test_cancel_only_by_requester_or_admin(world, http):
    tid = request(http, world).json()["ticket"]["ticket_id"]
    refused(world, http.post(f"/api/tickets/{tid}/cancel", json={}, headers=world.headers("otto")), 403,
            "forbidden", actor="otto")
    done = http.post(f"/api/tickets/{tid}/cancel", json={"comment": "wrong run"}, headers=world.headers("olga"))
    assert done.json()["ticket"]["status"] == "cancelled"
    refused(world, http.post(f"/api/tickets/{tid}/approve", json={}, headers=world.headers("alex")), 409, "conflict")


def test_commands_pause_is_approved_by_policy_rollback_needs_an_approver(world, http):
    pause = http.post(f"/api/runs/{RUN}/commands", json={"command": "pause", "reason": "look at KL"},
                      headers=world.headers("olga")).json()["ticket"]
    assert (pause["status"], pause["decided_by"]) == ("approved", "policy")
    rb = http.post(f"/api/runs/{RUN}/commands", json={"command": "rollback", "reason": "bad", "args": {"step": 4}},
                   headers=world.headers("olga")).json()["ticket"]
    assert rb["status"] == "requested" and rb["value"]["step"] == 4
    resp = http.post(f"/api/runs/{RUN}/commands", json={"command": "rollback", "reason": "bad",
                                                        "args": {"step": 3}}, headers=world.headers("olga"))
    err = refused(world, resp, 422, "invalid_ticket")
    assert err["details"]["checkpoint_steps"] == [4]
    refused(world, http.post(f"/api/runs/{RUN}/commands", json={"command": "explode", "reason": "x"},
                             headers=world.headers("olga")), 422, "invalid_ticket")


def test_no_users_reads_are_open_and_changes_refused(tmp_path):
    world = build_world(tmp_path, users=False)
    with client(world) as http:
        assert http.get(f"/api/runs/{RUN}/live").status_code == 200
        assert http.get("/api/me").json()["users_exist"] is False
        err = refused(world, request(http, world, user=None), 401, "unauthorized")
        assert err["details"]["reason"] == "no_users"


def test_every_refusal_keeps_the_audit_chain_intact(world, http):
    request(http, world, value=math.pi * 100)
    request(http, world, user="vera")
    assert verify(world.plane.store).ok
    actions = [(e.actor, e.outcome) for e in audit_tail(world, 2)]
    assert actions == [("olga", "refused"), ("vera", "refused")]


def test_the_live_stream_takes_the_token_from_the_url(world, http):
    """EventSource cannot send headers: GET requests may carry ?access_token= instead."""
    with http.stream("GET", f"/api/runs/{RUN}/stream?access_token={world.tokens['vera']}") as resp:
        assert resp.status_code == 200
    assert http.get(f"/api/me?access_token={world.tokens['vera']}").json()["name"] == "vera"
    resp = http.post(f"/api/runs/{RUN}/tickets?access_token={world.tokens['olga']}",
                     json={"param": "kl.coef", "value": 0.2, "reason": "x"})
    refused(world, resp, 401, "unauthorized")  # never for a change
