"""The baseline run: comparing a run with a healthy run of the same recipe (issue 10, point 2's
"failures present from the first step", for the failures no level check can see)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from detector_kit import conditions, feed, first, only
from rlcockpit.diagnostics import SKIPPED, DiagnosticsConfig, Engine, registry
from rlcockpit.diagnostics.baseline import Baseline, parse_ref
from rlcockpit.errors import ConfigError

HEALTHY = {"policy/approx_kl": 2e-4, "kl/token_mean": 0.006, "policy/clip_frac": 0.002, "policy/entropy": 0.2,
           "reward/std": 0.6, "value/loss": 0.25, "grad/norm/actor": 1.0, "grad/norm/critic": 0.85,
           "response/length_mean": 12.0}


def healthy_rows(n=60, seed=0, scale=None, reward_shift=0.0):
    """A healthy-looking run: every metric within ±15% noise of its level, reward mean 0.45 ± 0.05."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row = {k: v * float(rng.uniform(0.85, 1.15)) * (scale or {}).get(k, 1.0) for k, v in HEALTHY.items()}
        row["reward/mean"] = 0.45 + float(rng.normal(0, 0.05)) + reward_shift
        rows.append(row)
    return rows


def baseline(seed=1, n=60):
    return Baseline.from_steps("healthy-s1", enumerate(healthy_rows(n, seed)))


def detector(**cfg):
    det = registry.get("baseline")(registry.get("baseline").Config(**cfg))
    det.set_baseline(baseline())
    return det


def test_a_reference_names_a_store_and_a_run_or_fails_with_a_fix_it_message():
    assert parse_ref("sqlite:///runs/a.db#ppo-1") == ("sqlite:///runs/a.db", "ppo-1")
    assert parse_ref("runs/a#b.db#run") == ("runs/a#b.db", "run")
    for bad in ("runs.db", "#run", "runs.db#"):
        with pytest.raises(ConfigError, match="STORE_URI#RUN_ID"):
            parse_ref(bad)
    with pytest.raises(ConfigError, match="STORE_URI#RUN_ID"):
        DiagnosticsConfig(baseline="runs.db")


def test_the_baseline_window_equals_a_naive_filter_on_random_series():
    rng = random.Random(4)
    for _ in range(50):
        steps = sorted(rng.sample(range(0, 300), rng.randint(1, 80)))
        rows = [(s, {"reward/mean": rng.uniform(-1, 1), "policy/entropy": math.nan if rng.random() < 0.2 else 0.3})
                for s in steps]
        base = Baseline.from_steps("b", rows)
        step, half = rng.randint(-10, 310), rng.randint(0, 20)
        naive = [m["reward/mean"] for s, m in rows if step - half <= s <= step + half]
        assert base.window("reward/mean", step, half) == naive
        finite = [m["policy/entropy"] for s, m in rows if step - half <= s <= step + half
                  and math.isfinite(m["policy/entropy"])]
        assert base.window("policy/entropy", step, half) == finite  # NaN never enters the range
        assert base.window("value/loss", step, half) == []


def test_another_healthy_seed_of_the_recipe_raises_nothing():
    for seed in (2, 3, 4):
        assert conditions(detector(), healthy_rows(seed=seed)) == []


def test_skipped_without_a_baseline_so_coverage_says_so():
    det = registry.get("baseline")()
    assert all(conds is SKIPPED for _, conds in feed(det, healthy_rows(5)))


def test_an_update_three_times_larger_from_step_one_is_yellow_and_thirty_times_orange():
    step, cond = first(detector(), healthy_rows(seed=2, scale={"policy/approx_kl": 3.0}))
    assert cond.key == "policy/approx_kl" and cond.severity == "yellow" and cond.evidence["side"] == "above"
    assert step == 4  # the 5th step: a median of the run's last 5 steps
    assert cond.evidence["onset_step"] == 0 and "healthy-s1" in cond.message
    step, cond = first(detector(), healthy_rows(seed=2, scale={"policy/approx_kl": 30.0}), "orange")
    assert cond.key == "policy/approx_kl" and cond.evidence["ratio"] > 10


def test_a_kl_pinned_far_below_the_baseline_is_seen_from_below():
    step, cond = first(detector(), healthy_rows(seed=2, scale={"kl/token_mean": 0.1}))
    assert cond.key == "kl/token_mean" and cond.evidence["side"] == "below"
    assert cond.evidence["value"] < cond.evidence["baseline_min"]


