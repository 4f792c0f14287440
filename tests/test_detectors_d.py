"""Detection on noisy, small-batch and reward-only logs (issue 26, calibration half of the real
corpus): a length "collapse" that is the run's own noise, a fast rise back to a level the run held,
a flat reward with no KL logged, a reward frozen at one value, single-step spikes against ones that
hold, and a held condition that grows by orders of magnitude ("worsened")."""

from __future__ import annotations

import numpy as np

from detector_kit import conditions as fired
from detector_kit import first, only
from rlcockpit.diagnostics import NEWS, Engine, registry


def make(name: str, **overrides):
    cls = registry.get(name)
    return cls(cls.Config(**overrides))


def lengths(rows):
    return [{"response/length_mean": float(v)} for v in rows]


# ---------------------------------------------------------------------------- length collapse


def test_a_small_batch_whose_length_swings_below_the_collapse_level_is_not_a_collapse():
    # 4 answers per step (MiniMind, real run 006): the step mean swings 17-500 tokens; ~6% of the
    # steps fall below 20% of the early level, so two low steps in a row happen by chance
    rng = np.random.default_rng(6)
    noisy = np.clip(rng.gamma(2.2, 100.0, size=3000), 5, 512)
    noisy[:3] = [280, 300, 290]
    assert (noisy < 0.2 * 290).mean() > 0.03
    assert [c for c in fired(make("length_hacking"), lengths(noisy)) if c.key == "collapse"] == []
    # a real collapse in the same run still is one: the answers stay at 1-3 tokens
    collapsed = np.concatenate([noisy[:600], rng.uniform(1, 3, size=20)])
    step, cond = first(make("length_hacking"), lengths(collapsed), "orange", "collapse")
    assert step is not None and 602 <= step <= 608
    assert cond.evidence["steps_needed"] >= 3 and cond.evidence["noise_share_below"] > 0.03


def test_a_smooth_run_that_collapses_is_orange_after_two_steps_as_before():
    rows = lengths([1800 + 10 * (i % 3) for i in range(30)] + [2, 1, 1])
    step, cond = first(make("length_hacking"), rows, "orange", "collapse")
    assert step == 31 and cond.evidence["steps_needed"] == 2


def test_a_rise_back_to_a_level_the_run_held_before_is_not_length_growth():
    rng = np.random.default_rng(7)
    usual = rng.normal(210, 20, size=120)
    dip = rng.normal(100, 8, size=25)  # a stretch of short answers ...
    back = rng.normal(215, 20, size=10)  # ... and back to the usual length
    rows = lengths(np.concatenate([usual, dip, back]))
    assert [c for c in fired(make("length_hacking"), rows) if c.key == "length"] == []
    # growth to a level the run never held is still growth
    grown = lengths(np.concatenate([usual, rng.normal(420, 20, size=10)]))
    step, cond = first(make("length_hacking"), grown, key="length")
    assert step is not None and cond.severity == "orange" and cond.evidence["growth"] > 0.6


# ---------------------------------------------------------------------------- reward_progress


def rewards(values, **extra):
    return [{"reward/mean": float(v), **extra} for v in values]


def test_a_reward_that_never_moved_since_the_start_is_a_yellow_no_learning_finding():
    rng = np.random.default_rng(0)
    flat = rng.normal(-1.8, 0.4, size=400)
    step, cond = first(make("reward_progress"), rewards(flat), "yellow", "never_improved")
    assert step == 199 and cond.evidence["onset_step"] == 0
    assert abs(cond.evidence["moved"]) < 0.5 * cond.evidence["reward_std"]
    # it holds (hysteresis), one finding in an engine
    findings = [f for i, r in enumerate(rewards(flat))
                for f in ENGINE(i, r) if f.detector == "reward_progress"]
    assert [(f.step, f.status) for f in findings] == [(199, "raised")]


def ENGINE(step, row, _engines={}):  # noqa: B006 - one engine shared by the calls of one test
    engine = _engines.setdefault("e", Engine.from_config(only("reward_progress")))
    return engine.observe(step, row, wall_time=float(step))


