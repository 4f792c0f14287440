"""The `reward_consistency` detector: identical answers to the same prompt paid differently (a
reward of noise, rewards matched to the wrong samples, a judge sampling at a temperature), from the
samples alone. A deterministic reward gives exactly no difference."""

from __future__ import annotations

import random

import pytest

from rlcockpit.diagnostics import SKIPPED, DiagnosticsConfig, Engine, StepView, registry
from rlcockpit.errors import ConfigError
from rlcockpit.records import SampleRecord

PROMPTS = [f"What is {i} + {i}?" for i in range(16)]


def make(**overrides):
    cls = registry.get("reward_consistency")
    return cls(cls.Config(**overrides))


def batch(step, reward_of, *, uncertainty=None, n=16):
    """16 prompts, each answered with one of two fixed answers (so answers repeat across steps)."""
    out = []
    for i in range(n):
        prompt = PROMPTS[(i + step) % len(PROMPTS)]
        response = f"{i % 2 + (step % 2)}" if i % 3 else "  the answer is 4 "
        out.append(SampleRecord(step=step, sample_id=i, prompt=prompt, response=response,
                                reward=reward_of(prompt, response, step), uncertainty=uncertainty))
    return out


def run(det, reward_of, steps=12, metrics=None, **kw):
    found = []
    for step in range(1, steps + 1):
        cond = det.update(StepView(step, dict(metrics or {}), tuple(batch(step, reward_of, **kw))))
        found.append(cond)
    return found


def deterministic(prompt, response, step):
    return float(len(prompt) % 3) + (1.0 if "4" in response else 0.0)


def test_a_deterministic_reward_with_many_repeated_answers_raises_nothing():
    got = run(make(), deterministic, steps=30)
    assert got.count(None) == 30


def test_a_reward_of_noise_is_orange_once_twenty_answers_repeat():
    rng = random.Random(0)
    got = run(make(), lambda p, r, s: rng.uniform(-1, 1), steps=12)
    first = next(i for i, c in enumerate(got) if c is not None)
    cond = got[first]
    assert cond.severity == "orange" and cond.evidence["pairs"] >= 20
    assert cond.evidence["noise_share"] > 0.5 and "paid differently" in cond.message
    assert cond.evidence["pattern"] == "reward_volatility" and "奖励并不只取决于回答" in cond.message_zh


@pytest.mark.parametrize("jitter, expected", [(0.02, None), (0.25, "yellow"), (1.0, "orange")])
def test_the_severity_follows_the_noise_share_of_the_reward_variance(jitter, expected):
    rng = random.Random(1)
    got = run(make(), lambda p, r, s: deterministic(p, r, s) + rng.gauss(0, jitter), steps=20)
    assert got[-1] is None if expected is None else got[-1].severity == expected


def test_a_live_reward_scale_change_is_not_noise_and_gated_reward_model_samples_are_left_out():
    det = make()
    for step in range(1, 21):
        scale = 1.0 if step < 10 else 3.0
        view = StepView(step, {"reward/scale": scale},
                        tuple(batch(step, lambda p, r, s, k=scale: k * deterministic(p, r, s))))
        assert det.update(view) is None
    rng = random.Random(2)
    got = run(make(), lambda p, r, s: rng.uniform(-1, 1), steps=12, uncertainty=0.2)
    assert got.count(None) == 12


def test_answers_further_apart_than_the_window_are_not_compared():
    got = run(make(window=1), lambda p, r, s: float(s), steps=12)  # the reward grows with the step
    assert got.count(None) == 12  # each answer recurs 2+ steps later only
    got = run(make(window=50), lambda p, r, s: float(s), steps=12)
    assert any(c is not None for c in got)  # a reward that changes with time, within the window


def test_no_samples_skip_it_and_thresholds_are_checked():
    det = make()
    assert det.update(StepView(1, {"reward/mean": 0.5}, ())) is SKIPPED
    assert not registry.get("reward_consistency").able(frozenset({"reward/scale"}), False)
    assert registry.get("reward_consistency").able(frozenset(), True)
    with pytest.raises(ConfigError, match="orange"):
        make(yellow=0.6, orange=0.5)


def test_the_engine_raises_it_once_for_a_noisy_run():
    engine = Engine.from_config(DiagnosticsConfig())
    rng = random.Random(3)
    found = [f for step in range(1, 40)
             for f in engine.observe(step, {"reward/mean": 0.0},
                                     batch(step, lambda p, r, s: rng.uniform(-1, 1)))
             if f.detector == "reward_consistency"]
    assert [f.status for f in found] == ["raised"] and found[0].severity == "orange"


def test_a_moving_fusion_weight_starts_a_new_memory_and_a_fixed_one_does_not():
    det = make()
    for step in range(1, 21):  # the LSTM fusion re-weighs every answer each step, by design
        alpha = 0.8 + 0.01 * (step % 5)
        view = StepView(step, {"reward/fusion_alpha": alpha},
                        tuple(batch(step, lambda p, r, s, a=alpha: a * deterministic(p, r, s))))
        assert det.update(view) is None
    rng = random.Random(4)
    det = make()
    got = [det.update(StepView(step, {"reward/fusion_alpha": 1.0},
                               tuple(batch(step, lambda p, r, s: rng.uniform(-1, 1)))))
           for step in range(1, 13)]
    assert any(c is not None and c.severity == "orange" for c in got)
