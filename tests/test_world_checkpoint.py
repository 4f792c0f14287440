"""The committed SFT warm start: files, size, offline loading and its documented accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlcockpit.world import SFT_CHECKPOINT
from rlcockpit.world.evaluate import evaluate_policy
from rlcockpit.world.prompts import CATEGORIES, load_prompts
from rlcockpit.world.tokenizer import load_tokenizer

# Measured with `rlcockpit world eval` (validation, temperature 1.0, seed 0); also in the
# checkpoint's README.md and docs/world.md.
DOCUMENTED_ACCURACY = {"math": 0.375, "knowledge": 0.200, "safety": 0.525, "chat": 0.175}
# Sampling on another CPU may differ in the last float bits and so pick other tokens.
TOLERANCE = 0.12
REPRODUCE = "rlcockpit world sft --out src/rlcockpit/world/checkpoints/sft-tiny --seed 0"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "world.md"


@pytest.fixture(scope="module")
def policy():
    model = AutoModelForCausalLM.from_pretrained(SFT_CHECKPOINT, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(SFT_CHECKPOINT, local_files_only=True)
    return model, tokenizer


def test_checkpoint_is_a_small_hugging_face_directory():
    names = {p.name for p in SFT_CHECKPOINT.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json", "README.md"} <= names
    total = sum(p.stat().st_size for p in SFT_CHECKPOINT.iterdir())
    assert total < 5 * 1024 * 1024


def test_checkpoint_tokenizer_is_the_shipped_one(policy):
    _, tokenizer = policy
    shipped = load_tokenizer()
    assert tokenizer.get_vocab() == shipped.get_vocab()
    text = "问：法国的首都是哪里？\n答： 巴黎。"
    assert tokenizer(text)["input_ids"] == shipped(text)["input_ids"]
    assert tokenizer.pad_token_id == 0 and tokenizer.eos_token_id == 1
    assert tokenizer.padding_side == "left"


def test_checkpoint_scores_its_documented_accuracy(policy):
    model, tokenizer = policy
    metrics = evaluate_policy(model, tokenizer, load_prompts("validation"), temperature=1.0, seed=0)
    for category in CATEGORIES:
        measured = metrics[f"eval/accuracy/{category}"]
        assert abs(measured - DOCUMENTED_ACCURACY[category]) <= TOLERANCE, (category, measured)
    # imperfect but sensible: RL has headroom on math, and the warm start is far from random
    assert 0.15 < metrics["eval/accuracy/math"] < 0.7


def test_readme_and_docs_give_the_command_and_the_accuracies():
    readme = (SFT_CHECKPOINT / "README.md").read_text(encoding="utf-8")
    docs = DOCS.read_text(encoding="utf-8")
    for text in (readme, docs):
        assert REPRODUCE in text
        for category, acc in DOCUMENTED_ACCURACY.items():
            assert f"| {category} | {acc:.1%} |" in text, category
