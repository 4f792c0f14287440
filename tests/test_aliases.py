"""The alias table: foreign metric keys (TRL, verl, OpenRLHF) -> rlcockpit catalog names."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from rlcockpit.integrations import aliases
from rlcockpit.integrations.aliases import (
    ALIASES,
    SOURCES,
    aliases_markdown,
    detect_source,
    import_name,
    map_keys,
    rename_keys,
    to_catalog,
)
from rlcockpit.metrics.catalog import is_catalog_name

DOC = Path(__file__).resolve().parents[1] / "docs" / "import_export.md"


def test_every_alias_target_is_a_catalog_name():
    bad = []
    for row in ALIASES:
        target = row.target.replace("{component}", "accuracy_reward")
        if not is_catalog_name(target):
            bad.append((row.source, row.key, row.target))
    assert bad == []


def test_every_source_has_aliases_and_no_key_is_listed_twice():
    seen = set()
    for row in ALIASES:
        assert (row.source, row.key) not in seen, f"{row.source} {row.key} listed twice"
        seen.add((row.source, row.key))
        assert row.origin, f"{row.key} does not say where it is logged"
    counts = {s: sum(r.source == s for r in ALIASES) for s in SOURCES}
    assert all(n >= 10 for n in counts.values()), counts


@pytest.mark.parametrize(("key", "source", "expected"), [
    ("actor/pg_loss", "verl", "policy/loss"),
    ("critic/score/mean", "verl", "reward/mean"),
    ("response_length/clip_ratio", "verl", "response/truncated_frac"),
    ("timing_s/gen", "verl", "time/rollout_s"),
    ("objective/kl", "trl-ppo", "kl/mean"),
    ("val/ratio", "trl-ppo", "policy/ratio_mean"),
    ("frac_reward_zero_std", "trl-grpo", "reward/frac_zero_std_groups"),
    ("completions/clipped_ratio", "trl-grpo", "response/truncated_frac"),
    ("rewards/format_reward/mean", "trl-grpo", "reward/format_reward/mean"),
    ("train/rewards/format_reward/mean", "trl-grpo", "reward/format_reward/mean"),  # HF TB prefix
    ("train/kl", "trl-grpo", "kl/token_mean"),
    ("eval/reward", "trl-grpo", "eval/reward/mean"),  # eval_reward as the HF callbacks write it
    ("eval_reward", "trl-grpo", "eval/reward/mean"),
    ("ppo_clip_ratio", "openrlhf", "policy/clip_frac"),
    ("train/critic_loss", "openrlhf", "value/loss"),
    ("return", "openrlhf", "returns/mean"),
    ("completion_length", "trl-grpo", "response/length_mean"),  # older TRL key set
    ("rewards/reward_fn", "trl-grpo", "reward/reward_fn/mean"),
    ("actor/entropy_loss", "verl", "policy/entropy"),  # older verl: it is the entropy
    ("critic/vpred_mean", "verl", "value/mean"),
    ("critic/advantages/mean", "verl", "advantage/mean"),
])
def test_to_catalog_maps_real_keys(key, source, expected):
    assert to_catalog(key, source) == expected
    assert to_catalog(key) == expected  # no source: the first table that knows the key


def test_unknown_keys_are_kept_under_an_import_prefix_not_lost():
    assert to_catalog("global_seqlen/mean", "verl") is None
    assert import_name("global_seqlen/mean", "verl") == "import/verl/global_seqlen/mean"
    assert import_name("objective/entropy", "trl-ppo") == "import/trl-ppo/objective/entropy"
    assert import_name("rewards/acc/std", "trl-grpo") == "import/trl-grpo/rewards/acc/std"
    # a catalog name and an earlier import's name are kept as they are
    assert import_name("reward/mean", "verl") == "reward/mean"
    assert import_name("import/verl/perf/throughput", "openrlhf") == "import/verl/perf/throughput"
    assert import_name("anything/at/all", "rlcockpit") == "anything/at/all"
    assert import_name("loss", "unknown") == "import/unknown/loss"


def test_a_reward_function_name_that_is_not_a_catalog_name_is_not_forced_into_one():
    # catalog names are slash-separated: a "/" inside the reward-function name cannot alias
    assert to_catalog("rewards/a/b/mean", "trl-grpo") is None
    assert import_name("rewards/a/b/mean", "trl-grpo") == "import/trl-grpo/rewards/a/b/mean"


def test_two_keys_meaning_one_name_keep_both_values():
    values = {"actor/kl_loss": 0.1, "actor/reward_kl_penalty": 0.2, "actor/pg_loss": -0.3}
    out = map_keys(values, "verl")
    assert out == {"kl/token_mean": 0.1, "import/verl/actor/reward_kl_penalty": 0.2,
                   "policy/loss": -0.3}
    # TRL 1.16 logs policy_loss next to the Trainer's total loss: the specific one wins
    assert rename_keys(["loss", "policy_loss"], "trl-grpo") == {
        "policy_loss": "policy/loss", "loss": "import/trl-grpo/loss"}
    assert rename_keys(["loss"], "trl-grpo") == {"loss": "policy/loss"}


def test_look_alikes_of_other_meaning_stay_foreign():
    # per-token KL of a verl fork vs its distillation teacher (negative at step 1): not the
    # reference KL; the score minus the KL penalty, the machine's memory, the dual-clip share
    for key in ("actor/token_kl/mean", "actor/token_kl/max", "critic/rewards/mean",
                "perf/cpu_memory_used_gb", "actor/pg_clipfrac_lower", "global_seqlen/mean"):
        assert to_catalog(key, "verl") is None, key
    assert to_catalog("rewards/reward_fn/std", "trl-grpo") is None
    # MiniMind GRPO's KL_ref is log pi_ref - log pi: the negative k1 estimate, not a KL
    assert to_catalog("KL_ref", "minimind-grpo") is None
    assert to_catalog("KL_ref", "minimind-ppo") == "kl/token_mean"  # PPO's is the k3 estimate
    # ms-swift's reward_std is the mean within-group std; OpenRLHF's score is not the reward
    assert to_catalog("reward_std", "ms-swift") is None
    assert to_catalog("score", "openrlhf") is None


def test_the_newer_key_wins_when_both_generations_are_logged():
    assert rename_keys(["actor/entropy", "actor/entropy_loss"], "verl") == {
        "actor/entropy": "policy/entropy", "actor/entropy_loss": "import/verl/actor/entropy_loss"}
    assert rename_keys(["critic/values/mean", "critic/vpred_mean"], "verl")["critic/values/mean"] \
        == "value/mean"
    assert rename_keys(["completions/mean_length", "completion_length"], "trl-grpo") == {
        "completions/mean_length": "response/length_mean",
        "completion_length": "import/trl-grpo/completion_length"}


def test_a_user_map_wins_over_the_alias_table_and_loses_no_value():
    user = {"loss": "value/loss", "Reward": "reward/mean"}
    out = map_keys({"loss": 1.0, "Reward": 0.5, "reward": 0.4, "kl": 0.01}, "trl-grpo", user)
    assert out == {"value/loss": 1.0, "reward/mean": 0.5, "import/trl-grpo/reward": 0.4,
                   "kl/token_mean": 0.01}


@pytest.mark.parametrize(("keys", "expected"), [
    (["actor/pg_loss", "critic/score/mean", "timing_s/gen", "perf/throughput"], "verl"),
    (["train/policy_loss", "train/actor_lr", "train/kl", "train/reward"], "openrlhf"),
    (["train/reward", "train/kl", "train/completions/mean_length", "train/frac_reward_zero_std"],
     "trl-grpo"),
    (["objective/kl", "objective/scores", "val/ratio", "eps"], "trl-ppo"),
    (["my/own/metric"], None),
])
def test_detect_source_picks_the_table_that_knows_most_keys(keys, expected):
    assert detect_source(keys) == expected


def test_unknown_source_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="trl-grpo, trl-ppo, verl, openrlhf"):
        to_catalog("reward", "wandb")


def test_docs_list_every_alias_and_are_up_to_date():
    text = DOC.read_text(encoding="utf-8")
    assert aliases.render_doc(text) == text, (
        "docs/import_export.md is out of date: run "
        "`.venv/bin/python -m rlcockpit.integrations.aliases --update docs/import_export.md`")
    for row in ALIASES:
        shown = re.sub(r"\{(\w+)\}", r"<\1>", row.key)
        assert f"| `{shown}` |" in text


def test_module_prints_the_generated_table():
    out = io.StringIO()
    with redirect_stdout(out):
        assert aliases.main([]) == 0
    assert out.getvalue() == aliases_markdown()
