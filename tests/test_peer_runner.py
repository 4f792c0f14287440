"""benchmarks/_peer_runner.py's pure parts: the name maps from rlcockpit's catalog to each peer's own
names, and the synthetic failure of --self-check. The peers themselves live only in .benchvenv-peers
(`.benchvenv-peers/bin/python benchmarks/_peer_runner.py --self-check` runs them); nothing here imports
them."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from rlcockpit.metrics.catalog import is_catalog_name

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("_peer_runner", ROOT / "benchmarks" / "_peer_runner.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_peer_runner"] = mod
    spec.loader.exec_module(mod)
    return mod


pr = _load()


def _row(step: int = 1, **metrics):
    return {"step": step, "metrics": metrics, "samples": []}


def test_every_mapped_name_is_an_rlcockpit_catalog_name():
    ours = (list(pr.RLWATCH_KWARGS.values()) + list(pr.RLPROBE_FIELDS.values())
            + [o for o, _ in pr.RLDOCTOR_KEYS.values()]
            + [o for n, (o, _) in pr.TRAINPULSE_NAMES.items() if n != "step_time"])
    missing = sorted({n for n in ours if not is_catalog_name(n)})
    assert missing == []


def test_kl_goes_to_each_peer_as_its_per_token_kl():
    row = _row(**{"kl/token_mean": 0.02, "kl/mean": 0.3, "policy/entropy": 0.2})
    assert pr.rldoctor_record(row)["kl"] == 0.02  # rldoctor's alias table: TRL "kl"; it skipped kl_drift before
    assert pr.rlwatch_kwargs(row)["kl_divergence"] == 0.02
    assert pr.rlprobe_step(row)["kl_mean"] == 0.02
    assert pr.rldoctor_record(row)["entropy"] == 0.2
    assert "kl/mean" not in pr.rldoctor_record(row)  # our catalog names are never passed through


def test_reward_components_exclude_categories_and_aggregates():
    row = _row(**{"reward/helpfulness/mean": 0.1, "reward/raw/mean": 0.5, "reward/normalized/mean": 0.0,
                  "reward/category/math/mean": 0.4, "reward/mean": 0.5, "reward/format/mean": float("nan")})
    assert pr.reward_components(row["metrics"]) == {"helpfulness": 0.1}
    rec = pr.rldoctor_record(row)
    assert rec["rewards/helpfulness/mean"] == 0.1 and rec["reward"] == 0.5
    assert not any(k.startswith("reward/") for k in rec)  # rldoctor would read reward/raw/mean as a component
    assert pr.rlprobe_step(row)["reward_components"] == {"helpfulness": 0.1}


def test_missing_metrics_are_not_invented_and_nan_is_kept():
    row = _row(**{"policy/loss": float("nan")})
    kw = pr.rlwatch_kwargs(row)
    assert math.isnan(kw["loss"]) and kw["entropy"] is None and kw["rewards"] is None
    assert set(pr.rlprobe_step(row)) == {"loss"}
    assert pr.trainpulse_metrics(row).keys() == {"loss"}


def test_trainpulse_step_time_sums_the_step_phases_without_init():
    row = _row(**{"time/rollout_s": 0.5, "time/update_s": 1.25, "time/init_s": 11.0, "grad/norm/actor": 2.0})
    assert pr.trainpulse_metrics(row) == {"step_time": 1.75, "grad_norm": 2.0}


def test_samples_feed_rewards_and_drop_nonfinite_for_rlprobe():
    row = {"step": 3, "metrics": {}, "samples": [
        {"reward": 1.0, "length": 5, "response": "a", "prompt_id": "p", "components": {"h": 1.0}, "truncated": False},
        {"reward": float("nan"), "length": 6, "response": "b", "prompt_id": "p", "components": {}, "truncated": True}]}
    assert pr.rlwatch_kwargs(row)["rewards"][0] == 1.0 and math.isnan(pr.rlwatch_kwargs(row)["rewards"][1])
    s = pr.rlprobe_samples(row)
    assert [x["reward_total"] for x in s] == [1.0, None] and s[1]["sample_id"] == "3-1"


def test_run_config_from_head_and_first_step():
    head = {"run": "r", "onset": 5, "algo": "grpo", "config": {"group_size": 4}}
    cfg = pr.run_config(head, [_row(**{"kl/coef": 0.05, "rollout/max_new_tokens": 24.0})])
    assert cfg == {"algorithm": "grpo", "kl_coef": 0.05, "max_new_tokens": 24, "group_size": 4}


def test_synthetic_stream_fails_at_the_onset_and_is_deterministic():
    head, rows = pr.synthetic_stream(steps=120, onset=60)
    assert head["onset"] == 60 and len(rows) == 120 and rows[0]["step"] == 1
    before, after = rows[58]["metrics"], rows[-1]["metrics"]
    assert before["kl/token_mean"] < 0.02 and after["kl/token_mean"] > 2.0
    assert before["policy/entropy"] > 1.5 and after["policy/entropy"] < 0.1
    assert math.isnan(rows[95]["metrics"]["policy/loss"]) and not math.isnan(rows[80]["metrics"]["policy/loss"])
    assert len({s["reward"] for s in rows[-1]["samples"]}) == 1
    assert json.dumps(pr.synthetic_stream()) == json.dumps(pr.synthetic_stream())


def test_every_peer_has_its_self_check_detectors_and_limits():
    assert set(pr.SELF_CHECK_EXPECTED) == set(pr.PEERS) == set(pr.CANNOT_FIRE)


def test_load_stream_rejects_a_file_without_a_head(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text(json.dumps({"step": 1, "metrics": {}}) + "\n")
    with pytest.raises(ValueError, match="not a peer stream"):
        pr.load_stream(bad)
    good = tmp_path / "y.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in [{"run": "r", "onset": None, "algo": "ppo"}, _row()]) + "\n")
    assert pr.load_stream(good)[1] == [_row()]


def test_a_missing_peer_is_reported_not_hidden(tmp_path, monkeypatch):
    stream = tmp_path / "s.jsonl"
    stream.write_text("\n".join(json.dumps(x) for x in [{"run": "r", "onset": None, "algo": "ppo"}, _row()]) + "\n")
    # a peer whose distribution is installed nowhere (the real peers may be installed here or not)
    _, fn, driven, mapping = pr.PEERS["trainpulse"]
    monkeypatch.setitem(pr.PEERS, "trainpulse", ("rlcockpit-no-such-peer", fn, driven, mapping))
    out = pr.run_all([stream], ["trainpulse"])
    assert out == {"trainpulse": {"error": f"rlcockpit-no-such-peer is not installed in {sys.executable}"}}
