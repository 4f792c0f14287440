"""Detectors B (reward and sample detectors): synthetic streams and samples that must and must not
fire, with the expected severity, key and step; the recorded healthy tiny-world runs (metrics and
samples) raise no red, black or orange and at most 2 yellow findings per run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from detector_kit import conditions, feed, first
from rlcockpit.diagnostics import SKIPPED, Engine, StepView, registry
from rlcockpit.diagnostics.detectors.reward_hacking import ngram_shares
from rlcockpit.diagnostics.detectors.reward_oscillation import acf
from rlcockpit.diagnostics.stats import (
    Lagged,
    bimodality_coefficient,
    cusum,
    excess_kurtosis,
    skewness,
    spearman,
)
from rlcockpit.metrics.ks import ks_2samp, ks_test
from rlcockpit.records import SampleRecord
from streams import HEALTHY, load_samples, load_stream

MINE = ("reward_hacking", "length_hacking", "reward_shape", "reward_oscillation",
        "category_imbalance", "outlier_prompts", "rm_staleness", "degeneration", "reward_scale",
        "rm_component_bias")
PARTS = ("Failure mode", "Signal", "Default thresholds", "False positives", "Fix")


def make(name: str, **overrides):
    cls = registry.get(name)
    return cls(cls.Config(**overrides))


def metrics_only(rows):
    return [(row, ()) for row in rows]


def noise(n, scale, seed=0):
    return np.random.default_rng(seed).normal(scale=scale, size=n)


def sample(step, i, reward, response="an answer", length=10, prompt_id="", category="",
           components=None):
    return SampleRecord(step=step, sample_id=i, prompt=f"prompt {prompt_id or i}",
                        response=response, reward=float(reward), prompt_id=prompt_id,
                        category=category, components=components or {}, length=int(length))


# ---------------------------------------------------------------------------- shared statistics


def test_shape_statistics_match_scipy_on_random_inputs():
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.gamma(2.0, size=int(rng.integers(5, 200)))
        assert skewness(x) == pytest.approx(scipy.stats.skew(x, bias=False), rel=1e-9)
        assert excess_kurtosis(x) == pytest.approx(scipy.stats.kurtosis(x, bias=False), rel=1e-9)
        n = x.size
        naive = (skewness(x) ** 2 + 1) / (excess_kurtosis(x) + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))
        assert bimodality_coefficient(x) == pytest.approx(naive)
        y = rng.integers(0, 5, size=n).astype(float)  # ties
        assert spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=1e-12)


def test_bimodality_coefficient_separates_one_mode_from_two():
    rng = np.random.default_rng(0)
    one = rng.normal(size=400)
    two = np.concatenate([rng.normal(-3, 0.5, 200), rng.normal(3, 0.5, 200)])
    assert bimodality_coefficient(one) < 5 / 9 < bimodality_coefficient(two)
    assert math.isnan(bimodality_coefficient([1.0, 1.0, 1.0, 1.0]))


def test_fast_ks_agrees_with_the_exact_test():
    rng = np.random.default_rng(1)
    for shift in (0.0, 0.8, 1.5):
        a, b = rng.normal(shift, 1, 32), rng.normal(0, 1, 640)
        d, p = ks_test(a, b)
        d_exact, p_exact = ks_2samp(a, b)
        assert d == pytest.approx(d_exact)
        assert p == pytest.approx(p_exact, rel=0.3)
    assert ks_test([1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == ks_2samp([1.0, 2.0, 3.0], [1.0, 2.0, 4.0])


def test_lagged_reference_freezes_and_finds_the_onset():
    lag = Lagged(window=5, recent=2)
    for step, v in enumerate([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0]):
        lag.push(v, step)
    assert lag.ready(5) and lag.median == 1.0
    assert lag.onset(lambda v: v > 5) == 6
    lag.frozen = True
    for step in range(8, 20):
        lag.push(9.0, step)
    assert lag.median == 1.0  # the new level never entered the frozen reference
    assert not lag.push(math.nan, 21)


def test_pooled_level_is_welchs_z_of_the_pooled_steps():
    from rlcockpit.diagnostics.stats import PooledLevel

    rng = np.random.default_rng(16)
    steps = [rng.normal(0.0 if i < 12 else -1.0, 1.0, 10) for i in range(14)]
    pool = PooledLevel(window=20, recent=2)
    for i, values in enumerate(steps):
        pool.push(values, i)
    a, b = np.concatenate(steps[12:]), np.concatenate(steps[:12])
    naive = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert pool.ready(12) and pool.z() == pytest.approx(naive)
    assert pool.onset(lambda m: m < -0.5) == 12


def test_ngram_shares_count_each_response_once():
    shares = ngram_shares(["great question!! great question", "a great question", "no"], 6, 400)
    assert shares["great "] == pytest.approx(2 / 3)
    assert "!! gre" in shares and all(any(ch.isalpha() for ch in g) for g in shares)


def test_acf_of_a_sine_peaks_at_its_period():
    t = np.arange(120)
    r = acf(np.sin(2 * np.pi * t / 10), 30)
    assert int(np.argmax(r[5:15])) + 5 == 10 and r[5] < -0.8


# ---------------------------------------------------------------------------- reward_scale


def scale_rows(n=40, jump_at=20, factor=20.0):
    rows = []
    for i, e in enumerate(noise(n, 0.03)):
        k = factor if i >= jump_at else 1.0
        rows.append({"reward/std": k * (0.5 + e), "reward/min": -k, "reward/max": k,
                     "reward/raw/mean": k * 0.4, "reward/scale": 1.0})
    return rows


def test_reward_scale_x20_is_red_at_once_and_stays_while_it_lasts():
    det = make("reward_scale")
    step, cond = first(det, metrics_only(scale_rows()), severity="red")
    assert step == 20 and cond.evidence["std_ratio"] > 15 and cond.evidence["onset_step"] == 20
    det = make("reward_scale")
    res = feed(det, metrics_only(scale_rows()))
    assert all(conds and conds[0].severity == "red" for _, conds in res[20:])
    assert all(conds[0].evidence["onset_step"] == 20 for _, conds in res[20:])


def test_reward_scale_ramp_is_orange_then_red_against_its_level_before_the_ramp():
    # the scale grows x1.22 per step from step 30 (a 15-step ramp to x20): each step's spread is
    # under 2x the widest of the steps just before, but 3x the level before the ramp by step 36
    rows = scale_rows(n=60, jump_at=10_000)
    for i in range(30, 45):
        k = 20 ** ((i - 29) / 15)
        rows[i] = {**rows[i], "reward/std": rows[i]["reward/std"] * k, "reward/min": -k, "reward/max": k}
    step, cond = first(make("reward_scale"), metrics_only(rows), key="")
    assert step is not None and 33 <= step <= 36 and cond.evidence["std_ratio"] >= 3
    assert cond.severity == "orange" and "over steps" in cond.message  # 3-10x, one step: orange
    red, cond = first(make("reward_scale"), metrics_only(rows), severity="red")
    assert red == step + 2 and cond.evidence["steps"] == 3  # held 3 steps: red
    assert first(make("reward_scale", lag=1), metrics_only(rows), severity="red") == (None, None)


def test_reward_scale_quiet_when_spread_returns_after_steps_without_any():
    # GRPO with few generations: the batch's reward spread alternates between 0 (all groups
    # alike) and 0.2-0.5 (real runs 004/005/016; TRL logs no reward min / max)
    rng = np.random.default_rng(3)
    rows = [({"reward/mean": 0.9, "reward/std": float(0.0 if rng.random() < 0.6 else rng.uniform(0.2, 0.5))}, ())
            for _ in range(60)]
    rows[40] = ({"reward/mean": 0.9, "reward/std": 0.0}, ())
    rows[41:45] = [({"reward/mean": 0.9, "reward/std": 0.47}, ())] * 4
    assert conditions(make("reward_scale"), rows) == []


def test_reward_scale_quiet_for_a_doubling_and_skipped_without_rewards():
    assert conditions(make("reward_scale"), metrics_only(scale_rows(factor=2.0))) == []
    assert feed(make("reward_scale"), [({"kl/mean": 1.0}, ())])[0][1] is SKIPPED


# ---------------------------------------------------------------------------- rm_component_bias


def component_rows(n=40, at=25, shift=-0.32, which="truthfulness", all_move=False):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        row = {"reward/std": 0.3}
        for name, level in (("helpfulness", 0.6), ("truthfulness", 0.63), ("harmlessness", 0.7)):
            moved = i >= at and (name == which or all_move)
            row[f"reward/{name}/mean"] = level + (shift if moved else 0.0) + rng.normal(0, 0.02)
        rows.append(row)
    return rows


def test_rm_component_bias_one_component_falling_alone_is_orange():
    step, cond = first(make("rm_component_bias"), metrics_only(component_rows()))
    assert step in (25, 26) and cond.severity == "orange" and cond.key == "truthfulness"
    assert cond.evidence["mean_now"] < cond.evidence["reference_mean"]
    assert cond.evidence["onset_step"] == 25


def test_rm_component_bias_quiet_when_all_components_move_together():
    rows = component_rows(all_move=True, shift=0.3)
    assert conditions(make("rm_component_bias"), metrics_only(rows)) == []


def test_rm_component_bias_sample_distribution_shift_is_seen_a_step_earlier():
    rng = np.random.default_rng(2)
    steps = []
    for i in range(30):
        shift = -1.0 if i >= 20 else 0.0
        comps = [{"helpfulness": float(rng.choice([0.0, 1.0])),
                  "truthfulness": float(rng.choice([0.0, 0.5, 1.0])) + shift,
                  "harmlessness": float(rng.choice([0.0, 1.0]))} for _ in range(32)]
        metrics = {"reward/std": 0.5, **{f"reward/{c}/mean": float(np.mean([x[c] for x in comps]))
                                         for c in comps[0]}}
        steps.append((metrics, [sample(i, j, 0.0, components=c) for j, c in enumerate(comps)]))
    step, cond = first(make("rm_component_bias", recent=3), [(m, ()) for m, _ in steps])
    assert step == 21 and cond.evidence["ks_p"] is None  # metrics only: the 3-step mean lags
    step, cond = first(make("rm_component_bias", recent=3), steps)
    assert step == 20 and cond.key == "truthfulness" and cond.evidence["ks_p"] < 1e-6


def test_rm_component_bias_shift_at_the_first_judged_step_meets_a_clean_sample_pool():
    # warm-up 8 + recent 2: step 10 is the first judged step; the samples of steps 0-9 must
    # already be the KS reference (they were not, and a shift exactly there went unseen)
    rng = np.random.default_rng(3)
    steps = []
    for i in range(20):
        shift = -0.5 if i >= 10 else 0.0
        comps = [{"helpfulness": float(rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.5, 0.3])) + shift,
                  "correctness": float(rng.choice([0.0, 1.0])),
                  "harmlessness": float(rng.choice([0.0, 0.25]))} for _ in range(32)]
        metrics = {"reward/std": 0.6, **{f"reward/{c}/mean": float(np.mean([x[c] for x in comps]))
                                         for c in comps[0]}}
        steps.append((metrics, [sample(i, j, 0.0, components=c) for j, c in enumerate(comps)]))
    step, cond = first(make("rm_component_bias"), steps)
    assert step == 10 and cond.key == "helpfulness" and cond.evidence["ks_p"] < 1e-6


def test_cusum_matches_the_max_suffix_sum_on_random_series():
    rng = np.random.default_rng(11)
    for _ in range(200):
        z = rng.normal(rng.normal(0, 1), 1.5, size=int(rng.integers(1, 15)))
        k = float(rng.uniform(0, 1))
        up = max([0.0] + [float(np.sum(z[j:] - k)) for j in range(len(z))])
        down = max([0.0] + [float(np.sum(-z[j:] - k)) for j in range(len(z))])
        assert cusum(z.tolist(), k) == pytest.approx((up, down), abs=1e-9)


def _drift_steps(n=60, at=30, per_step=0.03, sparse=False):
    """Three components with samples; from ``at`` on 'helpfulness' drifts by ``per_step`` a step
    on every sample (a drifting head) or, ``sparse``, 'harmlessness' is earned by more and more
    answers (a skill learned: its low quartile stays at 0)."""
    rng = np.random.default_rng(8)
    steps = []
    for i in range(n):
        drift = per_step * max(0, i - at + 1)
        comps = [{"helpfulness": float(rng.normal(0.5, 0.3)) + (0.0 if sparse else drift),
                  "correctness": float(rng.choice([0.0, 1.0])),
                  "harmlessness": float(rng.random() < 0.1 + (drift if sparse else 0.0))}
                 for _ in range(32)]
        metrics = {"reward/std": 0.5, **{f"reward/{c}/mean": float(np.mean([x[c] for x in comps]))
                                         for c in comps[0]}}
        steps.append((metrics, [sample(i, j, 0.0, components=c) for j, c in enumerate(comps)]))
    return steps


def test_rm_component_bias_slow_drift_is_yellow_before_the_level_jump():
    steps = _drift_steps()
    step, cond = first(make("rm_component_bias"), steps, key="helpfulness/drift")
    assert cond.severity == "yellow" and cond.evidence["cusum"] >= cond.evidence["cusum_threshold"]
    level, _ = first(make("rm_component_bias"), steps, key="helpfulness")
    assert 30 < step < 45 and (level is None or step < level)
    # before the drift began: quiet
    assert not [c for _, c in conditions(make("rm_component_bias"), steps[:30])]


def test_rm_component_bias_drift_quiet_for_a_sparse_component_being_learned():
    steps = _drift_steps(per_step=0.01, sparse=True)  # 10% -> 40% of the answers earn it
    assert first(make("rm_component_bias"), steps, key="harmlessness/drift") == (None, None)
    # the mean did drift: without the every-sample check (and the level check) it would be reported
    assert first(make("rm_component_bias", median_frac=0.0, z_jump=1e6), steps,
                 key="harmlessness/drift")[0] is not None


def _observe_b(run_name):
    engine = Engine([registry.get(name)() for name in MINE])
    samples = load_samples(run_name)
    findings = []
    for step, metrics in load_stream(run_name):
        findings += engine.observe(step, metrics, samples.get(step, ()))
    return [f for f in findings if f.status != "resolved"]


def test_rm_component_bias_fault_run_seed_2_is_orange_at_the_onset():
    # recorded benchmark run (component_shift: helpfulness -0.5 from step 10); the noisy
    # reference (robust sd 0.12) keeps the level z below 6 — the sample KS test catches it
    raised = _observe_b("fault_rm_component_bias_s2")
    (bias, *_) = [f for f in raised if f.detector == "rm_component_bias"]
    assert (bias.step, bias.severity, bias.evidence["component"]) == (10, "orange", "helpfulness")
    assert not [f for f in raised if f.step < 10]


# ---------------------------------------------------------------------------- reward_hacking


def hacking_rows(n=40, at=25, kl_up=True, entropy_down=True, rise=0.5):
    rows = []
    for i, e in enumerate(noise(n, 0.03, seed=1)):
        hacked = i >= at
        rows.append({"reward/mean": 0.4 + 0.002 * i + e + (rise if hacked else 0.0),
                     "kl/mean": 0.5 + (2.0 if hacked and kl_up else 0.0) + 0.05 * e,
                     "policy/entropy": 1.0 - (0.6 if hacked and entropy_down else 0.0) + 0.05 * e,
                     "response/length_mean": 12.0 + e})
    return rows


def test_reward_hacking_jump_with_kl_up_and_entropy_down_turns_red_when_it_holds():
    step, cond = first(make("reward_hacking"), metrics_only(hacking_rows()), key="jump")
    assert step in (25, 26) and cond.severity == "orange"  # red needs the jump to hold 3 steps
    assert set(cond.evidence["co_moving"]) == {"KL", "entropy"}
    assert cond.evidence["onset_step"] == 25
    red, _ = first(make("reward_hacking"), metrics_only(hacking_rows()), "red", "jump")
    assert red == step + 2


def test_reward_hacking_jump_evidence_shows_the_best_paid_samples():
    steps = [(row, [sample(i, j, row["reward/mean"] + j, f"answer {j}") for j in range(5)])
             for i, row in enumerate(hacking_rows())]
    cond = first(make("reward_hacking"), steps, key="jump")[1]
    assert [s["response"] for s in cond.evidence["top_samples"]] == ["answer 4", "answer 3",
                                                                      "answer 2"]


def test_reward_hacking_severity_grows_with_the_co_moving_signals():
    one = first(make("reward_hacking"), metrics_only(hacking_rows(entropy_down=False)))[1]
    alone = first(make("reward_hacking"),
                  metrics_only(hacking_rows(kl_up=False, entropy_down=False)))[1]
    assert one.severity == "orange" and alone.severity == "yellow"


def test_reward_hacking_quiet_on_a_slow_healthy_rise():
    rows = hacking_rows(rise=0.0)
    assert conditions(make("reward_hacking"), metrics_only(rows)) == []


ANSWERS = ["Paris.", "12 + 30 = \\boxed{42}", "Clean up crumbs and seal the gaps.",
           "I can't help with that.", "Practice the talk and tell a story.", "Tokyo.",
           "7 - 2 = \\boxed{5}", "Drink water and rest."]
FILLER = "That is a great question worth exploring."
CHAT = [a for a in ANSWERS if "boxed" not in a]


def template_steps(n=30, at=20, prefix=""):
    rng = np.random.default_rng(4)
    steps = []
    for i in range(n):
        texts = [prefix + ANSWERS[int(k)] for k in rng.integers(0, len(ANSWERS), 32)]
        if i >= at:
            texts = [FILLER + " " + t if j % 8 else t for j, t in enumerate(texts)]
        steps.append(({"reward/mean": 0.5}, [sample(i, j, 0.5, t) for j, t in enumerate(texts)]))
    return steps


def test_template_takeover_is_orange_with_the_ngram_and_examples():
    step, cond = first(make("reward_hacking"), template_steps(), key="template")
    assert step == 21 and cond.severity == "orange"  # two steps in a row (template_steps=2)
    assert cond.evidence["ngram"] in FILLER + " " and cond.evidence["share"] > 0.8
    assert cond.evidence["onset_step"] == 20 and FILLER in cond.evidence["examples"][0]


def test_template_quiet_when_every_answer_shares_a_format_from_the_start():
    steps = template_steps(at=10_000, prefix="<think>ok</think> ")
    assert conditions(make("reward_hacking"), steps) == []


def test_template_ignores_content_shared_within_one_category():
    rng = np.random.default_rng(15)
    steps = []
    for i in range(30):
        batch = []
        for k in range(8):  # GRPO-like: 4 answers per prompt, math and chat prompts
            category = "math" if k < 4 else "chat"
            if category == "math" and i >= 20:
                text = f"{k} + 39 = \\boxed{{42}}"  # the same answer content on every math prompt
            else:
                text = CHAT[int(rng.integers(0, len(CHAT)))]
            batch += [sample(i, 4 * k + j, 0.5, text, prompt_id=f"{i}-{k}", category=category)
                      for j in range(4)]
        steps.append(({"reward/mean": 0.5}, batch))
    assert conditions(make("reward_hacking"), steps) == []


def paid_steps(n=20, at=10, paid=(2.5,), per_step=1, reward_scale=1.0, categories=("chat",)):
    """32 answers per step with bounded rewards (-0.5 / 0 / 1); from ``at``, ``per_step`` of them
    are the filler paid ``paid`` (the hackable reward model of the kl_coef_zero fault)."""
    rng = np.random.default_rng(21)
    steps = []
    for i in range(n):
        batch = []
        for j in range(32):
            cat = categories[j % len(categories)]
            if i >= at and j < per_step:
                text, reward = FILLER, paid[j % len(paid)]
            else:
                text, reward = CHAT[int(rng.integers(0, len(CHAT)))], float(rng.choice([-0.5, 0, 1]))
            batch.append(sample(i, j, reward * reward_scale, text, prompt_id=f"{i}-{j}",
                                category=cat))
        steps.append(({"reward/mean": float(np.mean([s.reward for s in batch]))}, batch))
    return steps


def test_paid_template_is_yellow_when_paid_and_orange_once_the_policy_produces_more_of_it():
    # the reward over-pays a template the policy emits now and then (1 per step): a reward-model
    # observation (yellow), not yet a hack
    step, cond = first(make("reward_hacking"), paid_steps(), key="paid")
    assert step == 11 and cond.severity == "yellow"  # 1 filler per step: the second one
    assert cond.evidence["ngram"] in FILLER and cond.evidence["over_paid"] == 2
    assert cond.evidence["reference_max"] == 1.0 and cond.evidence["onset_step"] == 10
    assert first(make("reward_hacking"), paid_steps(n=30), "orange", key="paid") == (None, None)
    # the policy learns it: 1, 1, 1 then 3 per step -> orange once the recent 3 steps
    # hold twice as many as the first 3
    steps = paid_steps(n=16, per_step=1)[:13] + paid_steps(n=16, per_step=3)[13:]
    step, cond = first(make("reward_hacking"), steps, "orange", key="paid")
    assert step == 15 and cond.evidence["growth"] >= 2.0 and "learning" in cond.message  # 6 steps known


def test_paid_without_a_shared_template_is_yellow_and_quiet_on_bounded_rewards_and_scaling():
    # two over-paid answers with nothing in common (e.g. a length bonus): yellow
    steps = paid_steps(per_step=2)
    for _, batch in steps[10:]:
        batch[1] = sample(batch[1].step, 1, 2.5, "Tokyo.", prompt_id=batch[1].prompt_id)
    step, cond = first(make("reward_hacking"), steps, key="paid")
    assert step == 10 and cond.severity == "yellow" and cond.evidence["ngram"] is None
    quiet = [c for c in conditions(make("reward_hacking"), paid_steps(at=10_000)) if c.key == "paid"]
    assert quiet == []
    scaled = paid_steps(at=10_000)[:10] + [(m, [sample(b.step, b.sample_id, 20 * b.reward,
                                                         b.response, prompt_id=b.prompt_id)
                                                  for b in batch])
                                           for m, batch in paid_steps(at=10_000)[10:]]
    assert [c for c in conditions(make("reward_hacking"), scaled) if c.key == "paid"] == []


def test_a_phrase_paid_from_the_first_step_is_yellow_where_the_paid_rule_has_no_clean_reference():
    # a reward model that pays a hedge from step 0 (onset 0): every step's reference already holds
    # the over-paid answers, so "paid" cannot see it; within each step they stand far above the rest
    hedge = "I am not sure about that."
    steps = paid_steps(n=12, at=10_000)
    for i, (_, batch) in enumerate(steps):
        if i % 2 == 0:
            batch[0] = sample(i, 0, 3.0, hedge, prompt_id=f"{i}-0")
    conds = conditions(make("reward_hacking"), steps)
    assert not [c for c in conds if c.key == "paid"]
    step, cond = first(make("reward_hacking"), steps, key="phrase")
    assert step == 4 and cond.severity == "yellow"  # the third hedge (steps 0, 2, 4)
    assert cond.evidence["ngram"] in hedge and cond.evidence["with_phrase"] == 3
    assert cond.evidence["rest_share"] == 0 and cond.evidence["onset_step"] == 0
    # the same phrase common among the unpaid answers too: the reward does not pay the phrase
    for i, (_, batch) in enumerate(steps):
        for j in range(1, 6):
            batch[j] = sample(i, j, batch[j].reward, hedge, prompt_id=f"{i}-{j}")
    assert [c for c in conditions(make("reward_hacking"), steps) if c.key == "phrase"] == []
    # bounded rewards with no singled-out answer: quiet
    assert [c for c in conditions(make("reward_hacking"), paid_steps(at=10_000)) if c.key == "phrase"] == []


def test_phrase_singles_out_against_the_step_naive_reference():
    # the singled-out bar (90th percentile + gap x std) against a loop on random steps
    from rlcockpit.diagnostics.detectors.reward_hacking import PhraseWatch, RewardHackingConfig
    rng = np.random.default_rng(4)
    for _ in range(20):
        cfg = RewardHackingConfig()
        watch = PhraseWatch(cfg)
        rewards = rng.normal(size=int(rng.integers(8, 60)))
        batch = [sample(0, j, r, f"answer {j}", prompt_id=str(j)) for j, r in enumerate(rewards)]
        watch.update(StepView(step=0, metrics={}, samples=tuple(batch)))
        (_, singled, rest) = watch._pool[-1]
        srt = sorted(rewards)
        pos = 0.9 * (len(srt) - 1)
        p90 = srt[int(pos)] + (pos - int(pos)) * (srt[min(int(pos) + 1, len(srt) - 1)] - srt[int(pos)])
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        assert sorted(s.reward for s in singled) == sorted(r for r in rewards if r > p90 + 0.5 * std)
        assert len(singled) + len(rest) == len(rewards)


def test_hackable_reward_fault_run_seed_1_is_caught_by_the_paid_template_then_its_spread():
    # recorded benchmark run: beta = 0, filler paid +3 from step 10; one filler per step at first
    # (steps 10, 12, 13, 14), so the template share and the reward mean barely move for 10 steps
    raised = [f for f in _observe_b("fault_kl_coef_zero_with_hackable_reward_s1")
              if f.detector == "reward_hacking"]
    assert (raised[0].step, raised[0].severity, raised[0].evidence["key"]) == (12, "yellow", "paid")
    assert raised[0].evidence["ngram"] in FILLER and raised[0].evidence["reference_max"] == 1.0
    # orange once the policy emits the paid filler twice as often as when it first appeared
    assert (raised[1].step, raised[1].severity, raised[1].status) == (15, "orange", "escalated")
    assert not [f for f in raised if f.step < 10]


def test_reward_hacking_skipped_without_reward_and_samples():
    assert feed(make("reward_hacking"), [({"kl/mean": 1.0}, ())])[0][1] is SKIPPED


# ---------------------------------------------------------------------------- length_hacking


def test_length_hacking_sustained_growth_yellow_then_orange():
    rows = [{"response/length_mean": 12.0 + e + (0.4 * (i - 20) if i >= 20 else 0.0),
             "response/truncated_frac": 0.0} for i, e in enumerate(noise(70, 0.3))]
    det = make("length_hacking")
    res = feed(det, metrics_only(rows))
    sev = {step: conds[0].severity for step, conds in res if conds}
    first_step = min(sev)
    assert 22 <= first_step <= 30 and sev[first_step] == "yellow"
    assert "orange" in sev.values()
    assert min(s for s, v in sev.items() if v == "orange") > first_step


def test_length_hacking_truncation_rise_is_yellow_and_a_large_growth_orange():
    rows = [{"response/length_mean": 12.0 + e + (10.0 if i >= 25 else 0.0),
             "response/truncated_frac": 0.02 + (0.4 if i >= 25 else 0.0)}
            for i, e in enumerate(noise(35, 0.3))]
    step, cond = first(make("length_hacking"), metrics_only(rows), key="truncation")
    assert step == 25 and cond.severity == "yellow" and cond.evidence["onset_step"] == 25
    step, cond = first(make("length_hacking"), metrics_only(rows), "orange", key="length")
    assert step == 27 and cond.evidence["growth"] > 0.6  # +83% once the 3-step mean is all new
    # growth into the cap with more truncation (real run 002: 358 -> 512, healthy) stays yellow
    capped = [{"response/length_mean": 360.0 + 3 * e + (150.0 if i >= 25 else 0.0),
               "response/truncated_frac": 0.05 + (0.9 if i >= 25 else 0.0)}
              for i, e in enumerate(noise(35, 1.0))]
    assert {c.severity for c in conditions(make("length_hacking"), metrics_only(capped))} == {"yellow"}


def test_length_collapse_is_orange_after_two_steps_even_right_after_the_first_value():
    # real run 017: 53 tokens at the first logged step, 2-5 from the second on
    rows = [{"response/length_mean": v} for v in [53.4, 2.6, 3.1, 4.5, 2.2]]
    step, cond = first(make("length_hacking"), metrics_only(rows), "orange", key="collapse")
    assert step == 2 and cond.evidence["onset_step"] == 1 and cond.evidence["length_early"] == 53.4
    # a run that shortens by half (healthy real run 004 keeps >= 45%) stays quiet
    halved = [{"response/length_mean": v} for v in [290.0, 300.0, 280.0] + [140.0] * 20]
    assert [c for c in conditions(make("length_hacking"), metrics_only(halved))
            if c.key == "collapse"] == []


def test_length_growth_onset_is_where_the_length_left_its_band():
    # flat at 12 tokens until step 40, then +0.5 per step: the onset is ~40, not the start of
    # the 30-step trend window that detects it
    rows = [{"response/length_mean": 12.0 + e + (0.5 * (i - 39) if i >= 40 else 0.0)}
            for i, e in enumerate(noise(70, 0.2))]
    step, cond = first(make("length_hacking"), metrics_only(rows), key="length")
    assert step is not None and 36 <= cond.evidence["onset_step"] <= 44  # window start: 16


def test_length_hacking_quiet_on_flat_noisy_lengths():
    rows = [{"response/length_mean": 12.0 + e, "response/truncated_frac": 0.02}
            for e in noise(100, 1.0)]
    assert conditions(make("length_hacking"), metrics_only(rows)) == []


def test_length_distribution_long_tail_from_samples():
    rng = np.random.default_rng(6)
    steps = []
    for i in range(30):
        lengths = rng.integers(8, 16, 32)
        if i >= 20:
            lengths[:6] = 200  # a minority becomes abnormally long (001 Q6)
        steps.append(({}, [sample(i, j, 0.0, length=n) for j, n in enumerate(lengths)]))
    step, cond = first(make("length_hacking"), steps, key="distribution")
    assert step == 22 and cond.severity == "yellow" and cond.evidence["tail_share"] > 0.15


# ---------------------------------------------------------------------------- reward_shape


def shape_steps(n=30, at=20, kind="collapse"):
    rng = np.random.default_rng(7)
    steps = []
    for i in range(n):
        r = rng.normal(0.5, 0.3, 64)
        if i >= at and kind == "collapse":
            r = rng.normal(0.9, 0.02, 64)
        elif i >= at and kind == "bimodal":
            r = np.concatenate([rng.normal(-0.75, 0.05, 32), rng.normal(1.75, 0.05, 32)])
        elif i >= at and kind == "tail":
            r[:3] = 9.0
        elif i >= at and kind == "left":
            r = r - 0.6
        steps.append(({"reward/mean": float(r.mean()), "reward/std": float(r.std())},
                      [sample(i, j, v) for j, v in enumerate(r)]))
    return steps


@pytest.mark.parametrize("kind,key,step,severity", [
    ("collapse", "variance_collapse", 22, "yellow"),
    # two modes 2.5 apart with a spread of 0.05 each: separated (Ashman's D ~ 50) -> orange
    ("bimodal", "bimodal", 21, "orange"), ("tail", "long_tail", 22, "yellow"),
    ("left", "left_shift", 21, "yellow")])
def test_reward_shape_each_shape_and_its_severity(kind, key, step, severity):
    got, cond = first(make("reward_shape"), shape_steps(kind=kind), key=key)
    assert got == step and cond.severity == severity
    assert {c.key for c in conditions(make("reward_shape"), shape_steps(kind=kind))} == {key}


def test_reward_shape_binary_rewards_are_not_bimodal_news():
    rng = np.random.default_rng(8)
    steps = [({"reward/mean": 0.5, "reward/std": 0.5},
              [sample(i, j, float(v)) for j, v in enumerate(rng.integers(0, 2, 64))])
             for i in range(40)]
    assert conditions(make("reward_shape"), steps) == []
    assert conditions(make("reward_shape"), shape_steps(kind="none")) == []


# ---------------------------------------------------------------------------- reward_oscillation


def test_reward_oscillation_period_found():
    t = np.arange(120)
    rows = [{"reward/mean": 0.5 + 0.002 * i + 0.15 * math.sin(2 * math.pi * i / 12) + e}
            for i, e in zip(t, noise(120, 0.05), strict=True)]
    step, cond = first(make("reward_oscillation"), metrics_only(rows))
    assert cond.severity == "yellow" and abs(cond.evidence["period"] - 12) <= 1
    assert 40 <= step <= 50


def test_reward_oscillation_quiet_on_noise_with_a_trend():
    for seed in range(5):
        rows = [{"reward/mean": 0.3 + 0.003 * i + e} for i, e in enumerate(noise(150, 0.08, seed))]
        assert conditions(make("reward_oscillation"), metrics_only(rows)) == []


# ---------------------------------------------------------------------------- category_imbalance


def category_rows(n=45, at=30, drop=1.0, all_fall=False):
    rng = np.random.default_rng(9)
    rows = []
    for i in range(n):
        row = {"reward/std": 0.5}
        for c, level in (("math", 0.5), ("safety", 0.8), ("chat", 0.6), ("knowledge", 0.5)):
            fell = i >= at and (c == "math" or all_fall)
            row[f"reward/category/{c}/mean"] = level + 0.004 * i * (c != "math") \
                - (drop if fell else 0.0) + rng.normal(0, 0.08)
        rows.append(row)
    return rows


def test_category_imbalance_one_category_falls_while_others_rise():
    step, cond = first(make("category_imbalance"), metrics_only(category_rows()))
    assert cond.key == "math" and 30 <= step <= 33 and cond.severity in ("yellow", "orange")
    assert cond.evidence["onset_step"] == 30


def test_category_imbalance_quiet_when_every_category_falls():
    assert conditions(make("category_imbalance"), metrics_only(category_rows(all_fall=True))) == []
    assert feed(make("category_imbalance"), [({"reward/mean": 1.0}, ())])[0][1] is SKIPPED


# ---------------------------------------------------------------------------- outlier_prompts


def test_outlier_prompts_lists_the_prompt_that_is_always_scored_low():
    rng = np.random.default_rng(10)
    steps = []
    for i in range(12):
        ids = [f"p{k}" for k in rng.choice(200, 31, replace=False)]
        batch = [sample(i, j, rng.normal(), prompt_id=pid) for j, pid in enumerate(ids)]
        if i % 3 == 0:
            batch.append(sample(i, 99, -6.0, prompt_id="p-bad"))
        steps.append(({}, batch))
    step, cond = first(make("outlier_prompts"), steps)
    assert step == 6 and cond.key == "low" and cond.severity == "yellow"
    assert cond.evidence["prompts"][0]["prompt_id"] == "p-bad"
    assert cond.evidence["prompts"][0]["appearances"] == 3 and cond.evidence["onset_step"] == 0


def test_outlier_prompts_skipped_without_samples_and_quiet_on_random_rewards():
    assert feed(make("outlier_prompts"), [({"reward/mean": 1.0}, ())])[0][1] is SKIPPED
    rng = np.random.default_rng(11)
    steps = [({}, [sample(i, j, rng.normal(), prompt_id=f"p{rng.integers(20)}")
                   for j in range(32)]) for i in range(40)]
    assert conditions(make("outlier_prompts"), steps) == []


# ---------------------------------------------------------------------------- rm_staleness


def staleness_steps(n=80, saturate=True, length_bias_at=None):
    rng = np.random.default_rng(12)
    steps = []
    for i in range(n):
        frac = i / n if saturate else 0.0
        lengths = rng.integers(5, 50, 32)
        mean, std = 0.3 + 0.6 * frac, 0.5 * (1 - 0.9 * frac)
        r = rng.normal(mean, std, 32)
        if length_bias_at is not None and i >= length_bias_at:  # same mean and spread, by length
            r = mean + std * (lengths - 27.5) / 13.0 + rng.normal(0, 0.1 * std, 32)
        steps.append(({"reward/mean": float(r.mean()), "reward/std": float(r.std())},
                      [sample(i, j, v, length=n_) for j, (v, n_) in enumerate(zip(r, lengths, strict=True))]))
    return steps


def test_rm_staleness_saturation_yellow_length_correlation_yellow_both_orange():
    step, cond = first(make("rm_staleness"), staleness_steps(), key="saturation")
    assert step == 59 and cond.severity == "yellow" and cond.evidence["std_drop"] >= 0.6
    steps = staleness_steps(saturate=False, length_bias_at=30)
    step, cond = first(make("rm_staleness"), steps, key="length_correlation")
    assert 30 <= step <= 34 and cond.severity == "yellow" and cond.evidence["spearman"] > 0.5
    both = conditions(make("rm_staleness"), staleness_steps(length_bias_at=65))
    assert {c.severity for c in both if c.key == "length_correlation"} == {"orange"}


def test_rm_staleness_quiet_on_a_steady_run():
    assert conditions(make("rm_staleness"), staleness_steps(saturate=False)) == []


# ---------------------------------------------------------------------------- degeneration


def test_degeneration_repetition_and_ppl_collapse_are_orange():
    rows = [{"response/repetition_rate": 0.01 + abs(e) + (0.4 if i >= 20 else 0.0),
             "response/ppl": 1.3 + e} for i, e in enumerate(noise(30, 0.01))]
    step, cond = first(make("degeneration"), metrics_only(rows), key="repetition")
    assert step == 21 and cond.severity == "orange" and cond.evidence["onset_step"] == 20
    rows = [{"response/repetition_rate": 0.0,
             "response/ppl": (1.01 if i >= 20 else 1.3) + abs(e)}
            for i, e in enumerate(noise(30, 0.01))]
    step, cond = first(make("degeneration"), metrics_only(rows), key="ppl")
    assert step == 22 and cond.severity == "orange" and cond.evidence["ppl"] < 1.1


def test_degeneration_quiet_on_steady_streams_and_skipped_without_them():
    rows = [{"response/repetition_rate": 0.02 + abs(e), "response/ppl": 1.3 + e}
            for e in noise(60, 0.01)]
    assert conditions(make("degeneration"), metrics_only(rows)) == []
    assert feed(make("degeneration"), [({"reward/mean": 1.0}, ())])[0][1] is SKIPPED


# ---------------------------------------------------------------------------- all together


def test_every_detector_is_registered_and_documented():
    found = registry.available()
    for name in MINE:
        cls = found[name]
        doc = __import__(cls.__module__, fromlist=["_"]).__doc__
        assert all(f"{part}" in doc for part in PARTS), name
        assert cls.patterns and cls.signal and cls.family
        cls.Config()  # defaults validate


@pytest.mark.parametrize("run_name", HEALTHY)
def test_healthy_recorded_runs_raise_only_a_few_yellows(run_name):
    engine = Engine([registry.get(name)() for name in MINE])
    samples = load_samples(run_name)
    findings = []
    for step, metrics in load_stream(run_name):
        findings += engine.observe(step, metrics, samples.get(step, ()))
    raised = [f for f in findings if f.status != "resolved"]
    assert {f.severity for f in raised} <= {"yellow"}, [(f.detector, f.message) for f in raised]
    assert len(raised) <= 2
    assert not engine.errors


def test_imported_run_without_samples_skips_the_sample_only_detector():
    engine = Engine([registry.get(name)() for name in MINE])
    for step, metrics in load_stream("healthy_ppo_s0")[:30]:
        engine.observe(step, metrics)
    assert engine.status["outlier_prompts"] == "skipped"
    assert engine.status["reward_hacking"] == "ok" and not engine.errors


def test_reward_hacking_leaves_a_reward_scale_jump_to_reward_scale():
    rows = [{**r, "reward/mean": r["reward/raw/mean"], "kl/mean": 0.5} for r in scale_rows()]
    assert [c.key for c in conditions(make("reward_hacking"), metrics_only(rows))] == []
    assert first(make("reward_scale"), metrics_only(rows))[0] == 20


def test_distinct_3_equals_the_metrics_definition_on_characters():
    from rlcockpit.diagnostics.detectors.reward_hacking import distinct_3
    from rlcockpit.metrics.stats import distinct_ngram_frac

    texts = ["好的好的好的", "a great question", "", "ab", "repeat repeat repeat"]
    assert distinct_3(texts, 400) == pytest.approx(distinct_ngram_frac([list(t) for t in texts], 3))


def test_category_imbalance_from_samples_uses_prompt_level_noise():
    rng = np.random.default_rng(13)
    steps = []
    for i in range(30):
        batch = []
        for c in ("math", "safety", "chat", "knowledge"):
            for k in range(8):
                drop = 1.0 if (c == "math" and i >= 20) else 0.0
                r = float(rng.choice([1.0, 0.0, -0.5])) - drop
                batch.append(sample(i, len(batch), r, prompt_id=f"{c}-{i}-{k}", category=c))
        metrics = {f"reward/category/{c}/mean": float(np.mean([s.reward for s in batch
                                                               if s.category == c]))
                   for c in ("math", "safety", "chat", "knowledge")}
        steps.append(({**metrics, "reward/std": 0.6}, batch))
    step, cond = first(make("category_imbalance"), steps)
    assert 20 <= step <= 22 and cond.key == "math"
    assert cond.evidence["z_kind"].startswith("welch") and cond.evidence["onset_step"] == 20
    metric_step = first(make("category_imbalance"), [(m, ()) for m, _ in steps])[0]
    assert metric_step is None or metric_step > step  # the metric means alone are slower


def test_rm_staleness_length_in_characters_counts_too():
    rng = np.random.default_rng(14)
    steps = []
    for i in range(20):
        batch = []
        for j in range(32):
            text = "x" * int(rng.integers(5, 60))
            reward = rng.normal() + (0.05 * len(text) if i >= 10 else 0.0)
            batch.append(sample(i, j, reward, text, length=int(rng.integers(5, 20))))
        steps.append(({"reward/mean": 0.0, "reward/std": 1.0}, batch))
    step, cond = first(make("rm_staleness"), steps, key="length_correlation")
    assert 10 <= step <= 14 and cond.evidence["length_unit"] == "characters"


def test_rm_component_bias_a_sparse_component_being_learned_is_yellow_a_biased_head_orange():
    # GRPO 'harmlessness' pays 1 on a few samples and 0 on the rest; the policy learns to earn it:
    # its mean rises alone, but the typical sample (the median) stays at 0 -- not a biased head
    rng = np.random.default_rng(7)

    def run(learned: bool):
        steps = []
        for i in range(40):
            p = (0.5 if i >= 25 else 0.03) if learned else 0.03  # half the samples: the median flips
            shift = -0.5 if (not learned and i >= 25) else 0.0
            comps = [{"helpfulness": float(rng.choice([0.0, 1.0])) + shift,
                      "harmlessness": float(rng.random() < p), "format": float(rng.choice([0.0, 1.0]))}
                     for _ in range(32)]
            metrics = {"reward/std": 0.6, **{f"reward/{c}/mean": float(np.mean([x[c] for x in comps]))
                                             for c in comps[0]}}
            steps.append((metrics, [sample(i, j, 0.0, components=c) for j, c in enumerate(comps)]))
        return conditions(make("rm_component_bias"), steps)

    learned = run(True)
    assert learned and {c.severity for c in learned} == {"yellow"} and {c.key for c in learned} == {"harmlessness"}
    assert "not a biased head" in learned[0].message and learned[0].evidence["sample_quartile_shift"] == 0
    biased = run(False)
    assert biased and biased[0].severity == "orange" and biased[0].key == "helpfulness"
