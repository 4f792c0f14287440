"""Any Hugging Face causal LM from a local directory trains; the rollout and update mechanics are exact.

Models are tiny random GPT-2 and Llama-style networks built in the test and saved to tmp_path with
the tiny world's tokenizer (no download).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlcockpit.metrics.rl import logprobs_from_logits
from rlcockpit.trainer.models import load_causal_lm, param_groups
from rlcockpit.trainer.optim import GuardedOptimizer, lr_factor
from rlcockpit.trainer.rollout import generate, left_pad, response_logits, sample_next
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import make_config, make_model_dir, series


@pytest.mark.parametrize("kind, algo", [("gpt2", "ppo"), ("llama", "ppo"), ("llama", "grpo")])
def test_a_local_hf_model_trains_and_its_weights_move(tmp_path, kind, algo):
    model_dir = make_model_dir(tmp_path / kind, kind)
    extra = ["algo=grpo", "rollout.n_samples=2", "rollout.batch_size=4"] if algo == "grpo" else []
    cfg = make_config(tmp_path, "train.steps=2", *extra, model=model_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert (result.status, result.step) == ("finished", 2)
    before = load_causal_lm(model_dir).state_dict()
    after = trainer.models.actor.state_dict()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved, "no parameter changed during training"
    ref = trainer.models.reference.state_dict()
    assert all(torch.equal(before[k], ref[k]) for k in before), "the reference model must stay frozen"
    got = series(cfg, result.run_id)
    assert [s for s, _ in got["reward/mean"]] == [1, 2]
    assert ("value/loss" in got) == (algo == "ppo")
    assert ("reward/frac_zero_std_groups" in got) == (algo == "grpo")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_causal_lm(make_model_dir(tmp_path_factory.mktemp("m"), "gpt2"))


def test_kv_cache_rollout_logprobs_equal_a_full_forward_without_padding(gpt2):
    """Left padding and the KV cache change nothing: batched, cached == one sequence at a time."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
    ids, mask = left_pad(prompts, pad_id=0)
    batch = generate(gpt2, ids, mask, max_new_tokens=8, temperature=0.7, top_p=0.9, eos_id=1, pad_id=0,
                     generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        batched = logprobs_from_logits(response_logits(gpt2, batch, 0.7), batch.response_ids)
        for i, p in enumerate(prompts):
            n = int(batch.response_mask[i].sum())
            alone = torch.tensor([p + batch.response_ids[i, :n].tolist()])
            logits = gpt2(input_ids=alone).logits[0, len(p) - 1:-1] / 0.7
            expected = logprobs_from_logits(logits, batch.response_ids[i, :n])
            torch.testing.assert_close(batched[i, :n], expected, atol=1e-5, rtol=0)
            # the logprobs recorded while sampling (PPO's old logprobs) are the same numbers
            torch.testing.assert_close(batch.logprobs[i, :n], expected, atol=1e-5, rtol=0)
            assert not batch.logprobs[i, n:].any()


def test_rows_stop_at_eos_which_is_kept_and_padding_is_masked(gpt2):
    # make EOS (id 1) overwhelmingly likely so every row stops at once
    handle = gpt2.register_forward_hook(lambda m, a, out: out.logits.__setitem__(
        (..., 1), out.logits[..., 1] + 1e4) or out)
    try:
        ids, mask = left_pad([[5, 6], [7]], pad_id=0)
        batch = generate(gpt2, ids, mask, max_new_tokens=5, temperature=1.0, top_p=1.0, eos_id=1, pad_id=0,
                         generator=torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    assert batch.response_ids[:, 0].tolist() == [1, 1]
    assert batch.response_mask.sum(-1).tolist() == [1.0, 1.0]
    assert batch.truncated.tolist() == [False, False]


def test_top_p_samples_only_from_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    drawn = sample_next(logits, 1.0, 0.7, torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {0, 1}  # 0.5 + 0.3 covers 0.7; tokens 2 and 3 are cut
    full = sample_next(logits, 1.0, 1.0, torch.Generator().manual_seed(0))
    assert set(full.tolist()) == {0, 1, 2, 3}


def test_same_generator_seed_gives_the_same_rollout(gpt2):
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    runs = [generate(gpt2, ids, mask, max_new_tokens=6, temperature=1.0, top_p=1.0, eos_id=1, pad_id=0,
                     generator=torch.Generator().manual_seed(42)).response_ids for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


def test_no_weight_decay_on_embeddings_biases_and_norms(gpt2):
    groups = param_groups(gpt2)
    names = {id(p): n for n, p in gpt2.named_parameters()}
    decayed = {names[id(p)] for p in groups.decay}
    assert decayed and all(".weight" in n and "wte" not in n and "wpe" not in n and "ln_" not in n
                           for n in decayed)
    assert {"transformer.wte.weight", "transformer.wpe.weight"} <= {names[id(p)] for p in groups.embedding}
    assert set(groups.by_layer) == {"embedding", "block_0", "block_1", "head"}


def test_embedding_and_body_are_clipped_to_their_own_limits(gpt2):
    from rlcockpit.trainer.config import OptimConfig
    from rlcockpit.trainer.optim import group_norm

    opt = GuardedOptimizer(gpt2, OptimConfig(), lr=0.0, split_embedding=True)
    seen = {}
    # intercept the AdamW step to look at the gradients right after clipping
    opt.optimizer.step = lambda: seen.update(emb=group_norm(opt.groups.embedding), rest=group_norm(opt.groups.rest))
    loss = 1000.0 * sum(p.sum() for p in gpt2.parameters())  # every gradient element is 1000
    grads = opt.step(loss, limit=1.0, embedding_limit=3.0)
    assert not grads.skipped and grads.layers["embedding"] > 3.0 and grads.total > grads.layers["embedding"]
    assert seen["emb"] == pytest.approx(3.0, rel=1e-4) and seen["rest"] == pytest.approx(1.0, rel=1e-4)


def test_a_nonfinite_loss_skips_the_step_and_leaves_weights_alone(gpt2):
    from rlcockpit.trainer.config import OptimConfig

    opt = GuardedOptimizer(gpt2, OptimConfig(), lr=1.0, split_embedding=True)
    before = {k: v.clone() for k, v in gpt2.state_dict().items()}
    nan_loss = gpt2(input_ids=torch.tensor([[5, 6]])).logits.sum() * math.nan
    grads = opt.step(nan_loss, 1.0, 3.0)
    assert grads.skipped and opt.skipped_total == 1
    assert all(torch.equal(before[k], v) for k, v in gpt2.state_dict().items())


def test_lr_schedule_warms_up_then_follows_its_shape():
    assert [lr_factor(s, 4, 20, "constant", 0.1) for s in (1, 2, 4, 10)] == [0.25, 0.5, 1.0, 1.0]
    assert lr_factor(20, 4, 20, "linear", 0.1) == pytest.approx(0.1)
    assert lr_factor(20, 4, 20, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_factor(12, 4, 20, "cosine", 0.0) == pytest.approx(0.5)


def test_the_fused_gelu_swap_gives_the_same_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = make_model_dir(tmp_path / "m", "gpt2")
    ours = load_causal_lm(model_dir)
    plain = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    assert ours.config.activation_function == "gelu_pytorch_tanh" and plain.config.activation_function == "gelu_new"
    x = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=x).logits, plain(input_ids=x).logits, atol=1e-5, rtol=1e-5)


def test_padding_content_never_reaches_valid_positions(gpt2):
    """Whatever sits in prompt padding or after EOS, the logprobs of real response tokens are unchanged."""
    ids, mask = left_pad([[5, 6, 7, 8], [9]], pad_id=0)
    batch = generate(gpt2, ids, mask, max_new_tokens=6, temperature=1.0, top_p=1.0, eos_id=1, pad_id=0,
                     generator=torch.Generator().manual_seed(3))
    noisy = batch.select(torch.arange(2))
    g = torch.Generator().manual_seed(7)
    noisy.prompt_ids = torch.where(noisy.prompt_mask == 0, torch.randint(2, 500, noisy.prompt_ids.shape, generator=g),
                                   noisy.prompt_ids)
    noisy.response_ids = torch.where(noisy.response_mask == 0,
                                     torch.randint(2, 500, noisy.response_ids.shape, generator=g), noisy.response_ids)
    with torch.no_grad():
        clean = logprobs_from_logits(response_logits(gpt2, batch, 1.0), batch.response_ids)
        dirty = logprobs_from_logits(response_logits(gpt2, noisy, 1.0), noisy.response_ids)
    valid = batch.response_mask != 0
    torch.testing.assert_close(clean[valid], dirty[valid], atol=1e-5, rtol=0)


def test_prompts_from_a_jsonl_file_with_their_own_categories_and_meta(tmp_path):
    import json

    model_dir = make_model_dir(tmp_path / "m", "gpt2")
    rows = [{"prompt": f"Say {w}:", "prompt_id": f"p{i}", "category": "echo" if i % 2 else "other", "word": w}
            for i, w in enumerate(["yes", "no", "up", "down", "left", "right", "red", "blue"])]
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    reward = tmp_path / "echo.py"
    reward.write_text("def fn(prompts, responses, meta, step):\n"
                      "    return [{'echo': float(m['word'] in r), 'info/correct': float(m['word'] in r)}\n"
                      "            for r, m in zip(responses, meta)]\n", encoding="utf-8")
    cfg = make_config(tmp_path, "train.steps=2", f"data.source={data}", f"reward.fn={reward}:fn", "eval.every=2",
                      model=model_dir)
    result = Trainer(cfg).run()
    got = series(cfg, result.run_id)
    assert {"reward/echo/mean", "reward/category/echo/mean", "reward/category/other/mean",
            "eval/accuracy/echo", "eval/accuracy/other"} <= set(got)
