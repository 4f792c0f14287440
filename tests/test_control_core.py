"""Control-plane building blocks: tokens and users, the audit chain (also with two processes
appending at once), parameter resolution, and the effect measurement against scipy."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from rlcockpit.control import ControlPlane
from rlcockpit.control.audit import verify
from rlcockpit.control.effect import reward_effect, window_effect
from rlcockpit.control.errors import AuthError, TicketError
from rlcockpit.control.params import check_value, resolve_name
from rlcockpit.errors import ConfigError, NotFoundError, StoreError
from rlcockpit.metrics.ks import ks_2samp
from rlcockpit.records import AuditEntry
from rlcockpit.store import open_store


@pytest.fixture
def plane(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    return ControlPlane.over(store.control(), store.reader())


def test_token_is_shown_once_and_only_a_salted_hash_is_stored(plane, tmp_path):
    user, token = plane.users.add("olga", "operator")
    again, token2 = plane.users.add("otto", "operator")
    raw = (tmp_path / "c.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("c.db-*"))
    secret = token.split("_", 2)[2]
    assert secret.encode() not in raw and token.encode() not in raw
    assert user.token_hash.startswith("hmac-sha256-exp$") and user.salt != again.salt and token != token2
    assert plane.users.authenticate(token).name == "olga"
    assert plane.users.authenticate(token2).role == "operator"


def test_authentication_failures_say_why(plane):
    _, token = plane.users.add("olga", "operator")
    reasons = []
    for bad in (None, "", "garbage", token[:-1] + ("A" if token[-1] != "A" else "B")):
        with pytest.raises(AuthError) as err:
            plane.users.authenticate(bad)
        reasons.append(err.value.details["reason"])
    assert reasons == ["missing", "missing", "malformed", "unknown"]
    plane.users.revoke("olga")
    with pytest.raises(AuthError, match="revoked"):
        plane.users.authenticate(token)  # also after the token was verified (and cached) before


def test_user_names_roles_and_duplicates_are_checked(plane):
    plane.users.add("olga", "operator")
    with pytest.raises(StoreError, match="already exists"):
        plane.users.add("olga", "admin")
    for bad in ("", "policy", "detector:x", "a b"):
        with pytest.raises(ConfigError):
            plane.users.add(bad, "viewer")
    with pytest.raises(ConfigError, match="unknown role"):
        plane.users.add("zed", "superuser")
    with pytest.raises(NotFoundError):
        plane.users.revoke("nobody")
    assert [u.name for u in plane.users.list()] == ["olga"]


def test_audit_chain_detects_a_changed_entry(plane, tmp_path):
    for i in range(20):
        plane.store.append_audit(AuditEntry(actor="a", action="x", details={"i": i, "nan": float("nan")}))
    assert verify(plane.store).ok and verify(plane.store).entries == 20
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE audit SET details = '{\"i\": 99, \"nan\": null}' WHERE seq = 7")
    result = verify(plane.store)
    assert not result.ok and result.broken_seq == 7 and "changed" in result.problem


def test_audit_chain_detects_a_recomputed_entry_via_its_successor(plane, tmp_path):
    """Even a forger who fixes the changed entry's own hash breaks the next link."""
    for i in range(5):
        plane.store.append_audit(AuditEntry(actor="a", action="x", details={"i": i}))
    entry = plane.store.read_audit()[2]
    forged = dataclasses.replace(entry, actor="mallory")
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE audit SET actor = ?, hash = ? WHERE seq = ?",
                     ("mallory", forged.chain_hash(entry.prev_hash), entry.seq))
    result = verify(plane.store)
    assert not result.ok and result.broken_seq == entry.seq + 1 and "prev_hash" in result.problem


APPENDER = """
import sys
from rlcockpit.records import AuditEntry
from rlcockpit.store import open_store
store = open_store(sys.argv[1]).control()
for i in range(40):
    store.append_audit(AuditEntry(actor=sys.argv[2], action="x", details={"i": i}))
"""


def test_two_processes_appending_at_once_form_one_chain(plane, tmp_path):
    uri = f"sqlite:///{tmp_path / 'c.db'}"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, uri, name]) for name in ("p1", "p2")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    result = verify(plane.store)
    assert result.ok and result.entries == 80
    assert {e.actor for e in plane.store.read_audit()} == {"p1", "p2"}


@pytest.mark.parametrize(("name", "expected"), [("kl_coef", "kl_coef"), ("kl.coef", "kl_coef"),
                                                ("trainer.kl.coef", "kl_coef"), ("ppo.clip_eps", "clip_eps"),
                                                ("kl/coef", "kl_coef"), ("optim.actor_lr", "actor_lr"),
                                                ("rollout.max_new_tokens", "max_new_tokens")])
def test_parameter_names_resolve(name, expected):
    from control_testkit import live_specs

    assert resolve_name(name, live_specs()) == expected


def test_parameter_values_are_checked_against_the_spec():
    spec = {"type": "int", "lo": 1, "hi": 16}
    assert check_value("ppo_epochs", 4.0, spec) == 4 and isinstance(check_value("ppo_epochs", 4.0, spec), int)
    for bad in (0, 17, 2.5, float("nan"), "4", True):
        with pytest.raises(TicketError):
            check_value("ppo_epochs", bad, spec)


def test_reward_effect_matches_scipy_and_reports_the_variance_change():
    from scipy import stats

    rng = np.random.default_rng(0)
    before = rng.normal(0.0, 1.0, 200)
    after = rng.normal(0.1, np.sqrt(0.6), 200)  # the seed's example: variance -40%
    eff = reward_effect(before.tolist(), after.tolist(), ks_2samp)
    ref = stats.ks_2samp(before, after)
    assert eff["ks_statistic"] == pytest.approx(ref.statistic) and eff["ks_pvalue"] == pytest.approx(ref.pvalue)
    assert eff["reward_var_change"] == pytest.approx(np.var(after) / np.var(before) - 1.0)
    assert eff["reward_mean_delta"] == pytest.approx(after.mean() - before.mean())
    assert eff["n_before"] == eff["n_after"] == 200


def test_reward_effect_ignores_nonfinite_and_handles_empty():
    eff = reward_effect([1.0, float("nan"), 2.0], [], ks_2samp)
    assert eff["n_before"] == 2 and eff["ks_pvalue"] is None and eff["reward_mean_before"] == 1.5


def test_window_effect_uses_the_steps_before_and_after_the_boundary():
    history = {s: {"kl/mean": float(s)} for s in range(1, 11)}
    w = window_effect(history, boundary=5, steps=3, names=("kl/mean", "policy/entropy"))
    assert w["kl/mean"] == {"before": 4.0, "after": 7.0, "delta": 3.0, "n_before": 3, "n_after": 3}
    assert w["policy/entropy"]["before"] is None and w["policy/entropy"]["n_after"] == 0