def test_a_reward_that_learns_is_not_flagged_and_a_slow_one_clears_once_its_trend_shows():
    rng = np.random.default_rng(1)
    learns = rng.normal(0.0, 0.4, size=600) + np.linspace(0, 1.2, 600)  # +1 sigma per 200 steps
    assert [c for c in fired(make("reward_progress"), rewards(learns))
            if c.key == "never_improved"] == []
    slow = rng.normal(0.0, 0.4, size=800) + np.linspace(0, 0.5, 800)  # too slow to see at step 200
    flags = [c for c in fired(make("reward_progress"), rewards(slow)) if c.key == "never_improved"]
    assert 0 < len(flags) < 500  # raised early, cleared once the rise is clear
    assert fired(make("reward_progress"), rewards(rng.normal(0, 1, size=150))) == []  # too short


def test_a_reward_frozen_at_one_value_is_constant_unless_the_spread_is_logged():
    rows = rewards([0.2056, 0.2058, 0.2064, 0.2059, 0.2065, 0.2061])  # DeepSpeed-Chat issue 018
    step, cond = first(make("reward_progress"), rows, "yellow", "constant")
    assert step == 4 and cond.evidence["relative_range"] < 0.01
    assert first(make("reward_progress"), rewards([0.0] * 6), "yellow", "constant")[0] == 4
    moving = rewards([0.20, 0.22, 0.19, 0.23, 0.21, 0.24])
    assert fired(make("reward_progress"), moving) == []
    # with reward/std logged, the spread itself is read by `levels`
    assert fired(make("reward_progress"), rewards([0.2] * 8, **{"reward/std": 0.3})) == []


def test_reward_progress_is_registered_with_its_rule_for_practical_significance():
    cls = registry.get("reward_progress")
    doc = __import__(cls.__module__, fromlist=["x"]).__doc__
    assert "Practical significance:" in doc and cls.family == "stall"


# ---------------------------------------------------------------------------- spikes vs persistence


def test_a_single_loss_spike_is_yellow_two_in_a_row_orange_and_a_huge_one_red():
    rng = np.random.default_rng(3)
    base = [{"policy/loss": float(v)} for v in rng.normal(0, 0.4, size=30)]
    one = base + [{"policy/loss": 12.0}, {"policy/loss": 0.3}]
    step, cond = first(make("gradients"), one, key="loss")
    assert step == 30 and cond.severity == "yellow"
    two = base + [{"policy/loss": 12.0}, {"policy/loss": 30.0}]
    step, cond = first(make("gradients"), two, "orange", "loss")
    assert step == 31 and cond.evidence["steps"] == 2 and cond.evidence["onset_step"] == 30
    huge = base + [{"policy/loss": 500.0}]
    assert first(make("gradients"), huge, "red", "loss")[0] == 30


# ---------------------------------------------------------------------------- worsened


def test_an_open_finding_that_grows_a_hundredfold_is_reported_again_as_worsened():
    # real run 014: a loss spike of 48 held open (red), then the loss at 4e7 within the hold
    rng = np.random.default_rng(4)
    calm = [{"policy/loss": float(v)} for v in rng.normal(0, 0.3, size=30)]
    rows = calm + [{"policy/loss": 200.0}] + calm[:10] + [{"policy/loss": 4.4e7}] + calm[:5]
    engine = Engine.from_config(only("gradients", resolve_after_severe=50))
    findings = [f for i, r in enumerate(rows) for f in engine.observe(i, r, wall_time=float(i))]
    got = [(f.step, f.status, f.severity) for f in findings]
    assert got[:2] == [(30, "raised", "red"), (41, "worsened", "red")]
    assert findings[-1].incident == findings[0].incident and "worsened" in NEWS
    # a growth below worsen_factor is the same open finding, reported once
    rows = calm + [{"policy/loss": 200.0}] + calm[:10] + [{"policy/loss": 9000.0}] + calm[:5]
    engine = Engine.from_config(only("gradients", resolve_after_severe=50))
    statuses = [f.status for i, r in enumerate(rows) for f in engine.observe(i, r, wall_time=float(i))]
    assert "worsened" not in statuses
    engine = Engine.from_config(only("gradients", resolve_after_severe=50, worsen_factor=0))
    rows = calm + [{"policy/loss": 200.0}] + calm[:10] + [{"policy/loss": 4.4e7}]
    assert "worsened" not in [f.status for i, r in enumerate(rows)
                              for f in engine.observe(i, r, wall_time=float(i))]


