"""The two-track reward end to end in a short training run, and the RM detectors on metric streams:
per-sample uncertainty, gate and fallback flags in the store, the reward-model metrics, the fusion
fed by the run (docs/reward_model.md)."""

from __future__ import annotations

import numpy as np
import pytest

from rlcockpit.diagnostics.base import StepView
from rlcockpit.store.base import SampleQuery
from trainer_testkit import make_config, reader, series

RM_METRICS = ("reward/uncertainty/mean", "reward/gated_frac", "reward/fallback_frac",
              "reward/rule_rate", "reward/rm_rule_disagreement", "reward/fusion_alpha",
              "reward/fusion_beta")


def test_a_short_run_with_the_reward_model_stores_its_decisions(tmp_path):
    from rlcockpit.trainer.trainer import Trainer
    from rlcockpit.world.rm import WorldRMScore

    cfg = make_config(tmp_path, "train.steps=3", "reward.fn=rlcockpit.world.rm:score",
                      "reward.rm.fallback.embedder=ngram", "reward.rm.gating.threshold=0.02",
                      "reward.rm.fallback.uncertainty_threshold=0.03",
                      "model.threads=1")
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "finished"
    fn = trainer.reward_fn.fn
    assert isinstance(fn, WorldRMScore) and fn.cfg.gating.threshold == 0.02  # configured from reward.rm
    assert len(fn.reward.fusion.history) == 3  # one observed step each: the fusion LSTM's input
    state = trainer.state_dict()["reward_fn"]  # what a checkpoint keeps: a resumed run goes on
    assert len(state["fusion"]["history"]) == 3
    fresh = WorldRMScore(fn.cfg)
    fresh.load_state_dict(state)
    fresh(["Q: What is 1 + 2?\nA:"], [" 1 + 2 = \\boxed{3}"], [{"category": "math", "answer": "3"}], 4)
    assert fresh.reward.fusion.state_dict() == state["fusion"]
    got = series(cfg, result.run_id)
    for name in RM_METRICS:
        assert sorted(s for s, _ in got[name]) == [1, 2, 3], name
    assert dict(got["reward/fusion_beta"])[1] == pytest.approx(0.2)  # no history yet: at rest
    r = reader(cfg)
    try:
        samples = r.query_samples(result.run_id, SampleQuery(limit=500)).items
        review = r.query_samples(result.run_id, SampleQuery(flags=("needs_review",), limit=500)).items
    finally:
        r.close()
    assert samples and all(s.uncertainty is not None and s.uncertainty >= 0 for s in samples)
    assert {"helpfulness", "correctness", "harmlessness", "rule"} <= set(samples[0].components)
    for s in samples:
        assert s.reward == pytest.approx(sum(s.components.values()), abs=1e-6)
        assert ("rm_gated" in s.flags) == (s.uncertainty > 0.02)
        assert ("needs_review" in s.flags) == ("rm_fallback" in s.flags)
        fallback = any(f.startswith("rule_") for f in s.flags) or s.uncertainty > 0.03
        assert ("needs_review" in s.flags) == fallback
        if fallback:  # the rules' +1 / -1 replaced the model's score
            assert abs(s.reward) == pytest.approx(1.0)
    assert review and all("needs_review" in s.flags for s in review)
    gated = np.mean([("rm_gated" in s.flags) for s in samples if s.step == 1])
    assert dict(got["reward/gated_frac"])[1] == pytest.approx(gated)


def _feed(detector, name: str, values, extra=None) -> list:
    out = []
    for step, v in enumerate(values, start=1):
        out.append(detector.update(StepView(step, {name: v, **(extra or {})})))
    return out


def test_rm_detectors_skip_without_a_reward_model():
    from rlcockpit.diagnostics.base import SKIPPED
    from rlcockpit.diagnostics.detectors.rm_fallback_rise import RMFallbackRise
    from rlcockpit.diagnostics.detectors.rm_rule_disagreement import RMRuleDisagreement
    from rlcockpit.diagnostics.detectors.rm_uncertainty import RMUncertainty

    for det in (RMUncertainty(), RMFallbackRise(), RMRuleDisagreement()):
        assert det.update(StepView(1, {"reward/mean": 0.3})) is SKIPPED


