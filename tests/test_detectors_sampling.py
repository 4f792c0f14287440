"""The `sampling` detector: rollouts sampled far colder than the policy (a temperature set or changed
to well below 1), judged from the logged temperature at once, with the entropy as context."""

from __future__ import annotations

import pytest

from detector_kit import feed
from rlcockpit.diagnostics import SKIPPED, DiagnosticsConfig, Engine, registry
from rlcockpit.errors import ConfigError


def make(**overrides):
    cls = registry.get("sampling")
    return cls(cls.Config(**overrides))


def severities(rows):
    return [(step, r if r is SKIPPED else (r[0].severity if r else None))
            for step, r in feed(make(), rows)]


@pytest.mark.parametrize("temperature, expected", [
    (1.0, None), (0.7, None), (0.6, None),  # healthy RL rollouts: 0.6-1.0
    (0.59, "yellow"), (0.41, "yellow"), (0.4, "orange"), (0.3, "orange"), (0.05, "orange")])
def test_temperature_levels_are_judged_at_the_first_step(temperature, expected):
    assert severities([{"rollout/temperature": temperature, "policy/entropy": 0.02}]) == [(0, expected)]


def test_the_finding_names_the_temperature_the_sharpening_and_the_entropy():
    (cond,) = make().update(_view(5, {"rollout/temperature": 0.3, "policy/entropy": 0.026}))
    assert cond.key == "temperature" and cond.severity == "orange" and "temperature 0.3 since step 5" in cond.message
    assert "logits × 3.3" in cond.message and "0.026 nats" in cond.message
    assert cond.evidence["onset_step"] == 5 and cond.evidence["pattern"] == "entropy_collapse"
    assert "温度 0.3" in cond.message_zh


def test_a_live_change_back_to_a_warm_temperature_ends_it_and_a_new_drop_has_its_own_onset():
    rows = [{"rollout/temperature": t} for t in (1.0, 0.3, 0.3, 1.0, 0.35)]
    got = [(s, r[0].evidence["onset_step"] if r else None) for s, r in feed(make(), rows)]
    assert got == [(0, None), (1, 1), (2, 1), (3, None), (4, 4)]


@pytest.mark.parametrize("top_p, expected", [
    (1.0, None), (0.9, None), (0.8, None), (0.79, "yellow"), (0.51, "yellow"), (0.5, "orange"),
    (0.05, "orange")])
def test_a_narrow_nucleus_is_judged_like_a_cold_temperature(top_p, expected):
    got = make().update(_view(1, {"rollout/temperature": 1.0, "rollout/top_p": top_p}))
    assert [(c.key, c.severity) for c in got] == ([("top_p", expected)] if expected else [])
    if expected == "orange":
        assert f"{1 - top_p:.0%} of the policy's probability mass is never sampled" in got[0].message


def test_temperature_and_top_p_are_two_findings_each_with_its_own_onset():
    det = make()
    det.update(_view(1, {"rollout/temperature": 0.3, "rollout/top_p": 1.0}))
    got = det.update(_view(2, {"rollout/temperature": 0.3, "rollout/top_p": 0.4}))
    assert {c.key: c.evidence["onset_step"] for c in got} == {"temperature": 1, "top_p": 2}


def test_runs_without_a_logged_temperature_skip_it_and_bad_thresholds_fail_at_setup():
    assert severities([{"policy/entropy": 0.001}]) == [(0, SKIPPED)]
    assert not registry.get("sampling").able(frozenset({"policy/entropy"}), False)
    assert registry.get("sampling").able(frozenset({"rollout/top_p"}), False)
    with pytest.raises(ConfigError, match="cold"):
        make(cold=0.7, low=0.6)


def test_the_engine_raises_one_orange_finding_for_a_run_sampled_cold_from_step_1():
    engine = Engine.from_config(DiagnosticsConfig())
    found = [f for s in range(1, 30)
             for f in engine.observe(s, {"rollout/temperature": 0.3, "policy/entropy": 0.02})
             if f.detector == "sampling"]
    assert [(f.step, f.severity, f.status) for f in found] == [(1, "orange", "raised")]


def _view(step, metrics):
    from rlcockpit.diagnostics import StepView

    return StepView(step, metrics, ())