# ---------------------------------------------------------------------------- coverage: able


def _concrete(read: str) -> list[str]:
    """Logged names that satisfy one declared read (a prefix gets two names under it; a per-rank
    prefix two ranks, a phase time two ranks of the rollout)."""
    if not read.endswith("/"):
        return [read]
    if read.startswith("dist/"):
        base = read if read.endswith("rank/") else (
            f"{read}rollout_s/rank/" if read == "dist/time/" else f"{read}rank/")
        return [f"{base}0", f"{base}1"]
    return [f"{read}a/mean", f"{read}b/mean"]


def test_every_detector_s_able_test_agrees_with_whether_it_runs_on_those_names():
    # the coverage doctor reports counts a detector as carried exactly when it would run: its
    # context reads alone (a length beside no KL, a learning rate beside no value loss) do not count
    from rlcockpit.diagnostics import NO_REFERENCE, SKIPPED, StepView
    from rlcockpit.diagnostics.reference import builtin_detectors

    rng = np.random.default_rng(26)
    for name, cls in builtin_detectors().items():
        reads = list(cls.reads)
        subsets = [[], reads] + [[r for r in reads if rng.random() < 0.5] for _ in range(40)]
        subsets += [[r] for r in reads]
        for subset in subsets:
            names = [n for r in subset for n in _concrete(r)]
            result = cls().update(StepView(0, {n: 1.0 for n in names}, ()))
            ran = result is not SKIPPED and result is not NO_REFERENCE
            if name == "nonfinite" and not names:
                continue  # it reads every metric a step has: an empty step is trivially finite
            assert ran == cls.able(frozenset(names), False), (name, subset)


def test_coverage_counts_what_a_detector_needs_not_its_context_reads():
    from rlcockpit.diagnostics.coverage import DetectorCoverage, logged_coverage

    cov = [DetectorCoverage("kl_tiers", "kl", registry.get("kl_tiers").reads, 0, 5,
                            ("kl/mean", "kl/token_mean", "kl/target", "kl/token_max")),
           DetectorCoverage("length_hacking", "length_hacking",
                            registry.get("length_hacking").reads, 5, 0, ("samples",))]
    logged = logged_coverage(cov, ["response/length_mean"], lambda k: [k])
    assert (logged.carried, logged.ran, logged.missed) == (1, 1, ())
    # with a KL logged, a kl_tiers that did not run is a miss
    logged = logged_coverage(cov, ["response/length_mean", "kl/mean"], lambda k: [k])
    assert (logged.carried, logged.ran) == (2, 1) and logged.missed[0].detector == "kl_tiers"


def test_an_approx_kl_jump_is_orange_only_once_the_policy_moves_a_practical_amount():
    # unseen-faults seed 702, healthy twin: 1.4e-4 -> 1.1e-3 early in training (8x a near-zero
    # level: yellow); the too-many-epochs fault reaches 7e-3 (orange)
    rng = np.random.default_rng(702)
    base = [{"policy/approx_kl": float(v)} for v in rng.uniform(1.2e-4, 1.6e-4, size=15)]
    small = base + [{"policy/approx_kl": 1.1e-3}] * 3
    step, cond = first(make("ppo_epoch_kl"), small, key="approx_jump")
    assert cond is not None and cond.severity == "yellow"
    assert first(make("ppo_epoch_kl"), small, "orange", "approx_jump")[0] is None
    large = base + [{"policy/approx_kl": 7e-3}] * 3
    assert first(make("ppo_epoch_kl"), large, "orange", "approx_jump")[0] is not None
