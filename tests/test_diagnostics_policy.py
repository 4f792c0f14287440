"""The severity policy (findings → actions) and the pure snapshot builders."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlcockpit.config import load_config
from rlcockpit.diagnostics.config import PolicyConfig
from rlcockpit.diagnostics.notify import redact_url, split_userinfo
from rlcockpit.diagnostics.policy import Policy, plan
from rlcockpit.diagnostics.snapshots import (
    MAX_BYTES,
    batch_payload,
    clean,
    diagnostic_payload,
    fit,
    grad_norm_hist,
    head_grad_cov,
    metric_window,
    sample_dict,
    size_of,
)
from rlcockpit.errors import ConfigError
from rlcockpit.records import FindingRecord, SampleRecord


def f(severity: str, step: int = 5, detector: str = "kl_tiers", incident: str = "inc-1",
      status: str = "raised") -> FindingRecord:
    return FindingRecord(step=step, detector=detector, severity=severity, message=f"{severity}!",
                         status=status, incident=incident)


def names(actions) -> list[str]:
    return [a.name for a in actions]


@pytest.mark.parametrize("severity, expected", [
    ("yellow", ["alert"]),
    ("orange", ["alert", "save_batch"]),
    ("red", ["alert", "snapshot", "checkpoint", "pause"]),  # evidence first, then pause
    ("black", ["alert", "snapshot", "stop", "rollback"]),
    ("info", []),
])
def test_default_policy_maps_each_tier_to_its_actions_in_a_safe_order(severity, expected):
    actions = plan([f(severity)])
    assert names(actions) == expected
    assert all(a.step == 5 and a.detector == "kl_tiers" and a.incident == "inc-1" for a in actions)


def test_one_incident_pauses_once_but_an_escalation_runs_the_higher_tier():
    policy = Policy()
    assert names(policy.plan([f("red", 5)])) == ["alert", "snapshot", "checkpoint", "pause"]
    assert names(policy.plan([f("red", 6, detector="gradients")])) == ["alert"]  # joined the incident
    assert names(policy.plan([f("black", 7)])) == ["alert", "snapshot", "stop", "rollback"]
    assert names(policy.plan([f("red", 30, incident="inc-2")])) == ["alert", "snapshot", "checkpoint", "pause"]


def test_several_findings_in_one_step_share_the_actions_of_the_worst():
    actions = plan([f("orange", detector="kl_token_spike"), f("red", detector="kl_tiers")])
    assert names(actions) == ["alert", "alert", "save_batch", "snapshot", "checkpoint", "pause"]
    by_name = {a.name: a for a in actions}
    assert by_name["pause"].detector == "kl_tiers" and by_name["save_batch"].detector == "kl_token_spike"


def test_a_resolved_finding_only_alerts():
    assert names(plan([f("red", status="resolved")])) == ["alert"]
    quiet = PolicyConfig(actions={"red": ("pause",)})
    assert names(plan([f("red", status="resolved")], quiet)) == []


def test_policy_overrides_from_dotted_keys_and_refusal_of_unknown_actions():
    from rlcockpit.trainer.config import TrainConfig

    cfg = load_config(TrainConfig, None, ["diagnostics.policy.actions.red=[alert,snapshot]"])
    assert cfg.diagnostics.policy.actions_for("red") == ("alert", "snapshot")
    assert cfg.diagnostics.policy.actions_for("black") == ("alert", "snapshot", "stop", "rollback")
    assert names(plan([f("red")], cfg.diagnostics.policy)) == ["alert", "snapshot"]
    with pytest.raises(ConfigError, match=r"diagnostics.policy.actions.red.*'reboot'.*actions are alert"):
        load_config(TrainConfig, None, ["diagnostics.policy.actions.red=[alert,reboot]"])
    with pytest.raises(ConfigError, match=r"severity tiers are yellow"):
        load_config(TrainConfig, None, ["diagnostics.policy.actions.purple=[alert]"])


# --------------------------------------------------------------------------- snapshot builders


def test_grad_norm_histogram_counts_every_finite_value_and_reports_the_rest():
    rng = np.random.default_rng(0)
    norms = rng.lognormal(size=100).tolist() + [math.nan]
    h = grad_norm_hist(list(range(101)), norms)
    assert sum(h["counts"]) == 100 and h["nonfinite"] == 1 and len(h["edges"]) == len(h["counts"]) + 1
    assert h["edges"][0] == pytest.approx(min(norms[:100])) and h["edges"][-1] == pytest.approx(max(norms[:100]))
    assert h["steps"] == list(range(101)) and h["values"][-1] is None
    assert grad_norm_hist([1, 2], [2.0, 2.0])["counts"] == [2]


def test_head_gradient_covariance_equals_a_naive_loop():
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(12, 5)).tolist()
    got = np.asarray(head_grad_cov([f"c{i}" for i in range(5)], rows)["matrix"])
    n = len(rows)
    means = [sum(r[j] for r in rows) / n for j in range(5)]
    for a in range(5):
        for b in range(5):
            naive = sum((r[a] - means[a]) * (r[b] - means[b]) for r in rows) / (n - 1)
            assert got[a, b] == pytest.approx(naive)
    assert head_grad_cov(["a"], [[1.0]])["matrix"] == []  # one row: no covariance


def test_metric_window_keeps_the_names_the_detectors_read():
    history = [(s, {"kl/mean": s * 0.1, "kl/token_max": 1.0, "reward/mean": math.nan, "other": 1.0})
               for s in range(1, 4)]
    w = metric_window(history, ["kl/", "reward/mean"])
    assert w["steps"] == [1, 2, 3]
    assert set(w["series"]) == {"kl/mean", "kl/token_max", "reward/mean"}
    assert w["series"]["reward/mean"] == [None, None, None]
    json.dumps(w, allow_nan=False)


def sample(i: int, text: str = "answer") -> SampleRecord:
    return SampleRecord(step=3, sample_id=i, prompt="q" * 10, response=text, reward=math.nan,
                        tokens=("a",), logprobs=(-1.0,), ref_logprobs=(-1.1,), token_kl=(0.1,))


def test_samples_lose_their_token_arrays_and_long_texts_are_cut():
    d = sample_dict(sample(0, "x" * 5000))
    assert not {"tokens", "logprobs", "ref_logprobs", "token_kl"} & set(d)
    assert len(d["response"]) == 2001 and d["reward"] is None
    assert batch_payload(FindingRecord(3, "kl", "orange", "m"), [sample(0)])["batch"][0]["sample_id"] == 0


def test_a_huge_snapshot_is_shrunk_under_one_megabyte_and_says_what_was_cut():
    big = [sample(i, "y" * 1900) for i in range(400)]
    payload = diagnostic_payload(FindingRecord(3, "kl", "red", "m"), None, big[:200], big, {"steps": []},
                                 {"seed": 0})
    assert size_of(payload) <= MAX_BYTES
    assert payload["truncated"]["max_bytes"] == MAX_BYTES
    assert payload["batch"] and payload["finding"]["severity"] == "red"
    assert payload["grad_norm_hist"]["counts"] == [] and payload["head_grad_cov"]["matrix"] == []
    small = {"batch": [sample_dict(sample(0))], "last_samples": []}
    assert fit(dict(small)) == small  # nothing to cut


def test_clean_turns_non_finite_numbers_into_json_nulls():
    assert clean({"a": [math.inf, 1.0, np.float32(2.0)], "b": (math.nan,)}) == {"a": [None, 1.0, 2.0], "b": [None]}


def test_urls_are_logged_without_user_info_or_query_and_user_info_becomes_basic_auth():
    url = "https://bob:pa%40ss@hooks.example.com:8443/services/T0?token=xyz#frag"
    assert redact_url(url) == "https://hooks.example.com:8443/services/T0"
    bare, headers = split_userinfo(url)
    assert bare == "https://hooks.example.com:8443/services/T0?token=xyz#frag"
    import base64

    assert base64.b64decode(headers["Authorization"].split()[1]) == b"bob:pa@ss"
    assert split_userinfo("http://h/p") == ("http://h/p", {})
