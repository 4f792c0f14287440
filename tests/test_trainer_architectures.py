"""Real architectures, offline: Llama, Qwen2 and GPT-2 built with random weights and the tiny world's
ChatML tokenizer (rlcockpit.world.architectures), saved, and loaded through model.path with a chat
JSONL prompt set: loading code, chat templates, left padding, several EOS ids and position ids run on
the real model classes."""

from __future__ import annotations

import json

import pytest
import torch

from rlcockpit.world.architectures import KINDS, save_random_model
from rlcockpit.world.tokenizer import EOS_TOKEN, IM_END
from trainer_testkit import make_config, reader

pytestmark = pytest.mark.slow  # trains real (tiny) models

WORDS = ["yes", "no", "up", "down", "left", "right", "red", "blue"]


def chat_prompts(path):
    rows = [{"messages": [{"role": "system", "content": "Answer in one word."},
                          {"role": "user", "content": f"Say {w}."}], "prompt_id": f"p{i}", "word": w,
             "category": "echo"} for i, w in enumerate(WORDS)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    return {kind: save_random_model(root / kind, kind) for kind in KINDS}


@pytest.mark.parametrize("kind, algo", [("qwen2", "grpo"), ("llama", "ppo"), ("gpt2", "grpo")])
def test_a_chat_prompt_set_trains_each_architecture(tmp_path, models, kind, algo):
    from rlcockpit.trainer.trainer import Trainer

    data = chat_prompts(tmp_path / "chat.jsonl")
    reward = tmp_path / "echo.py"
    reward.write_text("def fn(prompts, responses, meta, step):\n"
                      "    return [float(m['word'] in r) for r, m in zip(responses, meta)]\n", encoding="utf-8")
    extra = ["algo=grpo", "rollout.n_samples=2", "rollout.batch_size=4"] if algo == "grpo" else []
    cfg = make_config(tmp_path, "train.steps=1", f"data.source={data}", f"reward.fn={reward}:fn",
                      "model.threads=1", "rollout.temperature=2.0", *extra, model=models[kind])
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "finished"
    tok = trainer.models.tokenizer
    assert set(trainer.models.stop) == {tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(EOS_TOKEN)}
    r = reader(cfg)
    try:
        from rlcockpit.store.base import SampleQuery

        samples = r.query_samples(result.run_id, SampleQuery(limit=100)).items
    finally:
        r.close()
    assert samples
    for s in samples:  # the prompt the model saw: rendered by the chat template, generation prompt added
        assert s.prompt.startswith("<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nSay ")
        assert s.prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert IM_END not in s.response and "<|im_start|>" not in s.response  # special tokens never shown
    first = trainer.prompts.source.items[0]
    assert first.token_ids[0] == tok.convert_tokens_to_ids("<|im_start|>")  # no BOS added twice
    assert first.token_ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_left_padding_and_position_ids_on_the_real_classes(models, kind):
    """Batched, left-padded, KV-cached sampling == each sequence alone; any EOS id ends a row."""
    from rlcockpit.metrics.rl import logprobs_from_logits
    from rlcockpit.trainer.models import load_causal_lm, load_tokenizer
    from rlcockpit.trainer.rollout import generate, left_pad, response_logits, stop_ids

    model, tok = load_causal_lm(models[kind]), load_tokenizer(models[kind])
    stop = stop_ids(tok, model)
    assert len(stop) == 2
    prompts = [tok("Say yes.")["input_ids"], tok("What is two plus two, in words?")["input_ids"]]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    batch = generate(model, ids, mask, max_new_tokens=8, temperature=1.0, top_p=1.0, eos_id=stop,
                     pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for i, p in enumerate(prompts):
            n = int(batch.response_mask[i].sum())
            alone = torch.tensor([p + batch.response_ids[i, :n].tolist()])
            logits = model(input_ids=alone).logits[0, len(p) - 1:-1]
            torch.testing.assert_close(batch.logprobs[i, :n], logprobs_from_logits(logits, batch.response_ids[i, :n]),
                                       atol=1e-4, rtol=0)
        full = logprobs_from_logits(response_logits(model, batch, 1.0), batch.response_ids)
    valid = batch.response_mask != 0
    torch.testing.assert_close(full[valid], batch.logprobs[valid], atol=1e-4, rtol=0)

    # make the second EOS id (<|endoftext|>) certain: every row stops there at once
    eot = tok.convert_tokens_to_ids(EOS_TOKEN)
    handle = model.register_forward_hook(lambda m, a, out: out.logits.__setitem__((..., eot), 1e4) or out)
    try:
        stopped = generate(model, ids, mask, max_new_tokens=5, temperature=1.0, top_p=1.0, eos_id=stop,
                           pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    assert stopped.response_mask.sum(-1).tolist() == [1.0, 1.0] and not stopped.truncated.any()


def test_chat_rows_need_a_chat_template(tmp_path):
    from rlcockpit.errors import ConfigError
    from rlcockpit.trainer.data import read_jsonl_prompts, tokenize_items
    from rlcockpit.world.tokenizer import load_tokenizer

    items = read_jsonl_prompts(chat_prompts(tmp_path / "chat.jsonl"))
    assert items[0].meta["messages"][1]["content"] == "Say yes." and items[0].meta["word"] == "yes"
    with pytest.raises(ConfigError, match="no chat template"):
        tokenize_items(items, load_tokenizer(), 64)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user"}]}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match='"messages"'):
        read_jsonl_prompts(bad)