def test_rm_uncertainty_detector_fires_on_a_rise_and_on_the_seeds_30_percent_gated():
    from rlcockpit.diagnostics.detectors.rm_uncertainty import RMUncertainty

    calm = _feed(RMUncertainty(), "reward/uncertainty/mean", [0.05 + 0.001 * (i % 3) for i in range(40)])
    assert all(c is None for c in calm)
    rising = _feed(RMUncertainty(), "reward/uncertainty/mean", [0.05 + 0.004 * i for i in range(25)])
    assert rising[-1] is not None and rising[-1].severity == "yellow" and rising[-1].key == "rising"
    gated = _feed(RMUncertainty(), "reward/gated_frac", [0.05] * 5 + [0.32] * 3 + [0.7] * 3)
    assert gated[7].severity == "yellow" and gated[-1].severity == "orange"


def test_rm_fallback_rise_detector_fires_on_a_climb_not_on_noise():
    from rlcockpit.diagnostics.detectors.rm_fallback_rise import RMFallbackRise

    rng = np.random.default_rng(0)
    noise = _feed(RMFallbackRise(), "reward/fallback_frac", 0.2 + rng.normal(0, 0.03, 60))
    assert all(c is None for c in noise)
    climb = _feed(RMFallbackRise(), "reward/fallback_frac", [0.1 + 0.02 * i for i in range(25)],
                  {"reward/rule_rate": 0.5})
    assert climb[-1] is not None and climb[-1].severity == "orange"
    assert climb[-1].evidence["cause"] == "rules firing"


def test_rm_rule_disagreement_detector_fires_on_a_held_level():
    from rlcockpit.diagnostics.detectors.rm_rule_disagreement import RMRuleDisagreement

    out = _feed(RMRuleDisagreement(), "reward/rm_rule_disagreement", [0.1] * 5 + [0.3] * 3 + [0.6] * 3)
    assert out[5] is None and out[7].severity == "yellow" and out[-1].severity == "orange"


# reward/rm_rule_disagreement of benchmarks/rm_gating.py seed 0, the filler-paying reward model alone
HACKED = [0.031, 0.188, 0.156, 0.062, 0.281, 0.125, 0.062, 0.062, 0.094, 0.062, 0.031, 0.156, 0.188,
          0.094, 0.156, 0.094, 0.188, 0.156, 0.125, 0.25, 0.125, 0.125, 0.188, 0.25, 0.094, 0.125,
          0.156, 0.188, 0.094, 0.156, 0.156, 0.219, 0.188, 0.219, 0.156, 0.219, 0.312, 0.188, 0.188,
          0.094]


def test_rm_rule_disagreement_detector_catches_the_slow_drift_of_the_hacked_run_not_noise():
    from rlcockpit.diagnostics.detectors.rm_rule_disagreement import RMRuleDisagreement, welch_rise

    out = _feed(RMRuleDisagreement(), "reward/rm_rule_disagreement", HACKED)
    fired = [i + 1 for i, c in enumerate(out) if c is not None]
    assert fired and fired[0] == 37 and out[36].key == "drift" and out[36].severity == "yellow"
    rng = np.random.default_rng(1)
    for _ in range(20):  # a flat share of 32 samples per step: binomial noise only
        calm = rng.binomial(32, 0.06, 60) / 32
        assert all(c is None for c in _feed(RMRuleDisagreement(), "reward/rm_rule_disagreement", calm))
    rise, p = welch_rise(np.array([0.1, 0.12, 0.08]), np.array([0.2, 0.22, 0.18]))
    assert rise == pytest.approx(0.1) and p < 1e-6


def test_rm_gating_benchmark_quick_prints_both_arms_as_json(capsys):
    import importlib.util
    import json
    from pathlib import Path

    from rlcockpit.world.rm import RM_CHECKPOINT

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "rm_gating.py"
    spec = importlib.util.spec_from_file_location("rm_gating_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--rm-dir", str(RM_CHECKPOINT)]) == 0  # an existing RM: no training
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) >= {"rm_alone", "rm_gated", "runs"} and len(result["runs"]) == 2
    assert result["rm_alone"]["needs_review"] == 0.0 and result["rm_alone"]["effective"] == 1.0
    for arm in ("rm_alone", "rm_gated"):
        assert 0.0 <= result[arm]["filler_last"] <= 1.0 and result[arm]["kl_last"] >= 0.0