def test_a_reward_shifted_by_a_biased_head_is_a_shift_in_noise_units_never_red():
    conds = conditions(detector(), healthy_rows(seed=2, reward_shift=-0.5))
    keys = {c.key for c in conds}
    assert keys == {"reward/mean"} and {c.evidence["side"] for c in conds} == {"below"}
    assert max(abs(c.evidence["z"]) for c in conds) >= 20 and {c.severity for c in conds} <= {"yellow", "orange"}


def test_steps_past_the_end_of_the_baseline_are_not_judged():
    det = registry.get("baseline")()
    det.set_baseline(baseline(n=20))
    rows = healthy_rows(60, seed=2, scale={"policy/approx_kl": 30.0})
    judged = [s for s, conds in feed(det, rows) if conds]
    assert judged and max(judged) <= 20 + 10 - 4  # the window needs 5 baseline values


def test_the_engine_hands_the_baseline_to_the_detector_and_names_the_metric():
    engine = Engine.from_config(only("baseline"), baseline=baseline())
    found = []
    for step, row in enumerate(healthy_rows(seed=2, scale={"policy/entropy": 0.25})):
        found.extend(engine.observe(step, row))
    raised = [f for f in found if f.status == "raised"]
    assert raised and raised[0].detector == "baseline" and raised[0].evidence["key"] == "policy/entropy"
    assert "entropy" in raised[0].message and raised[0].evidence["side"] == "below"
    assert Engine.from_config(only("baseline")).detectors[0].baseline is None


def test_thresholds_are_validated_with_a_fix_it_message():
    with pytest.raises(ConfigError, match="ratio_orange"):
        DiagnosticsConfig(detectors={"baseline": {"ratio_yellow": 5.0, "ratio_orange": 2.0}})


# ---------------------------------------------------------------------------- doctor and trainer


def _record(store: str, name: str, rows: list[dict]) -> str:
    import rlcockpit

    run = rlcockpit.init(project="baseline-test", name=name, store=store)
    for step, row in enumerate(rows, start=1):
        run.log(step, row)
    run.close()
    return run.run_id


def test_doctor_compares_a_run_with_a_baseline_run_and_names_what_moved(tmp_path, capsys):
    from rlcockpit.cli import main

    store = f"sqlite:///{tmp_path / 'runs.db'}"
    good = _record(store, "good", healthy_rows(60, seed=1))
    new = _record(store, "new", healthy_rows(60, seed=2, scale={"policy/approx_kl": 30.0}))
    same = _record(store, "same-recipe", healthy_rows(60, seed=3))
    assert main(["doctor", "--store", store, "--run", new, "--baseline", good, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = [f for f in report["findings"] if f["detector"] == "baseline"]
    assert found and found[0]["evidence"]["key"] == "policy/approx_kl" and found[0]["severity"] == "orange"
    assert main(["doctor", "--store", store, "--run", same, "--baseline", f"{store}#{good}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not [f for f in report["findings"] if f["detector"] == "baseline"]
    cov = {c["detector"]: c for c in report["coverage"]["detectors"]}
    assert cov["baseline"]["state"] == "ran"
    # without a baseline the detector is skipped, and the coverage table says so
    main(["doctor", "--store", store, "--run", new, "--json"])
    cov = {c["detector"]: c for c in json.loads(capsys.readouterr().out)["coverage"]["detectors"]}
    assert cov["baseline"]["state"] == "skipped"


def test_a_baseline_that_does_not_exist_stops_the_setup_with_a_fix_it_message(tmp_path):
    from rlcockpit.diagnostics.baseline import load_baseline_ref
    from rlcockpit.store import open_store

    store = f"sqlite:///{tmp_path / 'runs.db'}"
    _record(store, "good", healthy_rows(10))
    with pytest.raises(ConfigError, match="no run 'nope'.*rlcockpit runs"):
        load_baseline_ref(f"{store}#nope", open_store)
    with pytest.raises(ConfigError, match="cannot open the store"):
        load_baseline_ref(f"sqlite:///{tmp_path / 'missing.db'}#x", open_store)


def test_the_trainer_reads_its_baseline_once_at_setup_and_refuses_a_wrong_one(tmp_path):
    from rlcockpit.trainer.diagnosis import Diagnosis

    store = f"sqlite:///{tmp_path / 'runs.db'}"
    good = _record(store, "good", healthy_rows(30))
    diag = Diagnosis(DiagnosticsConfig(baseline=f"{store}#{good}"))
    det = next(d for d in diag.engine.detectors if d.name == "baseline")
    assert det.baseline is not None and det.baseline.last_step == 30
    with pytest.raises(ConfigError, match="no run"):
        Diagnosis(DiagnosticsConfig(baseline=f"{store}#not-a-run"))
