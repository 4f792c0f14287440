"""The shipped prompt set, demonstrations and tokenizer of the tiny world."""

from __future__ import annotations

import collections
import json

import pytest

from rlcockpit.errors import ConfigError
from rlcockpit.world import DATA_DIR
from rlcockpit.world.build import OUTPUT_FILES, BuildConfig, build
from rlcockpit.world.prompts import CATEGORIES, Prompt, load_prompts, read_jsonl
from rlcockpit.world.rewards import is_refusal, mentions_keyword, score_sample
from rlcockpit.world.tokenizer import EOS_TOKEN, PAD_TOKEN, load_tokenizer


@pytest.fixture(scope="module")
def train() -> list[Prompt]:
    return load_prompts("train")


@pytest.fixture(scope="module")
def validation() -> list[Prompt]:
    return load_prompts("validation")


@pytest.fixture(scope="module")
def demos() -> list[dict]:
    return read_jsonl(DATA_DIR / "sft_train.jsonl")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_counts_per_split_and_category(train, validation):
    assert len(train) >= 400 and len(validation) >= 100
    for split in (train, validation):
        counts = collections.Counter(p.category for p in split)
        assert set(counts) == set(CATEGORIES)
        assert min(counts.values()) >= 20


def test_ids_unique_and_no_prompt_in_both_splits(train, validation):
    ids = [p.prompt_id for p in train + validation]
    assert len(ids) == len(set(ids))
    assert not {p.prompt for p in train} & {p.prompt for p in validation}
    assert len({p.prompt for p in train}) == len(train)


def test_meta_names_category_and_answer(train, validation):
    for p in train + validation:
        assert p.meta["category"] == p.category
        assert "answer" in p.meta


def test_both_languages_are_present(train):
    zh = [p for p in train if p.prompt.startswith("问：")]
    assert 0.1 < len(zh) / len(train) < 0.6
    assert {p.category for p in zh} == set(CATEGORIES)


def test_validation_is_not_taught_by_the_demonstrations(validation, demos):
    demo_prompts = {d["prompt"] for d in demos}
    assert not {p.prompt for p in validation} & demo_prompts
    # math: the same numbers must not appear in another wording either
    val_problems = {(p.meta["op"], p.meta["a"], p.meta["b"]) for p in validation if p.category == "math"}
    demo_text = "\n".join(d["prompt"] for d in demos if d["category"] == "math")
    for op, a, b in val_problems:
        assert f"{a} {op} {b}" not in demo_text and f"{a} {'加' if op == '+' else '减'} {b}" not in demo_text


def test_demonstrations_hold_a_controlled_share_of_bad_habits(demos):
    habits = collections.Counter((d["category"], d["habit"]) for d in demos)
    math = sum(v for (c, _), v in habits.items() if c == "math")
    assert 0.25 < habits["math", "wrong_sum"] / math < 0.45
    for bad in [("knowledge", "wrong_fact"), ("safety", "unsafe_compliance"),
                ("safety", "over_refusal"), ("chat", "filler"), ("chat", "off_topic")]:
        assert habits[bad] > 0, bad
    assert sum(v for (_, h), v in habits.items() if h == "good") / len(demos) > 0.55


def test_reference_answers_earn_full_reward(train, validation):
    for p in train + validation:
        if p.category == "safety" and p.meta["harmful"]:
            reference = " I can't help with that."
        else:
            reference = p.meta["reference"]
        out = score_sample(reference, p.meta)
        assert out["info/correct"] == 1.0, (p.prompt, reference, out)


def test_keywords_never_occur_in_filler_or_refusals():
    chat = json.loads((DATA_DIR / "chat.json").read_text(encoding="utf-8"))
    safety = json.loads((DATA_DIR / "safety.json").read_text(encoding="utf-8"))
    stock = [*chat["fillers"]["en"], *chat["fillers"]["zh"], *safety["refusals"]["en"],
             *safety["refusals"]["zh"]]
    for item in chat["topics"] + safety["harmless"]:
        for text in stock:
            assert not mentions_keyword(text, item["keywords"]), (item["en"], text)
        assert not is_refusal(item["answer_en"]) and not is_refusal(item["answer_zh"])


def test_build_data_reproduces_the_shipped_files(tmp_path):
    paths = build(tmp_path, BuildConfig())
    for name in OUTPUT_FILES:
        assert paths[name].read_bytes() == (DATA_DIR / name).read_bytes(), name


def test_another_seed_gives_other_prompts(tmp_path):
    build(tmp_path, BuildConfig(seed=1))
    assert (tmp_path / "prompts_train.jsonl").read_bytes() != (DATA_DIR / "prompts_train.jsonl").read_bytes()


def test_unknown_split_is_a_config_error():
    with pytest.raises(ConfigError, match="split='test'"):
        load_prompts("test")


def test_tokenizer_round_trips_all_shipped_text(tokenizer, train, validation, demos):
    texts = [p.prompt for p in train + validation] + [d["prompt"] + d["response"] for d in demos]
    texts += ["混沌理论 😀 ünïcödé\ttab  two spaces\r\n", "日本語とか한국어", ""]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens_and_padding(tokenizer):
    assert tokenizer.pad_token == PAD_TOKEN and tokenizer.eos_token == EOS_TOKEN
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"
    assert len(tokenizer) == 1024
    batch = tokenizer(["Q: What is 1 + 2?\nA:", "Q: Hi?\nA:"], padding=True)
    assert batch["input_ids"][1][0] == tokenizer.pad_token_id
    assert batch["attention_mask"][1][0] == 0


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer(" \\boxed{1234}")["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert pieces[-5:] == ["1", "2", "3", "4", "}"]


def test_sequences_are_short(tokenizer, train, validation, demos):
    assert max(len(tokenizer(p.prompt)["input_ids"]) for p in train + validation) <= 32
    good = {d["response"] for d in demos}
    assert max(len(tokenizer(r)["input_ids"]) for r in good) + 1 <= 20  # + eos
