"""SFT warm start and evaluation of the tiny world (tiny budgets: seconds)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlcockpit.world.evaluate import evaluate_detailed, evaluate_policy, generate_responses
from rlcockpit.world.prompts import CATEGORIES, load_prompts
from rlcockpit.world.sft import (
    IGNORE_INDEX,
    SFTConfig,
    collate,
    encode,
    load_demonstrations,
    lr_factor,
    save_checkpoint,
    train_sft,
)
from rlcockpit.world.tokenizer import load_tokenizer

TINY = {"steps": 3, "batch_size": 8, "warmup_steps": 1}


@pytest.fixture(scope="module")
def demos() -> list[dict]:
    return load_demonstrations()[:48]


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_same_seed_gives_identical_weights_and_another_seed_does_not(demos):
    a = train_sft(SFTConfig(seed=3, **TINY), demos=demos)
    b = train_sft(SFTConfig(seed=3, **TINY), demos=demos)
    c = train_sft(SFTConfig(seed=4, **TINY), demos=demos)
    wa, wb, wc = weights(a.model), weights(b.model), weights(c.model)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert a.losses == b.losses and len(a.losses) == 3


def test_training_lowers_the_loss(demos):
    result = train_sft(SFTConfig(steps=25, batch_size=16, warmup_steps=2, lr=3e-3), demos=demos)
    assert sum(result.losses[-5:]) / 5 < result.losses[0] - 1.0


def test_collate_masks_prompt_and_padding_and_keeps_eos():
    tok = load_tokenizer()
    examples = encode(tok, [{"prompt": "Q: What is 1 + 2?\nA:", "response": " 1 + 2 = \\boxed{3}"},
                            {"prompt": "Q: Hi?\nA:", "response": " Hello."}])
    batch = collate(examples, tok.pad_token_id)
    ids, n_prompt = examples[1]
    labels = batch["labels"][1]
    assert (labels[:n_prompt] == IGNORE_INDEX).all()
    assert labels[len(ids) - 1] == tok.eos_token_id
    assert (labels[len(ids):] == IGNORE_INDEX).all()
    assert batch["attention_mask"][1].sum() == len(ids)
    assert tok.decode(labels[n_prompt:len(ids) - 1]) == " Hello."


def test_learning_rate_warms_up_then_decays():
    cfg = SFTConfig(steps=100, warmup_steps=10)
    assert lr_factor(0, cfg) == pytest.approx(0.1)
    assert lr_factor(9, cfg) == pytest.approx(1.0)
    assert lr_factor(99, cfg) < 0.15


def test_saved_checkpoint_loads_with_auto_classes(tmp_path, demos):
    result = train_sft(SFTConfig(**TINY), demos=demos)
    out = save_checkpoint(result.model, result.tokenizer, tmp_path / "ckpt")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= names
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.pad_token == "<|pad|>" and tok.eos_token == "<|endoftext|>"
    assert torch.equal(model.transformer.wte.weight, result.model.transformer.wte.weight)


def test_evaluation_is_seeded_and_leaves_the_global_rng_alone(demos):
    model = train_sft(SFTConfig(**TINY), demos=demos).model
    tok = load_tokenizer()
    prompts = [p for p in load_prompts("validation")][:12]
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    first = generate_responses(model, tok, [p.prompt for p in prompts], seed=1, max_new_tokens=6)
    assert torch.equal(torch.rand(2), expected)
    again = generate_responses(model, tok, [p.prompt for p in prompts], seed=1, max_new_tokens=6)
    other = generate_responses(model, tok, [p.prompt for p in prompts], seed=2, max_new_tokens=6)
    assert first == again and first != other
    greedy = generate_responses(model, tok, [p.prompt for p in prompts], temperature=0.0,
                                max_new_tokens=6)
    assert len(greedy) == len(prompts)


def test_evaluate_policy_returns_catalog_names(demos):
    model = train_sft(SFTConfig(**TINY), demos=demos).model
    tok = load_tokenizer()
    by_cat = {c: [p for p in load_prompts("validation") if p.category == c][:3] for c in CATEGORIES}
    prompts = [p for c in CATEGORIES for p in by_cat[c]]
    metrics = evaluate_policy(model, tok, prompts, max_new_tokens=8)
    expected = {"eval/reward/mean"} | {f"eval/reward/category/{c}/mean" for c in CATEGORIES} | {
        f"eval/accuracy/{c}" for c in CATEGORIES}
    assert set(metrics) == expected
    assert all(0.0 <= metrics[f"eval/accuracy/{c}"] <= 1.0 for c in CATEGORIES)
    report = evaluate_detailed(model, tok, prompts, max_new_tokens=8)
    assert report.metrics() == metrics
    assert sum(c.count for c in report.categories) == len(prompts)
