"""The diagnostics engine: alert hygiene, incidents with their first mover, fail-soft detectors,
skipped inputs, config errors, and the documented user-defined detector run by from_config."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from detector_kit import only
from rlcockpit.diagnostics import (
    SKIPPED,
    Condition,
    Detector,
    DiagnosticsConfig,
    Engine,
    group,
    register,
    registry,
)
from rlcockpit.diagnostics.reference import PARTS, builtin_detectors, docstring_parts, render
from rlcockpit.errors import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "diagnostics.md"


def feed(engine: Engine, rows, start: int = 0, kl_target: float | None = 1.0):
    """Observe the rows; a KL row gets the target (nats per sequence) the trainer logs."""
    out = []
    for i, metrics in enumerate(rows):
        if "kl/mean" in metrics and kl_target is not None:
            metrics = {"kl/target": kl_target, **metrics}
        out += engine.observe(start + i, metrics, wall_time=float(start + i))
    return out


# ---------------------------------------------------------------------------- hygiene


def test_a_condition_is_raised_once_escalated_once_and_resolved_after_resolve_after_steps():
    engine = Engine.from_config(only("kl_tiers", resolve_after_severe=3))
    findings = feed(engine, [{"kl/mean": 0.5}] * 10 + [{"kl/mean": 1.8}] * 10
                    + [{"kl/mean": 3.0}] * 10 + [{"kl/mean": 0.5}] * 10)
    got = [(f.step, f.status, f.severity) for f in findings]
    assert got == [(12, "raised", "yellow"), (22, "escalated", "red"), (32, "resolved", "red")]
    assert findings[0].incident == findings[1].incident == findings[2].incident
    assert findings[2].evidence["raised_step"] == 12
    assert engine.status["kl_tiers"] == "ok" and engine.active() == {}


def test_a_red_condition_that_recurs_within_resolve_after_severe_is_one_finding():
    # intermittent spikes (real run 013: a loss exploding every 50-100 steps) must not raise a
    # new red finding each time; a yellow one resolves after resolve_after as before
    calm, high = [{"kl/mean": 0.5}] * 10, [{"kl/mean": 3.0}] * 5
    rows = calm + high + calm * 2 + high + calm * 6
    findings = feed(Engine.from_config(only("kl_tiers", resolve_after_severe=50)), rows)
    assert [(f.step, f.status, f.severity) for f in findings] == [
        (12, "raised", "red"), (89, "resolved", "red")]  # quiet from step 40: 50 absent steps
    eager = feed(Engine.from_config(only("kl_tiers", resolve_after_severe=3)), rows)
    assert [f.status for f in eager] == ["raised", "resolved", "raised", "resolved"]


def test_status_reports_firing_while_active_and_ok_after():
    engine = Engine.from_config(only("kl_tiers"))
    feed(engine, [{"kl/mean": 12.0}] * 2)
    assert engine.status["kl_tiers"] == "firing:black"
    assert engine.active() == {("kl_tiers", ""): "black"}


def test_a_condition_absent_fewer_than_resolve_after_steps_stays_open():
    # a 2-step dip, then 2 steps before kl_tiers' 3-step streak holds again: 4 absent steps
    rows = [{"kl/mean": 2.0}] * 5 + [{"kl/mean": 0.5}] * 2 + [{"kl/mean": 2.0}] * 5
    patient = feed(Engine.from_config(only("kl_tiers", resolve_after=5)), rows)
    assert [f.status for f in patient] == ["raised"]
    eager = feed(Engine.from_config(only("kl_tiers", resolve_after=3)), rows)
    assert [(f.step, f.status) for f in eager] == [(2, "raised"), (7, "resolved"), (9, "raised")]


def test_heartbeat_tick_raises_red_once_and_resolves_when_steps_resume():
    engine = Engine.from_config(only("stall", detectors={"stall": {"heartbeat_s": 60}}))
    feed(engine, [{"reward/mean": 0.5, "kl/mean": 0.3}] * 3)  # last step at wall time 2 s
    assert engine.tick(30.0) == []
    (finding,) = engine.tick(100.0)
    assert (finding.detector, finding.severity, finding.evidence["key"]) == (
        "stall", "red", "heartbeat")
    assert finding.evidence["silent_s"] == 98.0
    assert engine.tick(200.0) == []  # still silent: no repeat
    resumed = feed(engine, [{"reward/mean": 0.5, "kl/mean": 0.3}] * 3, start=3)
    assert [(f.status, f.evidence["key"]) for f in resumed] == [("resolved", "heartbeat")]
    (incident,) = group([finding, *resumed])
    assert incident.resolved  # the resolution of a keyed condition closes its incident


def test_a_resolved_finding_with_nan_evidence_stays_json_safe():
    engine = Engine.from_config(only("critic", resolve_after_severe=3))
    rows = [{"value/loss": 0.2}] * 5 + [{"value/loss": float("nan")}] + [{"value/loss": 0.2}] * 3
    findings = feed(engine, rows)
    assert [(f.status, f.evidence["key"]) for f in findings] == [
        ("raised", "divergence"), ("resolved", "divergence")]
    assert all(f.evidence["value_loss"] == "NaN" for f in findings)
    assert group(findings)[0].resolved


# ---------------------------------------------------------------------------- incidents


def _kl_then_clip():
    rows = []
    for step in range(40):
        kl = 1.8 if step >= 20 else 0.5  # KL above 1.5× target from step 20 (yellow at 22)
        clip = 0.6 if step >= 26 else 0.1  # clip fraction out of band from step 26
        rows.append({"kl/mean": kl, "policy/clip_frac": clip})
    return rows


def test_two_detectors_within_the_window_share_an_incident_named_by_the_first_mover():
    engine = Engine.from_config(only("kl_tiers", "clip_band"))
    findings = feed(engine, _kl_then_clip())
    raised = [f for f in findings if f.status == "raised"]
    # clip_band judges the median of 10 steps: out of band from 26, yellow at 30 (then orange)
    assert [(f.detector, f.step) for f in raised] == [("kl_tiers", 22), ("clip_band", 30)]
    assert raised[0].incident == raised[1].incident
    (incident,) = group(findings)
    assert incident.summary == "KL moved 6 steps before clip fraction"
    assert incident.detectors == ("kl_tiers", "clip_band")
    assert "6" in incident.summary_zh and "KL" in incident.summary_zh


def test_findings_far_apart_open_separate_incidents():
    engine = Engine.from_config(only("kl_tiers", "clip_band", incident_window=3))
    findings = feed(engine, _kl_then_clip())
    raised = [f for f in findings if f.status == "raised"]
    assert raised[0].incident != raised[1].incident
    assert len(group(findings)) == 2


# ---------------------------------------------------------------------------- fail soft


class _Broken(Detector):
    name = "test_broken"
    reads = ("kl/mean",)

    def update(self, view):
        if view.step == 3:
            raise ZeroDivisionError("bug in a user detector")
        return None


def test_a_detector_that_raises_is_switched_off_and_the_others_go_on():
    kl_tiers = registry.get("kl_tiers")()
    engine = Engine([_Broken(), kl_tiers], DiagnosticsConfig())
    findings = feed(engine, [{"kl/mean": 0.5}] * 5 + [{"kl/mean": 12.0}] * 2)
    assert engine.status["test_broken"] == "error"
    assert "ZeroDivisionError" in engine.errors["test_broken"]
    assert [(f.detector, f.severity) for f in findings] == [("kl_tiers", "black")]


def test_missing_inputs_are_reported_as_skipped_not_errors():
    engine = Engine.from_config(only("critic", "kl_tiers", "memory"))
    assert feed(engine, [{"reward/mean": 0.5, "kl/mean": 0.2}] * 3) == []
    assert engine.status == {"critic": "skipped", "kl_tiers": "ok", "memory": "skipped"}
    assert engine.errors == {}


def test_a_detector_is_reported_waiting_before_its_first_step():
    assert set(Engine.from_config(only("entropy")).status.values()) == {"waiting"}


# ---------------------------------------------------------------------------- config errors


def test_unknown_detector_names_suggest_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'kl_tiers'"):
        DiagnosticsConfig(detectors={"kl_tier": {"target": 0.05}})
    with pytest.raises(ConfigError, match="did you mean 'memory'"):
        DiagnosticsConfig(disabled=("memroy",))


@pytest.mark.parametrize("override, message", [
    ({"yellow_ratio": "high"}, "wrong type"),
    ({"yellow_ratio": 0.5}, "out of range"),
    ({"yelow_ratio": 2.0}, "did you mean 'diagnostics.detectors.kl_tiers.yellow_ratio'"),
    ({"yellow_ratio": 3.0, "red_ratio": 2.0}, "red_ratio"),
])
def test_bad_thresholds_fail_at_setup_with_the_key(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        DiagnosticsConfig(detectors={"kl_tiers": override})


def test_overrides_reach_the_detector():
    engine = Engine.from_config(only("kl_tiers", detectors={"kl_tiers": {"target": 0.05}}))
    (det,) = engine.detectors
    assert det.config.target == 0.05
    assert [f.severity for f in feed(engine, [{"kl/mean": 0.2}] * 3, kl_target=None)] == ["red"]


# ---------------------------------------------------------------------------- user detector


def _doc_example() -> str:
    """The first python block of docs/diagnostics.md "## Writing your own detector"."""
    section = DOCS.read_text(encoding="utf-8").split("## Writing your own detector", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.fixture
def user_detector():
    module = types.ModuleType("my_detectors")  # the user's own module, as if imported
    sys.modules[module.__name__] = module
    exec(compile(_doc_example(), "docs/diagnostics.md", "exec"), module.__dict__)  # noqa: S102
    yield module.RewardFloor
    registry._REGISTRY.pop("reward_floor", None)  # keep other tests' registry unchanged
    del sys.modules[module.__name__]


def test_the_documented_user_detector_runs_through_from_config(user_detector):
    assert registry.get("reward_floor") is user_detector
    cfg = only("reward_floor", "kl_tiers", detectors={"reward_floor": {"floor": 0.2}})
    engine = Engine.from_config(cfg)
    findings = feed(engine, [{"reward/mean": 0.5}] * 5 + [{"reward/mean": 0.1}] * 6)
    assert [(f.detector, f.step, f.severity, f.status) for f in findings] == [
        ("reward_floor", 9, "red", "raised")]
    assert findings[0].evidence["onset_step"] == 5
    assert findings[0].patterns == ("training_stall",)
    assert feed(Engine.from_config(cfg), [{"kl/mean": 0.1}]) == []
    with pytest.raises(ConfigError, match="range"):
        DiagnosticsConfig(detectors={"reward_floor": {"steps": 0}})


def test_register_refuses_a_nameless_detector_and_a_name_clash():
    class Nameless(Detector):
        def update(self, view):
            return None

    with pytest.raises(ConfigError, match="no `name`"):
        register(Nameless)

    class Clash(Detector):
        name = "kl_tiers"

        def update(self, view):
            return SKIPPED

    with pytest.raises(ConfigError, match="two detectors are named 'kl_tiers'"):
        register(Clash)


def test_condition_refuses_an_unknown_severity():
    with pytest.raises(ValueError, match="severity"):
        Condition("purple", "no such tier")


# ---------------------------------------------------------------------------- docs


def test_docs_detector_reference_is_the_generated_text():
    current = DOCS.read_text(encoding="utf-8")
    assert current == render(current), ("docs/diagnostics.md is stale: "
                                        "python -m rlcockpit.diagnostics.reference --write "
                                        "docs/diagnostics.md")


def test_every_builtin_detector_is_documented_with_every_part_scale_assumptions_included():
    text = DOCS.read_text(encoding="utf-8")
    for name, cls in builtin_detectors().items():
        assert f"### `{name}`" in text
        title, parts = docstring_parts(cls)
        missing = [p for p in PARTS if p not in parts]
        assert title and not missing, f"{name}'s docstring lacks {missing}"


class _Unchanged(Detector):
    name = "test_unchanged"
    signal = "level"

    def update(self, view):
        before, now = (0.5, 0.5) if view.step < 5 else (0.5, 0.2)
        return Condition("orange", f"level fell to {now} from {before}",
                         {"mean_now": now, "mean_reference": before})


def test_a_condition_whose_before_and_after_are_equal_is_never_raised():
    engine = Engine([_Unchanged()], DiagnosticsConfig())
    findings = feed(engine, [{"x": 1.0}] * 7)
    assert [(f.step, f.status) for f in findings] == [(5, "raised")]
    assert findings[0].evidence["mean_now"] == 0.2


def test_a_one_signal_incident_summary_speaks_chinese_when_the_detector_did():
    engine = Engine.from_config(only("kl_tiers"))
    findings = feed(engine, [{"kl/mean": 0.5}] * 3 + [{"kl/mean": 3.0}] * 3)
    (inc,) = group(findings)
    assert inc.summary.startswith("KL: KL 3 per sequence")
    assert inc.summary_zh.startswith("KL：KL 3 为目标值") and "per sequence" not in inc.summary_zh
