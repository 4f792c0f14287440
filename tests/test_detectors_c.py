"""The detectors for the failure classes of issue 26: a critic that does not learn, a reward scale
that drifts, two separated reward modes, an entropy that rises before the KL follows; and the
helpers they share (typical magnitude, the two-mode split), each against a naive reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detector_kit import conditions as fired
from detector_kit import first, only
from rlcockpit.diagnostics import SKIPPED, Engine, StepView, registry
from rlcockpit.diagnostics.stats import two_mode_split
from rlcockpit.diagnostics.windows import typical_magnitude
from rlcockpit.records import SampleRecord
from streams import HEALTHY, load_samples, load_stream

NEW = ("critic_learning", "reward_drift", "entropy_trend")
PARTS = ("Failure mode", "Signal", "Default thresholds", "Practical significance",
         "False positives", "Fix")


def make(name: str, **overrides):
    cls = registry.get(name)
    return cls(cls.Config(**overrides))


def sample(step, i, reward):
    return SampleRecord(step=step, sample_id=i, prompt=f"prompt {i}", response="an answer",
                        reward=float(reward), length=10)


@pytest.mark.parametrize("name", NEW)
def test_new_detectors_are_registered_and_state_their_rule_for_practical_significance(name):
    cls = registry.get(name)
    doc = cls.__module__ and __import__(cls.__module__, fromlist=["x"]).__doc__
    assert all(part in doc for part in PARTS), name
    assert cls.family and cls.patterns


# ---------------------------------------------------------------------------- helpers


def test_typical_magnitude_is_the_high_quantile_of_the_absolute_values():
    rng = np.random.default_rng(1)
    for _ in range(30):
        x = rng.normal(size=int(rng.integers(5, 60))) * rng.choice([1e-4, 1.0, 1e4])
        x[rng.random(x.size) < 0.3] = 0.0
        got = typical_magnitude(x, min_nonzero=3)
        naive = sorted(abs(v) for v in x)
        if sum(v != 0 for v in x) < 3:
            assert got is None
            continue
        n = len(naive)
        idx = (n - 1) * 0.9
        lo = int(math.floor(idx))
        want = naive[lo] + (naive[min(lo + 1, n - 1)] - naive[lo]) * (idx - lo)
        assert got == pytest.approx(want) or (want == 0 and got is None)


def test_typical_magnitude_of_a_zero_laden_history_is_no_evidence():
    assert typical_magnitude([0.0] * 20 + [1e-3] * 3, min_nonzero=5) is None
    assert typical_magnitude([0.0] * 19 + [1.0] * 6) == 1.0  # 6 of 25 moved: the q90 reaches them
    assert typical_magnitude([float("nan")] * 10) is None


def _naive_split(x):
    v = sorted(x)
    best = None
    for cut in range(1, len(v)):
        a, b = v[:cut], v[cut:]
        ss = sum((t - np.mean(a)) ** 2 for t in a) + sum((t - np.mean(b)) ** 2 for t in b)
        if best is None or ss < best[0] - 1e-12:
            best = (ss, a, b)
    return best


def test_two_mode_split_matches_a_naive_exhaustive_search():
    rng = np.random.default_rng(7)
    for _ in range(25):
        n = int(rng.integers(8, 40))
        gap = rng.choice([0.0, 1.0, 5.0])
        x = np.concatenate([rng.normal(0, 1, n // 2), rng.normal(gap, 1, n - n // 2)])
        got = two_mode_split(x, min_share=0.0)
        _, a, b = _naive_split(x.tolist())
        d = math.sqrt(2) * abs(np.mean(b) - np.mean(a)) / math.sqrt(np.var(a) + np.var(b))
        assert got is not None and got[0] == pytest.approx(d, rel=1e-6)
        assert got[1] == pytest.approx(min(len(a), len(b)) / len(x))


def test_two_mode_split_needs_enough_values_in_each_mode():
    assert two_mode_split([0.0] * 7) is None
    assert two_mode_split([0.0] * 19 + [5.0], min_share=0.2) is None  # one outlier is no mode
    d, share = two_mode_split([0.0] * 10 + [5.0] * 10)
    assert d == math.inf and share == 0.5


# ---------------------------------------------------------------------------- critic_learning


def test_critic_learning_is_skipped_without_a_critic():
    det = make("critic_learning")
    assert det.update(StepView(0, {"policy/entropy": 0.3}, ())) is SKIPPED


def test_a_critic_that_is_never_updated_is_orange_at_the_third_step():
    rows = [{"value/loss": 0.29, "update/ratio/critic": 0.0, "grad/norm/critic": 1.0,
             "value/explained_var": -0.04}] * 10
    step, cond = first(make("critic_learning"), rows, key="frozen")
    assert (step, cond.severity) == (2, "orange") and cond.evidence["onset_step"] == 0
    assert cond.evidence["zero"] == ["update/ratio/critic"] and "never updated" in cond.message
    moving = [{**r, "update/ratio/critic": 0.002} for r in rows]
    assert first(make("critic_learning"), moving, key="frozen") == (None, None)


def test_a_critic_that_explains_nothing_is_yellow_then_orange():
    rng = np.random.default_rng(2)
    rows = [{"value/loss": 0.28, "update/ratio/critic": 0.002,
             "value/explained_var": float(rng.normal(-0.04, 0.03))} for _ in range(80)]
    found = [(c.key, c.severity) for c in fired(make("critic_learning"), rows)]
    assert found[0] == ("not_learning", "yellow") and ("not_learning", "orange") in found
    step, _ = first(make("critic_learning"), rows, key="not_learning")
    assert step == 25  # after the 25-step warm-up


def test_a_critic_that_cannot_follow_large_returns_is_not_learning():
    # rewards 100x too large for the value head: the values creep towards returns of ~40, so the
    # critic explains ~0.1 % of their variance although it is updated every step
    rng = np.random.default_rng(5)
    rows = []
    for step in range(60):
        returns = rng.normal(40.0, 30.0, 64)
        values = np.full(64, 0.03 + 0.1 * step) + rng.normal(0.0, 0.05, 64)
        ev = 1.0 - np.var(returns - values) / np.var(returns)
        rows.append({"value/loss": float(np.mean((returns - values) ** 2)), "update/ratio/critic": 0.003,
                     "value/explained_var": float(ev)})
    step, cond = first(make("critic_learning"), rows, key="not_learning")
    assert step == 25 and cond.severity == "yellow" and cond.evidence["explained_var_median"] < 0.01
    learning = [{**r, "value/explained_var": 0.05 + 0.002 * i} for i, r in enumerate(rows)]
    assert first(make("critic_learning"), learning, key="not_learning") == (None, None)


@pytest.mark.parametrize("name", [n for n in HEALTHY if "ppo" in n])
def test_recorded_healthy_ppo_runs_keep_critic_learning_quiet(name):
    rows = [m for _, m in load_stream(name)]
    assert fired(make("critic_learning"), rows) == []


# ---------------------------------------------------------------------------- reward_drift


def test_a_reward_scale_growing_8_percent_a_step_is_orange_within_20_steps():
    rng = np.random.default_rng(4)
    rows = []
    for step in range(40):
        f = 1.08 ** step
        r = rng.normal(0.4, 0.6, 32) * f
        rows.append({"reward/mean": float(r.mean()), "reward/std": float(r.std()),
                     "reward/min": float(r.min()), "reward/max": float(r.max())})
    step, cond = first(make("reward_drift"), rows, "orange", "scale")
    assert step is not None and step <= 20 and cond.evidence["growth"] >= 2


def test_a_reward_that_rises_by_learning_within_its_bounds_is_no_drift():
    # accuracy 0.05 -> 0.9 over 40 steps: the mean and the std move, the magnitude stays at 1
    rng = np.random.default_rng(5)
    rows = []
    for step in range(40):
        r = (rng.random(64) < 0.05 + 0.85 * step / 39).astype(float)
        rows.append((({"reward/mean": float(r.mean()), "reward/std": float(r.std())}),
                     [sample(step, i, v) for i, v in enumerate(r)]))
    assert fired(make("reward_drift"), rows) == []


@pytest.mark.parametrize("name", HEALTHY)
def test_recorded_healthy_runs_keep_reward_drift_quiet(name):
    samples = load_samples(name) if name != "healthy_grpo_s3" else {}
    rows = [(m, samples.get(s, ())) for s, m in load_stream(name)]
    assert fired(make("reward_drift"), rows) == []


# ---------------------------------------------------------------------------- entropy_trend


def test_an_entropy_rising_steadily_is_named_before_the_kl_runs_away():
    rng = np.random.default_rng(6)
    rows = [{"policy/entropy": float(0.2 * 1.04 ** s * (1 + 0.03 * rng.normal())),
             "kl/mean": float(0.02 * 1.1 ** s)} for s in range(40)]
    step, cond = first(make("entropy_trend"), rows, "orange", "rising")
    assert step is not None and step <= 25 and cond.evidence["ratio"] >= 1.5
    assert cond.evidence["kl_rising"] is True and "already rising" in cond.message


@pytest.mark.parametrize("name", HEALTHY)
def test_recorded_healthy_runs_keep_entropy_trend_quiet(name):
    rows = [m for _, m in load_stream(name)]
    assert fired(make("entropy_trend"), rows) == []


# ---------------------------------------------------------------------------- reward_shape bimodal


def test_two_separated_reward_modes_are_orange_a_blurred_bimodality_yellow():
    rng = np.random.default_rng(8)
    calm = [(({"reward/mean": 0.4}), [sample(s, i, v) for i, v in enumerate(rng.normal(0.4, 0.5, 32))])
            for s in range(15)]
    split = [(({"reward/mean": 2.4}), [sample(s, i, v) for i, v in enumerate(
        np.concatenate([rng.normal(0.4, 0.4, 16), rng.normal(4.4, 0.4, 16)]))])
        for s in range(15, 22)]
    step, cond = first(make("reward_shape"), calm + split, key="bimodal")
    assert cond.severity == "orange" and cond.evidence["separation"] >= 2
    assert step <= 17


def test_engine_runs_the_new_detectors_together_without_errors():
    engine = Engine.from_config(only(*NEW))
    for step, metrics in load_stream("healthy_ppo_s0"):
        engine.observe(step, metrics, wall_time=float(step))
    assert engine.errors == {}


# ---------------------------------------------------------------------------- issue 26, point 1


def test_every_builtin_detector_states_its_rule_for_practical_significance():
    """Every detector's module docstring has a paragraph starting exactly with "Practical
    significance:" (issue 26). Detectors registered by tests or plugins (defined outside
    rlcockpit's detectors package) are not rlcockpit's to document."""
    import sys

    detectors = {name: cls for name, cls in registry.available().items()
                 if cls.__module__.startswith("rlcockpit.diagnostics.detectors.")}
    assert len(detectors) >= 35
    missing = [name for name, cls in detectors.items()
               if "\nPractical significance:" not in (sys.modules[cls.__module__].__doc__ or "")]
    assert missing == []
