"""The control plane from the command line: `users`, `audit`, and `ticket` / `pause` / `rollback`
over HTTP against a real `rlcockpit serve` process (real store, real sockets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from control_testkit import RUN, build_world
from server_testkit import free_port

pytestmark = pytest.mark.timeout(240)


def cli(*args: str, token: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RLCOCKPIT_TOKEN"}
    if token:
        env["RLCOCKPIT_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "rlcockpit", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture
def served(tmp_path):
    """A store with a live run, two users made by the CLI, and `rlcockpit serve` on it."""
    world = build_world(tmp_path, users=False)
    tokens = {}
    for name, role in (("olga", "operator"), ("alex", "approver")):
        out = cli("users", "add", name, "--role", role, "--store", world.uri)
        assert out.returncode == 0, out.stderr
        tokens[name] = out.stdout.strip().splitlines()[-1]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rlcockpit", "serve", "--store", world.uri, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/api/me", timeout=2).status_code == 401:  # up, and asking for a token
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"serve did not start: {proc.stdout.read()}")
        time.sleep(0.1)
    yield world, url, tokens
    proc.terminate()
    proc.wait(timeout=20)


def test_users_add_list_revoke(served):
    world, _, tokens = served
    assert all(t.startswith("rlc_") for t in tokens.values())
    listed = cli("users", "list", "--store", world.uri)
    assert listed.returncode == 0 and "olga" in listed.stdout and "approver" in listed.stdout
    revoked = cli("users", "revoke", "olga", "--store", world.uri)
    assert revoked.returncode == 0 and "revoked" in cli("users", "list", "--store", world.uri).stdout


def test_ticket_lifecycle_over_http(served):
    world, url, tokens = served
    req = cli("ticket", "request", "--server", url, "--token", tokens["olga"], "--run", RUN, "--param", "kl.coef",
              "--value", "0.2", "--reason", "KL too loose")
    assert req.returncode == 0, req.stderr
    assert "#1" in req.stdout and "kl_coef -> 0.2" in req.stdout
    ok = cli("ticket", "approve", "1", "--server", url, "--comment", "go", token=tokens["alex"])  # token from env
    assert ok.returncode == 0 and "approved" in ok.stdout
    twice = cli("ticket", "approve", "1", "--server", url, "--comment", "go", token=tokens["alex"])
    assert twice.returncode == 2 and "409 conflict" in twice.stderr and "approved" in twice.stderr
    own = cli("ticket", "reject", "1", "--server", url, token=tokens["olga"])
    assert own.returncode == 2 and "403" in own.stderr
    shown = cli("ticket", "show", "1", "--server", url, "--json", token=tokens["olga"])
    assert json.loads(shown.stdout)["ticket"]["decided_by"] == "alex"
    listed = cli("ticket", "list", "--run", RUN, "--server", url, "--status", "approved", token=tokens["olga"])
    assert listed.returncode == 0 and "#1" in listed.stdout


def test_commands_over_http(served):
    world, url, tokens = served
    pause = cli("pause", "--run", RUN, "--reason", "inspect", "--server", url, token=tokens["olga"])
    assert pause.returncode == 0 and "approved" in pause.stdout and "pause" in pause.stdout
    rb = cli("rollback", "--run", RUN, "--reason", "bad step", "--step", "4", "--server", url, token=tokens["olga"])
    assert rb.returncode == 0 and "requested" in rb.stdout
    assert world.plane.store.get_ticket(2).value["step"] == 4
    bad = cli("rollback", "--run", RUN, "--reason", "x", "--step", "3", "--server", url, token=tokens["olga"])
    assert bad.returncode == 2 and "no checkpoint" in bad.stderr
    none = cli("pause", "--run", RUN, "--reason", "x", "--server", url)
    assert none.returncode == 2 and "401 unauthorized" in none.stderr


def test_revoked_token_and_audit_verify_export(served, tmp_path):
    world, url, tokens = served
    assert cli("users", "revoke", "olga", "--store", world.uri).returncode == 0
    refused = cli("ticket", "request", "--server", url, "--token", tokens["olga"], "--run", RUN, "--param",
                  "kl.coef", "--value", "0.2", "--reason", "x")
    assert refused.returncode == 2 and "revoked" in refused.stderr
    verify = cli("audit", "verify", "--store", world.uri)
    assert verify.returncode == 0 and verify.stdout.startswith("OK")
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--store", world.uri, "--output", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["action"] for r in rows][:2] == ["user_added", "user_added"]
    assert rows[-1]["action"] == "access_denied" and rows[-1]["outcome"] == "refused"
    assert all(r["hash"] and r["prev_hash"] for r in rows)


def test_serve_refuses_a_public_bind_without_users(tmp_path):
    world = build_world(tmp_path, users=False)
    out = cli("serve", "--store", world.uri, "--host", "0.0.0.0", "--port", str(free_port()), timeout=60)
    assert out.returncode == 2 and "without users" in out.stderr
